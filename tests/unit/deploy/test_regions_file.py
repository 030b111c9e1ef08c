"""Region files with several regions: the default file, the port map, links, flows,
cluster.json round trips, and one test per refusal."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mq.deploy.errors import RegionError
from mq.deploy.regions_file import load_topology, parse_topology
from mq.deploy.shaping import LinkSettings
from mq.deploy.topology import Deployment, FlowSpec, LinkSpec, load_cluster

REPO = Path(__file__).resolve().parents[3]
TWO = """\
data_dir: /tmp/geo
link_port_base: 7300
regions:
  - name: east
    brokers: [{id: 1, listen: 127.0.0.1:7001}, {id: 2, listen: 127.0.0.1:7002}]
  - name: west
    brokers: [{id: 1, listen: 127.0.0.1:7101}]
links:
  - {source: east, target: west, latency_ms: 40, jitter_ms: 5}
mirrors:
  - {source: east, target: west}
"""


def parse(text: str, **kwargs) -> Deployment:
    return parse_topology(textwrap.dedent(text), source="regions/x.yaml", **kwargs)


def refused(text: str) -> str:
    with pytest.raises(RegionError) as info:
        parse(text)
    err = info.value
    assert err.what.startswith("regions/x.yaml: ") and err.todo
    return f"{err.what} — {err.todo}"


def test_the_default_file_is_two_regions_a_link_pair_and_one_flow(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = load_topology(REPO / "regions" / "default.yaml")
    assert d.region_names == ["east", "west"] and d.data_dir == str(tmp_path / ".mq")
    east, west = d.regions
    assert [b.listen for b in east.brokers] == [f"127.0.0.1:{p}" for p in (9092, 9093, 9094)]
    assert [b.listen for b in west.brokers] == [f"127.0.0.1:{p}" for p in (9192, 9193, 9194)]
    assert [b.metrics_endpoint for b in west.brokers] == [f"127.0.0.1:{p}" for p in (19192, 19193, 19194)]
    assert east.voters == west.voters == (1, 2, 3)
    assert east.data_dir == str(tmp_path / ".mq" / "east")
    assert west.brokers[0].data_dir == str(tmp_path / ".mq" / "west" / "broker-1")
    assert dict(west.brokers[0].configs)["controller.quorum.voters"] == \
        "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"
    assert [dict(b.configs)["region.name"] for b in (*east.brokers, *west.brokers)] == ["east"] * 3 + ["west"] * 3
    assert [(x.name, x.settings.latency_ms, x.declared) for x in d.links] == [
        ("east->west", 40.0, True), ("west->east", 40.0, True)]
    [pair] = d.pairs
    assert pair.name == "east-west" and pair.control == "127.0.0.1:9306"
    assert pair.data_dir == str(tmp_path / ".mq" / "links" / "east-west")
    assert [(r.region, r.node_id, r.target, r.listen) for r in pair.routes] == [
        ("east", 1, "127.0.0.1:9092", "127.0.0.1:9300"), ("east", 2, "127.0.0.1:9093", "127.0.0.1:9301"),
        ("east", 3, "127.0.0.1:9094", "127.0.0.1:9302"), ("west", 1, "127.0.0.1:9192", "127.0.0.1:9303"),
        ("west", 2, "127.0.0.1:9193", "127.0.0.1:9304"), ("west", 3, "127.0.0.1:9194", "127.0.0.1:9305")]
    [flow] = d.flows
    assert (flow.name, flow.source, flow.target, flow.mode) == ("east-to-west", "east", "west", "active-passive")
    assert (flow.topics_include, flow.topics_exclude) == ((".*",), ("__.*",))
    assert flow.sync_group_offsets_interval_ms == 5000 and flow.data_dir == str(tmp_path / ".mq" / "mirror-east-to-west")
    doc = d.flow_json(flow)
    assert doc["source_address_map"] == {"127.0.0.1:9092": "127.0.0.1:9300", "127.0.0.1:9093": "127.0.0.1:9301",
                                         "127.0.0.1:9094": "127.0.0.1:9302"}
    assert doc["source_bootstrap"] == "127.0.0.1:9300,127.0.0.1:9301,127.0.0.1:9302"
    assert doc["target_bootstrap"] == west.bootstrap


def test_a_one_region_file_is_a_deployment_of_one_region(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = load_topology(REPO / "regions" / "local.yaml")
    assert d.region_names == ["local"] and not d.links and not d.pairs and not d.flows
    assert d.regions[0].brokers[0].data_dir == str(tmp_path / ".mq" / "broker-1")  # the layout of old
    assert d.to_json()["bootstrap"] == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"


def test_a_missing_reverse_link_copies_the_declared_one_and_ports_follow_the_map():
    d = parse(TWO)
    assert [(x.name, x.settings, x.declared) for x in d.links] == [
        ("east->west", LinkSettings(latency_ms=40, jitter_ms=5), True),
        ("west->east", LinkSettings(latency_ms=40, jitter_ms=5), False)]
    [pair] = d.pairs
    assert [r.listen for r in pair.routes] == ["127.0.0.1:7300", "127.0.0.1:7301", "127.0.0.1:7302"]
    assert pair.control == "127.0.0.1:7303"
    assert d.address_map("west", "east") == {"127.0.0.1:7101": "127.0.0.1:7302"}
    assert d.flows[0].name == "east-to-west"  # the default name


def test_three_regions_get_a_link_process_per_pair():
    d = parse("""\
        link_port_base: 8000
        regions:
          - {name: a, brokers: [{id: 1, listen: 127.0.0.1:7001}]}
          - {name: b, brokers: [{id: 1, listen: 127.0.0.1:7002}]}
          - {name: c, brokers: [{id: 1, listen: 127.0.0.1:7003}]}
        links:
          - {source: c, target: a, latency_ms: 100}
          - {source: a, target: b}
          - {source: b, target: a, latency_ms: 7}
        """)
    assert [(p.name, p.control) for p in d.pairs] == [("a-c", "127.0.0.1:8002"), ("a-b", "127.0.0.1:8005")]
    assert d.link("b", "a").settings.latency_ms == 7 and d.link("a", "c").settings.latency_ms == 100
    assert d.pair("c", "b") is None


def test_flow_settings_patterns_and_configs():
    d = parse(TWO.replace("  - {source: east, target: west}", textwrap.dedent("""\
          - name: orders
            source: east
            target: west
            mode: active-active
            forward: true
            topics: ['orders\\..*', payments]
            groups: {exclude: ['tmp-.*']}
            sync.group.offsets.enabled: false
            sync.group.offsets.interval.ms: 1000
            refresh.topics.interval.ms: 2000
            emit.heartbeats.interval.ms: 300
            configs: {offset.lag.max: 100, some.flag: true}
        """)))
    [f] = d.flows
    assert f == FlowSpec(name="orders", source="east", target="west", mode="active-active", forward=True,
                         topics_include=(r"orders\..*", "payments"), topics_exclude=("__.*",),
                         groups_include=(".*",), groups_exclude=("tmp-.*",), sync_group_offsets_enabled=False,
                         sync_group_offsets_interval_ms=1000, refresh_topics_interval_ms=2000,
                         emit_heartbeats_interval_ms=300, configs=(("offset.lag.max", "100"), ("some.flag", "true")),
                         data_dir="/tmp/geo/mirror-orders")


def test_cluster_json_round_trip(tmp_path):
    d = parse(TWO).with_link(LinkSpec("east", "west", LinkSettings(latency_ms=80, bandwidth_mbit=50), "blackhole"))
    (tmp_path / "cluster.json").write_text(json.dumps(d.to_json()))
    back = load_cluster(tmp_path)  # the directory or the file
    assert back == d and load_cluster(tmp_path / "cluster.json") == d
    doc = d.to_json()
    assert doc["format"] == 2 and "bootstrap" not in doc  # several regions: no implicit bootstrap
    assert doc["links"][0]["state"] == "cut" and doc["links"][0]["control"] == "127.0.0.1:7303"
    (tmp_path / "cluster.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a cluster file"):
        load_cluster(tmp_path)
    with pytest.raises(OSError):
        load_cluster(tmp_path / "nowhere")


def test_a_cluster_json_of_the_first_format_is_one_region(tmp_path):
    one = parse_topology("brokers: [{id: 1, listen: '127.0.0.1:7001'}]\n", data_dir=str(tmp_path))
    old = {"format": 1, "bootstrap": "127.0.0.1:7001", "topology": one.regions[0].to_json(), "processes": {}}
    (tmp_path / "cluster.json").write_text(json.dumps(old))
    assert load_cluster(tmp_path).regions == one.regions


# ---------------------------------------------------------------------- refusals, one per mistake


@pytest.mark.parametrize("change, words", [
    (("target: west, latency", "target: north, latency"),
     "links[0].target: 'north' is not a region of this file — use one of: east, west"),
    (("target: west, latency", "target: wset, latency"),
     "links[0].target: 'wset' is not a region of this file — did you mean west? use one of: east, west"),
    (("{source: east, target: west, latency", "{source: east, target: east, latency"),
     "links[0]: a link from east to itself — a link joins two different regions"),
    (("{source: east, target: west}", "{source: west, target: west}"),
     "mirrors[0]: a flow from west to itself — a flow copies topics from one region into another"),
    (("{source: east, target: west}", "{source: east, target: south}"),
     "mirrors[0].target: 'south' is not a region of this file"),
    (("latency_ms: 40", "latency_ms: forty"), "links[0].latency_ms: expected a number, found a string"),
    (("latency_ms: 40", "latency_ms: -4"), "links[0].latency_ms: latency_ms must be a number >= 0"),
    (("jitter_ms: 5", "loss: 1.5"), "links[0].loss: loss must be a fraction from 0 to below 1"),
    (("jitter_ms: 5", "bandwidth_mbit: 0"), "links[0].bandwidth_mbit: bandwidth_mbit must be a number > 0"),
    (("jitter_ms: 5", "delay_ms: 5"), "links[0]: unknown key 'delay_ms'"),
    (("link_port_base: 7300", "link_port_base: 70000"), "link_port_base: 70000 is not a port number"),
    (("  - name: west", "  - name: east"), "regions[1].name: 'east' is already regions[0] — give each region"),
    (("  - name: west", "  - name: links"), "regions[1].name: 'links' is reserved"),
    (("  - name: west", "  - nam: west"), "regions[1]: unknown key 'nam' — did you mean name?"),
    (("{id: 1, listen: 127.0.0.1:7101}", "{id: 1, listen: 127.0.0.1:7002}"),
     "port 7002: regions[1].brokers[0].listen (west broker 1) is also regions[0].brokers[1].listen (east broker 2)"),
    (("{id: 1, listen: 127.0.0.1:7101}", "{id: 1, listen: 127.0.0.1:7300}"),
     ("port 7300: the link proxy east-west for east broker 1 (from link_port_base) is also "
     "regions[1].brokers[0].listen")),
    (("{id: 1, listen: 127.0.0.1:7101}", "{id: 1, listen: 127.0.0.1:7303}"),
     "port 7303: the control port of link east-west (from link_port_base) is also regions[1].brokers[0].listen"),
    (("link_port_base: 7300", "link_port_base: 17001"),
     ("port 17001: the link proxy east-west for east broker 1 (from link_port_base) is also "
     "regions[0].brokers[0].metrics_listen (the default: listen port + 10000)")),
    (("{id: 1, listen: 127.0.0.1:7101}", "{id: 1, listen: 127.0.0.1:60001}"),
     ("regions[1].brokers[0].metrics_listen (the default: listen port + 10000): '127.0.0.1:70001' is not "
      "HOST:PORT")),
    (("{id: 1, listen: 127.0.0.1:7101}", "{id: 1, listen: '0.0.0.0:7001'}"),
     "port 7001: regions[1].brokers[0].listen (west broker 1) is also regions[0].brokers[0].listen"),
    (("{id: 1, listen: 127.0.0.1:7101}", "{id: 1, listen: 127.0.0.1}"),
     "regions[1].brokers[0].listen: '127.0.0.1' is not HOST:PORT"),
    (("  - name: west\n", "  - name: west\n    configs: {min.insync.replicas: 2}\n"),
     "regions[1].configs: min.insync.replicas is a topic config, not a broker config"),
])
def test_refusals(change, words):
    old, new = change
    assert old in TWO, old
    assert words in refused(TWO.replace(old, new, 1))


def test_flow_refusals():
    def flow(text: str) -> str:
        return refused(TWO.replace("  - {source: east, target: west}", textwrap.indent(textwrap.dedent(text), "  ")))

    assert "mirrors[0].topics.include[0]: 'orders[' is not a regular expression (unterminated character set" \
        in flow("- {source: east, target: west, topics: ['orders[']}")
    assert "write a Python regular expression matched against whole topic names" in \
        flow("- {source: east, target: west, topics: ['orders[']}")
    assert "mirrors[0].groups.exclude[1]: expected a pattern, found a number" in \
        flow("- {source: east, target: west, groups: {exclude: [a, 3]}}")
    assert "mirrors[0].topics: unknown key 'only'" in flow("- {source: east, target: west, topics: {only: [a]}}")
    assert "mirrors[1].name: 'f' is already mirrors[0] — give each flow its own name" in flow(
        "- {name: f, source: east, target: west}\n- {name: f, source: west, target: east}")
    assert "mirrors[1]: a flow from east to west is already mirrors[0] (a)" in flow(
        "- {name: a, source: east, target: west}\n- {name: b, source: east, target: west}")
    assert "mirrors[0].mode: 'active-ish' is not a mirror mode — use one of: active-passive, active-active" in \
        flow("- {source: east, target: west, mode: active-ish}")
    assert "mirrors[0].forward: forward: true needs mode: active-active" in \
        flow("- {source: east, target: west, forward: true}")
    assert "mirrors[0].forward: expected true or false, found a string" in \
        flow("- {source: east, target: west, mode: active-active, forward: 'yes'}")
    assert "mirrors[0].name: 'a b' is not a flow name" in flow("- {name: 'a b', source: east, target: west}")
    assert "mirrors[0].sync.group.offsets.interval.ms: 0 is not a positive number of milliseconds" in \
        flow("- {source: east, target: west, sync.group.offsets.interval.ms: 0}")
    assert "mirrors[0].sync.group.offsets.enabled: expected true or false" in \
        flow("- {source: east, target: west, sync.group.offsets.enabled: 'yes'}")
    assert "mirrors[0].configs.x: expected a value, found a list" in \
        flow("- {source: east, target: west, configs: {x: [1]}}")
    no_link = TWO.replace("links:\n  - {source: east, target: west, latency_ms: 40, jitter_ms: 5}\n", "")
    line = refused(no_link)
    assert "mirrors[0]: no link between east and west — every byte between regions crosses a link" in line


def test_shape_refusals():
    assert "regions: expected a list of regions, found a list" in refused("regions: []\n")
    assert "regions[0]: no name" in refused("regions: [{brokers: [{id: 1, listen: 'h:1'}]}]\n")
    assert "regions[0]: no brokers" in refused("regions: [{name: a}]\n")
    assert "region, brokers next to regions: a file describes one region" in refused(
        "region: a\nbrokers: []\nregions: [{name: a}]\n")
    assert "links: expected a list of links, found a mapping" in refused(TWO.replace(
        "links:\n  - {source: east, target: west, latency_ms: 40, jitter_ms: 5}", "links: {a: 1}"))
    assert "mirrors: expected a list of mirror flows" in refused(TWO.replace(
        "mirrors:\n  - {source: east, target: west}", "mirrors: 3"))
    assert "links[1]: the link east->west is already links[0]" in refused(TWO.replace(
        "jitter_ms: 5}", "jitter_ms: 5}\n  - {source: east, target: west}"))
    assert "links[0]: no source" in refused(TWO.replace("{source: east, target: west, latency", "{target: west, latency"))
