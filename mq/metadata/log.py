"""The metadata log's settings, and recognising a log written before the quorum.

The metadata log is ``<log.dirs>/__cluster_metadata-0/``, an ordinary partition log
that ``StorageReplicatedLog`` (``raft_log.py``) runs Raft over: one entry per batch,
its value a list of metadata records. The first mq build kept a single-node log
there instead (one record per metadata record, keyed by its type name); such a
directory is refused with a message rather than misread.
"""

from __future__ import annotations

from mq.core.config import TopicConfig
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import iter_records
from mq.storage.log import Log

METADATA_LOG_CONFIG = TopicConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=64 * 1024 * 1024,
                                  max_message_bytes=8 * 1024 * 1024)


def is_pre_quorum_log(log: Log) -> bool:
    """Whether ``log`` holds the first build's single-node metadata records (Raft
    entries have no key; those records were keyed by their type's name)."""
    if log.log_end_offset <= log.log_start_offset:
        return False
    data = log.read(log.log_start_offset, max_bytes=64 * 1024).records
    try:
        first = next(iter(iter_records(data)), None)
    except ProtocolError:
        return False
    return first is not None and first.key is not None
