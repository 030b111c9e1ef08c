"""The client's view of the cluster: brokers, topics, partition leaders.

Refreshed by a MetadataRequest when something is learned to be stale (a retriable
routing error such as NOT_LEADER or UNKNOWN_TOPIC, a new topic of interest, a
disconnect) and at least every ``metadata_max_age_ms``. Refreshes are spaced by
``retry_backoff_ms`` since the last attempt, except the first one after a new topic of
interest is added (Kafka's ``requestUpdateForNewTopics``): a consumer assigned a topic
just after connecting must not wait out a backoff meant for retries. A partition's leader never moves back to an older
leader epoch: a lagging broker's answer cannot undo a newer one (Kafka's KIP-320 rule).

Bootstrap addresses are tried in a seeded-random rotation, so a dead first address
costs one failed attempt and never wedges the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mq.core.conflict import ConflictRules
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol.messages import MetadataResponse

REFRESH_ON = frozenset({
    ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN_TOPIC, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.REQUEST_TIMED_OUT,
    # The topic's conflict.policy changed since the client last looked (not retried: the
    # record itself is refused; the next ones are routed or stamped by the new policy).
    ErrorCode.NOT_HOME_REGION, ErrorCode.INVALID_HLC,
})
"""Errors that mean "your picture of the cluster is stale": refresh before retrying."""


def needs_metadata_refresh(code: int) -> bool:
    return code in REFRESH_ON


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int | None  # None: no leader right now
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


def parse_address(item: str, *, what: str = "bootstrap address") -> tuple[str, int]:
    """``"host:port"`` → (host, port); IPv6 as ``[::1]:9092``."""
    host, sep, port = item.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {item!r} is not host:port")
    return host.strip("[]") or "localhost", int(port)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` → [(host, port), ...]; IPv6 as ``[::1]:9092``."""
    out = [parse_address(item) for item in bootstrap.split(",") if item.strip()]
    if not out:
        raise ValueError("bootstrap list is empty")
    return out


def parse_address_map(address_map: Mapping[str, str] | None) -> dict[tuple[str, int], tuple[str, int]]:
    """``{"advertised host:port": "host:port to dial"}`` → the same as address pairs."""
    return {parse_address(advertised, what="address_map key"): parse_address(dial, what="address_map value")
            for advertised, dial in (address_map or {}).items()}


class Metadata:
    def __init__(self, bootstrap: list[tuple[str, int]], rng: Rng, *, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 300_000) -> None:
        self.bootstrap = list(bootstrap)
        rng.shuffle(self.bootstrap)
        self._bootstrap_cursor = 0
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.brokers: dict[int, Node] = {}
        self.controller_id = -1
        self.cluster_id = ""
        self.region = ""  # the answering broker's region.name
        self.conflict: dict[str, ConflictRules] = {}  # topics with conflict.* configs
        self.topics: dict[str, None] = {}  # topics of interest, insertion-ordered
        self.partitions: dict[str, list[PartitionInfo]] = {}
        self.topic_errors: dict[str, ErrorCode] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._epochs: dict[TopicPartition, int] = {}
        self.need_update = True
        self._topics_version = 0  # bumped by every new topic of interest
        self._requested_version = 0  # _topics_version when the last attempt started
        self.last_refresh_ms: int | None = None
        self.last_attempt_ms: int | None = None
        self.version = 0  # bumped by every successful update

    # ------------------------------------------------------------------ what to refresh

    def add_topics(self, *topics: str) -> bool:
        """Track topics; True if one is new (and an update is now needed)."""
        new = False
        for topic in topics:
            if topic not in self.topics:
                self.topics[topic] = None
                new = True
        if new:
            self.need_update = True
            self._topics_version += 1
        return new

    def request_update(self) -> None:
        self.need_update = True

    def time_to_next_update_ms(self, now_ms: int) -> int:
        """0 when a refresh should be sent now; else ms to wait."""
        if self.need_update and self._topics_version != self._requested_version:
            return 0  # a topic nobody has asked about yet: no backoff
        backoff = 0
        if self.last_attempt_ms is not None:
            backoff = max(0, self.last_attempt_ms + self.retry_backoff_ms - now_ms)
        if self.need_update:
            return backoff
        if self.last_refresh_ms is None:
            return backoff
        return max(backoff, self.last_refresh_ms + self.metadata_max_age_ms - now_ms)

    def request_topics(self) -> list[str]:
        return list(self.topics)

    def attempt_started(self, now_ms: int) -> None:
        self.last_attempt_ms = now_ms
        self._requested_version = self._topics_version

    def update_failed(self, now_ms: int) -> None:
        self.last_attempt_ms = now_ms

    # ------------------------------------------------------------------ where to ask

    def next_bootstrap(self) -> tuple[str, int]:
        """The next bootstrap address in rotation (each failure moves on)."""
        address = self.bootstrap[self._bootstrap_cursor % len(self.bootstrap)]
        self._bootstrap_cursor += 1
        return address

    def metadata_candidates(self) -> list[tuple[str, int]]:
        """Addresses to ask for metadata, in order: known brokers (rotating), then bootstrap."""
        known = [(n.host, n.port) for _, n in sorted(self.brokers.items())]
        if known:
            k = self._bootstrap_cursor % len(known)
            known = known[k:] + known[:k]
        boot = [self.next_bootstrap() for _ in range(len(self.bootstrap))]
        return known + [a for a in boot if a not in known]

    # ------------------------------------------------------------------ the answer

    def update(self, response: MetadataResponse, now_ms: int) -> None:
        self.brokers = {b.node_id: Node(b.node_id, b.host, b.port, b.rack)
                        for b in response.brokers}
        self.controller_id = response.controller_id
        self.cluster_id = response.cluster_id
        self.region = response.region
        for topic in response.topics:
            code = ErrorCode(topic.error_code) if topic.error_code in ErrorCode._value2member_map_ \
                else ErrorCode.UNKNOWN_SERVER_ERROR
            if code != ErrorCode.NONE:
                self.topic_errors[topic.name] = code
                self.partitions.pop(topic.name, None)
                for tp in [tp for tp in self._leaders if tp.topic == topic.name]:
                    del self._leaders[tp]
                continue
            self.topic_errors.pop(topic.name, None)
            self._update_conflict(topic.name, topic.configs)
            infos = []
            for p in sorted(topic.partitions, key=lambda p: p.partition):
                tp = TopicPartition(topic.name, p.partition)
                known_epoch = self._epochs.get(tp, -1)
                if p.leader_epoch < known_epoch and tp in self._leaders:
                    old = next(i for i in self.partitions.get(topic.name, []) if i.partition == p.partition)
                    infos.append(old)
                    continue
                leader = p.leader_id if p.leader_id >= 0 and p.error_code == 0 else None
                infos.append(PartitionInfo(topic.name, p.partition, leader, p.leader_epoch,
                                           tuple(p.replicas), tuple(p.isr),
                                           tuple(p.offline_replicas)))
                self._epochs[tp] = p.leader_epoch
                if leader is None:
                    self._leaders.pop(tp, None)
                else:
                    self._leaders[tp] = leader
            self.partitions[topic.name] = infos
        # A topic added while this request was on the wire is not in the answer.
        self.need_update = self._topics_version != self._requested_version
        self.last_refresh_ms = now_ms
        self.last_attempt_ms = now_ms
        self.version += 1

    def _update_conflict(self, topic: str, configs: Mapping[str, str]) -> None:
        rules = None
        if configs:
            try:
                rules = ConflictRules.from_configs(configs)
            except MqError:  # the controller validated them; a newer broker may know more
                rules = None
        if rules is None or not (rules.active or rules.regions):
            self.conflict.pop(topic, None)
        else:
            self.conflict[topic] = rules

    def conflict_rules(self, topic: str) -> ConflictRules | None:
        """The topic's conflict policy and home regions (None: no conflict.* configs)."""
        return self.conflict.get(topic)

    # ------------------------------------------------------------------ lookups (hot path)

    def leader_for(self, tp: TopicPartition) -> int | None:
        return self._leaders.get(tp)

    def leader_epoch(self, tp: TopicPartition) -> int:
        return self._epochs.get(tp, -1)

    def partition_count(self, topic: str) -> int | None:
        infos = self.partitions.get(topic)
        return len(infos) if infos is not None else None

    def available_partitions(self, topic: str) -> list[int]:
        return [i.partition for i in self.partitions.get(topic, ()) if i.leader is not None]

    def topic_error(self, topic: str) -> ErrorCode | None:
        return self.topic_errors.get(topic)

    def node(self, node_id: int) -> Node | None:
        return self.brokers.get(node_id)
