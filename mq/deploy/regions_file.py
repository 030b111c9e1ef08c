"""Region files with several regions: ``regions:``, ``links:`` and ``mirrors:`` read and
checked into a ``Deployment``.

::

    data_dir: .mq                  # each region under <data_dir>/<name>
    link_port_base: 9300           # the link proxies' ports are allocated from here
    regions:
      - name: east
        brokers: [{id: 1, listen: 127.0.0.1:9092}, ...]
      - name: west
        brokers: [{id: 1, listen: 127.0.0.1:9192}, ...]
    links:                         # directed; a missing reverse copies the declared one
      - {source: east, target: west, latency_ms: 40}
    mirrors:
      - {name: east-to-west, source: east, target: west, mode: active-passive}

Each region is read by ``mq.deploy.region``'s reader (same keys as a one-region file,
``name`` instead of ``region``). Then the file as a whole is checked: links between
known, different regions, once each; flows between known, different regions joined by a
link, with unique names and patterns that compile; and every port — native listeners,
metrics, link proxies, link control ports — used once. ``load_topology`` reads either
format: a file without ``regions:`` is one region, as before.

Link proxy ports: per pair of regions (in the order their first link appears), one port
per broker of the pair's first region (dialed from the second), then one per broker of
the second, then the control port; pairs follow each other from ``link_port_base``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from mq.deploy.region import (
    _WILDCARD_HOSTS,
    DEFAULT_DATA_DIR,
    _close,
    _load_yaml,
    _Reader,
    _type_name,
    read_region_file,
)
from mq.deploy.shaping import LinkSettings
from mq.deploy.topology import (
    FLOW_MODES,
    Deployment,
    FlowSpec,
    LinkPair,
    LinkSpec,
    ProxyRoute,
    Topology,
    split_host_port,
)

TOP_KEYS = ("data_dir", "configs", "link_port_base", "regions", "links", "mirrors")
REGION_KEYS = ("name", "data_dir", "voters", "configs", "brokers")
LINK_KEYS = ("source", "target", "latency_ms", "jitter_ms", "bandwidth_mbit", "loss", "loss_stall_ms")
FLOW_KEYS = ("name", "source", "target", "mode", "forward", "topics", "groups", "sync.group.offsets.enabled",
             "sync.group.offsets.interval.ms", "refresh.topics.interval.ms", "emit.heartbeats.interval.ms",
             "configs")
FLOW_INTERVALS = {"sync.group.offsets.interval.ms": 5000, "refresh.topics.interval.ms": 1000,
                  "emit.heartbeats.interval.ms": 1000}
LINK_EXAMPLES = {"latency_ms": 40, "jitter_ms": 5, "bandwidth_mbit": 100, "loss": 0.01, "loss_stall_ms": 200}
DEFAULT_LINK_PORT_BASE = 9300
LINK_HOST = "127.0.0.1"
RESERVED_REGION_NAMES = ("links",)  # <data_dir>/links holds the link processes


def load_topology(path: str | os.PathLike, *, data_dir: str | None = None,
                  extra_configs: Sequence[tuple[str, str]] = ()) -> Deployment:
    """Read and check a region file of either format into a Deployment; ``data_dir``
    (``mq up --data-dir``) replaces the file's, ``extra_configs`` (``mq up --config``)
    apply to every broker after the file's."""
    text, source = read_region_file(path)
    return parse_topology(text, source=source, path=os.path.abspath(path), data_dir=data_dir,
                          extra_configs=extra_configs)


def parse_topology(text: str, *, source: str = "<region>", path: str = "", data_dir: str | None = None,
                   extra_configs: Sequence[tuple[str, str]] = ()) -> Deployment:
    """``load_topology`` on text already read; ``source`` names it in errors."""
    data = _load_yaml(text, source)
    reader = _Reader(source)
    if isinstance(data, dict) and "regions" in data:
        return _GeoReader(source).read(data, data_dir, extra_configs, path)
    return Deployment.of_region(reader.read(data, data_dir, extra_configs), source=path)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _GeoReader(_Reader):
    def read(self, data: dict, data_dir: str | None, extra_configs: Sequence[tuple[str, str]],
             path: str) -> Deployment:
        mixed = [k for k in ("region", "brokers", "voters") if k in data]
        if mixed:
            raise self.fail("", f"{', '.join(mixed)} next to regions: a file describes one region "
                            "(region:, brokers:) or several (regions:), not both",
                            "move the brokers into an entry of regions: (see regions/default.yaml)")
        data = self.keys("", data, TOP_KEYS)
        root = os.path.abspath(os.path.expanduser(data_dir or self.data_dir(data.get("data_dir", DEFAULT_DATA_DIR))))
        shared = self.configs("configs", data.get("configs", {}))
        extra = self.configs("--config", dict(extra_configs)) if extra_configs else {}
        regions = self.regions(data["regions"], root, shared, extra)
        names = [r.name for r in regions]
        links = self.links(data.get("links", []), names)
        pairs = self.pairs(links, regions, root, self.port_base(data.get("link_port_base", DEFAULT_LINK_PORT_BASE)))
        flows = self.flows(data.get("mirrors", []), names, pairs, root)
        deployment = Deployment(data_dir=root, regions=regions, links=links, pairs=pairs, flows=flows,
                                source=path)
        self.check_ports(deployment)
        return deployment

    # ------------------------------------------------------------------ regions

    def regions(self, value: Any, root: str, shared: dict[str, str], extra: dict[str, str]) -> tuple[Topology, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail("regions", f"expected a list of regions, found {_type_name(value)}",
                            "write - {name: east, brokers: [...]} for each region (see regions/default.yaml)")
        out: list[Topology] = []
        seen: dict[str, int] = {}
        dirs: dict[str, int] = {}
        for i, raw in enumerate(value):
            where = f"regions[{i}]"
            part = self.at(f"{where}.")
            raw = self.keys(where, raw, REGION_KEYS)
            if "name" not in raw:
                raise self.fail(where, "no name", "name every region, for example name: east")
            name = part.region_name(raw["name"], "name")
            if name in RESERVED_REGION_NAMES or name.startswith("mirror-"):
                raise part.fail("name", f"{name!r} is reserved for the link and mirror directories",
                                "pick another name, for example east")
            if name in seen:
                raise part.fail("name", f"{name!r} is already regions[{seen[name]}]", "give each region its own name")
            seen[name] = i
            region_dir = os.path.abspath(os.path.expanduser(part.data_dir(raw["data_dir"]))) \
                if "data_dir" in raw else os.path.join(root, name)
            if region_dir in dirs:
                raise part.fail("data_dir", f"{region_dir} is already the data directory of regions[{dirs[region_dir]}]",
                                "give each region its own data_dir (or leave it out: <data_dir>/<name>)")
            dirs[region_dir] = i
            own = part.configs("configs", raw.get("configs", {}))
            out.append(part.region(raw, name, region_dir, {**shared, **own}, extra))
        return tuple(out)

    # ------------------------------------------------------------------ links

    def region_ref(self, where: str, raw: dict, key: str, names: list[str], example: str) -> str:
        if key not in raw:
            raise self.fail(where, f"no {key}", f"name the {key} region, for example {key}: {example}")
        value = raw[key]
        if value not in names:
            raise self.fail(f"{where}.{key}", f"{value!r} is not a region of this file",
                            f"{_close(str(value), names)}use one of: {', '.join(names)}")
        return str(value)

    def links(self, value: Any, names: list[str]) -> tuple[LinkSpec, ...]:
        if value is None:
            value = []
        if not isinstance(value, list):
            raise self.fail("links", f"expected a list of links, found {_type_name(value)}",
                            "write - {source: east, target: west, latency_ms: 40} for each link")
        declared: list[LinkSpec] = []
        seen: dict[tuple[str, str], int] = {}
        for i, raw in enumerate(value):
            where = f"links[{i}]"
            raw = self.keys(where, raw, LINK_KEYS)
            source = self.region_ref(where, raw, "source", names, names[0])
            target = self.region_ref(where, raw, "target", names, names[-1])
            if source == target:
                raise self.fail(where, f"a link from {source} to itself",
                                "a link joins two different regions (traffic inside a region is never proxied)")
            if (source, target) in seen:
                raise self.fail(where, f"the link {source}->{target} is already links[{seen[(source, target)]}]",
                                "describe each direction once")
            seen[(source, target)] = i
            declared.append(LinkSpec(source, target, self.link_settings(where, raw)))
        out = list(declared)
        for link in declared:  # a WAN is usually symmetric: the reverse copies the declared direction
            if (link.target, link.source) not in seen:
                out.append(LinkSpec(link.target, link.source, link.settings, declared=False))
        return tuple(out)

    def link_settings(self, where: str, raw: dict) -> LinkSettings:
        values: dict[str, Any] = {}
        for key in LINK_KEYS[2:]:
            if key not in raw or (key == "bandwidth_mbit" and raw[key] is None):
                continue
            if not _number(raw[key]):
                raise self.fail(f"{where}.{key}", f"expected a number, found {_type_name(raw[key])}",
                                f"write for example {key}: {LINK_EXAMPLES[key]}")
            values[key] = float(raw[key])
        settings = LinkSettings(**values)
        problems = settings.problems()
        if problems:
            key = problems[0].split()[0]
            raise self.fail(f"{where}.{key}", problems[0], "see docs/reference/regions.md (links)")
        return settings

    def port_base(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            raise self.fail("link_port_base", f"{value!r} is not a port number",
                            f"write a port from 1 to 65535, for example link_port_base: {DEFAULT_LINK_PORT_BASE}")
        return value

    def pairs(self, links: tuple[LinkSpec, ...], regions: tuple[Topology, ...], root: str,
              base: int) -> tuple[LinkPair, ...]:
        order = [r.name for r in regions]
        by_name = {r.name: r for r in regions}
        pairs: list[LinkPair] = []
        port = base
        for link in links:
            a, b = sorted((link.source, link.target), key=order.index)
            if any(p.regions == (a, b) for p in pairs):
                continue
            routes = []
            for region in (a, b):
                for broker in by_name[region].brokers:
                    routes.append(ProxyRoute(region, broker.node_id, broker.listen, f"{LINK_HOST}:{port}"))
                    port += 1
            control = f"{LINK_HOST}:{port}"
            port += 1
            if port > 65536:
                raise self.fail("link_port_base", f"the link proxies need ports up to {port - 1}, past 65535",
                                "choose a lower link_port_base")
            pairs.append(LinkPair((a, b), control, tuple(routes), os.path.join(root, "links", f"{a}-{b}")))
        return tuple(pairs)

    # ------------------------------------------------------------------ mirror flows

    def flows(self, value: Any, names: list[str], pairs: tuple[LinkPair, ...], root: str) -> tuple[FlowSpec, ...]:
        if value is None:
            value = []
        if not isinstance(value, list):
            raise self.fail("mirrors", f"expected a list of mirror flows, found {_type_name(value)}",
                            "write - {name: east-to-west, source: east, target: west} for each flow")
        out: list[FlowSpec] = []
        for i, raw in enumerate(value):
            where = f"mirrors[{i}]"
            part = self.at(f"{where}.")
            raw = self.keys(where, raw, FLOW_KEYS)
            source = self.region_ref(where, raw, "source", names, names[0])
            target = self.region_ref(where, raw, "target", names, names[-1])
            if source == target:
                raise self.fail(where, f"a flow from {source} to itself",
                                "a flow copies topics from one region into another: pick two different regions")
            name = part.region_name(raw.get("name", f"{source}-to-{target}"), "name", noun="flow")
            for j, other in enumerate(out):
                if other.name == name:
                    raise part.fail("name", f"{name!r} is already mirrors[{j}]", "give each flow its own name")
                if (other.source, other.target) == (source, target):
                    raise self.fail(where, f"a flow from {source} to {target} is already mirrors[{j}] ({other.name})",
                                    "put all the topics of one direction into one flow (topics.include)")
            if not any(set(p.regions) == {source, target} for p in pairs):
                raise self.fail(where, f"no link between {source} and {target}",
                                "every byte between regions crosses a link: add one under links:, for example "
                                f"- {{source: {source}, target: {target}, latency_ms: 0}}")
            mode = raw.get("mode", "active-passive")
            if mode not in FLOW_MODES:
                raise part.fail("mode", f"{mode!r} is not a mirror mode", f"use one of: {', '.join(FLOW_MODES)}")
            forward = raw.get("forward", False)
            if not isinstance(forward, bool):
                raise part.fail("forward", f"expected true or false, found {_type_name(forward)}",
                                "write forward: true to copy records that came from other regions onward")
            if forward and mode != "active-active":
                raise part.fail("forward", "forward: true needs mode: active-active",
                                "an active-passive flow copies whole topics; set mode: active-active, or drop forward")
            topics = part.patterns("topics", raw.get("topics"), (".*",), ("__.*",), "topic", r"orders\..*")
            groups = part.patterns("groups", raw.get("groups"), (".*",), (), "group", "billing-.*")
            enabled = raw.get("sync.group.offsets.enabled", True)
            if not isinstance(enabled, bool):
                raise part.fail("sync.group.offsets.enabled", f"expected true or false, found {_type_name(enabled)}",
                                "write sync.group.offsets.enabled: true")
            intervals = {key: part.interval(key, raw.get(key, default)) for key, default in FLOW_INTERVALS.items()}
            configs = part.flow_configs(raw.get("configs", {}))
            out.append(FlowSpec(
                name=name, source=source, target=target, mode=mode, forward=forward, topics_include=topics[0], topics_exclude=topics[1],
                groups_include=groups[0], groups_exclude=groups[1], sync_group_offsets_enabled=enabled,
                sync_group_offsets_interval_ms=intervals["sync.group.offsets.interval.ms"],
                refresh_topics_interval_ms=intervals["refresh.topics.interval.ms"],
                emit_heartbeats_interval_ms=intervals["emit.heartbeats.interval.ms"],
                configs=configs, data_dir=os.path.join(root, f"mirror-{name}")))
        return tuple(out)

    def patterns(self, key: str, value: Any, include: tuple[str, ...], exclude: tuple[str, ...], noun: str,
                 example: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``[a, b]`` (include only) or ``{include: [...], exclude: [...]}``; each a regular
        expression matched against whole names."""
        if value is None:
            return include, exclude
        if isinstance(value, list):
            value = {"include": value}
        value = self.keys(key, value, ("include", "exclude"))
        out = []
        for part, default in (("include", include), ("exclude", exclude)):
            items = value.get(part, list(default))
            if not isinstance(items, list):
                raise self.fail(f"{key}.{part}", f"expected a list of patterns, found {_type_name(items)}",
                                f"write {part}: ['{example}']")
            for j, pattern in enumerate(items):
                if not isinstance(pattern, str) or not pattern:
                    raise self.fail(f"{key}.{part}[{j}]", f"expected a pattern, found {_type_name(pattern)}",
                                    f"write a regular expression as a string, for example '{example}'")
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise self.fail(f"{key}.{part}[{j}]", f"{pattern!r} is not a regular expression ({exc})",
                                    f"write a Python regular expression matched against whole {noun} names, "
                                    f"for example '{example}'") from None
            out.append(tuple(items))
        return out[0], out[1]

    def interval(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(key, f"{value!r} is not a positive number of milliseconds",
                            f"write for example {key}: {FLOW_INTERVALS[key]}")
        return value

    def flow_configs(self, value: Any) -> tuple[tuple[str, str], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise self.fail("configs", f"expected a mapping of mirror config names to values, found {_type_name(value)}",
                            "write for example configs: {offset.lag.max: 100}")
        out = []
        for name, raw in value.items():
            if raw is None or isinstance(raw, (dict, list)):
                raise self.fail(f"configs.{name}", f"expected a value, found {_type_name(raw)}",
                                f"write {name}: VALUE")
            out.append((str(name), "true" if raw is True else "false" if raw is False else str(raw)))
        return tuple(out)

    # ------------------------------------------------------------------ every port once

    def check_ports(self, deployment: Deployment) -> None:
        taken: list[tuple[str, int, str]] = []  # (host, port, what)
        used: list[tuple[str, str]] = []
        for i, region in enumerate(deployment.regions):
            for j, b in enumerate(region.brokers):
                used.append((b.listen, f"regions[{i}].brokers[{j}].listen ({region.name} broker {b.node_id})"))
                implied = "" if b.metrics_listen else " (the default: listen port + 10000)"
                used.append((b.metrics_endpoint, f"regions[{i}].brokers[{j}].metrics_listen{implied}"))
        for pair in deployment.pairs:
            for route in pair.routes:
                used.append((route.listen, (f"the link proxy {pair.name} for {route.region} broker {route.node_id} "
                                           "(from link_port_base)")))
            used.append((pair.control, f"the control port of link {pair.name} (from link_port_base)"))
        for address, what in used:
            try:
                host, port = split_host_port(address)
            except ValueError as exc:
                raise self.fail("", f"{what}: {exc}",
                                "a broker listening above port 55535 needs its own metrics_listen "
                                "(the default is the listen port + 10000)") from None
            for other_host, other_port, other in taken:
                if port == other_port and (host == other_host or host in _WILDCARD_HOSTS
                                           or other_host in _WILDCARD_HOSTS):
                    raise self.fail("", f"port {port}: {what} is also {other}",
                                    "give every listener its own port (move the brokers, metrics_listen or "
                                    "link_port_base; docs/reference/regions.md has the default port map)")
            taken.append((host, port, what))
