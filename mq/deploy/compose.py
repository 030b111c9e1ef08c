"""A Docker Compose file for any region file: ``mq docker compose regions/default.yaml``.

What runs, per region ``east`` of the file (container names take ``--project``, default ``mq``):

- ``east`` (container ``mq-east``): holds the region's network namespace, like a pod's
  pause container; it only sleeps. It is on the region's own network ``east`` and
  publishes the region's ports on the host's 127.0.0.1.
- ``east-1``, ``east-2``... (``mq-east-1``...): one broker each, in that namespace
  (``network_mode: service:east``), data in a named volume. Each listens on 0.0.0.0 and
  advertises ``127.0.0.1:PORT``, the port it is also published on. So the same address
  works inside the region (the brokers share the namespace's loopback) and from the
  host (the published port): a client on the host dials what the metadata says, as with
  ``mq up``. Killing or pausing a broker's container leaves the namespace to the others.
- ``link-east-west``: the link process of the pair (``mq.deploy.link``), the only
  container on both region networks. Every byte between regions crosses it, so latency,
  jitter, bandwidth and cuts work as with processes; its control port is published.
- ``mirror-east-to-west``: one mirror per flow, in the target region's namespace (it
  runs beside its target), reaching the source brokers through the link (the flow's
  ``source_address_map``: ``127.0.0.1:19092 -> link-east-west:19300``).

Ports: every port of the file moves by ``port_offset`` (default 10000: east's broker 1 on
9092 becomes 19092, its metrics 19092+10000 become 29092, the link control port 9306
becomes 19306), so a compose cluster and ``mq up`` of the same file can run side by
side. Published: each broker's native and metrics ports, each link's control port.

The link and mirror containers read the deployment as the containers see it (the
``x-mq-cluster`` block of the compose file, given to them as ``MQ_CLUSTER_JSON``;
``mq.deploy.container`` writes it to ``/var/lib/mq/cluster.json`` and starts the process).
``mq docker attach`` turns the same block into the host's view (``host_cluster``): a
``cluster.json`` whose brokers and link control ports are the published ones, so ``mq
status``, ``mq link``, ``--region`` and ``mq mirror failover`` work from the host.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import Any

from mq.deploy.compose_yaml import Alias, BlockText, compact_json, render
from mq.deploy.errors import DeployError
from mq.deploy.topology import (
    BrokerSpec,
    Deployment,
    FlowSpec,
    LinkPair,
    ProxyRoute,
    Topology,
    split_host_port,
    voters_config,
)

DEFAULT_IMAGE = "mq:dev"
DEFAULT_PROJECT = "mq"
DEFAULT_PORT_OFFSET = 10_000
PUBLISH_HOST = "127.0.0.1"
CONTAINER_DATA_DIR = "/var/lib/mq"
HEALTHCHECK = ["python", "-I", "-S", "/opt/mq/healthcheck.py"]
CLUSTER_ENV = "MQ_CLUSTER_JSON"
# Docker service, container, network and DNS names: lowercase letters, digits, '-'.
_DOCKER_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
MAX_CONTAINER_NAME = 63  # a DNS label


class ComposeError(DeployError):
    """A region file (or option) that cannot become a compose file."""


@dataclass(frozen=True)
class ComposeOptions:
    image: str = DEFAULT_IMAGE
    project: str = DEFAULT_PROJECT  # container names: <project>-<service>
    port_offset: int = DEFAULT_PORT_OFFSET
    source: str = ""  # the region file, named in the header


@dataclass(frozen=True)
class Published:
    """One port published on the host: what it is and the service that publishes it."""

    port: int
    service: str
    what: str


# ---------------------------------------------------------------------- checks and the container view


def check_name(name: str, what: str, where: str) -> None:
    if not _DOCKER_NAME.match(name):
        raise ComposeError(f"{what} {name!r} ({where}) cannot name a Docker service, network or host",
                           "use lowercase letters, digits and '-' (not first or last), for example east or "
                           "east-to-west")


def _moved(address: str, offset: int, what: str) -> int:
    _, port = split_host_port(address)
    if port + offset > 65535:
        raise ComposeError(f"{what} is on port {port}: with --port-offset {offset} it would be {port + offset}, "
                           "past 65535", "choose a smaller --port-offset (or lower ports in the region file)")
    if port + offset < 1:
        raise ComposeError(f"{what} is on port {port}: with --port-offset {offset} it would be {port + offset}",
                           "choose a --port-offset that keeps every port from 1 to 65535")
    return port + offset


def service_names(deployment: Deployment) -> dict[str, str]:
    """``{service: what it is}`` in file order; two parts of the file that would get the
    same service name (region ``east-1`` and broker 1 of region ``east``) are refused."""
    out: dict[str, str] = {}

    def add(name: str, what: str) -> None:
        if name in out:
            raise ComposeError(f"{what} and {out[name]} would both be the Docker service {name!r}",
                               "rename a region or flow so that the names differ")
        out[name] = what

    for region in deployment.regions:
        check_name(region.name, "region", "regions[].name")
        add(region.name, f"region {region.name}")
        for b in region.brokers:
            add(f"{region.name}-{b.node_id}", f"{region.name} broker {b.node_id}")
    for pair in deployment.pairs:
        add(f"link-{pair.name}", f"the link {pair.name}")
    for flow in deployment.flows:
        check_name(flow.name, "mirror flow", "mirrors[].name")
        add(f"mirror-{flow.name}", f"the mirror flow {flow.name}")
    return out


def published_ports(deployment: Deployment, offset: int) -> list[Published]:
    """Every host port the compose file publishes; refused when two would collide (the
    file may put brokers on different hosts with one port: the host has one 127.0.0.1)."""
    out: list[Published] = []
    for region in deployment.regions:
        for b in region.brokers:
            what = f"{region.name} broker {b.node_id}"
            out.append(Published(_moved(b.listen, offset, what), region.name, what))
            out.append(Published(_moved(b.metrics_endpoint, offset, f"{what} metrics"), region.name,
                                 f"{what} metrics"))
    for pair in deployment.pairs:
        what = f"the control port of link {pair.name}"
        out.append(Published(_moved(pair.control, offset, what), f"link-{pair.name}", what))
    seen: dict[int, Published] = {}
    for p in out:
        if p.port in seen:
            raise ComposeError(f"host port {p.port} would be published twice: for {seen[p.port].what} and for "
                               f"{p.what}", "give every broker, metrics and link port of the file its own port "
                               "number (the compose file publishes them all on 127.0.0.1)")
        seen[p.port] = p
    return out


def check(deployment: Deployment, options: ComposeOptions) -> None:
    """Everything that would make the compose file unusable, as a ComposeError."""
    check_name(options.project, "project", "--project")
    if isinstance(options.port_offset, bool) or not isinstance(options.port_offset, int):
        raise ComposeError(f"--port-offset {options.port_offset!r} is not a whole number", "for example 10000")
    services = service_names(deployment)
    longest = max(services, key=len)
    if len(options.project) + 1 + len(longest) > MAX_CONTAINER_NAME:
        raise ComposeError(f"the container name {options.project}-{longest} is longer than {MAX_CONTAINER_NAME} "
                           "characters", "use shorter region or flow names (or a shorter --project)")
    published_ports(deployment, options.port_offset)


def advertised(broker: BrokerSpec, offset: int) -> str:
    """Where a broker is dialed, inside its region and from the host alike."""
    return f"{PUBLISH_HOST}:{_moved(broker.listen, offset, f'broker {broker.node_id}')}"


def _region(region: Topology, offset: int) -> Topology:
    listens = {b.node_id: advertised(b, offset) for b in region.brokers}
    voters = voters_config([replace(b, listen=listens[v]) for v in region.voters
                            if (b := region.broker(v)) is not None])
    brokers = []
    for b in region.brokers:
        metrics = f"0.0.0.0:{_moved(b.metrics_endpoint, offset, f'broker {b.node_id} metrics')}"
        configs = tuple((k, voters if k == "controller.quorum.voters" else v) for k, v in b.configs
                        if k != "advertised.listeners")
        brokers.append(BrokerSpec(node_id=b.node_id, listen=listens[b.node_id],
                                  data_dir=f"{CONTAINER_DATA_DIR}/data", metrics_listen=metrics, configs=configs))
    return Topology(name=region.name, data_dir=CONTAINER_DATA_DIR, brokers=tuple(brokers), voters=region.voters)


def _pair(deployment: Deployment, pair: LinkPair, offset: int) -> LinkPair:
    routes = []
    for r in pair.routes:
        region = deployment.region(r.region)
        broker = region.broker(r.node_id) if region is not None else None
        assert broker is not None  # regions_file made the routes from the brokers
        port = split_host_port(advertised(broker, offset))[1]
        routes.append(ProxyRoute(r.region, r.node_id, f"{r.region}:{port}",
                                 f"0.0.0.0:{_moved(r.listen, offset, f'link {pair.name}')}"))
    control = f"0.0.0.0:{_moved(pair.control, offset, f'the control port of link {pair.name}')}"
    return LinkPair(pair.regions, control, tuple(routes), f"{CONTAINER_DATA_DIR}/links/{pair.name}")


def container_deployment(deployment: Deployment, options: ComposeOptions) -> Deployment:
    """The deployment as the containers see it (see the module docstring)."""
    check(deployment, options)
    offset = options.port_offset
    return Deployment(
        data_dir=CONTAINER_DATA_DIR, regions=tuple(_region(r, offset) for r in deployment.regions),
        links=deployment.links, pairs=tuple(_pair(deployment, p, offset) for p in deployment.pairs),
        flows=tuple(replace(f, data_dir=f"{CONTAINER_DATA_DIR}/mirror-{f.name}") for f in deployment.flows),
        source=options.source)


def container_cluster(deployment: Deployment, options: ComposeOptions) -> dict[str, Any]:
    """cluster.json for the link and mirror containers: the container view, each flow
    reaching its source through the link's DNS name, and a ``docker`` section."""
    inside = container_deployment(deployment, options)
    doc = replace(inside, flows=()).to_json()
    flows = []
    for flow in inside.flows:
        address_map = _link_address_map(inside, flow)
        target = inside.region(flow.target)
        flows.append({**flow.to_json(), "source_address_map": address_map,
                      "source_bootstrap": ",".join(address_map.values()),
                      "target_bootstrap": target.bootstrap if target is not None else ""})
    doc["flows"] = flows
    doc["docker"] = {"project": options.project, "image": options.image, "port_offset": options.port_offset,
                     "publish_host": PUBLISH_HOST,
                     "containers": {name: f"{options.project}-{name}" for name in service_names(deployment)}}
    return doc


def _link_address_map(inside: Deployment, flow: FlowSpec) -> dict[str, str]:
    pair = inside.pair(flow.source, flow.target)
    source = inside.region(flow.source)
    assert pair is not None and source is not None  # regions_file: every flow has a link
    service = f"link-{pair.name}"
    by_node = {r.node_id: r for r in pair.routes if r.region == flow.source}
    return {b.listen: f"{service}:{split_host_port(by_node[b.node_id].listen)[1]}" for b in source.brokers}


def host_cluster(container_doc: dict[str, Any], data_dir: str) -> dict[str, Any]:
    """The container view turned into the host's ``cluster.json`` under ``data_dir``:
    brokers at their published addresses (unchanged: they advertise them), link control
    ports on 127.0.0.1, flow state under ``data_dir``."""
    docker = container_doc.get("docker")
    if not isinstance(docker, dict):
        raise ComposeError("the compose file's x-mq-cluster has no docker section",
                           "generate the compose file again with `mq docker compose`")
    data_dir = os.path.abspath(data_dir)
    doc = json.loads(json.dumps(container_doc))
    doc["data_dir"] = data_dir
    host = str(docker.get("publish_host", PUBLISH_HOST))
    for region in doc["regions"]:
        region["data_dir"] = os.path.join(data_dir, region["name"])
        for b in region["brokers"]:
            b["metrics_listen"] = b["metrics"] = f"{host}:{split_host_port(b['metrics_listen'])[1]}"
            b["data_dir"] = os.path.join(region["data_dir"], f"broker-{b['node_id']}")
    for pair in doc.get("link_pairs", []):
        pair["control"] = f"{host}:{split_host_port(pair['control'])[1]}"
        pair["data_dir"] = os.path.join(data_dir, "links", pair["name"])
        pair["log"] = os.path.join(pair["data_dir"], "link.log")
    for link in doc.get("links", []):
        pair = next((p for p in doc.get("link_pairs", []) if p["name"] == link.get("pair")), None)
        if pair is not None:
            link["control"] = pair["control"]
    for flow in doc.get("flows", []):
        flow["data_dir"] = os.path.join(data_dir, f"mirror-{flow['name']}")
        for key, name in (("log", "mirror.log"), ("pid_file", "mirror.pid"), ("status_file", "status.json")):
            flow[key] = os.path.join(flow["data_dir"], name)
        # From the host every broker is dialed directly at its published address.
        flow["source_address_map"] = {}
        flow["source_bootstrap"] = next(r["bootstrap"] for r in doc["regions"] if r["name"] == flow["source"])
    return doc


# ---------------------------------------------------------------------- the compose document


def _duration(seconds: int) -> str:
    return f"{seconds}s"


def _broker_service(region: Topology, b: BrokerSpec, options: ComposeOptions) -> dict[str, Any]:
    port = split_host_port(b.listen)[1]
    command = ["mq", "broker", "--node-id", str(b.node_id), "--data-dir", b.data_dir, "--listen", f"0.0.0.0:{port}",
               "--metrics-listen", b.metrics_listen, "--config", f"advertised.listeners={b.listen}"]
    for key, value in b.configs:
        command += ["--config", f"{key}={value}"]
    metrics = f"127.0.0.1:{split_host_port(b.metrics_listen)[1]}"
    return {
        "image": options.image, "container_name": f"{options.project}-{region.name}-{b.node_id}", "init": True,
        "network_mode": f"service:{region.name}", "command": command,
        "volumes": [f"{region.name}-{b.node_id}-data:{CONTAINER_DATA_DIR}"],
        "stop_grace_period": _duration(30),
        "healthcheck": {"test": ["CMD", *HEALTHCHECK, "broker", metrics], "interval": _duration(3),
                        "timeout": _duration(3), "retries": 3, "start_period": _duration(90)},
        "depends_on": {region.name: {"condition": "service_started"}},
    }


def _region_service(region: Topology, ports: list[Published], options: ComposeOptions) -> dict[str, Any]:
    return {
        "image": options.image, "container_name": f"{options.project}-{region.name}", "init": True,
        "command": ["sleep", "infinity"], "healthcheck": {"disable": True}, "networks": [region.name],
        "ports": [f"{PUBLISH_HOST}:{p.port}:{p.port}" for p in ports if p.service == region.name],
    }


def _link_service(pair: LinkPair, ports: list[Published], options: ComposeOptions) -> dict[str, Any]:
    name = f"link-{pair.name}"
    control = split_host_port(pair.control)[1]
    return {
        "image": options.image, "container_name": f"{options.project}-{name}", "init": True,
        "command": ["python", "-m", "mq.deploy.container", "link", pair.name],
        "environment": {CLUSTER_ENV: Alias("cluster")}, "networks": list(pair.regions),
        "ports": [f"{PUBLISH_HOST}:{p.port}:{p.port}" for p in ports if p.service == name],
        "healthcheck": {"test": ["CMD", *HEALTHCHECK, "link", f"127.0.0.1:{control}"], "interval": _duration(3),
                        "timeout": _duration(3), "retries": 3, "start_period": _duration(30)},
    }


def _mirror_service(inside: Deployment, flow: FlowSpec, options: ComposeOptions) -> dict[str, Any]:
    pair = inside.pair(flow.source, flow.target)
    assert pair is not None
    waits = {f"{region}-{b.node_id}": {"condition": "service_healthy"}
             for region in (flow.source, flow.target) for b in inside.region(region).brokers}  # type: ignore[union-attr]
    waits[f"link-{pair.name}"] = {"condition": "service_healthy"}
    return {
        "image": options.image, "container_name": f"{options.project}-mirror-{flow.name}", "init": True,
        "command": ["python", "-m", "mq.deploy.container", "mirror", flow.name],
        "environment": {CLUSTER_ENV: Alias("cluster")}, "network_mode": f"service:{flow.target}",
        "volumes": [f"mirror-{flow.name}-data:{CONTAINER_DATA_DIR}"],
        "stop_grace_period": _duration(20),
        "healthcheck": {"test": ["CMD", *HEALTHCHECK, "mirror", f"{flow.data_dir}/status.json"],
                        "interval": _duration(5), "timeout": _duration(3), "retries": 3,
                        "start_period": _duration(60)},
        "depends_on": waits,
    }


def compose_document(deployment: Deployment, options: ComposeOptions) -> dict[str, Any]:
    """The compose file as data (``render_compose`` writes it with its comments)."""
    inside = container_deployment(deployment, options)
    ports = published_ports(deployment, options.port_offset)
    services: dict[str, Any] = {}
    volumes: dict[str, Any] = {}
    for region in inside.regions:
        services[region.name] = _region_service(region, ports, options)
        for b in region.brokers:
            services[f"{region.name}-{b.node_id}"] = _broker_service(region, b, options)
            volumes[f"{region.name}-{b.node_id}-data"] = {}
    for pair in inside.pairs:
        services[f"link-{pair.name}"] = _link_service(pair, ports, options)
    for flow in inside.flows:
        services[f"mirror-{flow.name}"] = _mirror_service(inside, flow, options)
        volumes[f"mirror-{flow.name}-data"] = {}
    cluster = compact_json(container_cluster(deployment, options))
    doc: dict[str, Any] = {"x-mq-cluster": BlockText(cluster, anchor="cluster"), "services": services,
                           "networks": {r.name: {} for r in inside.regions}}
    if volumes:
        doc["volumes"] = volumes
    return doc


def _header(deployment: Deployment, options: ComposeOptions) -> str:
    source = options.source or "a region file"
    lines = [
        f"Generated by `mq docker compose {source}` (port offset {options.port_offset}): do not edit, generate",
        f"it again. Build the image first: docker build -t {options.image} -f docker/Dockerfile .",
        "Then: docker compose -f FILE up -d (or docker-compose); docker compose -f FILE down -v.",
        "",
        "Each region's brokers share one network namespace (the service named after the region)",
        "and advertise 127.0.0.1:PORT, the port they are published on: clients on this host dial",
        "the brokers directly; between regions every byte crosses the region pair's link container.",
        "`mq docker attach FILE` writes .mq/cluster.json for this cluster: then `mq status`,",
        "`mq link ...`, `--region NAME` work from this host (docs/how-to/run-regions-in-docker.md).",
        "",
        "Port map (published on 127.0.0.1):",
    ]
    ports = published_ports(deployment, options.port_offset)
    labels = [r.name for r in deployment.regions] + [f"link {p.name}" for p in deployment.pairs]
    width = max(len(label) for label in labels) + 2
    for region in deployment.regions:
        native = [p.port for p in ports if p.service == region.name and not p.what.endswith("metrics")]
        metrics = [p.port for p in ports if p.service == region.name and p.what.endswith("metrics")]
        lines.append(f"  {region.name:<{width}}brokers {_ranges(native)}, metrics {_ranges(metrics)}")
    for pair in deployment.pairs:
        control = next(p.port for p in ports if p.service == f"link-{pair.name}")
        lines.append(f"  {'link ' + pair.name:<{width}}control {control} (`mq link ...`)")
    return "\n".join(f"# {line}".rstrip() for line in lines) + "\n"


def _ranges(ports: list[int]) -> str:
    if ports and ports == list(range(ports[0], ports[0] + len(ports))):
        return f"{ports[0]}-{ports[-1]}" if len(ports) > 1 else str(ports[0])
    return ",".join(str(p) for p in ports)


def render_compose(deployment: Deployment, options: ComposeOptions = ComposeOptions()) -> str:
    """The compose file's text: a header with the port map, then the document."""
    return _header(deployment, options) + "\n" + render(compose_document(deployment, options))
