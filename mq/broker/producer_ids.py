"""Producer ids, unique across the region and across restarts, and InitProducerId.

The scheme: each broker registration owns a block of ``IDS_PER_REGISTRATION`` (2**24)
ids, ``[broker_epoch * 2**24, (broker_epoch + 1) * 2**24)``. A broker epoch is the
offset of the broker's ``RegisterBrokerRecord`` in the committed metadata log (the
Raft quorum, ``mq.metadata.controller``), and an offset holds one record, so no two
registrations, of one broker or of two, across any restarts, share an epoch, and
their blocks never overlap: ids are unique without a write per id. It is Kafka's
KIP-730 (blocks of ids allocated through the metadata quorum) with the block
allocation riding on the registration record the quorum commits anyway. A broker
that hands out all 16.7 M ids of its block asks clients to use another broker
(retriable) until it restarts and registers again; a ``ProducerIdManager`` takes
its blocks from ``add_block``, so a later AllocateProducerIds request to the
controller (KIP-730's) can feed it blocks without changing its callers.

The transaction coordinator will call ``ProducerIdManager.generate`` for a new
``transactional_id`` (and bump epochs itself). Until then a request naming a
``transactional_id`` is refused.

Ids below 2**24 are never produced (epoch 0 is the metadata log's first record,
never a registration), and ``-1`` means "no producer id" in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.core.errors import ErrorCode, MqError
from mq.protocol.producer_messages import InitProducerIdRequest, InitProducerIdResponse

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode

IDS_PER_REGISTRATION = 1 << 24
MAX_PRODUCER_EPOCH = 32767
"""Epochs are i16; an idempotent producer whose epoch would pass this asks for a new id."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    first_id: int
    size: int

    @property
    def end(self) -> int:
        return self.first_id + self.size


def registration_block(broker_epoch: int) -> ProducerIdBlock:
    return ProducerIdBlock(broker_epoch * IDS_PER_REGISTRATION, IDS_PER_REGISTRATION)


class ProducerIdManager:
    """Hands out ids from the blocks it was given, in order (sans-IO)."""

    def __init__(self) -> None:
        self._blocks: list[ProducerIdBlock] = []
        self._next = -1
        self._seen: set[int] = set()

    def add_block(self, block: ProducerIdBlock) -> None:
        """A block this broker owns (ignored if given before)."""
        if block.first_id in self._seen:
            return
        self._seen.add(block.first_id)
        self._blocks.append(block)
        if self._next < 0:
            self._next = block.first_id

    def on_registered(self, broker_epoch: int) -> None:
        if broker_epoch > 0:
            self.add_block(registration_block(broker_epoch))

    @property
    def remaining(self) -> int:
        if not self._blocks:
            return 0
        return self._blocks[0].end - self._next + sum(b.size for b in self._blocks[1:])

    def generate(self) -> int:
        while self._blocks and self._next >= self._blocks[0].end:
            self._blocks.pop(0)
            self._next = self._blocks[0].first_id if self._blocks else -1
        if not self._blocks:
            raise MqError(ErrorCode.COORDINATOR_NOT_AVAILABLE, (
                "this broker has no producer id block (not registered with the controller yet, or "
                "its block is used up until it registers again): retry, or ask another broker"))
        producer_id = self._next
        self._next += 1
        return producer_id


def handle_init_producer_id(node: BrokerNode, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(ErrorCode.INVALID_REQUEST, error_message=(
            f"transactional_id {request.transactional_id!r}: this broker serves idempotent producers only "
            "(no transaction coordinator); leave transactional_id unset"))
    manager = node.producer_ids
    manager.on_registered(node.broker_epoch)
    try:
        producer_id = manager.generate()
    except MqError as err:
        return InitProducerIdResponse(err.code, error_message=err.message)
    return InitProducerIdResponse(ErrorCode.NONE, producer_id, 0)
