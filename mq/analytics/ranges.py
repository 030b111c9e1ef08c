"""Offset ranges: what each Spark partition of an mq read covers, resolved from the options.

Pure: the caller asks the brokers for each partition's log start, log end (high
watermark) and the offsets for the timestamps, and passes them in. A range is
``[start, end)``; a batch read gets one per topic partition (or several, with
``maxRecordsPerPartition``), a micro-batch one per partition that moved. Streaming
offsets, as Spark stores them in the checkpoint, are ``{"orders": {"0": 42, "1": 7}}``:
the next offset to read per partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mq.analytics.options import EARLIEST, LATEST, SourceOptions
from mq.core.types import TopicPartition


class SourceReadError(RuntimeError):
    """A read the source cannot do as asked (data deleted, offsets beyond the end, no topic)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"[{code}] {message}")


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class PartitionBounds:
    """What the brokers said about one partition when the read was planned."""

    log_start: int
    log_end: int
    start_for_time: int | None = None  # ListOffsets answer for the starting timestamp (-1: none)
    end_for_time: int | None = None


def _pick(spec: int | dict[str, dict[int, int]], tp: TopicPartition, default: int) -> tuple[int, bool]:
    """The offset spec for ``tp`` (``default`` for a partition a JSON spec leaves out) and
    whether it is an explicit offset."""
    if isinstance(spec, dict):
        spec = spec.get(tp.topic, {}).get(tp.partition, default)
    return spec, spec not in (EARLIEST, LATEST)


def _resolve(spec: int, bounds: PartitionBounds) -> int:
    if spec == EARLIEST:
        return bounds.log_start
    if spec == LATEST:
        return bounds.log_end
    return spec


def _for_time(found: int | None, bounds: PartitionBounds) -> int:
    """ListOffsets by time answers -1 when no record is that recent: the log end."""
    return bounds.log_end if found in (None, -1) else found


def batch_ranges(options: SourceOptions, bounds: Mapping[TopicPartition, PartitionBounds]) -> list[OffsetRange]:
    """One range per partition of a batch read (see ``mq.analytics.options`` for the rules)."""
    out = []
    for tp in sorted(bounds):
        b = bounds[tp]
        if options.starting_timestamp_ms is not None:
            start, explicit_start = _for_time(b.start_for_time, b), False
        else:
            spec, explicit_start = _pick(options.starting, tp, EARLIEST)
            start = _resolve(spec, b)
        if options.ending_timestamp_ms is not None:
            end, explicit_end = _for_time(b.end_for_time, b), False
        else:
            spec, explicit_end = _pick(options.ending, tp, LATEST)
            end = _resolve(spec, b)
        if explicit_start and start > b.log_end:
            raise SourceReadError("MQ_SOURCE_OFFSET_BEYOND_END", f"startingOffsets {tp}: {start} is beyond the log "
                                  f"end {b.log_end} (the partition holds [{b.log_start}, {b.log_end}))")
        if explicit_end and end > b.log_end:
            raise SourceReadError("MQ_SOURCE_OFFSET_BEYOND_END", f"endingOffsets {tp}: {end} is beyond the log end "
                                  f"{b.log_end}: those records do not exist yet")
        if explicit_start and explicit_end and end < start:
            raise SourceReadError("MQ_SOURCE_BAD_RANGE", f"{tp}: endingOffsets {end} is before startingOffsets {start}")
        start = _data_loss(options, tp, start, b.log_start, end)
        out.append(OffsetRange(tp.topic, tp.partition, start, max(start, end)))
    return out


def _data_loss(options: SourceOptions, tp: TopicPartition, start: int, log_start: int, end: int) -> int:
    if start >= log_start or start >= end:
        return start
    if options.fail_on_data_loss:
        raise SourceReadError("MQ_SOURCE_DATA_LOSS", f"{tp}: offsets [{start}, {min(end, log_start)}) were deleted "
                              f"(the log starts at {log_start}, retention or DeleteRecords); read from there with "
                              ".option(\"failOnDataLoss\", \"false\")")
    return log_start


def split(ranges: list[OffsetRange], max_records: int | None) -> list[OffsetRange]:
    """Ranges of at most ``max_records`` offsets each (empty ranges dropped)."""
    out = []
    for r in ranges:
        if r.size == 0:
            continue
        if not max_records:
            out.append(r)
            continue
        for lo in range(r.start, r.end, max_records):
            out.append(OffsetRange(r.topic, r.partition, lo, min(r.end, lo + max_records)))
    return out


# ---------------------------------------------------------------- streaming


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{tp: offset}`` as Spark keeps it in the checkpoint (JSON: string keys)."""
    doc: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return doc


def offsets_of_json(doc: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    try:
        return {TopicPartition(str(topic), int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise SourceReadError("MQ_SOURCE_BAD_CHECKPOINT", f"not mq source offsets: {str(doc)[:120]} (a checkpoint "
                              "written by another source? use a new checkpointLocation)") from None


def initial_offsets(options: SourceOptions, bounds: Mapping[TopicPartition, PartitionBounds]
                    ) -> dict[TopicPartition, int]:
    """Where a new streaming query starts, per partition."""
    out = {}
    for tp in sorted(bounds):
        b = bounds[tp]
        if options.starting_timestamp_ms is not None:
            out[tp] = _for_time(b.start_for_time, b)
            continue
        spec, explicit = _pick(options.starting, tp, LATEST)
        start = _resolve(spec, b)
        if explicit and start > b.log_end:
            raise SourceReadError("MQ_SOURCE_OFFSET_BEYOND_END", f"startingOffsets {tp}: {start} is beyond the log "
                                  f"end {b.log_end}")
        out[tp] = start
    return out


def stream_ranges(options: SourceOptions, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                  log_starts: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """The ranges of one micro-batch: each partition from its start offset to its end (a
    partition created since the last batch starts at its log start)."""
    out = []
    for tp in sorted(end):
        log_start = log_starts.get(tp, 0)
        begin = start.get(tp, log_start)
        begin = _data_loss(options, tp, begin, log_start, end[tp])
        if end[tp] > begin:
            out.append(OffsetRange(tp.topic, tp.partition, begin, end[tp]))
    return out
