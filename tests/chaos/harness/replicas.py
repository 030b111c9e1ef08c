"""The replica check: after healing, every replica of a partition holds byte-identical
batches below the high watermark (TESTING.md).

It reads the segment files directly with ``mq.storage.dump`` (read-only, no recovery
run, so a stopped node's files are looked at exactly as they are) and compares the
raw bytes of each batch whose last offset is below the bound. Kafka followers copy
the leader's batches unchanged (offsets, leader epoch, CRC), so any difference is a
divergence.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mq.storage.dump import dump_segment
from mq.storage.fileio import OsFileIO

MAX_EXAMPLES = 32


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    data: bytes


@dataclass(frozen=True)
class ReplicaCheck:
    compared_batches: int
    partitions: tuple[str, ...]
    divergences: tuple[str, ...]

    def assert_ok(self) -> None:
        if self.divergences:
            raise AssertionError(f"{len(self.divergences)} replica divergences:\n  "
                                 + "\n  ".join(self.divergences[:MAX_EXAMPLES]))


def read_batches(partition_dir: str | Path, *, below: int | None = None) -> list[Batch]:
    """Every complete batch of the partition, in offset order, whose last offset is
    below ``below`` (all when None). A corrupt or torn tail ends the list."""
    fileio = OsFileIO()
    directory = str(partition_dir)
    out: list[Batch] = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        path = os.path.join(directory, name)
        handle = fileio.open(path)
        try:
            for entry in dump_segment(fileio, path):
                if entry["type"] != "batch" or not entry["crc_ok"]:
                    break
                if below is not None and entry["last_offset"] >= below:
                    break
                data = handle.pread(entry["position"], entry["size"])
                out.append(Batch(entry["base_offset"], entry["last_offset"], data))
        finally:
            handle.close()
    return out


def topic_partition_dirs(data_dir: str | Path) -> list[str]:
    """``<topic>-<n>`` directory names of a data dir, internal ``__`` logs excluded."""
    names = []
    for name in sorted(os.listdir(data_dir)):
        topic, sep, number = name.rpartition("-")
        if sep and topic and number.isdigit() and not name.startswith("__") \
                and os.path.isdir(os.path.join(data_dir, name)):
            names.append(name)
    return names


def compare_replicas(data_dirs: Iterable[str | Path], *,
                     below: int | Mapping[str, int] | None = None,
                     partitions: Iterable[str] | None = None) -> ReplicaCheck:
    """Compare each partition across ``data_dirs``. ``below`` bounds the comparison:
    one offset for every partition, or ``{"topic-0": hw, ...}``; None compares whole
    logs. ``partitions`` defaults to the partition dirs present in every data dir."""
    dirs = [Path(d) for d in data_dirs]
    if partitions is None:
        common = [set(topic_partition_dirs(d)) for d in dirs]
        names = sorted(set.intersection(*common)) if common else []
    else:
        names = sorted(partitions)
    compared, divergences = 0, []
    for name in names:
        bound = below.get(name) if isinstance(below, Mapping) else below
        replicas = [read_batches(d / name, below=bound) for d in dirs]
        reference = replicas[0]
        for d, batches in zip(dirs[1:], replicas[1:], strict=True):
            divergences.extend(_diff(name, dirs[0], reference, d, batches, bound))
        compared += len(reference)
    return ReplicaCheck(compared, tuple(names), tuple(divergences))


def _diff(name: str, ref_dir: Path, ref: list[Batch], other_dir: Path, other: list[Batch],
          bound: int | None) -> list[str]:
    out = []
    for a, b in zip(ref, other, strict=False):
        if a.data != b.data:
            out.append(f"{name}: batch {a.base_offset}-{a.last_offset} in {ref_dir} differs from "
                       f"batch {b.base_offset}-{b.last_offset} in {other_dir}")
    if len(ref) != len(other):
        longer, shorter = (ref_dir, other_dir) if len(ref) > len(other) else (other_dir, ref_dir)
        out.append(f"{name}: {shorter} has {min(len(ref), len(other))} batches below {bound}, "
                   f"{longer} has {max(len(ref), len(other))}")
    return out
