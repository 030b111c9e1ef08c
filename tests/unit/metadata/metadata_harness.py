"""A controller driven like the shell drives it: every handler's records are proposed
as one entry at the next offset and replayed at once (the active controller's
speculative replay), and brokers heartbeat with the offset they have applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.metadata.controller import ControllerResult, QuorumController
from mq.metadata.image import PartitionImage
from mq.metadata.records import MetadataRecord
from mq.protocol.inter_broker import (
    AlterPartitionPartition,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopic,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerListener,
    BrokerRegistrationRequest,
    BrokerState,
)
from mq.protocol.messages import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse

SESSION_MS = 9000
HEARTBEAT_MS = 2000


@dataclass
class Harness:
    controller: QuorumController
    now_ms: int = 0
    next_offset: int = 0
    epochs: dict[int, int] = field(default_factory=dict)
    log: list[list[MetadataRecord]] = field(default_factory=list)

    @classmethod
    def create(cls, *, seed: int = 7, **config: Any) -> Harness:
        cfg = BrokerConfig(broker_session_timeout_ms=SESSION_MS, broker_heartbeat_interval_ms=HEARTBEAT_MS,
                           **config)
        controller = QuorumController(cfg, rng=Rng(seed))
        controller.activate(0)
        return cls(controller)

    @property
    def image(self):  # type: ignore[no-untyped-def]
        return self.controller.image

    def commit(self, result: ControllerResult[Any]) -> Any:
        self.propose(result.records)
        return result.response

    def propose(self, records: list[MetadataRecord]) -> None:
        if records:
            self.log.append(list(records))
            self.controller.replay(records, last_offset=self.next_offset)
            self.next_offset += 1

    def register(self, broker_id: int, *, incarnation: str | None = None) -> int:
        request = BrokerRegistrationRequest(
            broker_id, incarnation or f"inc-{broker_id}", [BrokerListener("127.0.0.1", 9090 + broker_id)])
        response = self.commit(self.controller.register_broker(request, next_offset=self.next_offset,
                                                                 now_ms=self.now_ms))
        assert response.error_code == ErrorCode.NONE
        self.epochs[broker_id] = response.broker_epoch
        return int(response.broker_epoch)

    def heartbeat(self, broker_id: int, *, epoch: int | None = None, offset: int | None = None,
                  want_shutdown: bool = False, want_fence: bool = False) -> BrokerHeartbeatResponse:
        request = BrokerHeartbeatRequest(
            broker_id, self.epochs[broker_id] if epoch is None else epoch,
            current_metadata_offset=self.next_offset - 1 if offset is None else offset,
            want_shutdown=want_shutdown, want_fence=want_fence)
        response: BrokerHeartbeatResponse = self.commit(
            self.controller.broker_heartbeat(request, now_ms=self.now_ms))
        return response

    def start_brokers(self, *ids: int) -> None:
        for broker_id in ids:
            self.register(broker_id)
        for broker_id in ids:
            response = self.heartbeat(broker_id)
            assert not response.is_fenced

    def create_topic(self, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
                     ) -> CreateTopicsResponse:
        request = CreateTopicsRequest([CreatableTopic(name, partitions, rf, configs or {})])
        response: CreateTopicsResponse = self.commit(self.controller.create_topics(request, now_ms=self.now_ms))
        return response

    def partition(self, topic: str, index: int) -> PartitionImage:
        part = self.image.topics[topic].partitions[index]
        assert isinstance(part, PartitionImage)
        return part

    def advance(self, ms: int, *, heartbeating: tuple[int, ...] = ()) -> None:
        """Move time in heartbeat-sized steps; listed brokers heartbeat, the rest stay silent."""
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms = min(end, self.now_ms + HEARTBEAT_MS)
            for broker_id in heartbeating:
                self.heartbeat(broker_id)
            self.propose(self.controller.tick(self.now_ms))

    def alter_isr(self, leader: int, topic: str, index: int, isr: list[int], *, leader_epoch: int | None = None,
                  partition_epoch: int | None = None, with_epochs: list[BrokerState] | None = None,
                  broker_epoch: int | None = None) -> AlterPartitionResponse:
        part = self.partition(topic, index)
        request = AlterPartitionRequest(
            leader, self.epochs[leader] if broker_epoch is None else broker_epoch,
            [AlterPartitionTopic(topic, [AlterPartitionPartition(
                index, part.leader_epoch if leader_epoch is None else leader_epoch, isr,
                part.partition_epoch if partition_epoch is None else partition_epoch,
                with_epochs or [])])])
        response: AlterPartitionResponse = self.commit(self.controller.alter_partition(request, now_ms=self.now_ms))
        return response
