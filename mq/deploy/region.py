"""Region files: ``regions/*.yaml`` read and checked into a ``Topology`` (one region).

A one-region file names one region, its brokers (node id, native address, optional
metrics address and broker configs), the controller voters and the data directory::

    region: local
    data_dir: .mq            # relative to the directory `mq up` runs in
    voters: [1, 2, 3]        # default: every broker
    configs: {}              # broker configs (Kafka names) for every broker
    brokers:
      - {id: 1, listen: 127.0.0.1:9092}
      - {id: 2, listen: 127.0.0.1:9093, configs: {log.segment.bytes: 1048576}}

Every mistake is refused before a process starts, with the file, the key path and
what to write instead (``regions/x.yaml: brokers[1].listen: '127.0.0.1' is not
HOST:PORT — write it as 127.0.0.1:9093``). Unknown keys are refused too, so a typo is
never silently ignored. A file with ``regions:`` (several regions, WAN links, mirror
flows) is read by ``mq.deploy.regions_file``, which reuses this reader for each region;
``load_topology`` there reads either format. docs/reference/regions.md documents every key.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mq.core.config import BROKER_KEYS_BY_NAME, TOPIC_KEYS_BY_NAME, BrokerConfig
from mq.core.errors import MqError
from mq.deploy.errors import RegionError
from mq.deploy.topology import METRICS_PORT_OFFSET, BrokerSpec, Topology, voters_config

DEFAULT_REGION_FILE = os.path.join("regions", "default.yaml")
PACKAGED_REGION_FILE = Path(__file__).with_name("default_region.yaml")
REPO_REGION_FILE = Path(__file__).resolve().parents[2] / DEFAULT_REGION_FILE
DEFAULT_DATA_DIR = ".mq"
FIRST_PORT = 9092

REGION_KEYS = ("region", "data_dir", "voters", "configs", "brokers")
BROKER_ENTRY_KEYS = ("id", "listen", "metrics_listen", "configs")
GEO_KEYS = ("regions", "links", "mirrors", "link_port_base")  # the several-regions format
# Broker configs the file sets through its own keys, never through `configs:`.
STRUCTURAL_CONFIGS = {
    "node.id": "brokers[N].id",
    "log.dirs": "data_dir (each broker uses <data_dir>/broker-<id>)",
    "listeners": "brokers[N].listen",
    "metrics.listener": "brokers[N].metrics_listen",
    "controller.quorum.voters": "voters",
    "region.name": "the region's name (region:, or name: under regions:)",
}
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def default_region_file(cwd: str | os.PathLike | None = None) -> Path:
    """The file ``mq up`` reads without an argument: ``regions/default.yaml`` in the current
    directory, else the one of the source checkout mq runs from, else the packaged copy."""
    for candidate in (Path(cwd or os.getcwd()) / DEFAULT_REGION_FILE, REPO_REGION_FILE):
        if candidate.is_file():
            return candidate
    return PACKAGED_REGION_FILE


def display_path(path: str | os.PathLike) -> str:
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def load_region(path: str | os.PathLike, *, data_dir: str | None = None,
                extra_configs: Sequence[tuple[str, str]] = ()) -> Topology:
    """Read and check a region file; ``data_dir`` replaces the file's ``data_dir`` and
    ``extra_configs`` (``mq up --config``) apply to every broker after the file's."""
    text, source = read_region_file(path)
    return parse_region(text, source=source, data_dir=data_dir, extra_configs=extra_configs)


def read_region_file(path: str | os.PathLike) -> tuple[str, str]:
    """A region file's text and the name errors give it; a RegionError if it cannot be read."""
    source = display_path(path)
    try:
        return Path(path).read_text(encoding="utf-8"), source
    except FileNotFoundError:
        raise RegionError(f"{source}: no such file",
                          f"pass an existing region file, or run `mq up` without one for {DEFAULT_REGION_FILE}"
                          ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegionError(f"{source}: cannot read it ({exc})", "check the path and its permissions") from None


def parse_region(text: str, *, source: str = "<region>", data_dir: str | None = None,
                 extra_configs: Sequence[tuple[str, str]] = ()) -> Topology:
    """``load_region`` on text already read; ``source`` names it in errors."""
    return _Reader(source).read(_load_yaml(text, source), data_dir, extra_configs)


# ---------------------------------------------------------------------- YAML


class _Loader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _mapping(loader: _Loader, node: yaml.MappingNode) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value",
                                                    key_node.start_mark)
        if key in out:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                    key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise RegionError(f"{source}: {where}{problem}", "fix the YAML (see docs/reference/regions.md)") from None


# ---------------------------------------------------------------------- checks


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _close(word: str, choices: Sequence[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {match[0]}? " if match else ""


def _config_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Reader:
    """Checks one file; ``prefix`` is the key path of the part being read (``regions[1].``)."""

    def __init__(self, source: str, prefix: str = "") -> None:
        self.source = source
        self.prefix = prefix

    def at(self, prefix: str) -> _Reader:
        return type(self)(self.source, self.prefix + prefix)

    def fail(self, where: str, what: str, todo: str) -> RegionError:
        where = f"{self.prefix}{where}" if where else self.prefix.rstrip(".")
        prefix = f"{self.source}: {where}: " if where else f"{self.source}: "
        return RegionError(prefix + what, todo)

    def keys(self, where: str, data: Any, allowed: Sequence[str], *, top: bool = False) -> dict:
        label = where or "the file"
        if not isinstance(data, dict):
            example = "region: local\nbrokers: [...]" if top else ", ".join(allowed)
            raise self.fail(where, f"expected a mapping, found {_type_name(data)}",
                            f"write {label} as keys and values ({example}); see docs/reference/regions.md")
        unknown = sorted((str(k) for k in data if k not in allowed), key=str)
        if unknown:
            geo = [k for k in unknown if top and k in GEO_KEYS]
            if geo:
                raise self.fail(where, f"{', '.join(repr(k) for k in geo)}: only in a file with several "
                                "regions (regions:, links:, mirrors:)",
                                "list the regions under regions: with their brokers, or remove "
                                f"{', '.join(geo)} (see regions/default.yaml and docs/reference/regions.md)")
            names = ", ".join(repr(k) for k in unknown)
            hint = _close(unknown[0], allowed)
            raise self.fail(where, f"unknown key{'s' if len(unknown) > 1 else ''} {names}",
                            f"{hint}{label} may have: {', '.join(allowed)} (see docs/reference/regions.md)")
        return data

    # ------------------------------------------------------------------ the file

    def read(self, data: Any, data_dir: str | None, extra_configs: Sequence[tuple[str, str]]) -> Topology:
        if data is None:
            raise self.fail("", "the file is empty", "describe a region: see regions/default.yaml")
        data = self.keys("", data, REGION_KEYS, top=True)
        name = self.region_name(data.get("region", "local"))
        root = os.path.abspath(os.path.expanduser(data_dir or self.data_dir(data.get("data_dir", DEFAULT_DATA_DIR))))
        shared = self.configs("configs", data.get("configs", {}))
        extra = self.configs("--config", dict(extra_configs)) if extra_configs else {}
        return self.region(data, name, root, shared, extra)

    def region(self, data: dict, name: str, root: str, shared: dict[str, str], extra: dict[str, str]) -> Topology:
        """The brokers and voters of one region whose brokers live under ``root``."""
        if "brokers" not in data:
            raise self.fail("", "no brokers", "list them under brokers: (see regions/default.yaml)")
        raw_brokers = data["brokers"]
        if not isinstance(raw_brokers, list) or not raw_brokers:
            raise self.fail("brokers", f"expected a list of brokers, found {_type_name(raw_brokers)}",
                            "write - {id: 1, listen: 127.0.0.1:9092} for each broker")
        entries = [self.broker_entry(i, raw) for i, raw in enumerate(raw_brokers)]
        self.check_unique(entries)
        voters = self.voters(data.get("voters"), [e["id"] for e in entries])
        voter_specs = [BrokerSpec(e["id"], e["listen"], "") for e in entries if e["id"] in voters]
        quorum = voters_config(sorted(voter_specs, key=lambda b: voters.index(b.node_id)))
        brokers = []
        for i, e in enumerate(entries):
            merged = {**shared, **e["configs"], **extra}
            self.check_together(i, e["id"], merged)
            configs = (*sorted(merged.items()), ("controller.quorum.voters", quorum), ("region.name", name))
            brokers.append(BrokerSpec(node_id=e["id"], listen=e["listen"],
                                      data_dir=os.path.join(root, f"broker-{e['id']}"),
                                      metrics_listen=e["metrics_listen"], configs=configs))
        return Topology(name=name, data_dir=root, brokers=tuple(brokers), voters=tuple(voters))

    def region_name(self, value: Any, key: str = "region", *, noun: str = "region") -> str:
        if not isinstance(value, str) or not _NAME.match(value):
            raise self.fail(key, f"{value!r} is not a {noun} name",
                            "use 1 to 64 letters, digits, '.', '_' or '-' (for example: "
                            f"{'east-to-west' if noun == 'flow' else 'local'})")
        return value

    def data_dir(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail("data_dir", f"expected a directory path, found {_type_name(value)}",
                            f"write a path, for example data_dir: {DEFAULT_DATA_DIR}")
        return value

    # ------------------------------------------------------------------ brokers

    def broker_entry(self, i: int, raw: Any) -> dict:
        where = f"brokers[{i}]"
        raw = self.keys(where, raw, BROKER_ENTRY_KEYS)
        for key in ("id", "listen"):
            if key not in raw:
                raise self.fail(where, f"no {key}",
                                f"give every broker an id and a listen address, for example "
                                f"{{id: {i + 1}, listen: 127.0.0.1:{FIRST_PORT + i}}}")
        node_id = raw["id"]
        if isinstance(node_id, bool) or not isinstance(node_id, int) or node_id < 0:
            raise self.fail(f"{where}.id", f"{node_id!r} is not a node id",
                            f"use a whole number >= 0, for example id: {i + 1}")
        listen = self.address(f"{where}.listen", raw["listen"], FIRST_PORT + i)
        metrics = raw.get("metrics_listen")
        metrics = "" if metrics is None else self.address(f"{where}.metrics_listen", metrics,
                                                         FIRST_PORT + i + METRICS_PORT_OFFSET)
        return {"id": node_id, "listen": listen, "metrics_listen": metrics,
                "configs": self.configs(f"{where}.configs", raw.get("configs", {}))}

    def address(self, where: str, value: Any, suggested_port: int) -> str:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
            raise self.fail(where, f"{value} is not HOST:PORT", f"write it as 127.0.0.1:{value}")
        if not isinstance(value, str):
            raise self.fail(where, f"expected HOST:PORT, found {_type_name(value)}",
                            f"write it as 127.0.0.1:{suggested_port}")
        host, sep, port = value.rpartition(":")
        if not sep or not host.strip("[]"):
            if value.strip().isdigit() or (sep and port.isdigit()):
                fix = f"127.0.0.1:{port or value.strip()}"
            else:
                fix = f"{value.strip() or '127.0.0.1'}:{suggested_port}"
            raise self.fail(where, f"{value!r} is not HOST:PORT", f"write it as {fix}")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise self.fail(where, f"{value!r} is not HOST:PORT",
                            f"the port must be a number from 1 to 65535, for example {host}:{suggested_port}")
        return value

    def check_unique(self, entries: list[dict]) -> None:
        ids: dict[int, int] = {}
        for i, e in enumerate(entries):
            if e["id"] in ids:
                raise self.fail(f"brokers[{i}].id", f"{e['id']} is already brokers[{ids[e['id']]}].id",
                                "give each broker its own id")
            ids[e["id"]] = i
        taken: list[tuple[str, int, str]] = []  # (host, port, where)
        for i, e in enumerate(entries):
            spec = BrokerSpec(e["id"], e["listen"], "", e["metrics_listen"])
            for key, address in (("listen", e["listen"]), ("metrics_listen", spec.metrics_endpoint)):
                host, _, port = address.rpartition(":")
                host, port_n = host.strip("[]"), int(port)
                here = f"brokers[{i}].{key}"
                for other_host, other_port, other in taken:
                    if port_n == other_port and (host == other_host or host in _WILDCARD_HOSTS
                                                 or other_host in _WILDCARD_HOSTS):
                        implied = "" if key == "listen" or e["metrics_listen"] else \
                            f" (the default: listen port + {METRICS_PORT_OFFSET})"
                        raise self.fail(here, f"{address}{implied} is already used by {other}",
                                        "give each broker its own ports")
                taken.append((host, port_n, here))

    def voters(self, value: Any, ids: list[int]) -> list[int]:
        if value is None:
            return list(ids)
        if not isinstance(value, list) or not value:
            raise self.fail("voters", f"expected a list of broker ids, found {_type_name(value)}",
                            f"write for example voters: {ids[:3]} (or leave it out: every broker votes)")
        seen: list[int] = []
        for j, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int) or v not in ids:
                raise self.fail(f"voters[{j}]", f"{v!r} is not the id of a broker in this file",
                                f"use ids from brokers: {', '.join(map(str, ids))}")
            if v in seen:
                raise self.fail(f"voters[{j}]", f"{v} is listed twice", "name each voter once")
            seen.append(v)
        return seen

    # ------------------------------------------------------------------ configs

    def configs(self, where: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping of config names to values, found {_type_name(value)}",
                            "write for example configs: {log.segment.bytes: 1048576}")
        out: dict[str, str] = {}
        for name, raw in value.items():
            name = str(name)
            key = BROKER_KEYS_BY_NAME.get(name)
            if name in STRUCTURAL_CONFIGS:
                raise self.fail(where, f"{name} is set by the region file itself",
                                f"use {STRUCTURAL_CONFIGS[name]} instead of configs")
            if key is None and name in TOPIC_KEYS_BY_NAME:
                raise self.fail(where, f"{name} is a topic config, not a broker config",
                                f"set it per topic: mq topic create NAME --config {name}=VALUE")
            if key is None:
                raise self.fail(where, f"unknown broker config {name!r}",
                                f"{_close(name, list(BROKER_KEYS_BY_NAME))}use Kafka's broker config names "
                                "(docs/reference/configs.md)")
            if raw is None or isinstance(raw, (dict, list)):
                raise self.fail(f"{where}.{name}", f"expected a value, found {_type_name(raw)}",
                                f"write {name}: {_config_text(key.default) or 'VALUE'}")
            text = _config_text(raw)
            try:
                key.parse(text)
            except MqError as exc:
                raise self.fail(f"{where}.{name}", exc.message, "see docs/reference/configs.md") from None
            out[name] = text
        return out

    def check_together(self, i: int, node_id: int, merged: Mapping[str, str]) -> None:
        """Settings valid alone may clash (heartbeat >= session timeout): the broker would
        refuse to start, so refuse the file instead."""
        try:
            BrokerConfig.from_kafka({**merged, "node.id": str(node_id)})
        except MqError as exc:
            raise self.fail(f"brokers[{i}]", exc.message,
                            "fix its configs (the region-wide configs apply to every broker)") from None
