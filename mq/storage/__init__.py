"""Segments, indexes, the partition log and its recovery, behind a FileIO seam."""

from mq.storage.fileio import FileHandle, FileIO, MemoryFileIO, OsFileIO, power_loss
from mq.storage.index import OffsetIndex, TimeIndex
from mq.storage.log import FetchDataInfo, Log
from mq.storage.segment import LogCorruptedError, LogSegment
from mq.storage.validator import LogAppendInfo

__all__ = [
    "FetchDataInfo", "FileHandle", "FileIO", "Log", "LogAppendInfo", "LogCorruptedError",
    "LogSegment", "MemoryFileIO", "OffsetIndex", "OsFileIO", "TimeIndex", "power_loss",
]
