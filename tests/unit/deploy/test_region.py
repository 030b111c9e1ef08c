"""Region files: the default one, the packaged copy, and one test per refusal."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from mq.core.config import BrokerConfig
from mq.deploy import region
from mq.deploy.errors import DeployError, RegionError
from mq.deploy.region import load_region, parse_region
from mq.deploy.topology import Topology

REPO = Path(__file__).resolve().parents[3]
THREE = """\
region: local
brokers:
  - {id: 1, listen: 127.0.0.1:9092}
  - {id: 2, listen: 127.0.0.1:9093}
  - {id: 3, listen: 127.0.0.1:9094}
"""


def parse(text: str, **kwargs) -> Topology:
    return parse_region(textwrap.dedent(text), source="regions/x.yaml", **kwargs)


def refused(text: str, **kwargs) -> str:
    with pytest.raises(RegionError) as info:
        parse(text, **kwargs)
    err = info.value
    assert isinstance(err, DeployError) and err.what.startswith("regions/x.yaml: ") and err.todo
    return f"{err.what} — {err.todo}"


# ---------------------------------------------------------------------- the default region


def test_local_region(tmp_path, monkeypatch):
    """regions/local.yaml: the one region `mq up` started before regions came."""
    monkeypatch.chdir(tmp_path)
    topology = load_region(REPO / "regions" / "local.yaml")
    assert topology.name == "local" and topology.voters == (1, 2, 3)
    assert topology.data_dir == str(tmp_path / ".mq")  # relative to the cwd, as `mq up` always used
    assert [(b.node_id, b.listen, b.metrics_endpoint) for b in topology.brokers] == [
        (1, "127.0.0.1:9092", "127.0.0.1:19092"), (2, "127.0.0.1:9093", "127.0.0.1:19093"),
        (3, "127.0.0.1:9094", "127.0.0.1:19094")]
    assert [b.data_dir for b in topology.brokers] == [str(tmp_path / ".mq" / f"broker-{i}") for i in (1, 2, 3)]
    voters = "1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094"
    assert topology.quorum_voters == voters
    for b in topology.brokers:
        args = b.broker_args()
        assert args[:6] == ["--node-id", str(b.node_id), "--data-dir", b.data_dir, "--listen", b.listen]
        assert args[6:] == ["--config", f"controller.quorum.voters={voters}", "--config", "region.name=local"]
    assert topology.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"


def test_packaged_copy_is_the_repository_file():
    """`pip install` users get mq/deploy/default_region.yaml: it must stay regions/default.yaml."""
    assert region.PACKAGED_REGION_FILE.read_bytes() == (REPO / "regions" / "default.yaml").read_bytes()


def test_default_file_lookup(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert region.default_region_file() == region.REPO_REGION_FILE  # a source checkout
    monkeypatch.setattr(region, "REPO_REGION_FILE", tmp_path / "nowhere.yaml")
    assert region.default_region_file() == region.PACKAGED_REGION_FILE  # pip install
    (tmp_path / "regions").mkdir()
    (tmp_path / "regions" / "default.yaml").write_text(THREE)
    assert region.default_region_file() == tmp_path / "regions" / "default.yaml"  # the user's own


def test_topology_json_round_trip_keeps_voters():
    topology = parse(THREE)
    assert Topology.from_json(topology.to_json()) == topology
    old = topology.to_json()
    del old["voters"]  # cluster.json written before regions
    assert Topology.from_json(old).voters == ()


def test_single_broker_topology_is_unchanged():
    topology = Topology.single_broker(".mq")
    assert topology.voters == () and [b.broker_args()[-2:] for b in topology.brokers] == [["--listen", "127.0.0.1:9092"]]


# ---------------------------------------------------------------------- what a file may say


def test_everything_a_file_may_say(tmp_path):
    topology = parse(f"""\
        region: edge-1
        data_dir: {tmp_path}/d
        voters: [2, 1]
        configs:
          log.segment.bytes: 1048576
          log.flush.policy: always
          replica.lag.time.max.ms: 10000
        brokers:
          - id: 1
            listen: 127.0.0.1:7001
            metrics_listen: 127.0.0.1:7101
            configs: {{log.segment.bytes: 2097152}}
          - id: 2
            listen: localhost:7002
          - id: 5
            listen: 127.0.0.1:7005
        """)
    assert topology.name == "edge-1" and topology.voters == (2, 1) and topology.data_dir == f"{tmp_path}/d"
    b1, b2, b5 = topology.brokers
    assert b1.metrics_endpoint == "127.0.0.1:7101" and b2.metrics_endpoint == "localhost:17002"
    assert dict(b1.configs)["log.segment.bytes"] == "2097152"  # the broker's own wins
    assert dict(b2.configs)["log.segment.bytes"] == "1048576"
    assert dict(b5.configs)["controller.quorum.voters"] == "2@localhost:7002,1@127.0.0.1:7001"
    for b in topology.brokers:  # what the broker will parse: valid
        BrokerConfig.from_kafka(dict(b.configs))


def test_data_dir_and_extra_configs_from_the_command_line(tmp_path):
    topology = parse(THREE + "configs: {log.segment.bytes: 1048576}\n", data_dir=str(tmp_path),
                     extra_configs=[("log.segment.bytes", "4096"), ("log.flush.policy", "always")])
    assert topology.data_dir == str(tmp_path)
    assert dict(topology.brokers[0].configs)["log.segment.bytes"] == "4096"
    line = refused(THREE, extra_configs=[("nope.nope", "1")])
    assert line.startswith("regions/x.yaml: --config: unknown broker config 'nope.nope'")


def test_values_become_kafka_strings():
    topology = parse(THREE + "configs: {log.segment.bytes: 4096, log.retention.ms: -1}\n")
    configs = dict(topology.brokers[0].configs)
    assert configs["log.segment.bytes"] == "4096" and configs["log.retention.ms"] == "-1"


# ---------------------------------------------------------------------- refusals, one per mistake


def test_listen_without_a_port():
    line = refused("""\
        brokers:
          - {id: 1, listen: 127.0.0.1:9092}
          - {id: 2, listen: 127.0.0.1}
        """)
    assert line == ("regions/x.yaml: brokers[1].listen: '127.0.0.1' is not HOST:PORT — "
                    "write it as 127.0.0.1:9093")


@pytest.mark.parametrize(("value", "what", "todo"), [
    ("9093", "9093 is not HOST:PORT", "write it as 127.0.0.1:9093"),
    ("':9093'", "':9093' is not HOST:PORT", "write it as 127.0.0.1:9093"),
    ("h:70000", "'h:70000' is not HOST:PORT", "the port must be a number from 1 to 65535"),
    ("h:x", "'h:x' is not HOST:PORT", "the port must be a number from 1 to 65535"),
    ("[1, 2]", "expected HOST:PORT, found a list", "write it as 127.0.0.1:9092"),
])
def test_bad_addresses(value, what, todo):
    line = refused(f"brokers: [{{id: 1, listen: {value}}}]")
    assert f"brokers[0].listen: {what} — {todo}" in line


def test_bad_metrics_address():
    line = refused("brokers: [{id: 1, listen: 127.0.0.1:9092, metrics_listen: 127.0.0.1}]")
    assert "brokers[0].metrics_listen: '127.0.0.1' is not HOST:PORT — write it as 127.0.0.1:19092" in line


def test_duplicate_ids():
    line = refused("brokers: [{id: 1, listen: 'h:1'}, {id: 2, listen: 'h:2'}, {id: 1, listen: 'h:3'}]")
    assert line == "regions/x.yaml: brokers[2].id: 1 is already brokers[0].id — give each broker its own id"


def test_duplicate_ports():
    line = refused("brokers: [{id: 1, listen: '127.0.0.1:9092'}, {id: 2, listen: '127.0.0.1:9092'}]")
    assert "brokers[1].listen: 127.0.0.1:9092 is already used by brokers[0].listen" in line
    wildcard = refused("brokers: [{id: 1, listen: '0.0.0.0:9092'}, {id: 2, listen: '127.0.0.1:9092'}]")
    assert "brokers[1].listen: 127.0.0.1:9092 is already used by brokers[0].listen" in wildcard
    other_hosts = parse("brokers: [{id: 1, listen: '10.0.0.1:9092'}, {id: 2, listen: '10.0.0.2:9092'}]")
    assert len(other_hosts.brokers) == 2


def test_a_native_port_on_another_brokers_metrics_port():
    line = refused("brokers: [{id: 1, listen: 'h:9092'}, {id: 2, listen: 'h:19092'}]")
    assert "brokers[1].listen: h:19092 is already used by brokers[0].metrics_listen" in line
    implied = refused("brokers: [{id: 1, listen: 'h:19093'}, {id: 2, listen: 'h:9093'}]")
    assert ("brokers[1].metrics_listen: h:19093 (the default: listen port + 10000) is already used by "
            "brokers[0].listen") in implied


def test_unknown_top_level_key_is_named():
    line = refused(THREE + "brokerz: []\nzones: 3\n")
    assert "regions/x.yaml: unknown keys 'brokerz', 'zones' — did you mean brokers? the file may have:" in line


def test_keys_of_the_several_regions_format_are_refused_in_a_one_region_file():
    line = refused(THREE + "links: []\n")
    assert "'links': only in a file with several regions (regions:, links:, mirrors:)" in line
    assert "list the regions under regions:" in line


def test_unknown_broker_key():
    line = refused("brokers: [{id: 1, listen: 'h:1', port: 9092}]")
    assert "regions/x.yaml: brokers[0]: unknown key 'port' — did you mean" not in line  # no close match
    assert "brokers[0]: unknown key 'port'" in line and "id, listen, metrics_listen, configs" in line


@pytest.mark.parametrize(("entry", "what"), [
    ("{listen: 'h:1'}", "brokers[0]: no id"),
    ("{id: 1}", "brokers[0]: no listen"),
    ("{id: -1, listen: 'h:1'}", "brokers[0].id: -1 is not a node id"),
    ("{id: one, listen: 'h:1'}", "brokers[0].id: 'one' is not a node id"),
    ("{id: true, listen: 'h:1'}", "brokers[0].id: True is not a node id"),
    ("127.0.0.1:9092", "brokers[0]: expected a mapping, found a string"),
])
def test_bad_broker_entries(entry, what):
    assert f"regions/x.yaml: {what}" in refused(f"brokers: [{entry}]")


def test_unknown_config_name_suggests_the_right_one():
    line = refused(THREE + "configs: {log.segment.byte: 1048576}\n")
    assert line.startswith("regions/x.yaml: configs: unknown broker config 'log.segment.byte' — "
                           "did you mean log.segment.bytes?")


def test_a_topic_config_is_not_a_broker_config():
    line = refused("brokers: [{id: 1, listen: 'h:1', configs: {min.insync.replicas: 2}}]")
    assert line == ("regions/x.yaml: brokers[0].configs: min.insync.replicas is a topic config, not a broker "
                    "config — set it per topic: mq topic create NAME --config min.insync.replicas=VALUE")


@pytest.mark.parametrize("name", ["node.id", "log.dirs", "listeners", "metrics.listener",
                                  "controller.quorum.voters", "region.name"])
def test_configs_the_file_sets_itself(name):
    line = refused(THREE + f"configs: {{{name}: '1'}}\n")
    assert f"configs: {name} is set by the region file itself — use " in line


def test_bad_config_value():
    line = refused(THREE + "configs: {log.segment.bytes: 10}\n")
    assert "configs.log.segment.bytes: log.segment.bytes='10': must be >= 1024" in line
    assert "log.flush.policy" in refused(THREE + "configs: {log.flush.policy: sometimes}\n")
    assert "expected a value, found a list" in refused(THREE + "configs: {log.segment.bytes: [1]}\n")


def test_configs_that_clash():
    line = refused("""\
        configs: {broker.heartbeat.interval.ms: 3000, broker.session.timeout.ms: 9000}
        brokers:
          - {id: 1, listen: 'h:1'}
          - {id: 2, listen: 'h:2', configs: {broker.session.timeout.ms: 2500}}
        """)
    assert "regions/x.yaml: brokers[1]: broker.heartbeat.interval.ms must be below broker.session.timeout.ms" in line


@pytest.mark.parametrize(("voters", "what"), [
    ("[1, 4]", "voters[1]: 4 is not the id of a broker in this file — use ids from brokers: 1, 2, 3"),
    ("[1, 1]", "voters[1]: 1 is listed twice"),
    ("[]", "voters: expected a list of broker ids, found a list"),
    ("2", "voters: expected a list of broker ids, found a number"),
])
def test_bad_voters(voters, what):
    assert what in refused(THREE + f"voters: {voters}\n")


@pytest.mark.parametrize(("text", "what"), [
    ("", "regions/x.yaml: the file is empty"),
    ("- 1\n- 2\n", "regions/x.yaml: expected a mapping, found a list"),
    ("region: local\n", "regions/x.yaml: no brokers"),
    ("brokers: []\n", "regions/x.yaml: brokers: expected a list of brokers, found a list"),
    ("brokers: {id: 1}\n", "regions/x.yaml: brokers: expected a list of brokers, found a mapping"),
    ("region: 'a b'\n" + THREE.split("\n", 1)[1], "regions/x.yaml: region: 'a b' is not a region name"),
    (THREE + "data_dir: ''\n", "regions/x.yaml: data_dir: expected a directory path, found a string"),
    (THREE + "configs: [a]\n", "regions/x.yaml: configs: expected a mapping of config names to values"),
])
def test_bad_shapes(text, what):
    assert refused(text).startswith(what)


def test_yaml_syntax_error_names_the_line():
    line = refused("region: local\nbrokers:\n  - id: 1\n   listen: x\n")
    assert line.startswith("regions/x.yaml: line 4, column ") and "fix the YAML" in line


def test_a_key_given_twice_is_refused():
    line = refused(THREE + "region: other\n")
    assert "key 'region' is given twice" in line


def test_missing_file_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RegionError) as info:
        load_region("regions/nope.yaml")
    assert info.value.what == f"regions{os.sep}nope.yaml: no such file"
