"""The asyncio client: Producer, Consumer, Admin (``mq.client.blocking`` has the same API, blocking)."""

from mq.client.admin import Admin
from mq.client.consumer import Consumer
from mq.client.internals.fetcher import ConsumerRecord
from mq.client.mirror_admin import MirrorAppendResult, OffsetOutOfRange, RawFetch
from mq.client.producer import Producer
from mq.client.results import GroupMetadata, OffsetAndMetadata, PendingRecordFuture, RecordFuture
from mq.client.share_consumer import ShareConsumer, ShareRecord
from mq.client.table_view import TableView
from mq.core.types import RecordMetadata

__all__ = ["Admin", "Consumer", "ConsumerRecord", "GroupMetadata", "MirrorAppendResult", "OffsetAndMetadata",
           "OffsetOutOfRange", "PendingRecordFuture", "Producer", "RawFetch", "RecordFuture", "RecordMetadata",
           "ShareConsumer", "ShareRecord", "TableView"]
