"""Kafka's key hash, shared by the partitioner (``mq.client.internals.partitioner``) and
the home-region rule of conflict policies (``mq.core.conflict``): one definition, so a
key's partition and its home region are computed from the same bytes the same way in
every client and broker."""

from __future__ import annotations

import struct

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2 as a signed int (Java's int)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    words = length >> 2
    for k in struct.unpack_from(f"<{words}I", data) if words else ():
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = words << 2
    extra = length & 3
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails on MIN_INT)."""
    return n & 0x7FFFFFFF
