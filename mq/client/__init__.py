"""The asyncio client: Producer, Consumer, Admin (``mq.client.blocking`` has the same API, blocking)."""

from mq.client.admin import Admin
from mq.client.consumer import Consumer
from mq.client.internals.fetcher import ConsumerRecord
from mq.client.producer import Producer
from mq.client.results import GroupMetadata, OffsetAndMetadata, PendingRecordFuture, RecordFuture
from mq.core.types import RecordMetadata

__all__ = ["Admin", "Consumer", "ConsumerRecord", "GroupMetadata", "OffsetAndMetadata",
           "PendingRecordFuture", "Producer", "RecordFuture", "RecordMetadata"]
