"""Swapping the log cleaner's output in for the segments it replaces, crash-safely.

Kafka's scheme, by file names. The cleaner writes the new segment under the base
offset of the first segment it replaces with the suffix ``.cleaned``
(``<base>.log.cleaned``, ``.index.cleaned``, ``.timeindex.cleaned``) and fsyncs it.
Then ``swap_in``:

1. renames the cleaned index files, then the ``.log``, to ``.swap``: the rename of
   ``<base>.log.swap`` is the commit point;
2. deletes the replaced segments' files;
3. renames the ``.swap`` files to the segment's plain names (the ``.log`` last);
4. fsyncs the directory.

``recover_swaps`` runs when a partition is opened, before its segments are listed:
``.cleaned`` files are an unfinished cleaning and are removed (the old segments are
intact); a ``<base>.log.swap`` is a committed one, finished now: every segment file
whose base offset lies in ``[base, end of the swap segment)`` is removed and the
``.swap`` files take the plain names. The cleaner keeps the last batch of every
segment group it rewrites (empty if all its records went), so the swap segment
ends exactly where the replaced ones did and that range covers them all. Index
``.swap`` files without a ``<base>.log.swap`` belong to an uncommitted swap and are
removed. A missing index is rebuilt from the ``.log`` on first use.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from mq.core.config import TopicConfig
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import HEADER_SIZE, read_header
from mq.storage.fileio import FileIO
from mq.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_name

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def parse_base(name: str, suffix: str) -> int | None:
    """The base offset in ``<20 digits><suffix>``, else None."""
    stem = name[: -len(suffix)]
    if not name.endswith(suffix) or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def segment_paths(directory: str, base_offset: int, suffix: str = "") -> tuple[str, str, str]:
    """``(.log, .index, .timeindex)`` paths of a segment, each followed by ``suffix``."""
    prefix = posixpath.join(directory, segment_name(base_offset))
    return tuple(prefix + s + suffix for s in SEGMENT_SUFFIXES)  # type: ignore[return-value]


def remove_cleaned(fileio: FileIO, directory: str, base_offset: int) -> None:
    """Remove the ``.cleaned`` files of an abandoned cleaning."""
    for path in segment_paths(directory, base_offset, CLEANED_SUFFIX):
        if fileio.exists(path):
            fileio.remove(path)


def swap_in(
    fileio: FileIO, directory: str, old: Sequence[LogSegment], config: TopicConfig, *,
    created_ms: int,
) -> LogSegment:
    """Replace the segments ``old`` by the ``.cleaned`` segment at ``old[0]``'s base
    offset (written, fsynced and closed); returns it opened under the plain names."""
    base = old[0].base_offset
    cleaned = segment_paths(directory, base, CLEANED_SUFFIX)
    swap = segment_paths(directory, base, SWAP_SUFFIX)
    final = segment_paths(directory, base)
    for src, dst in zip(cleaned[1:], swap[1:]):
        if fileio.exists(src):
            fileio.rename(src, dst)
    fileio.rename(cleaned[0], swap[0])  # the commit point
    for segment in old:
        segment.delete()
    for src, dst in zip(swap[1:], final[1:]):
        if fileio.exists(src):
            fileio.rename(src, dst)
    fileio.rename(swap[0], final[0])
    fileio.fsync_dir(directory)
    return LogSegment(fileio, directory, base, config, created_ms=created_ms)


def _swap_end(fileio: FileIO, path: str, base_offset: int) -> int:
    """One past the last offset of the segment file at ``path`` (a hop over its batch
    headers; the file was fsynced before it was renamed, so it is whole)."""
    handle = fileio.open(path)
    try:
        size, pos, end = handle.size(), 0, base_offset
        while pos + HEADER_SIZE <= size:
            try:
                header = read_header(handle.pread(pos, HEADER_SIZE))
            except ProtocolError:
                break
            end = header.next_offset
            pos += header.size
        return end
    finally:
        handle.close()


def recover_swaps(fileio: FileIO, directory: str) -> int:
    """Finish committed swaps and remove abandoned cleaner output (see the module
    docstring); returns the number of swaps finished."""
    names = fileio.listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            fileio.remove(posixpath.join(directory, name))
    swaps = sorted(b for b in (parse_base(n, LOG_SUFFIX + SWAP_SUFFIX) for n in names) if b is not None)
    for base in swaps:
        swap = segment_paths(directory, base, SWAP_SUFFIX)
        end = _swap_end(fileio, swap[0], base)
        for name in fileio.listdir(directory):
            for suffix in SEGMENT_SUFFIXES:
                old = parse_base(name, suffix)
                if old is not None and base <= old < max(end, base + 1):
                    fileio.remove(posixpath.join(directory, name))
        for src, dst in zip(swap[1:], segment_paths(directory, base)[1:]):
            if fileio.exists(src):
                fileio.rename(src, dst)
        fileio.rename(swap[0], segment_paths(directory, base)[0])
    for name in fileio.listdir(directory):
        if name.endswith(SWAP_SUFFIX):  # an index of a swap that never committed
            fileio.remove(posixpath.join(directory, name))
    if swaps:
        fileio.fsync_dir(directory)
    return len(swaps)
