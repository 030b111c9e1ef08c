"""The broker's control plane: the metadata quorum, the controller and the broker's
registration, all sans-IO.

Every broker of a region is a voter of the metadata quorum (KRaft's combined mode):
it runs a ``RaftNode`` over its copy of the metadata log (``__cluster_metadata-0``,
a ``StorageReplicatedLog``), and the Raft leader is the *active controller*. Records
reach the log only through the controller: an admin request, a registration, a
heartbeat or an ISR change becomes ``ControllerResult(records, response)``, the
records are proposed to Raft, and the response is sent once they are committed
(replicated to a majority and fsynced there).

Two images: ``image`` is the committed one, which the broker acts on (which logs to
host, whom to follow); the controller's own image also holds its proposals that are
not committed yet, so two requests in a row see each other (Kafka's controller does
the same with its snapshot registry). A controller that loses leadership goes back
to the committed image and fails what waited for a commit with ``NOT_CONTROLLER``
(the records may still commit; clients retry, as with Kafka).

Failpoints (scope ``node-<id>``): ``raft.before_persist`` (a vote or entries about
to be made durable), ``raft.before_send`` (persisted, not yet sent) and
``raft.before_apply`` (committed, not yet applied).

The broker publishes nothing until the controller says it has caught up with the
metadata log: a restarted broker replaying an old image must not act as the leader
it used to be.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from mq.broker.lifecycle import BrokerLifecycle
from mq.broker.outbound import Outbound, Pending
from mq.broker.quorum_state import read_quorum_state, write_quorum_state
from mq.core import failpoints
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.metadata.controller import ControllerResult, QuorumController
from mq.metadata.image import MetadataImage
from mq.metadata.log import is_pre_quorum_log
from mq.metadata.raft_log import StorageReplicatedLog
from mq.metadata.raft_wire import decode_raft_message, encode_raft_message
from mq.metadata.records import METADATA_TOPIC, MetadataRecord, decode_records, encode_records
from mq.protocol.codec import RequestHeader
from mq.protocol.inter_broker import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerListener,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    RaftRequest,
)
from mq.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterConfigsResult,
    ConfigResourceType,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    Request,
    Response,
)
from mq.raft import LogEntry, RaftConfig, RaftNode, Ready
from mq.storage.fileio import FileIO

Reply = Callable[[Response], None]

CONTROLLER_REQUEST_TIMEOUT_MS = 30_000
"""How long a client's admin request waits for its records to commit."""
FORWARDED = (CreateTopicsRequest, DeleteTopicsRequest, AlterConfigsRequest, CreatePartitionsRequest)
"""Client requests a non-controller forwards to the active controller (KIP-590)."""
BROKER_TO_CONTROLLER = (BrokerRegistrationRequest, BrokerHeartbeatRequest, AlterPartitionRequest)


@dataclass(slots=True)
class _AwaitCommit:
    offset: int  # the proposal's entry: committed once the image reaches it
    reply: Reply
    response: Response
    request: Request


class _LastSeenClock:
    """The Clock the metadata log stamps batches with: the last ``now_ms`` the shell
    gave us (the core never reads the system clock)."""

    def __init__(self) -> None:
        self.now_ms = 0

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms


class ControlPlane:
    def __init__(
        self, config: BrokerConfig, fileio: FileIO, *, rng: Rng, advertised_host: str,
        advertised_port: int, new_op_id: Callable[[], int],
    ) -> None:
        self.config = config
        self.fileio = fileio
        self.node_id = config.node_id
        voters = config.quorum_voters or ((config.node_id, advertised_host, advertised_port),)
        self.voter_addresses = {node_id: (host, port) for node_id, host, port in voters}
        if self.node_id not in self.voter_addresses:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"node {self.node_id} is not in controller.quorum.voters "
                          f"({config.controller_quorum_voters}); every broker of a region is a voter")
        self.controller = QuorumController(config, rng=rng.fork("controller"))
        self.image = MetadataImage()
        self.lifecycle = BrokerLifecycle(config, incarnation_id=_uuid(rng.fork("incarnation").randbytes(16)),
                                         host=advertised_host, port=advertised_port)
        self.raft: RaftNode | None = None
        self._rng = rng
        self._new_op_id = new_op_id
        self._clock = _LastSeenClock()
        self._directory = posixpath.join(config.log_dirs, f"{METADATA_TOPIC}-0")
        self._failpoint_scope = f"node-{self.node_id}"
        self._log: StorageReplicatedLog | None = None
        self._raft_deadline_ms = 0
        self._was_leader = False
        self._awaiting: list[_AwaitCommit] = []
        self._ops: dict[int, Request] = {}  # client op id -> request, while unanswered
        self._forwards: dict[int, tuple[int, int]] = {}  # outbound tag -> (client op id, controller)
        self._lifecycle_tag: int | None = None
        self._lifecycle_destination: int | None = None
        self._loopback: list[tuple[Reply, Response]] = []
        self._outbound: list[Outbound] = []
        self._completions: list[tuple[int, Response]] = []
        self._published_from = MetadataImage()

    # ------------------------------------------------------------ life cycle

    def start(self, *, now_ms: int) -> None:
        self._clock.now_ms = now_ms
        self.fileio.makedirs(self._directory)
        self._log = StorageReplicatedLog.open(self.fileio, self._directory, clock=self._clock)
        if is_pre_quorum_log(self._log.log):
            self._log.close()
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR,
                          f"{self._directory} holds a metadata log from an mq build before the Raft quorum; "
                          f"this build cannot read it: move {self.config.log_dirs} aside and start again "
                          "(topics are recreated empty)")
        state = read_quorum_state(self.fileio, self._directory)
        fetch_timeout = self.config.controller_quorum_fetch_timeout_ms
        # A parked fetch must come back well before the follower gives up on the leader.
        raft_config = RaftConfig(election_timeout_ms=self.config.controller_quorum_election_timeout_ms,
                                 fetch_timeout_ms=fetch_timeout, fetch_max_wait_ms=min(500, fetch_timeout // 4),
                                 request_timeout_ms=min(1000, max(1, fetch_timeout // 2)))
        self.raft = RaftNode(self.node_id, sorted(self.voter_addresses), self._log, state,
                             self._rng.fork("raft"), raft_config, now_ms=now_ms)
        ready = self.raft.campaign(now_ms) if len(self.voter_addresses) == 1 else self.raft.tick(now_ms)
        self._on_ready(ready, now_ms)
        self._after(now_ms)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # ------------------------------------------------------------ state

    @property
    def is_active_controller(self) -> bool:
        return self.raft is not None and self.raft.is_leader

    @property
    def controller_id(self) -> int | None:
        return None if self.raft is None else self.raft.leader_id

    @property
    def controller_epoch(self) -> int:
        return -1 if self.raft is None else self.raft.epoch

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    @property
    def is_ready(self) -> bool:
        return self.lifecycle.is_ready

    @property
    def shutdown_complete(self) -> bool:
        return self.lifecycle.shutdown_complete

    def begin_shutdown(self, *, now_ms: int) -> None:
        self.lifecycle.begin_shutdown(now_ms)
        self._after(now_ms)

    def _check_shutdown(self) -> None:
        if self.lifecycle.want_shutdown and self.controller_id is None:
            self.lifecycle.give_up_shutdown()  # no quorum: nobody to hand leadership to

    def set_advertised(self, host: str, port: int) -> None:
        """The shell bound the listener (``:0`` picks a port): register with the real one."""
        if not self.config.quorum_voters:
            self.voter_addresses = {self.node_id: (host, port)}
        self.lifecycle.listener = BrokerListener(host, port)

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        if node_id in self.voter_addresses:
            return self.voter_addresses[node_id]
        broker = self.image.broker(node_id)
        return None if broker is None else (broker.host, broker.port)

    # ------------------------------------------------------------ shell interface

    def take_outbound(self) -> list[Outbound]:
        out, self._outbound = self._outbound, []
        return out

    def take_completions(self) -> list[tuple[int, Response]]:
        done, self._completions = self._completions, []
        return done

    def take_published(self) -> list[tuple[MetadataImage, MetadataImage]]:
        """Committed (before, after) images for the broker to act on; nothing until
        the broker has caught up, then one pair covering everything since the last call."""
        if not self.lifecycle.is_caught_up or self._published_from is self.image:
            return []
        pair = (self._published_from, self.image)
        self._published_from = self.image
        return [pair]

    def poll(self, *, now_ms: int) -> int:
        self._clock.now_ms = now_ms
        if self.raft is not None and now_ms >= self._raft_deadline_ms:
            self._on_ready(self.raft.tick(now_ms), now_ms)
        if self.is_active_controller:
            records = self.controller.tick(now_ms)
            if records:
                self._propose(records, now_ms)
        self._after(now_ms)
        deadlines = [self._raft_deadline_ms, now_ms + 1000]
        if self.is_active_controller:
            controller_deadline = self.controller.next_deadline_ms()
            if controller_deadline is not None:
                deadlines.append(controller_deadline)
        lifecycle_deadline = self.lifecycle.deadline_ms()
        if lifecycle_deadline is not None and self.controller_id is not None:
            deadlines.append(lifecycle_deadline)
        return max(now_ms, min(deadlines))

    def handle(self, header: RequestHeader, request: Request, *, now_ms: int) -> Response | Pending | None:
        self._clock.now_ms = now_ms
        if isinstance(request, RaftRequest):
            self._step_raft(request, now_ms)
            return None
        op_id = self._new_op_id()
        self._ops[op_id] = request
        reply = self._client_reply(op_id)
        if self.is_active_controller:
            self._serve(request, now_ms, reply)
        elif isinstance(request, FORWARDED) and self.controller_id not in (None, self.node_id):
            tag = self._new_op_id()
            self._forwards[tag] = (op_id, self.controller_id)  # type: ignore[assignment]
            self._outbound.append(Outbound(self.controller_id, request, tag))  # type: ignore[arg-type]
        else:
            reply(error_response(request, ErrorCode.NOT_CONTROLLER, self._not_controller_message()))
        self._after(now_ms)
        done = [c for c in self._completions if c[0] == op_id]
        if done:
            self._completions.remove(done[0])
            return done[0][1]
        return Pending(op_id, CONTROLLER_REQUEST_TIMEOUT_MS)

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> bool:
        """An answer to one of our outbound requests; False if the tag is not ours."""
        self._clock.now_ms = now_ms
        if tag == self._lifecycle_tag:
            self._lifecycle_tag = None
            self.lifecycle.on_response(response, now_ms=now_ms)
        elif tag in self._forwards:
            op_id, _ = self._forwards.pop(tag)
            request = self._ops.get(op_id)
            if request is not None:
                if response is None:
                    response = error_response(request, ErrorCode.NOT_CONTROLLER,
                                              "the active controller did not answer; retry")
                self._client_reply(op_id)(response)
        else:
            return False
        self._after(now_ms)
        return True

    def expire(self, op_id: int, *, now_ms: int) -> bool:
        request = self._ops.get(op_id)
        if request is None:
            return False
        self._client_reply(op_id)(error_response(
            request, ErrorCode.REQUEST_TIMED_OUT,
            f"not committed within {CONTROLLER_REQUEST_TIMEOUT_MS} ms: is a majority of the quorum up?"))
        return True

    def cancel(self, op_id: int) -> None:
        self._ops.pop(op_id, None)

    # ------------------------------------------------------------ controller

    def _serve(self, request: Request, now_ms: int, reply: Reply) -> None:
        """Run a request on the active controller."""
        c = self.controller
        result: ControllerResult
        if isinstance(request, CreateTopicsRequest):
            result = c.create_topics(request, now_ms=now_ms)
        elif isinstance(request, DeleteTopicsRequest):
            result = c.delete_topics(request, now_ms=now_ms)
        elif isinstance(request, CreatePartitionsRequest):
            result = c.create_partitions(request, now_ms=now_ms)
        elif isinstance(request, AlterConfigsRequest):
            result = self._alter_configs(request)
        elif isinstance(request, BrokerRegistrationRequest):
            assert self.raft is not None
            result = c.register_broker(request, next_offset=self.raft.log.end_offset, now_ms=now_ms)
        elif isinstance(request, BrokerHeartbeatRequest):
            result = c.broker_heartbeat(request, now_ms=now_ms)
        elif isinstance(request, AlterPartitionRequest):
            result = c.alter_partition(request, now_ms=now_ms)
        else:
            raise MqError(ErrorCode.UNSUPPORTED_API, f"{type(request).__name__} is not a controller request")
        if not result.records:
            reply(result.response)
            return
        offset = self._propose(result.records, now_ms)
        if self.image.offset >= offset:  # a lone voter commits as it appends
            reply(result.response)
        else:
            self._awaiting.append(_AwaitCommit(offset, reply, result.response, request))

    def _alter_configs(self, request: AlterConfigsRequest) -> ControllerResult[AlterConfigsResponse]:
        records: list[MetadataRecord] = []
        results = []
        for resource in request.resources:
            if resource.resource_type == ConfigResourceType.TOPIC:
                result = self.controller.alter_topic_configs(resource, validate_only=request.validate_only)
                records.extend(result.records)
                results.append(result.response)
            elif resource.resource_type == ConfigResourceType.BROKER:
                results.append(AlterConfigsResult(
                    resource.resource_type, resource.resource_name, ErrorCode.INVALID_CONFIG,
                    "broker configs are static: restart the broker with --config name=value"))
            else:
                results.append(AlterConfigsResult(
                    resource.resource_type, resource.resource_name, ErrorCode.INVALID_REQUEST,
                    f"unknown resource type {resource.resource_type}"))
        return ControllerResult(records, AlterConfigsResponse(results))

    def _propose(self, records: list[MetadataRecord], now_ms: int) -> int:
        assert self.raft is not None
        offset = self.raft.log.end_offset
        ready = self.raft.propose([encode_records(records)], now_ms)
        self.controller.replay(records, last_offset=offset)  # speculative: see the module doc
        self._on_ready(ready, now_ms)
        return offset

    def _not_controller_message(self) -> str:
        leader = self.controller_id
        if leader is None:
            return "no active controller (the metadata quorum is electing one); retry"
        return f"this broker is not the active controller (node {leader} is); retry there"

    # ------------------------------------------------------------ Raft

    def _step_raft(self, request: RaftRequest, now_ms: int) -> None:
        assert self.raft is not None
        message = decode_raft_message(request.payload)  # ProtocolError on garbage
        self._on_ready(self.raft.step(message, now_ms), now_ms)
        self._after(now_ms)

    def _on_ready(self, ready: Ready, now_ms: int) -> None:
        """Persist, then send, then apply (the order RaftNode's contract requires)."""
        assert self._log is not None and self.raft is not None
        if ready.persist is not None:
            failpoints.hit("raft.before_persist", self._failpoint_scope)
            if ready.persist.election_state is not None:
                write_quorum_state(self.fileio, self._directory, ready.persist.election_state)
            if ready.persist.appended or ready.persist.truncated_to is not None:
                self._log.flush()
        if ready.messages:
            failpoints.hit("raft.before_send", self._failpoint_scope)
        for message in ready.messages:
            self._outbound.append(Outbound(message.destination_id, RaftRequest(encode_raft_message(message)),
                                           0, one_way=True))
        if ready.snapshot is not None:  # this build never takes metadata snapshots
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR, "metadata snapshots are not supported by this build")
        if ready.committed:
            failpoints.hit("raft.before_apply", self._failpoint_scope)
            self._apply_committed(ready.committed)
        self._raft_deadline_ms = ready.deadline_ms
        self._check_leadership(now_ms)

    def _apply_committed(self, entries: tuple[LogEntry, ...]) -> None:
        image = self.image
        for entry in entries:
            records = decode_records(entry.data) if entry.data and not entry.control else []
            image = image.apply(records, last_offset=entry.offset)
        self.image = image
        if not self.is_active_controller:
            self.controller.reset(image)
        still = []
        for waiting in self._awaiting:
            if waiting.offset <= image.offset:
                waiting.reply(waiting.response)
            else:
                still.append(waiting)
        self._awaiting = still

    def _check_leadership(self, now_ms: int) -> None:
        assert self.raft is not None
        leader = self.raft.is_leader
        if leader == self._was_leader:
            return
        self._was_leader = leader
        if leader:
            # Entries of earlier epochs past the commit point will commit with ours:
            # the controller's image must already include them.
            start = self.image.offset + 1
            pending = self.raft.log.entries(start, self.raft.log.end_offset - start)
            speculative = self.image
            for entry in pending:
                records = decode_records(entry.data) if entry.data and not entry.control else []
                speculative = speculative.apply(records, last_offset=entry.offset)
            self.controller.reset(speculative)
            self.controller.activate(now_ms)
            return
        self.controller.reset(self.image)
        awaiting, self._awaiting = self._awaiting, []
        for waiting in awaiting:
            waiting.reply(error_response(waiting.request, ErrorCode.NOT_CONTROLLER,
                                         "the controller lost its leadership before this committed; retry"))

    # ------------------------------------------------------------ plumbing

    def _client_reply(self, op_id: int) -> Reply:
        def reply(response: Response) -> None:
            if self._ops.pop(op_id, None) is not None:
                self._completions.append((op_id, response))
        return reply

    def _after(self, now_ms: int) -> None:
        """Send the lifecycle's next request, run local controller calls to completion."""
        controller = self.controller_id
        self._check_shutdown()
        if self._lifecycle_tag is not None and controller != self._lifecycle_destination:
            # The controller moved: the old one may never answer (it may be dead or cut
            # off), and our session runs on the new one. Send again there now; a late
            # answer to the old tag is ignored.
            self._lifecycle_tag = None
            self.lifecycle.in_flight = False
        for tag in [t for t, (_, dest) in self._forwards.items() if dest != controller]:
            self.on_response(tag, None, now_ms=now_ms)  # the old controller may never answer
        if self._lifecycle_tag is None and controller is not None:
            request = self.lifecycle.next_request(now_ms=now_ms, metadata_offset=self.image.offset)
            if request is not None:
                tag = self._new_op_id()
                self._lifecycle_tag = tag
                self._lifecycle_destination = controller
                if controller == self.node_id:
                    self._serve(request, now_ms, lambda r, t=tag: self._loopback.append((self._local(t), r)))
                else:
                    self._outbound.append(Outbound(controller, request, tag))
        while self._loopback:
            deliver, response = self._loopback.pop(0)
            deliver(response)

    def _local(self, tag: int) -> Reply:
        def deliver(response: Response) -> None:
            self.on_response(tag, response, now_ms=self._clock.now_ms)
        return deliver


def error_response(request: Request, code: ErrorCode, message: str) -> Response:
    """The response to ``request`` that reports ``code`` for everything it asked."""
    if isinstance(request, CreateTopicsRequest):
        return CreateTopicsResponse([CreatableTopicResult(t.name, code, message) for t in request.topics])
    if isinstance(request, CreatePartitionsRequest):
        return CreatePartitionsResponse([CreatePartitionsTopicResult(t.name, code, message) for t in request.topics])
    if isinstance(request, DeleteTopicsRequest):
        return DeleteTopicsResponse([DeletableTopicResult(n, code, message) for n in request.topic_names])
    if isinstance(request, AlterConfigsRequest):
        return AlterConfigsResponse([AlterConfigsResult(r.resource_type, r.resource_name, code, message)
                                     for r in request.resources])
    if isinstance(request, BrokerRegistrationRequest):
        return BrokerRegistrationResponse(code)
    if isinstance(request, BrokerHeartbeatRequest):
        return BrokerHeartbeatResponse(code)
    if isinstance(request, AlterPartitionRequest):
        return AlterPartitionResponse([], error_code=code)
    raise MqError(ErrorCode.UNSUPPORTED_API, f"{type(request).__name__} is not a controller request")


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
