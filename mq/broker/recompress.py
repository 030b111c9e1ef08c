"""Re-encode produced batches with the topic's ``compression.type``.

Only when a topic sets ``compression.type`` to a codec (not ``producer``) and a batch
arrives with another codec: then, like Kafka, the broker decompresses and rebuilds it.
This is the one place the broker looks inside a batch, so it is also where a
decompression bomb could hurt: output is capped (``max_decompressed_bytes``) and a
batch that expands beyond it is refused with ``RECORD_TOO_LARGE`` before anything is
appended. With ``compression.type=producer`` (the default) batches stay opaque bytes.
"""

from __future__ import annotations

from mq.core.types import CompressionType
from mq.protocol.record_batch import BatchBuilder, decode_records, iter_batches

DECOMPRESSED_LIMIT_FACTOR = 16
"""A batch may expand to this many times ``max.message.bytes`` (capped at 64 MiB)."""
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


def target_codec(compression_type: str) -> CompressionType | None:
    """The codec a topic stores with, or None for ``producer`` (keep the bytes)."""
    if compression_type == "producer":
        return None
    return CompressionType.parse(compression_type)


def needs_recompression(records: bytes | memoryview, codec: CompressionType) -> bool:
    return any(h.compression != codec and not h.is_control for _, h in iter_batches(records))


def recompress(records: bytes | memoryview, codec: CompressionType, *, max_message_bytes: int) -> bytes:
    """Every batch in ``records`` rebuilt with ``codec``; producer ids, sequences and
    timestamps are kept. Raises ProtocolError (CORRUPT_MESSAGE, RECORD_TOO_LARGE)."""
    limit = min(MAX_DECOMPRESSED_BYTES, DECOMPRESSED_LIMIT_FACTOR * max_message_bytes)
    view = memoryview(records)
    out = []
    for pos, header in iter_batches(view):
        batch = view[pos:pos + header.size]
        if header.compression == codec or header.is_control:
            out.append(bytes(batch))
            continue
        builder = BatchBuilder(
            compression=codec,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
        )
        for record in decode_records(batch, max_decompressed_bytes=limit):
            builder.append(record.timestamp, record.key, record.value, record.headers)
        out.append(builder.build())
    return b"".join(out)
