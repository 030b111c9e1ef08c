"""Small checkpoint files in a partition directory, replaced atomically.

``recovery-point-offset-checkpoint``: every offset below it was fsynced, so start-up
recovery only re-reads the segments from the one holding it.
``log-start-offset-checkpoint``: the log start offset moved by DeleteRecords or
retention, so deleted offsets stay deleted after a restart.

Format (text, like Kafka's checkpoint files but one entry, since the file lives in
the partition's own directory): a version line ``0`` and an offset line. Written to
``<name>.tmp``, fsynced, then renamed over the old file: a reader sees the old or the
new file, never a torn one. An unreadable file counts as missing (recovery then
re-reads more, which is safe).
"""

from __future__ import annotations

import posixpath

from mq.storage.fileio import FileIO

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
TMP_SUFFIX = ".tmp"
VERSION = 0


def write_checkpoint(fileio: FileIO, directory: str, name: str, offset: int) -> None:
    path = posixpath.join(directory, name)
    tmp = path + TMP_SUFFIX
    handle = fileio.open(tmp)
    try:
        handle.truncate(0)
        handle.append(f"{VERSION}\n{offset}\n".encode())
        handle.fsync()
    finally:
        handle.close()
    fileio.rename(tmp, path)


def read_checkpoint(fileio: FileIO, directory: str, name: str) -> int | None:
    path = posixpath.join(directory, name)
    if not fileio.exists(path):
        return None
    handle = fileio.open(path)
    try:
        text = handle.pread(0, 128)
    finally:
        handle.close()
    lines = text.split(b"\n")
    if len(lines) != 3 or lines[0] != str(VERSION).encode() or lines[2] != b"":
        return None
    try:
        offset = int(lines[1])
    except ValueError:
        return None
    return offset if offset >= 0 else None
