"""The metadata log: ``<log.dirs>/__cluster_metadata-0/``, an ordinary partition log.

Appends are fsynced before they count (metadata is always durable, whatever the
topic flush policy), and start-up replays the whole log into a ``MetadataImage``.
The next issue replicates this same log with Raft; then "committed" will mean
"replicated to a majority" instead of "fsynced here".
"""

from __future__ import annotations

import os.path
from dataclasses import dataclass

from mq.core.config import TopicConfig
from mq.metadata.records import METADATA_TOPIC, MetadataRecord, decode_batches, encode_batch
from mq.protocol.record_batch import iter_batches
from mq.storage.fileio import FileIO
from mq.storage.log import Log

METADATA_LOG_CONFIG = TopicConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=64 * 1024 * 1024,
                                  max_message_bytes=8 * 1024 * 1024)
READ_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    last_offset: int
    records: list[MetadataRecord]


class MetadataLog:
    def __init__(self, log: Log) -> None:
        self.log = log

    @classmethod
    def open(cls, fileio: FileIO, data_dir: str, *, now_ms: int) -> MetadataLog:
        directory = os.path.join(data_dir, f"{METADATA_TOPIC}-0")
        return cls(Log.open(fileio, directory, METADATA_LOG_CONFIG, now_ms=now_ms))

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    def read_committed(self) -> list[CommittedBatch]:
        """Every record in the log, oldest first, in read-sized chunks (start-up replay)."""
        out: list[CommittedBatch] = []
        offset = self.log.log_start_offset
        end = self.log.log_end_offset
        while offset < end:
            data = self.log.read(offset, max_bytes=READ_CHUNK_BYTES).records
            if not data:
                break
            records = decode_batches(data)
            offset = _next_offset(data)
            out.append(CommittedBatch(offset - 1, records))
        return out

    def append(self, records: list[MetadataRecord], *, now_ms: int) -> int:
        """Append atomically (one batch) and fsync; returns the last offset."""
        info = self.log.append_as_leader(encode_batch(records, now_ms=now_ms), leader_epoch=0, now_ms=now_ms)
        self.log.flush()
        return info.last_offset

    def close(self) -> None:
        self.log.close()


def _next_offset(data: bytes | memoryview) -> int:
    last = -1
    for _, header in iter_batches(data):
        last = header.next_offset
    return last
