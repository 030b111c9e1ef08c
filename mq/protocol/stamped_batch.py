"""Batches whose records all get the same headers appended, two of them varying: what a
copier that stamps every record it copies writes (the active-active mirror's provenance:
origin region, partition, offset, timestamp, hops, path).

``AppendedHeaders`` holds the constant header pairs before and after the two varying ones,
whose values are per-record integers written as ASCII decimals. ``build`` writes the batch
from columns without a Python step per record: when no record has headers of its own, each
record's msgpack payload (``mq.protocol.batch_builder``: ``[offset_delta, timestamp_delta,
key, value, headers]``) is one bytes-format of a template in which the constant pairs are
already encoded, so only the deltas, key, value and the two decimals are encoded per record
(one C-level ``map`` over the columns); records with headers of their own get them first,
then the appended ones, through ``build_batch_columns``. Both give the bytes
``build_batch`` gives for the same records.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import add

import crc32c
import msgpack

from mq.core.types import CompressionType
from mq.protocol.batch_builder import build_batch_columns
from mq.protocol.batch_format import BODY_HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, PREFIX
from mq.protocol.compression import codec_of, compress

Header = tuple[str, bytes]
_DECIMAL = b"%d".__mod__  # an int as ASCII decimal, in C
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _array_header(n: int) -> bytes:
    if n <= 15:
        return bytes((0x90 | n,))
    if n <= 0xFFFF:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


class AppendedHeaders:
    """``head``, then ``(first_name, decimal)`` and ``(second_name, decimal)``, then
    ``tail``: the headers appended to every record (see the module docstring)."""

    def __init__(self, head: Sequence[Header], names: tuple[str, str], tail: Sequence[Header]) -> None:
        self.head = tuple(head)
        self.names = names
        self.tail = tuple(tail)
        packer = msgpack.Packer(use_bin_type=True)
        self._pack = packer.pack
        count = len(self.head) + 2 + len(self.tail)
        # a record without headers of its own: [delta, ts delta, key, value, [pairs...]]
        self._record = (b"\x95%b%b%b%b" + _array_header(count)
                        + b"".join(map(self._pack, self.head))
                        + b"\x92" + self._pack(names[0]) + b"\xc4%c%b"
                        + b"\x92" + self._pack(names[1]) + b"\xc4%c%b"
                        + b"".join(map(self._pack, self.tail)))

    def columns(self, own: Sequence[Sequence[Header]], first: Sequence[int],
                second: Sequence[int]) -> list[tuple[Header, ...]]:
        """Every record's headers: its own, then the appended ones (tuples, C-level passes)."""
        n = len(first)
        stamps = zip(*(repeat(h, n) for h in self.head),
                     zip(repeat(self.names[0]), map(_DECIMAL, first)),
                     zip(repeat(self.names[1]), map(_DECIMAL, second)),
                     *(repeat(h, n) for h in self.tail))
        if own.count(()) == n:
            return list(stamps)
        return list(map(add, map(tuple, own), stamps))

    def build(self, timestamps: Sequence[int], keys: Sequence[bytes | None], values: Sequence[bytes | None],
              own: Sequence[Sequence[Header]], first: Sequence[int], second: Sequence[int], *,
              compression: CompressionType | int = CompressionType.NONE) -> bytes:
        """One batch (base offset 0, CreateTime) of the records, each with its own headers
        (``own``) and the appended ones; ``first`` and ``second``: the varying values."""
        n = len(values)
        if not n or not len(keys) == len(timestamps) == len(own) == len(first) == len(second) == n:
            raise ValueError("a batch needs at least one record, and one entry per record in every column")
        if own.count(()) != n:
            return build_batch_columns(timestamps, keys, values, self.columns(own, first, second),
                                       compression=compression)
        start, low, high = timestamps[0], min(timestamps), max(timestamps)
        if type(start) is not int or not _INT64_MIN <= low <= high <= _INT64_MAX:
            raise ValueError("record timestamps must be ints that fit in 64 bits")
        if high - low > _INT64_MAX:
            raise ValueError("record timestamps too far apart for one batch")
        pack = self._pack
        first_digits = list(map(_DECIMAL, first))
        second_digits = list(map(_DECIMAL, second))
        if low == high:
            ts_deltas = repeat(b"\x00", n)
        else:
            ts_deltas = map(pack, map(add, timestamps, repeat(-start)))
        key_bytes = repeat(b"\xc0", n) if keys.count(None) == n else map(pack, keys)
        records = map(self._record.__mod__, zip(
            map(pack, range(n)), ts_deltas, key_bytes, map(pack, values),
            map(len, first_digits), first_digits, map(len, second_digits), second_digits))
        payload = _array_header(n) + b"".join(records)
        codec = codec_of(int(compression))
        payload = compress(codec, payload)
        body = BODY_HEADER.pack(int(codec), n - 1, start, high, -1, -1, -1, n)
        crc = crc32c.crc32c(payload, crc32c.crc32c(body))
        prefix = PREFIX.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, MAGIC, crc)
        return b"".join((prefix, body, payload))
