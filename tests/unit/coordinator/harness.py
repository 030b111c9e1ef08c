"""A coordinator shard with an in-memory log: requests in, responses out, virtual time."""

from __future__ import annotations

from dataclasses import replace

from mq.coordinator import CoordinatorRecord, CoordinatorResult, GroupConfig, GroupCoordinator
from mq.coordinator.group import assignment_from_wire, assignment_to_wire
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from mq.protocol.messages import Request, Response

TOPICS = {"t": 6, "u": 3}
CONFIG = GroupConfig(min_session_timeout_ms=100, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0,
                     max_size=5, offsets_retention_ms=100_000, offsets_retention_check_interval_ms=1_000,
                     offset_metadata_max_bytes=64)


class Shard:
    """Every result's records are committed at once (the log is ``self.log``), unless
    ``hold`` is set: then results with records wait in ``held`` (appended, not yet
    committed) for ``commit_held``/``fail_held``, their responses with them."""

    def __init__(self, config: GroupConfig = CONFIG, *, seed: int = 1, topics: dict[str, int] | None = None) -> None:
        self.config = config
        self.coordinator = GroupCoordinator(0, config, rng=Rng(seed))
        self.log: list[CoordinatorRecord] = []
        self.now_ms = 0
        self.topics = dict(TOPICS if topics is None else topics)
        self.responses: dict[int, Response] = {}
        self._next_request_id = 0
        self.last_result = CoordinatorResult()
        self.hold = False
        self.held: list[CoordinatorResult] = []

    def _take(self, result: CoordinatorResult) -> CoordinatorResult:
        self.last_result = result
        self.log.extend(result.records)
        if result.records and self.hold:
            self.held.append(result)
        else:
            if result.records:
                self.coordinator.confirm(result)
            self._answer(result.responses)
        return result

    def _answer(self, responses: list[tuple[int, Response]]) -> None:
        for request_id, response in responses:
            assert request_id not in self.responses, "a request answered twice"
            self.responses[request_id] = response

    def commit_held(self, result: CoordinatorResult | None = None) -> None:
        """The high watermark passed ``result`` (default: the oldest held one)."""
        result = self.held[0] if result is None else result
        self.held = [r for r in self.held if r is not result]
        self.coordinator.confirm(result)
        self._answer(result.responses)

    def fail_held(self, result: CoordinatorResult, code: ErrorCode = ErrorCode.REQUEST_TIMED_OUT,
                  *, lost: bool = True) -> None:
        """``result`` did not commit (``lost``: its records are cut from the log too)."""
        self.held = [r for r in self.held if r is not result]
        if lost:
            self.log = [r for r in self.log if not any(r is mine for mine in result.records)]
        self._answer(self.coordinator.fail(result, code))

    def send(self, request: Request, *, client_id: str = "c") -> int:
        self._next_request_id += 1
        rid = self._next_request_id
        self._take(self.coordinator.handle(request, request_id=rid, client_id=client_id, client_host="/10.0.0.1",
                                           topics=self.topics, now_ms=self.now_ms))
        return rid

    def call(self, request: Request, **kw: str) -> Response:
        rid = self.send(request, **kw)
        return self.responses.pop(rid)

    def answer(self, rid: int) -> Response | None:
        return self.responses.pop(rid, None)

    def advance(self, ms: int) -> CoordinatorResult:
        self.now_ms += ms
        return self._take(self.coordinator.poll(topics=self.topics, now_ms=self.now_ms))

    def reload(self) -> GroupCoordinator:
        """Fail-over: a new coordinator replays the log."""
        self.coordinator = GroupCoordinator(0, self.config, rng=Rng(99))
        for offset, record in enumerate(self.log):
            self.coordinator.replay(record, offset=offset)
        return self.coordinator

    # ------------------------------------------------------------ request helpers

    def join(self, group: str = "g", *, member_id: str = "", instance: str | None = None,
             assignors: tuple[str, ...] = ("range",), topics: tuple[str, ...] = ("t",), pattern: str | None = None,
             owned: tuple[TopicPartition, ...] = (), session_ms: int = 10_000, rebalance_ms: int = 5_000,
             client_id: str = "c", protocol_type: str = "consumer", raw: bool = False) -> int:
        """Send a JoinGroup; the request id (its answer: ``answer``). Unless ``raw``, a
        MEMBER_ID_REQUIRED answer (KIP-394) is followed as a client does: the same
        JoinGroup again with the allocated member id (the returned request id is that one)."""
        request = gm.JoinGroupRequest(
            group, session_ms, rebalance_ms, member_id, instance, protocol_type, list(assignors), list(topics),
            pattern, assignment_to_wire(tuple(owned)))
        rid = self.send(request, client_id=client_id)
        first = self.responses.get(rid)
        if not raw and isinstance(first, gm.JoinGroupResponse) and first.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            del self.responses[rid]
            rid = self.send(replace(request, member_id=first.member_id), client_id=client_id)
        return rid

    def heartbeat(self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None) -> int:
        response = self.call(gm.HeartbeatRequest(group, generation, member_id, instance))
        return response.error_code  # type: ignore[attr-defined]

    def commit(self, offsets: dict[TopicPartition, int], *, group: str = "g", generation: int = -1,
               member_id: str = "", instance: str | None = None, metadata: str = "") -> dict[TopicPartition, int]:
        by_topic: dict[str, list[gm.OffsetCommitPartition]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(gm.OffsetCommitPartition(tp.partition, offset, metadata=metadata))
        response = self.call(gm.OffsetCommitRequest(
            group, [gm.OffsetCommitTopic(t, parts) for t, parts in by_topic.items()], generation, member_id, instance))
        assert isinstance(response, gm.OffsetCommitResponse)
        return {TopicPartition(t.name, p.partition): p.error_code for t in response.topics for p in t.partitions}

    def fetch(self, tps: list[TopicPartition] | None = None, *, group: str = "g") -> dict[TopicPartition, int]:
        topics = None
        if tps is not None:
            topics = [gm.OffsetFetchTopic(t, [tp.partition for tp in tps if tp.topic == t])
                      for t in sorted({tp.topic for tp in tps})]
        response = self.call(gm.OffsetFetchRequest(group, topics))
        assert isinstance(response, gm.OffsetFetchResponse)
        return {TopicPartition(t.name, p.partition): p.offset for t in response.topics for p in t.partitions}


def assigned(response: Response | None) -> tuple[TopicPartition, ...]:
    assert isinstance(response, gm.JoinGroupResponse), response
    assert response.error_code == 0, response
    return assignment_from_wire(response.assignment)


def tps(topic: str, *partitions: int) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(topic, p) for p in partitions)
