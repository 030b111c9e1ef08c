"""A mirror flow's configuration, read from ``<data_dir>/cluster.json`` (written by ``mq up``)
or given on the command line.

``mirror`` may not import ``mq.deploy`` (import-linter), so cluster.json, which is plain
JSON, is parsed here. What the mirror needs of it: each region's name, brokers (their
``listen`` addresses form the bootstrap) and the flows: name, source and target region,
topic include/exclude patterns (regular expressions matched against whole names), group
patterns, intervals, and ``source_address_map``, the source brokers' advertised addresses
mapped to the link proxy listeners that reach them from the target region.

Flow settings use MirrorMaker 2's names (or its consumer's) where it has one:

=================================== ========= ========================================
name                                default   meaning
=================================== ========= ========================================
``refresh.topics.interval.ms``       1000     how often new topics and config changes are picked up
``sync.group.offsets.interval.ms``   5000     how often committed group offsets are copied
``emit.heartbeats.interval.ms``      1000     how often a heartbeat is written to the source
``replication.factor``               0        target replication factor (0: min(3, brokers))
``max.partition.fetch.bytes``        4 MiB    most bytes one fetch asks of one partition
``buffer.max.bytes``                 64 MiB   the flow's memory: fetched, not yet appended, plus
                                              what the fetches in flight may bring
``fetches.per.leader``               2        requests in flight per source leader
=================================== ========= ========================================

(``mirror.fetch_plan`` says why the fetch sizes matter through a WAN link.)

Active-active flows (``mode: active-active``, ``mirror.active``) also read, from the flow's
``configs`` (``forward`` may also be a key of the flow itself):

================================= ========= ============================================
name                              default   meaning
================================= ========= ============================================
``forward``                       false     copy records that came from other regions onward
``replication.policy``            default   remote topic names: ``default`` (``east.orders``) or ``identity``
``replication.policy.separator``  ``.``     between the region and the topic
``offset.lag.max``                100       an offset sync at least every this many source offsets
``offset.sync.interval.ms``       1000      ... and for a record that waited this long without one
================================= ========= ============================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mirror.fetch_plan import FetchSettings
from mirror.remote import ProvenanceError, replication_policy
from mirror.topics import TopicFilter

DEFAULT_DATA_DIR = ".mq"
FETCH_DEFAULTS = FetchSettings()
SETTING_DEFAULTS = {
    "refresh.topics.interval.ms": 1_000,
    "sync.group.offsets.interval.ms": 5_000,
    "emit.heartbeats.interval.ms": 1_000,
    "replication.factor": 0,
    "offset.lag.max": 100,
    "offset.sync.interval.ms": 1_000,
    "max.partition.fetch.bytes": FETCH_DEFAULTS.partition_max_bytes,
    "buffer.max.bytes": FETCH_DEFAULTS.buffer_max_bytes,
    "fetches.per.leader": FETCH_DEFAULTS.fetches_per_leader,
}
MODES = ("active-passive", "active-active")


class FlowConfigError(ValueError):
    """cluster.json or the command line does not describe a usable flow."""


@dataclass(frozen=True)
class FlowConfig:
    name: str
    source_region: str
    target_region: str
    source_bootstrap: str
    target_bootstrap: str
    state_dir: str  # <data_dir>/mirror-<flow>: status.json, pid file, fail-over state
    source_address_map: Mapping[str, str] = field(default_factory=dict)
    topics: TopicFilter = field(default_factory=TopicFilter)
    groups: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = ()
    sync_group_offsets_enabled: bool = True
    mode: str = "active-passive"
    refresh_topics_interval_ms: int = 1_000
    sync_group_offsets_interval_ms: int = 5_000
    emit_heartbeats_interval_ms: int = 1_000
    replication_factor: int = 0
    fetch: FetchSettings = FETCH_DEFAULTS
    cluster_path: str = ""  # the cluster.json it came from ("" when given on the command line)
    # active-active (mirror.active)
    forward: bool = False
    replication_policy: str = "default"
    replication_policy_separator: str = "."
    offset_lag_max: int = 100
    offset_sync_interval_ms: int = 1_000
    regions: tuple[str, ...] = ()  # every region of the deployment (remote names are checked against them)

    @property
    def status_path(self) -> str:
        return os.path.join(self.state_dir, "status.json")

    @property
    def pid_path(self) -> str:
        return os.path.join(self.state_dir, "mirror.pid")


def flow_dir_name(flow: str) -> str:
    return f"mirror-{flow}"


def default_cluster_path() -> str:
    return os.path.join(os.environ.get("MQ_DATA_DIR", DEFAULT_DATA_DIR), "cluster.json")


def load_cluster(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise FlowConfigError(f"{path} does not exist: start the regions with `mq up` first, "
                              f"or pass --cluster PATH") from None
    except (OSError, ValueError) as exc:
        raise FlowConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise FlowConfigError(f"{path} is not a JSON object")
    return doc


def data_dir_of(doc: Mapping[str, Any], path: str) -> str:
    """cluster.json lives in the data dir; an absolute ``data_dir`` in it wins."""
    data_dir = doc.get("data_dir")
    if isinstance(data_dir, str) and os.path.isabs(data_dir):
        return data_dir
    return os.path.dirname(os.path.abspath(path))


def regions_of(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    regions = doc.get("regions")
    if isinstance(regions, dict):
        return {name: dict(r, name=name) for name, r in regions.items()}
    return {r["name"]: r for r in regions or [] if isinstance(r, dict) and "name" in r}


def flows_of(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    flows = doc.get("flows")
    if isinstance(flows, dict):
        return {name: dict(f, name=name) for name, f in flows.items()}
    return {f["name"]: f for f in flows or [] if isinstance(f, dict) and "name" in f}


def reverse_address_map(doc: Mapping[str, Any], source: str, target: str) -> dict[str, str]:
    """How a client in ``target`` reaches ``source``'s brokers: the routes of the link
    process between them (``link_pairs``), else a flow source->target's map ({}: direct)."""
    for pair in doc.get("link_pairs") or []:
        if set(pair.get("regions", ())) == {source, target}:
            return {str(r["target"]): str(r["listen"]) for r in pair.get("routes", [])
                    if r.get("region") == source}
    for flow in flows_of(doc).values():
        if flow.get("source") == source and flow.get("target") == target:
            return dict(flow.get("source_address_map") or {})
    return {}


def bootstrap_of(region: Mapping[str, Any]) -> str:
    if region.get("bootstrap"):
        return str(region["bootstrap"])
    brokers = region.get("brokers") or []
    listens = [str(b.get("listen") or b.get("advertised") or "") for b in brokers if isinstance(b, dict)]
    listens = [a for a in listens if a]
    if not listens:
        raise FlowConfigError(f"region {region.get('name')!r} lists no broker addresses")
    return ",".join(listens)


def _patterns(value: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def _int_setting(flow: Mapping[str, Any], key: str) -> int:
    settings = flow.get("intervals") or flow.get("configs") or {}
    for source in (settings, flow):
        for name in (key, key.replace(".", "_")):
            if name in source:
                try:
                    return int(source[name])
                except (TypeError, ValueError):
                    raise FlowConfigError(f"flow {flow.get('name')!r}: {key} must be an integer, "
                                          f"not {source[name]!r}") from None
    return SETTING_DEFAULTS[key]


def fetch_settings(partition_max_bytes: int, buffer_max_bytes: int, fetches_per_leader: int, *,
                   flow: str) -> FetchSettings:
    """Checked: each at least 1, and the budget holds at least one fetch of one partition."""
    for key, value in (("max.partition.fetch.bytes", partition_max_bytes), ("buffer.max.bytes", buffer_max_bytes),
                       ("fetches.per.leader", fetches_per_leader)):
        if value < 1:
            raise FlowConfigError(f"flow {flow!r}: {key} must be at least 1, not {value} "
                                  f"(default {SETTING_DEFAULTS[key]})")
    if buffer_max_bytes < partition_max_bytes:
        raise FlowConfigError(f"flow {flow!r}: buffer.max.bytes ({buffer_max_bytes}) is below "
                              f"max.partition.fetch.bytes ({partition_max_bytes}): the flow could not hold one "
                              f"fetch; raise buffer.max.bytes or lower max.partition.fetch.bytes")
    return FetchSettings(partition_max_bytes, buffer_max_bytes, fetches_per_leader)


def _setting(flow: Mapping[str, Any], key: str, default: str) -> str:
    configs = flow.get("configs") or {}
    value = flow.get(key, configs.get(key, default))
    return str(value).lower() if isinstance(value, bool) else str(value)


def _bool(flow: Mapping[str, Any], key: str) -> bool:
    value = _setting(flow, key, "false").lower()
    if value not in ("true", "false"):
        raise FlowConfigError(f"flow {flow.get('name')!r}: {key} must be true or false, not {value!r}")
    return value == "true"


def flow_from_cluster(path: str, flow_name: str) -> FlowConfig:
    doc = load_cluster(path)
    flows = flows_of(doc)
    if flow_name not in flows:
        known = ", ".join(sorted(flows)) or "none"
        raise FlowConfigError(f"no flow {flow_name!r} in {path} (flows: {known})")
    return flow_from_entry(doc, path, flows[flow_name])


def flow_from_entry(doc: Mapping[str, Any], path: str, flow: Mapping[str, Any]) -> FlowConfig:
    regions = regions_of(doc)
    name = str(flow["name"])
    source, target = str(flow.get("source", "")), str(flow.get("target", ""))
    for role, region in (("source", source), ("target", target)):
        if region not in regions:
            raise FlowConfigError(f"flow {name!r}: its {role} region {region!r} is not in {path}")
    topics = flow.get("topics") if isinstance(flow.get("topics"), dict) else {}
    include = _patterns(flow.get("include", topics.get("include", flow.get("topics")
                                                         if not isinstance(flow.get("topics"), dict) else None)),
                        (".*",))
    exclude = _patterns(flow.get("exclude", topics.get("exclude")), ())
    groups_value = flow.get("groups")
    groups_exclude: Any = None
    if isinstance(groups_value, dict):
        groups_value, groups_exclude = groups_value.get("include"), groups_value.get("exclude")
    mode = str(flow.get("mode", "active-passive"))
    if mode not in MODES:
        raise FlowConfigError(f"flow {name!r}: mode {mode!r} is not one of {', '.join(MODES)}")
    policy = _setting(flow, "replication.policy", "default")
    separator = _setting(flow, "replication.policy.separator", ".")
    if mode == "active-active":
        try:
            replication_policy(policy, regions=sorted(regions), separator=separator)
        except ProvenanceError as exc:
            raise FlowConfigError(f"flow {name!r}: {exc.message}") from None
    state_dir = str(flow.get("data_dir") or "")
    if not os.path.isabs(state_dir):
        state_dir = os.path.join(data_dir_of(doc, path), flow_dir_name(name))
    return FlowConfig(
        name=name, source_region=source, target_region=target,
        source_bootstrap=str(flow.get("source_bootstrap") or bootstrap_of(regions[source])),
        target_bootstrap=str(flow.get("target_bootstrap") or bootstrap_of(regions[target])),
        state_dir=state_dir,
        source_address_map={str(k): str(v) for k, v in (flow.get("source_address_map") or {}).items()},
        topics=TopicFilter(include, exclude), groups=_patterns(groups_value, (".*",)),
        groups_exclude=_patterns(groups_exclude, ()),
        sync_group_offsets_enabled=str(flow.get("sync.group.offsets.enabled", True)).lower() != "false",
        mode=mode, forward=_bool(flow, "forward"),
        replication_policy=policy, replication_policy_separator=separator,
        offset_lag_max=_int_setting(flow, "offset.lag.max"),
        offset_sync_interval_ms=_int_setting(flow, "offset.sync.interval.ms"),
        regions=tuple(sorted(regions)),
        refresh_topics_interval_ms=_int_setting(flow, "refresh.topics.interval.ms"),
        sync_group_offsets_interval_ms=_int_setting(flow, "sync.group.offsets.interval.ms"),
        emit_heartbeats_interval_ms=_int_setting(flow, "emit.heartbeats.interval.ms"),
        replication_factor=_int_setting(flow, "replication.factor"),
        fetch=fetch_settings(_int_setting(flow, "max.partition.fetch.bytes"), _int_setting(flow, "buffer.max.bytes"),
                             _int_setting(flow, "fetches.per.leader"), flow=name),
        cluster_path=os.path.abspath(path))


def parse_address_map(text: str) -> dict[str, str]:
    """``"a:1=b:2,c:3=d:4"`` -> ``{"a:1": "b:2", "c:3": "d:4"}``."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        advertised, sep, dial = item.partition("=")
        if not sep or not advertised or not dial:
            raise FlowConfigError(f"--source-address-map item {item!r} is not ADVERTISED=DIAL "
                                  f"(for example 127.0.0.1:9092=127.0.0.1:29092)")
        out[advertised] = dial
    return out
