"""Fetcher: the consumer's fetch loop as a sans-IO core (Kafka's ``Fetcher``/``FetchCollector``).

``prepare_fetches`` builds at most one FetchRequest per leader for the partitions that
are fetchable (known position, not paused, no fetch in flight, room in the buffer).
The next fetch of a partition starts where the data already buffered for it ends, not
at the position, so a fetch is in flight while the application processes the records
of the previous one (prefetch). ``on_response`` buffers raw record batches as they
arrived (bytes, undecoded); ``fetch_records`` decodes one batch at a time (one msgpack
unpack per batch) and returns records from the position on: a fetch answers with the
whole batch containing the fetch offset, so records below the position are skipped.

Gaps: when data the consumer expected is gone (a reset after OFFSET_OUT_OF_RANGE, or a
batch that starts beyond the position), an ``OffsetGap`` with exact offsets is recorded.
Holes *inside* a batch are compaction at work and are not gaps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from mq.client.internals.metadata import needs_metadata_refresh
from mq.client.internals.subscription import SubscriptionState, TopicPartitionState
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TimestampType, TopicPartition
from mq.protocol.control_batch import ControlType, marker_of
from mq.protocol.messages import (
    AbortedTransaction,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from mq.protocol.record_batch import HEADER_SIZE, decode_record_columns, read_header


class ConsumerRecord(NamedTuple):
    """One record as ``poll`` returns it (immutable; a tuple for speed: millions per second)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class OffsetGap:
    """Offsets ``[expected_offset, next_offset)`` of a partition could not be read."""

    topic_partition: TopicPartition
    expected_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    refresh_metadata: bool = False


class CompletedFetch:
    """Raw bytes of one partition from one fetch response, consumed batch by batch.

    ``aborted`` (read_committed): the answer's aborted transactions, by first offset.
    As batches are read, each transaction whose first offset is reached puts its
    producer id in ``aborted_pids``; that producer's transactional batches are then
    dropped until its ABORT marker takes it out again (Kafka's ``FetchCollector``)."""

    __slots__ = ("aborted", "aborted_pids", "data", "index", "pos", "records", "records_next", "seek_epoch",
                 "tp")

    def __init__(self, tp: TopicPartition, data: memoryview, seek_epoch: int,
                 aborted: list[AbortedTransaction] | None = None) -> None:
        self.aborted = deque(sorted(aborted or (), key=lambda t: t.first_offset))
        self.aborted_pids: set[int] = set()
        self.tp = tp
        self.data = data
        self.pos = 0
        self.seek_epoch = seek_epoch
        self.records: list[ConsumerRecord] = []
        self.index = 0
        self.records_next = 0  # next offset after the decoded batch


SentFetch = dict[TopicPartition, tuple[int, int]]  # tp -> (fetch_offset, seek_epoch)

ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
"""The consumer's ``isolation_level`` and its wire value in FetchRequest."""

_new_tuple = tuple.__new__
_TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)


class Fetcher:
    def __init__(self, subscriptions: SubscriptionState, *, fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 50 * 1024 * 1024,
                 max_partition_fetch_bytes: int = 1024 * 1024, check_crcs: bool = True,
                 max_buffered_per_partition: int = 2, max_gaps: int = 1000,
                 isolation_level: str = "read_uncommitted") -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise MqError(ErrorCode.INVALID_CONFIG, f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, "
                                                    f"not {isolation_level!r}")
        self.isolation_level = ISOLATION_LEVELS[isolation_level]
        self.subscriptions = subscriptions
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.check_crcs = check_crcs
        self.max_buffered_per_partition = max_buffered_per_partition
        self.in_flight_nodes: dict[int, None] = {}
        self._in_flight_partitions: dict[TopicPartition, int] = {}  # tp -> node
        self._next_fetch: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (seek_epoch, offset)
        self.completed: deque[CompletedFetch] = deque()
        self.missing_leaders = False  # set by prepare_fetches: a fetchable partition had none
        self.gaps: deque[OffsetGap] = deque(maxlen=max_gaps)

    # ------------------------------------------------------------------ requests

    def _buffered_count(self, tp: TopicPartition) -> int:
        return sum(1 for cf in self.completed if cf.tp == tp)

    def fetch_offset(self, tp: TopicPartition) -> int | None:
        """Where the next fetch of ``tp`` starts: after what is buffered, else the position."""
        st = self.subscriptions.states[tp]
        nxt = self._next_fetch.get(tp)
        if nxt is not None and nxt[0] == st.seek_epoch:
            return nxt[1]
        return st.position

    def prepare_fetches(self, leader_for: Callable[[TopicPartition], int | None],
                        epoch_for: Callable[[TopicPartition], int]
                        ) -> list[tuple[int, FetchRequest, SentFetch]]:
        """One request per leader not already serving a fetch; partitions in assignment order.
        Sets ``missing_leaders`` when a fetchable partition has no known leader."""
        by_node: dict[int, SentFetch] = {}
        self.missing_leaders = False
        for tp, st in self.subscriptions.states.items():
            if not self.subscriptions.is_fetchable(tp) or tp in self._in_flight_partitions:
                continue
            leader = leader_for(tp)
            if leader is None:
                self.missing_leaders = True  # the caller refreshes metadata
                continue
            if leader in self.in_flight_nodes:
                continue
            if self._buffered_count(tp) >= self.max_buffered_per_partition:
                continue
            offset = self.fetch_offset(tp)
            assert offset is not None
            by_node.setdefault(leader, {})[tp] = (offset, st.seek_epoch)
        requests = []
        for node, sent in by_node.items():
            topics: dict[str, list[FetchPartition]] = {}
            for tp, (offset, _) in sent.items():
                topics.setdefault(tp.topic, []).append(FetchPartition(
                    tp.partition, offset, self.max_partition_fetch_bytes,
                    current_leader_epoch=epoch_for(tp)))
            request = FetchRequest(
                topics=[FetchTopic(name, parts) for name, parts in topics.items()],
                max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                max_bytes=self.fetch_max_bytes, isolation_level=self.isolation_level)
            self.in_flight_nodes[node] = None
            for tp in sent:
                self._in_flight_partitions[tp] = node
            requests.append((node, request, sent))
        return requests

    def in_flight_node(self, tp: TopicPartition) -> int | None:
        """The node whose fetch in flight includes ``tp`` (None if none does)."""
        return self._in_flight_partitions.get(tp)

    # ------------------------------------------------------------------ responses

    def on_failure(self, node: int, sent: SentFetch) -> None:
        """The request failed (disconnect, timeout): the partitions become fetchable again."""
        self.in_flight_nodes.pop(node, None)
        for tp in sent:
            self._in_flight_partitions.pop(tp, None)

    def on_response(self, node: int, sent: SentFetch, response: FetchResponse) -> FetchOutcome:
        self.on_failure(node, sent)
        if response.error_code:
            return FetchOutcome(refresh_metadata=needs_metadata_refresh(response.error_code))
        refresh = False
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition)
                if tp in sent:
                    refresh |= self._on_partition(tp, sent[tp], part)
        return FetchOutcome(refresh_metadata=refresh)

    def _on_partition(self, tp: TopicPartition, sent: tuple[int, int],
                      part: FetchPartitionResponse) -> bool:
        """Handle one partition's answer; True if metadata should be refreshed."""
        fetch_offset, seek_epoch = sent
        st = self.subscriptions.states.get(tp)
        if st is None or st.seek_epoch != seek_epoch:
            return False  # unassigned or sought since: a stale answer
        code = part.error_code
        if code == ErrorCode.NONE:
            st.high_watermark = part.high_watermark
            st.log_start_offset = part.log_start_offset
            data = memoryview(part.records)
            end = _complete_prefix(data)
            if end:
                self.completed.append(CompletedFetch(tp, data[:end], seek_epoch, part.aborted_transactions))
                self._next_fetch[tp] = (seek_epoch, _last_next_offset(data, end))
            return False
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if fetch_offset == st.position:
                self.subscriptions.request_reset(
                    tp, f"offset {fetch_offset} is out of range [{part.log_start_offset}, "
                        f"{part.high_watermark}]")
            return False
        if needs_metadata_refresh(code):
            return True
        if _code(code).retriable:
            return False  # fetched again next round
        st.error = MqError(_code(code), part.error_message or f"fetch {tp} failed")
        return False

    def on_lookup_done(self, tp: TopicPartition, offset: int, seek_epoch: int) -> None:
        """A ListOffsets answer for a pending lookup; records a gap after an auto reset."""
        st = self.subscriptions.states.get(tp)
        was_reset = st is not None and st.lookup_is_reset
        old = self.subscriptions.lookup_done(tp, offset, seek_epoch)
        if was_reset and old is not None and offset > old:
            self.gaps.append(OffsetGap(tp, old, offset))

    # ------------------------------------------------------------------ records

    def has_buffered(self) -> bool:
        return bool(self.completed)

    def fetch_records(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` records from the buffered fetches, advancing positions."""
        out: list[ConsumerRecord] = []
        states = self.subscriptions.states
        completed = self.completed
        i = 0
        while i < len(completed) and len(out) < max_records:
            cf = completed[i]
            st = states.get(cf.tp)
            if st is None or st.seek_epoch != cf.seek_epoch or st.position is None:
                del completed[i]  # unassigned or sought since it was fetched
                continue
            if st.paused:
                i += 1  # stays buffered until resumed
                continue
            if cf.index >= len(cf.records) and not self._decode_next_batch(cf, st):
                del completed[i]
                continue
            chunk = cf.records[cf.index:cf.index + max_records - len(out)]
            cf.index += len(chunk)
            out.extend(chunk)
            st.position = chunk[-1].offset + 1 if cf.index < len(cf.records) else cf.records_next
        return out

    def _decode_next_batch(self, cf: CompletedFetch, st: TopicPartitionState) -> bool:
        """Decode the next batch holding records at or after the position; False when done."""
        data = cf.data
        tp = cf.tp
        while cf.pos + HEADER_SIZE <= len(data):
            header = read_header(data, cf.pos)
            start = cf.pos
            cf.pos += header.size
            position = st.position
            assert position is not None
            if header.next_offset <= position:
                continue  # wholly before the position
            if header.base_offset > position:
                self.gaps.append(OffsetGap(tp, position, header.base_offset))
                st.position = position = header.base_offset
            if cf.aborted and header.producer_id >= 0:
                while cf.aborted and cf.aborted[0].first_offset <= header.last_offset:
                    cf.aborted_pids.add(cf.aborted.popleft().producer_id)
            if header.is_control:
                if header.producer_id in cf.aborted_pids and marker_of(data[start:cf.pos])[0] == ControlType.ABORT:
                    cf.aborted_pids.discard(header.producer_id)
                st.position = header.next_offset
                continue
            if header.is_transactional and header.producer_id in cf.aborted_pids:
                st.position = header.next_offset  # an aborted transaction's records
                continue
            cols = decode_record_columns(data[start:cf.pos], verify_crc=self.check_crcs)
            cols = cols.since(position)
            # Column-wise, all in C: ConsumerRecords straight from the decoded columns,
            # without a Python-level call or an intermediate tuple per record.
            # LogAppendTime batches already carry the broker's time in every timestamp.
            cf.records = list(map(_new_tuple, repeat(ConsumerRecord), zip(
                repeat(tp.topic), repeat(tp.partition), cols.offsets, cols.timestamps,
                repeat(_TIMESTAMP_TYPES[header.timestamp_type]), cols.keys, cols.values,
                cols.headers)))
            cf.index = 0
            cf.records_next = header.next_offset
            if cf.records:
                return True
            st.position = header.next_offset
        return False


def _complete_prefix(data: memoryview) -> int:
    """Length of the prefix made of whole batches (a response may end mid-batch)."""
    pos = 0
    n = len(data)
    while pos + HEADER_SIZE <= n:
        header = read_header(data, pos)
        if pos + header.size > n:
            break
        pos += header.size
    return pos


def _last_next_offset(data: memoryview, end: int) -> int:
    pos = 0
    nxt = 0
    while pos < end:
        header = read_header(data, pos)
        nxt = header.next_offset
        pos += header.size
    return nxt


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
