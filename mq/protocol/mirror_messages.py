"""Requests of offset-preserving mirror topics (geo-replication, issue 10).

A *mirror topic* (topic config ``mirror.source.region`` set) is a read-only copy of a
topic of another region: Produce to it is refused with ``MIRROR_TOPIC_READ_ONLY``. The
mirror service (``mirror/``, a pure client) fills it with ``MirrorAppend``: the record
batches exactly as fetched from the source region, appended by the partition leader at
their source offsets, so offsets, bytes and timestamps are the same in both regions.
``MirrorTruncate`` cuts such a partition on every replica (fail-back, after the
divergent tail was copied away). Both are mq's own APIs (Confluent's Cluster Linking
does the same inside the broker, with no public API to borrow names from); the broker
side is ``mq.broker.mirror``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.protocol.messages import ApiKey, Records, Request, Response


@dataclass(frozen=True, slots=True)
class MirrorAppendResponse(Response):
    """The partition after the request: appended and duplicate counts are batches."""

    API_KEY = ApiKey.MIRROR_APPEND
    error_code: int
    error_message: str = ""
    log_end_offset: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1
    appended_batches: int = 0
    duplicate_batches: int = 0


@dataclass(frozen=True, slots=True)
class MirrorAppendRequest(Request):
    """Append the source's batches unchanged at their source offsets (the leader stamps
    only its own partition leader epoch, outside the CRC). Batch by batch: a base offset
    equal to the log end is appended; below it, a batch with the same base offset, last
    offset and CRC already in the log is a duplicate (acknowledged), anything else is
    `MIRROR_DIVERGED`; above it is `MIRROR_OFFSET_GAP`, unless `start_offset` ≥ 0 is given
    and the partition ends at or below it: the partition then restarts empty at
    `start_offset` first (retention removed the source's records before they were
    mirrored). A restart is a fenced step: the leader first gets a new leader epoch from
    the controller (refusing other appends meanwhile), then restarts and appends; if the
    epoch does not come within `timeout_ms` the answer is `REQUEST_TIMED_OUT` and nothing
    changed (retry), and the high watermark passes the new start only once the in-sync
    replicas restarted too. The batches of one request must be contiguous, unless `fetch_offset` ≥ 0
    names the source offset they were fetched from: then, if it is at or below the log
    end, they may leave holes (a compacted source has no record there; neither may the
    mirror topic) and the first new batch may start past the log end; a `fetch_offset`
    past the log end is `MIRROR_OFFSET_GAP`, unless `start_offset` ≥ `fetch_offset` is
    given: the partition then restarts at `start_offset` (or at the first batch, if it
    begins before). An empty tail only moves the start. Every
    batch is checked before any is written: a refused request appends nothing. `acks=-1`
    answers once the high watermark covers every batch of the request, duplicates
    included."""

    API_KEY = ApiKey.MIRROR_APPEND
    RESPONSE = MirrorAppendResponse
    topic: str
    partition: int
    records: Records  # record batches as fetched from the source region
    acks: int = -1  # -1: the in-sync replicas (min.insync.replicas enforced); 1: the leader
    start_offset: int = -1  # >= 0: restart an empty or wholly lower partition here first
    timeout_ms: int = 30_000
    fetch_offset: int = -1  # >= 0: the source offset these batches were fetched from (holes allowed)


@dataclass(frozen=True, slots=True)
class MirrorTruncateResponse(Response):
    API_KEY = ApiKey.MIRROR_TRUNCATE
    error_code: int
    error_message: str = ""
    log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class MirrorTruncateRequest(Request):
    """Remove the records at and above `offset` from a mirror topic's partition on every
    replica. The leader cuts its log and starts a new leader epoch there; followers cut
    theirs by leader epoch (KIP-101/279) and the answer comes once every in-sync replica
    has fetched in the new epoch. `offset` at or above the log end cuts nothing."""

    API_KEY = ApiKey.MIRROR_TRUNCATE
    RESPONSE = MirrorTruncateResponse
    topic: str
    partition: int
    offset: int
    timeout_ms: int = 30_000


MIRROR_REQUESTS: tuple[type[Request], ...] = (MirrorAppendRequest, MirrorTruncateRequest)
