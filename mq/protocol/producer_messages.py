"""Requests of idempotent (and, later, transactional) producers.

``InitProducerId`` (Kafka's API 22) gives a producer its producer id and epoch. Any
broker answers it for an idempotent producer (no ``transactional_id``); the
transaction coordinator will answer it for a transactional one, fencing older
instances by bumping the epoch of the id it keeps for that ``transactional_id``.
Producer ids are unique across the region and across restarts: see
``mq.broker.producer_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.protocol.messages import ApiKey, Request, Response


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse(Response):
    API_KEY = ApiKey.INIT_PRODUCER_ID
    error_code: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    error_message: str = ""
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest(Request):
    """A new producer id with epoch 0. `transactional_id` (None: an idempotent
    producer) and `transaction_timeout_ms` are for the transaction coordinator;
    `producer_id` and `producer_epoch` (-1: none) name the id a producer holds, so a
    coordinator can bump its epoch instead of allocating (KIP-360). An idempotent
    producer bumps its epoch itself and asks for a new id only when the epoch would
    overflow."""

    API_KEY = ApiKey.INIT_PRODUCER_ID
    RESPONSE = InitProducerIdResponse
    transactional_id: str | None = None
    transaction_timeout_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1


PRODUCER_REQUESTS: tuple[type[Request], ...] = (InitProducerIdRequest,)
