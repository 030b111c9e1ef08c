"""Produce-time checks of a topic's conflict policy (``conflict.policy``, ``mq.core.conflict``).

Produce otherwise never parses records; a topic with a policy pays for decoding its keyed
records here, before anything is appended, so a refused batch leaves no trace:

- ``home-region``: a keyed record is accepted only where its key lives. The region that
  wrote it is the provenance header ``mq.origin.region`` when present (a record the
  active-active mirror copies into a remote topic keeps its origin), else this broker's
  ``region.name``. Anything else is ``NOT_HOME_REGION`` naming the key's home.
- ``last-writer-wins``: a keyed record must carry exactly one valid ``mq.hlc`` header
  (``mq.core.hlc``), else ``INVALID_HLC`` saying what is wrong with it.

Keyless records pass: a table has no row for them. The first offending record decides the
answer for the partition's whole request (Kafka's producer also fails a batch as a whole).
"""

from __future__ import annotations

from collections.abc import Sequence

from mq.core.conflict import (
    ORIGIN_REGION_HEADER,
    ConflictPolicy,
    ConflictRules,
    not_home_message,
    shown_key,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.hlc import HLC_HEADER, decode_hlc, is_valid_hlc
from mq.protocol.batch_format import iter_batches
from mq.protocol.record_batch import decode_record_columns

Refusal = tuple[ErrorCode, str]


def check_conflicts(records: bytes | memoryview, rules: ConflictRules, *, topic: str,
                    region: str) -> Refusal | None:
    """The refusal of ``records`` (whole batches) under ``rules`` at a broker of ``region``,
    or None when every keyed record may be appended."""
    if not rules.active:
        return None
    if rules.policy is ConflictPolicy.HOME_REGION and not region:
        return ErrorCode.NOT_HOME_REGION, (
            f"topic {topic} has conflict.policy=home-region but this broker does not know its region "
            "(broker config region.name is empty): start it with mq up from a region file, or with "
            "--config region.name=NAME")
    try:
        with memoryview(records) as view:
            for pos, header in iter_batches(view):
                columns = decode_record_columns(view[pos: pos + header.size])
                refusal = _check_batch(columns.keys, columns.headers, rules, topic, region)
                if refusal is not None:
                    return refusal
    except MqError as err:  # a malformed batch: what the log would have said
        return err.code, err.message
    return None


def _check_batch(keys: Sequence[bytes | None], headers: Sequence[tuple[tuple[str, bytes], ...]],
                 rules: ConflictRules, topic: str, region: str) -> Refusal | None:
    if rules.policy is ConflictPolicy.HOME_REGION:
        homes: dict[bytes, str] = {}
        for key, record_headers in zip(keys, headers):
            if key is None:
                continue
            home = homes.get(key)
            if home is None:
                home = homes[key] = rules.home_of(key)
            origin = region
            for name, value in record_headers:
                if name == ORIGIN_REGION_HEADER:
                    origin = value.decode("utf-8", errors="replace")
            if home != origin:
                return ErrorCode.NOT_HOME_REGION, not_home_message(key, topic, home, origin)
        return None
    for key, record_headers in zip(keys, headers):
        if key is None:
            continue
        if len(record_headers) == 1 and record_headers[0][0] == HLC_HEADER and is_valid_hlc(record_headers[0][1]):
            continue  # the common case, checked without building a stamp
        stamps = [value for name, value in record_headers if name == HLC_HEADER]
        if len(stamps) == 1 and is_valid_hlc(stamps[0]):
            continue
        if len(stamps) != 1:
            what = "has no" if not stamps else f"has {len(stamps)}"
            return ErrorCode.INVALID_HLC, (
                f"key {shown_key(key)} of topic {topic} {what} {HLC_HEADER} header; conflict.policy="
                "last-writer-wins needs exactly one hybrid logical clock stamp per keyed record "
                "(mq's Producer sets it: upgrade the client, or stamp <wall_ms>.<logical> yourself)")
        try:
            decode_hlc(stamps[0])
        except MqError as err:
            return ErrorCode.INVALID_HLC, f"key {shown_key(key)} of topic {topic}: {err.message}"
    return None
