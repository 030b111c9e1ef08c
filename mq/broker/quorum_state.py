"""``quorum-state``: the Raft epoch and vote a voter must never forget.

A voter that votes twice in one epoch after a restart could elect two leaders, so
the vote is fsynced before the vote response leaves (Raft §5.2; KRaft's file of the
same name). Text, two lines after the version: the epoch and the vote (-1: none);
written to a ``.tmp`` file, fsynced and renamed, so a reader sees the old or the new
state, never a torn one.
"""

from __future__ import annotations

import posixpath

from mq.core.errors import ErrorCode, MqError
from mq.raft.quorum import ElectionState
from mq.storage.fileio import FileIO

QUORUM_STATE_FILE = "quorum-state"
_VERSION = b"0"


def write_quorum_state(fileio: FileIO, directory: str, state: ElectionState) -> None:
    path = posixpath.join(directory, QUORUM_STATE_FILE)
    voted = -1 if state.voted_for is None else state.voted_for
    handle = fileio.open(path + ".tmp")
    try:
        handle.truncate(0)
        handle.append(b"%s\n%d\n%d\n" % (_VERSION, state.epoch, voted))
        handle.fsync()
    finally:
        handle.close()
    fileio.rename(path + ".tmp", path)


def read_quorum_state(fileio: FileIO, directory: str) -> ElectionState | None:
    """None when the file does not exist (a new voter); a damaged file is an error:
    guessing an epoch or a vote could break Raft's safety."""
    path = posixpath.join(directory, QUORUM_STATE_FILE)
    if not fileio.exists(path):
        return None
    handle = fileio.open(path)
    try:
        lines = handle.pread(0, 256).split(b"\n")
    finally:
        handle.close()
    try:
        if len(lines) != 4 or lines[0] != _VERSION or lines[3] != b"":
            raise ValueError("unexpected layout")
        epoch, voted = int(lines[1]), int(lines[2])
    except ValueError as exc:
        raise MqError(ErrorCode.KAFKA_STORAGE_ERROR,
                      f"{path} is damaged ({exc}); restore it or remove this node's metadata directory "
                      f"so it rejoins the quorum as a new voter") from None
    return ElectionState(epoch, None if voted < 0 else voted)
