"""Look at a partition directory the way Kafka lays it out.

A partition is a directory ``<topic>-<partition>/`` of segments. Each segment is
three files named by its base offset (the first offset it holds, 20 digits):
``.log`` (record batches back to back), ``.index`` (sparse offset -> file position)
and ``.timeindex`` (sparse timestamp -> offset). The newest segment is the active
one: appends go there until it reaches ``segment.bytes`` and a new one is rolled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mq.storage.dump import dump_segment
from mq.storage.fileio import OsFileIO

_BASE_DIGITS = 20


@dataclass(frozen=True)
class Segment:
    """A snapshot of one segment's files (sizes as they were when listed)."""

    base_offset: int
    log_path: Path
    log_bytes: int
    index_bytes: int
    timeindex_bytes: int

    @property
    def index_path(self) -> Path:
        return self.log_path.with_suffix(".index")

    @property
    def timeindex_path(self) -> Path:
        return self.log_path.with_suffix(".timeindex")

    def row(self) -> dict[str, Any]:
        return {"base_offset": self.base_offset, "file": self.log_path.name,
                "log_bytes": self.log_bytes, "index_bytes": self.index_bytes,
                "timeindex_bytes": self.timeindex_bytes}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def list_segments(partition_dir: str | Path) -> list[Segment]:
    """The segments of a partition, oldest first; empty when the directory is gone."""
    directory = Path(partition_dir)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        stem = path.name[: -len(".log")]
        if path.suffix == ".log" and len(stem) == _BASE_DIGITS and stem.isdigit():
            found.append(Segment(
                base_offset=int(stem), log_path=path, log_bytes=_size(path),
                index_bytes=_size(path.with_suffix(".index")),
                timeindex_bytes=_size(path.with_suffix(".timeindex")),
            ))
    return sorted(found, key=lambda s: s.base_offset)


def fits_retention_bytes(segments: Sequence[Segment], retention_bytes: int) -> bool:
    """True when size-based retention has nothing left to delete: the broker deletes the
    oldest segment while the partition would still hold at least ``retention_bytes``
    without it (Kafka's rule), so it stops once dropping the oldest would go below."""
    total = sum(s.log_bytes for s in segments)
    return not segments or total - segments[0].log_bytes < retention_bytes


def dump(path: str | Path) -> list[dict[str, Any]]:
    """What ``mq dump-log`` prints for a ``.log``, ``.index`` or ``.timeindex`` file, as
    dicts (batches with offsets, timestamps and CRC status; index entries)."""
    return list(dump_segment(OsFileIO(), str(path)))
