"""SubscriptionState: which partitions a consumer reads, and where it is in each.

A partition's *position* is the offset of the next record ``poll`` will return.
A position may be unknown: right after ``assign``, after ``seek_to_beginning/end/timestamp``, or after OFFSET_OUT_OF_RANGE under
an ``earliest``/``latest`` reset policy. Such a partition carries a pending *offset
lookup* (a ListOffsets timestamp: -2 earliest, -1 latest, or a time in ms) that the
consumer resolves before fetching it. ``seek_epoch`` grows with every seek so that a
fetch sent before the seek cannot move the position afterwards.

Assignment is kept in the order given (never set order), so fetches and polls visit
partitions deterministically. A consumer group assigns partitions through the same
``assign`` with ``awaiting_committed=True``: a new partition then waits for its
committed offset (OffsetFetch) and falls back to the reset policy when there is none.
A partition removed and later assigned again starts with a ``seek_epoch`` above its old
one, so nothing fetched for its previous incarnation is ever returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition


class OffsetResetStrategy(str, Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"

    @property
    def lookup_timestamp(self) -> int | None:
        if self is OffsetResetStrategy.EARLIEST:
            return EARLIEST_TIMESTAMP
        if self is OffsetResetStrategy.LATEST:
            return LATEST_TIMESTAMP
        return None


@dataclass(slots=True)
class TopicPartitionState:
    position: int | None = None
    pending_lookup: int | None = None  # ListOffsets timestamp to resolve the position with
    lookup_is_reset: bool = False  # the lookup is an auto reset (a gap is recorded after it)
    paused: bool = False
    seek_epoch: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    error: MqError | None = None  # raised by the next poll (e.g. out of range, reset=none)
    awaiting_committed: bool = False  # group member: position comes from OffsetFetch


class SubscriptionState:
    def __init__(self, default_reset: OffsetResetStrategy | str = OffsetResetStrategy.LATEST) -> None:
        self.default_reset = OffsetResetStrategy(default_reset)
        self.states: dict[TopicPartition, TopicPartitionState] = {}
        self._retired_epochs: dict[TopicPartition, int] = {}  # last seek_epoch of removed partitions

    # ------------------------------------------------------------------ assignment

    def assign(self, partitions: list[TopicPartition], *, awaiting_committed: bool = False) -> None:
        """Replace the assignment; partitions kept from the old one keep their position.
        ``awaiting_committed``: new partitions wait for ``committed_done``."""
        ordered = list(dict.fromkeys(partitions))
        old = self.states
        kept = set(ordered)
        for tp, st in old.items():
            if tp not in kept:
                self._retired_epochs[tp] = st.seek_epoch
        self.states = {tp: old.get(tp) or self._initial_state(tp, awaiting_committed)
                       for tp in ordered}

    def _initial_state(self, tp: TopicPartition, awaiting_committed: bool) -> TopicPartitionState:
        epoch = self._retired_epochs.pop(tp, -1) + 1
        if awaiting_committed:
            return TopicPartitionState(seek_epoch=epoch, awaiting_committed=True)
        return TopicPartitionState(pending_lookup=self.default_reset.lookup_timestamp,
                                   lookup_is_reset=True, seek_epoch=epoch)

    def assigned(self) -> list[TopicPartition]:
        return list(self.states)

    def topics(self) -> list[str]:
        return list(dict.fromkeys(tp.topic for tp in self.states))

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        st = self.states.get(tp)
        if st is None:
            raise MqError(ErrorCode.INVALID_REQUEST, f"{tp} is not assigned to this consumer")
        return st

    # ------------------------------------------------------------------ positions

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise MqError(ErrorCode.INVALID_REQUEST, f"cannot seek {tp} to negative offset {offset}")
        st = self.state(tp)
        st.position = offset
        st.pending_lookup = None
        st.lookup_is_reset = False
        st.awaiting_committed = False
        st.error = None
        st.seek_epoch += 1

    def request_lookup(self, tp: TopicPartition, timestamp: int, *, is_reset: bool = False) -> None:
        """Forget the position until a ListOffsets for ``timestamp`` answers."""
        st = self.state(tp)
        st.pending_lookup = timestamp
        st.lookup_is_reset = is_reset
        st.awaiting_committed = False
        st.error = None
        st.seek_epoch += 1
        if not is_reset:
            st.position = None

    def request_reset(self, tp: TopicPartition, reason: str) -> None:
        """OFFSET_OUT_OF_RANGE: apply the reset policy, or remember the error for poll."""
        st = self.state(tp)
        ts = self.default_reset.lookup_timestamp
        if ts is None:
            st.error = MqError(ErrorCode.OFFSET_OUT_OF_RANGE,
                               f"{tp}: {reason} and auto_offset_reset=none; seek to a valid offset")
            st.seek_epoch += 1
            return
        self.request_lookup(tp, ts, is_reset=True)

    def lookup_done(self, tp: TopicPartition, offset: int, seek_epoch: int) -> int | None:
        """Apply a ListOffsets answer if no seek happened since; returns the old position
        (for gap detection) or None."""
        st = self.states.get(tp)
        if st is None or st.seek_epoch != seek_epoch or st.pending_lookup is None:
            return None
        old = st.position
        st.position = offset
        st.pending_lookup = None
        st.lookup_is_reset = False
        st.seek_epoch += 1
        return old

    def awaiting_committed(self) -> list[tuple[TopicPartition, int]]:
        """(tp, seek_epoch) of each partition waiting for its committed offset."""
        return [(tp, st.seek_epoch) for tp, st in self.states.items() if st.awaiting_committed]

    def committed_done(self, tp: TopicPartition, offset: int | None, seek_epoch: int) -> None:
        """Apply an OffsetFetch answer (``None``: nothing committed, so the reset policy
        decides) unless the partition was sought or reassigned since."""
        st = self.states.get(tp)
        if st is None or not st.awaiting_committed or st.seek_epoch != seek_epoch:
            return
        if offset is not None and offset >= 0:
            self.seek(tp, offset)
        else:
            st.awaiting_committed = False
            self.request_reset(tp, "no committed offset")

    def position(self, tp: TopicPartition) -> int | None:
        return self.state(tp).position

    def pending_lookups(self) -> list[tuple[TopicPartition, int, int]]:
        """(tp, timestamp, seek_epoch) for each partition waiting for ListOffsets."""
        return [(tp, st.pending_lookup, st.seek_epoch) for tp, st in self.states.items()
                if st.pending_lookup is not None]

    def pause(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self.state(tp).paused = True

    def resume(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self.state(tp).paused = False

    def paused(self) -> list[TopicPartition]:
        return [tp for tp, st in self.states.items() if st.paused]

    def is_fetchable(self, tp: TopicPartition) -> bool:
        st = self.states.get(tp)
        return (st is not None and st.position is not None and st.pending_lookup is None
                and not st.paused and st.error is None)

    def take_error(self) -> MqError | None:
        """The first partition error to raise from poll (cleared once taken)."""
        for st in self.states.values():
            if st.error is not None:
                err, st.error = st.error, None
                return err
        return None
