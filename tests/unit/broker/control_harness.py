"""Several ``ControlPlane``s in one process, wired by a lossless in-memory network
that can cut nodes off: enough to test the metadata quorum, registration, fencing and
forwarding deterministically (the seeded sim in ``mq.sim`` does the same with faults)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from mq.broker.control import ControlPlane
from mq.broker.outbound import Pending
from mq.core.config import BrokerConfig
from mq.core.rng import Rng
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import Request, Response
from mq.storage.fileio import MemoryFileIO


@dataclass
class Member:
    node_id: int
    fileio: MemoryFileIO
    plane: ControlPlane | None = None
    ops: dict[int, tuple[int, int]] = field(default_factory=dict)  # op id -> (source node, tag)


class ControlCluster:
    def __init__(self, node_ids=(1, 2, 3), *, seed: int = 1, configs: dict[str, object] | None = None) -> None:
        self.now_ms = 1_000_000
        self.rng = Rng(seed)
        self.ids = tuple(node_ids)
        voters = ",".join(f"{i}@127.0.0.1:{9090 + i}" for i in self.ids)
        self.configs = {i: BrokerConfig(node_id=i, log_dirs=f"/data/{i}", controller_quorum_voters=voters,
                                        **(configs or {})) for i in self.ids}
        self.members = {i: Member(i, MemoryFileIO()) for i in self.ids}
        self.down: set[int] = set()
        self._ops = itertools.count(1)
        self.answers: dict[tuple[int, int], Response] = {}  # (node, op id) of requests the test sent
        for i in self.ids:
            self.start(i)

    def start(self, node_id: int) -> None:
        member = self.members[node_id]
        member.plane = ControlPlane(self.configs[node_id], member.fileio, rng=self.rng.fork("node", node_id, self.now_ms),
                                    advertised_host="127.0.0.1", advertised_port=9090 + node_id,
                                    new_op_id=lambda: next(self._ops))
        member.plane.start(now_ms=self.now_ms)
        member.ops.clear()
        self.down.discard(node_id)

    def crash(self, node_id: int) -> None:
        member = self.members[node_id]
        member.plane = None
        member.fileio.crash()
        self.down.add(node_id)

    def plane(self, node_id: int) -> ControlPlane:
        plane = self.members[node_id].plane
        assert plane is not None
        return plane

    def live(self) -> list[int]:
        return [i for i in self.ids if i not in self.down]

    def request(self, node_id: int, request: Request) -> Response | Pending | None:
        header = RequestHeader(type(request).API_KEY, 0, 0, "test")  # type: ignore[attr-defined]
        return self.plane(node_id).handle(header, request, now_ms=self.now_ms)

    def run(self, ms: int, *, step_ms: int = 10) -> None:
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms += step_ms
            for i in self.live():
                self.plane(i).poll(now_ms=self.now_ms)
            self.pump()

    def run_until(self, predicate, *, timeout_ms: int = 20_000, step_ms: int = 10) -> None:
        end = self.now_ms + timeout_ms
        while not predicate():
            assert self.now_ms < end, "condition not reached in simulated time"
            self.run(step_ms, step_ms=step_ms)

    def pump(self) -> None:
        """Deliver every outbound request and response until nothing moves."""
        moved = True
        while moved:
            moved = False
            for src in self.live():
                for out in self.plane(src).take_outbound():
                    moved = True
                    self._deliver(src, out)
            for dst in self.live():
                member = self.members[dst]
                for op_id, response in self.plane(dst).take_completions():
                    moved = True
                    origin = member.ops.pop(op_id, None)
                    if origin is None:
                        self.answers[(dst, op_id)] = response
                    elif origin[0] not in self.down:
                        self.plane(origin[0]).on_response(origin[1], response, now_ms=self.now_ms)

    def _deliver(self, src: int, out) -> None:
        if out.destination in self.down:
            if not out.one_way:
                self.plane(src).on_response(out.tag, None, now_ms=self.now_ms)
            return
        header = RequestHeader(type(out.request).API_KEY, 0, 0, f"node-{src}")
        outcome = self.plane(out.destination).handle(header, out.request, now_ms=self.now_ms)
        if out.one_way:
            return
        if isinstance(outcome, Pending):
            self.members[out.destination].ops[outcome.op_id] = (src, out.tag)
        elif outcome is not None:
            self.plane(src).on_response(out.tag, outcome, now_ms=self.now_ms)
