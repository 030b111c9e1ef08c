"""The compose generator: what each service runs, how the regions are wired, the ports it
publishes, the host's view, and the region files it refuses (mq.deploy.compose)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mq.deploy.compose import (
    ComposeError,
    ComposeOptions,
    compose_document,
    container_cluster,
    host_cluster,
    render_compose,
)
from mq.deploy.compose_yaml import compact_json, scalar
from mq.deploy.regions_file import load_topology, parse_topology
from mq.deploy.topology import Deployment

REPO = Path(__file__).resolve().parents[3]
DEFAULT = REPO / "regions" / "default.yaml"
THREE = REPO / "regions" / "three-regions.yaml"


def default() -> Deployment:
    return load_topology(DEFAULT)


def two_regions(east: str = "127.0.0.1:9092", west: str = "127.0.0.1:9192", **names: str) -> str:
    e, w = names.get("east", "east"), names.get("west", "west")
    flow = names.get("flow", "east-to-west")
    return (f"regions:\n  - name: {e}\n    brokers: [{{id: 1, listen: {east}}}]\n"
            f"  - name: {w}\n    brokers: [{{id: 1, listen: {west}}}]\n"
            f"links: [{{source: {e}, target: {w}, latency_ms: 10}}]\n"
            f"mirrors: [{{name: {flow}, source: {e}, target: {w}}}]\n")


def loaded(options: ComposeOptions | None = None, deployment: Deployment | None = None) -> dict:
    """The rendered file read back as compose reads it (aliases resolved, $$ still escaped)."""
    return yaml.safe_load(render_compose(deployment or default(), options or ComposeOptions()))


def test_the_committed_compose_file_is_the_generated_one():
    expected = render_compose(default(), ComposeOptions(source="regions/default.yaml"))
    assert (REPO / "docker" / "compose.yaml").read_text(encoding="utf-8") == expected, (
        "regenerate with: mq docker compose regions/default.yaml -o docker/compose.yaml")


def test_services_networks_and_volumes_of_the_default_regions():
    doc = loaded()
    assert list(doc["services"]) == ["east", "east-1", "east-2", "east-3", "west", "west-1", "west-2", "west-3",
                                     "link-east-west", "mirror-east-to-west"]
    assert list(doc["networks"]) == ["east", "west"]
    assert list(doc["volumes"]) == [f"{r}-{i}-data" for r in ("east", "west") for i in (1, 2, 3)] + [
        "mirror-east-to-west-data"]
    services = doc["services"]
    # A region's brokers share its namespace; only the link joins two region networks.
    assert services["east"]["networks"] == ["east"] and services["west"]["networks"] == ["west"]
    assert all(services[f"east-{i}"]["network_mode"] == "service:east" for i in (1, 2, 3))
    assert services["link-east-west"]["networks"] == ["east", "west"]
    assert services["mirror-east-to-west"]["network_mode"] == "service:west"  # beside its target
    assert {s["container_name"] for s in services.values()} == {f"mq-{name}" for name in services}
    assert all(s["image"] == "mq:dev" and s["init"] is True for s in services.values())


def test_a_broker_listens_everywhere_and_advertises_its_published_port():
    broker = loaded()["services"]["east-2"]
    command = broker["command"]
    assert command[:4] == ["mq", "broker", "--node-id", "2"]
    args = dict(zip(command[2::2], command[3::2], strict=False))
    assert args["--listen"] == "0.0.0.0:19093" and args["--metrics-listen"] == "0.0.0.0:29093"
    configs = [command[i + 1] for i, a in enumerate(command) if a == "--config"]
    assert "advertised.listeners=127.0.0.1:19093" in configs
    assert "controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094" in configs
    assert broker["volumes"] == ["east-2-data:/var/lib/mq"]
    assert broker["healthcheck"]["test"][-2:] == ["broker", "127.0.0.1:29093"]  # GET /ready on the metrics port


def test_published_ports_are_the_files_moved_by_the_offset_on_127_0_0_1():
    services = loaded()["services"]
    assert services["east"]["ports"] == [f"127.0.0.1:{p}:{p}" for p in (19092, 29092, 19093, 29093, 19094, 29094)]
    assert services["link-east-west"]["ports"] == ["127.0.0.1:19306:19306"]
    moved = loaded(ComposeOptions(port_offset=17000))["services"]
    assert moved["west"]["ports"][0] == "127.0.0.1:26192:26192"


def test_the_mirror_waits_for_both_regions_and_the_link_and_reaches_the_source_through_it():
    services = loaded()["services"]
    mirror = services["mirror-east-to-west"]
    assert mirror["command"] == ["python", "-m", "mq.deploy.container", "mirror", "east-to-west"]
    assert set(mirror["depends_on"]) == {f"{r}-{i}" for r in ("east", "west") for i in (1, 2, 3)} | {"link-east-west"}
    assert all(d == {"condition": "service_healthy"} for d in mirror["depends_on"].values())
    cluster = json.loads(mirror["environment"]["MQ_CLUSTER_JSON"])
    assert cluster == json.loads(services["link-east-west"]["environment"]["MQ_CLUSTER_JSON"])
    flow = cluster["flows"][0]
    assert flow["source_address_map"] == {f"127.0.0.1:{19092 + i}": f"link-east-west:{19300 + i}" for i in range(3)}
    assert flow["target_bootstrap"] == "127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194"
    assert flow["data_dir"] == "/var/lib/mq/mirror-east-to-west"
    routes = cluster["link_pairs"][0]["routes"]
    assert [(r["listen"], r["target"]) for r in routes] == [
        ("0.0.0.0:19300", "east:19092"), ("0.0.0.0:19301", "east:19093"), ("0.0.0.0:19302", "east:19094"),
        ("0.0.0.0:19303", "west:19192"), ("0.0.0.0:19304", "west:19193"), ("0.0.0.0:19305", "west:19194")]
    assert Deployment.from_json(cluster).link("east", "west").settings.latency_ms == 40


def test_the_header_documents_the_port_map():
    text = render_compose(default(), ComposeOptions(source="regions/default.yaml"))
    assert text.startswith("# Generated by `mq docker compose regions/default.yaml`")
    assert "#   east            brokers 19092-19094, metrics 29092-29094" in text
    assert "#   link east-west  control 19306" in text


def test_three_regions_make_three_links_and_two_mirrors():
    doc = loaded(deployment=load_topology(THREE))
    services = doc["services"]
    links = [s for s in services if s.startswith("link-")]
    assert links == ["link-east-west", "link-east-south", "link-west-south"]
    assert services["link-east-south"]["networks"] == ["east", "south"]
    assert services["mirror-east-to-south"]["network_mode"] == "service:south"
    published = [p for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published)) == 3 * 3 * 2 + 3


def test_dollars_are_escaped_for_compose_and_read_back_by_attach(tmp_path: Path):
    text = two_regions().replace("mirrors: [{name: east-to-west, source: east, target: west}]",
                                 "mirrors: [{name: east-to-west, source: east, target: west, "
                                 "topics: {include: ['^orders$']}}]")
    deployment = parse_topology(text)
    rendered = render_compose(deployment)
    assert "$$" in rendered and "'^orders$'" not in rendered
    from mq.deploy.compose_runtime import read_compose_cluster

    path = tmp_path / "c.yaml"
    path.write_text(rendered)
    assert read_compose_cluster(str(path))["flows"][0]["topics"]["include"] == ["^orders$"]


def test_the_hosts_view_reaches_the_published_ports(tmp_path: Path):
    doc = host_cluster(container_cluster(default(), ComposeOptions()), str(tmp_path / "state"))
    deployment = Deployment.from_json(doc)
    assert deployment.region("east").bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert deployment.region("west").brokers[0].metrics_endpoint == "127.0.0.1:29192"
    assert deployment.pair("east", "west").control == "127.0.0.1:19306"
    flow = deployment.flow("east-to-west")
    assert flow.data_dir == str(tmp_path / "state" / "mirror-east-to-west")
    assert doc["flows"][0]["source_address_map"] == {}  # from the host every broker is dialed directly
    assert doc["docker"]["containers"]["east-2"] == "mq-east-2"


@pytest.mark.parametrize(("text", "words"), [
    (two_regions(east="127.0.0.1:9092", west="127.0.0.2:9092"),
     "host port 19092 would be published twice: for east broker 1 and for west broker 1"),
    (two_regions(east="127.0.0.1:60000, metrics_listen: 127.0.0.1:9500"),
     "east broker 1 is on port 60000: with --port-offset 10000 it would be 70000, past 65535"),
    (two_regions(west="127.0.0.2:19092"),  # the file allows it (two hosts), the host has one 127.0.0.1
     "host port 29092 would be published twice: for east broker 1 metrics and for west broker 1"),
    (two_regions().replace("name: east", "name: East_1").replace("source: east", "source: East_1"),
     "region 'East_1' (regions[].name) cannot name a Docker service"),
    (two_regions(flow="to.west"), "mirror flow 'to.west' (mirrors[].name) cannot name a Docker service"),
    (two_regions(west="127.0.0.1:9192").replace("name: west", "name: east-1").replace(
        "target: west", "target: east-1"), "region east-1 and east broker 1 would both be the Docker service"),
])
def test_region_files_docker_cannot_run_are_refused_with_what_to_do(text: str, words: str):
    with pytest.raises(ComposeError) as caught:
        compose_document(parse_topology(text), ComposeOptions())
    assert words in caught.value.what, caught.value.what
    assert caught.value.todo


def test_a_project_name_docker_cannot_use_is_refused():
    with pytest.raises(ComposeError, match="project 'My_Project'"):
        compose_document(default(), ComposeOptions(project="My_Project"))


def test_yaml_scalars_that_would_change_meaning_are_quoted():
    assert scalar("127.0.0.1:9092:9092") == '"127.0.0.1:9092:9092"'
    assert scalar("30s") == '"30s"' and scalar("1") == '"1"' and scalar("yes") == '"yes"'
    assert scalar("--node-id") == "--node-id" and scalar("service:east") == "service:east"
    assert scalar("-") == '"-"' and scalar("a b") == '"a b"' and scalar("$X") == '"$$X"'
    for value in ("127.0.0.1:9092:9092", "30s", "1", "yes", "--node-id", "a: b", "#x", "null", "[x]"):
        assert yaml.safe_load(f"k: {scalar(value)}") == {"k": value}


def test_compact_json_round_trips_and_keeps_short_objects_on_one_line():
    doc = {"a": {"b": [1, 2]}, "long": {f"key{i}": "v" * 20 for i in range(8)}}
    text = compact_json(doc)
    assert json.loads(text) == doc
    assert ' "a": {"b": [1, 2]},' in text and '  "key0": "vvvvvvvvvvvvvvvvvvvv",' in text
