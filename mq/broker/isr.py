"""ISR changes a leader proposes to the active controller (Kafka's
``AlterPartitionManager``).

``PartitionState`` proposes an expansion when a follower catches up and a shrink when
one lags for ``replica.lag.time.max.ms``; the proposals queue here and leave as one
``AlterPartitionRequest`` at a time. The answer carries each partition's committed
state: applied at once (the same state arrives later with the metadata image, and
``PartitionState.apply`` ignores it then). A refusal, a failed request or a
controller change clears the proposal; the next follower fetch or shrink check
proposes again from the current state.
"""

from __future__ import annotations

from mq.broker.partition import Partition
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import inter_broker as ib
from mq.protocol.messages import Response
from mq.replication import AlterPartitionRequest, LeaderAndIsr


class IsrChanges:
    def __init__(self) -> None:
        self._queued: dict[TopicPartition, AlterPartitionRequest] = {}
        self._in_flight: dict[int, list[AlterPartitionRequest]] = {}
        self._destinations: dict[int, int] = {}  # tag -> the controller it went to

    def __len__(self) -> int:
        return len(self._queued)

    def propose(self, proposal: AlterPartitionRequest) -> None:
        self._queued[proposal.tp] = proposal

    def forget(self, tp: TopicPartition) -> None:
        self._queued.pop(tp, None)

    @property
    def ready(self) -> bool:
        return bool(self._queued) and not self._in_flight

    def take_request(self, tag: int, *, broker_id: int, broker_epoch: int,
                     destination: int) -> ib.AlterPartitionRequest:
        proposals = [self._queued[tp] for tp in sorted(self._queued)]
        self._queued.clear()
        self._in_flight[tag] = proposals
        self._destinations[tag] = destination
        topics: dict[str, list[ib.AlterPartitionPartition]] = {}
        for p in proposals:
            topics.setdefault(p.tp.topic, []).append(ib.AlterPartitionPartition(
                p.tp.partition, p.leader_epoch, list(p.new_isr), p.partition_epoch,
                _with_epochs(p, broker_id=broker_id, broker_epoch=broker_epoch), p.bump_leader_epoch,
            ))
        return ib.AlterPartitionRequest(
            broker_id, broker_epoch, [ib.AlterPartitionTopic(name, parts) for name, parts in topics.items()])

    def owns(self, tag: int) -> bool:
        return tag in self._in_flight

    def sent_elsewhere(self, controller: int | None) -> list[int]:
        """Tags of requests in flight to a controller that is no longer the active one:
        it may never answer, so the caller fails them and the proposals start again."""
        return [tag for tag, dest in self._destinations.items() if dest != controller]

    def on_response(
        self, tag: int, response: Response | None, *, partitions: dict[TopicPartition, Partition], now_ms: int,
    ) -> list[TopicPartition]:
        """Apply the controller's answer; returns the partitions whose state changed."""
        proposals = self._in_flight.pop(tag, [])
        self._destinations.pop(tag, None)
        results: dict[TopicPartition, ib.AlterPartitionPartitionResult] = {}
        if isinstance(response, ib.AlterPartitionResponse) and response.error_code == ErrorCode.NONE:
            for topic in response.topics:
                for part in topic.partitions:
                    results[TopicPartition(topic.name, part.partition_index)] = part
        changed = []
        for proposal in proposals:
            partition = partitions.get(proposal.tp)
            state = None if partition is None else partition.leader
            if state is None or state.pending_alter_partition != proposal:
                continue  # leadership or the proposal moved on meanwhile
            result = results.get(proposal.tp)
            if result is None or result.error_code != ErrorCode.NONE:
                state.on_alter_partition_error()
                changed.append(proposal.tp)
                continue
            if result.leader_id == state.local_id:
                state.apply(LeaderAndIsr(result.leader_id, result.leader_epoch, tuple(result.isr),
                                         result.partition_epoch, state.replicas), now_ms=now_ms)
                changed.append(proposal.tp)
        return changed


def _with_epochs(proposal: AlterPartitionRequest, *, broker_id: int, broker_epoch: int) -> list[ib.BrokerState]:
    """Every proposed member with the broker epoch it fetched with (KIP-903); the
    leader is a member too, with its own epoch. Kafka's controller reads the ISR from
    this list when it is given."""
    epochs = dict(proposal.broker_epochs)
    epochs[broker_id] = broker_epoch
    return [ib.BrokerState(b, epochs.get(b, -1)) for b in proposal.new_isr]
