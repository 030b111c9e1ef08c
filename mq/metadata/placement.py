"""Replica placement for new topics: Kafka's rack-unaware assignment.

Partition ``p``'s first replica (its initial leader) is broker ``(start + p) mod n``, so
leaders are spread evenly; the other replicas follow at a shift that grows by one
after every ``n`` partitions, so followers spread too. ``start`` and the first shift come
from the controller's seeded ``Rng``, so successive topics do not all pile their
leaders on the lowest broker id. Every replica set holds distinct brokers.
"""

from __future__ import annotations

from collections.abc import Sequence

from mq.core.errors import ErrorCode, MqError


def assign_replicas(
    broker_ids: Sequence[int], partitions: int, replication_factor: int, *, start_index: int = 0,
    shift: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``0..partitions-1`` over ``broker_ids`` (sorted by
    the caller; leader first)."""
    brokers = list(broker_ids)
    n = len(brokers)
    if not 1 <= replication_factor <= n:
        raise MqError(ErrorCode.INVALID_REPLICATION_FACTOR,
                      f"replication factor {replication_factor} must be between 1 and the number "
                      f"of live brokers ({n})")
    out = []
    next_shift = shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[_replica_index(first, next_shift, j, n)])
        out.append(tuple(replicas))
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's ``replicaIndex``: never ``first`` itself, distinct for each ``j < n - 1``."""
    return (first + 1 + (shift + j) % (n - 1)) % n
