"""The link process's control requests (no sockets: the handler on its directions), the
mirror-availability check, and the data-directory marker that refuses another topology."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from mq.deploy import services, state
from mq.deploy.link import LinkPairState
from mq.deploy.regions_file import parse_topology
from mq.deploy.shaping import LinkSettings
from mq.deploy.topology import Deployment, LinkSpec, Topology

TWO = textwrap.dedent("""\
    link_port_base: 7300
    regions:
      - {name: east, brokers: [{id: 1, listen: 127.0.0.1:7001}, {id: 2, listen: 127.0.0.1:7002}]}
      - {name: west, brokers: [{id: 1, listen: 127.0.0.1:7101}]}
    links:
      - {source: east, target: west, latency_ms: 40}
    """)


@pytest.fixture
def pair_state(tmp_path) -> LinkPairState:
    d = parse_topology(TWO, data_dir=str(tmp_path))
    d = d.with_link(LinkSpec("west", "east", LinkSettings(latency_ms=40), "blackhole", declared=False))
    return LinkPairState(d, d.pairs[0])


def test_routes_take_the_directions_of_their_client(pair_state):
    east_1, east_2, west_1 = pair_state.listeners
    assert (east_1.target, east_1.port) == (("127.0.0.1", 7001), 7300)
    assert (east_1.forward.name, east_1.backward.name) == ("west->east", "east->west")  # west's clients dial east
    assert (west_1.forward.name, west_1.backward.name) == ("east->west", "west->east")
    assert east_2.forward is east_1.forward  # one direction, shared by every route
    assert not pair_state.directions["west->east"].is_up  # the recorded cut comes back


def test_list_set_cut_heal_reset_stall(pair_state):
    listed = pair_state.handle({"op": "list"}, 0.0)
    assert listed["ok"] and listed["pair"] == "east-west"
    assert [(x["name"], x["latency_ms"], x["state"]) for x in listed["links"]] == [
        ("east->west", 40.0, "up"), ("west->east", 40.0, "cut")]
    done = pair_state.handle({"op": "set", "link": "east->west", "latency_ms": 80, "bandwidth_mbit": 50}, 0.0)
    assert done["ok"] and (done["link"]["latency_ms"], done["link"]["bandwidth_mbit"]) == (80, 50)
    done = pair_state.handle({"op": "set", "link": "east->west", "bandwidth_mbit": 0}, 0.0)
    assert done["link"]["bandwidth_mbit"] is None and done["link"]["latency_ms"] == 80  # the rest is kept
    assert pair_state.handle({"op": "heal", "link": "west->east"}, 0.0)["link"]["state"] == "up"
    cut = pair_state.handle({"op": "cut", "link": "east->west", "mode": "refuse"}, 0.0)
    assert cut["ok"] and cut["reset"] == 0 and cut["link"]["cut_mode"] == "refuse"
    assert pair_state.handle({"op": "reset", "link": "west->east"}, 0.0) == {
        "ok": True, "reset": 0, "link": pair_state.handle({"op": "list"}, 0.0)["links"][1]}
    stalled = pair_state.handle({"op": "stall", "link": "west->east", "ms": 3000}, 1000.0)
    assert stalled["link"]["stall_left_ms"] == 3000.0


@pytest.mark.parametrize("request_, words", [
    ([1], "a control request is a JSON object with an op"),
    ({"op": "explode"}, "unknown op 'explode'"),
    ({"op": "cut", "link": "east->mars"}, "no link 'east->mars' in the link process east-west"),
    ({"op": "cut", "link": "east->west", "mode": "drop"}, "'drop' is not a cut mode"),
    ({"op": "set", "link": "east->west", "latency_ms": -1}, "latency_ms must be a number >= 0"),
    ({"op": "set", "link": "east->west", "latency_ms": "slow"}, "latency_ms must be a number >= 0"),
    ({"op": "set", "link": "east->west", "delay": 1}, "unknown link setting 'delay'"),
    ({"op": "stall", "link": "east->west", "ms": -3}, "a stall needs ms >= 0"),
])
def test_bad_requests_are_answered_not_raised(pair_state, request_, words):
    answer = pair_state.handle(request_, 0.0)
    assert answer["ok"] is False and words in answer["error"] and answer["todo"]


def test_mirror_available_needs_a_main_module(tmp_path, monkeypatch):
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "__init__.py").write_text("raise RuntimeError('mq must not import mirror')\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "mirror", raising=False)
    assert not services.mirror_available()
    (tmp_path / "mirror" / "__main__.py").write_text("")
    assert services.mirror_available() and "mirror" not in sys.modules


def test_the_marker_says_which_topology_owns_the_data(tmp_path):
    single = Deployment.of_region(Topology.single_broker(str(tmp_path)))
    three = parse_topology("brokers: [{id: 1, listen: 'h:1'}, {id: 2, listen: 'h:2'}, {id: 3, listen: 'h:3'}]\n",
                           data_dir=str(tmp_path))
    assert state.foreign_data(str(tmp_path), three) is None  # an empty directory
    state.write_marker(str(tmp_path), single)
    assert json.loads((tmp_path / "topology.json").read_text())["regions"][0]["voters"] == [1]
    assert state.foreign_data(str(tmp_path), single) is None
    assert state.foreign_data(str(tmp_path), three) == "region local (broker 1; voters 1)"


def test_without_a_marker_the_broker_directories_decide(tmp_path):
    three = parse_topology("brokers: [{id: 1, listen: 'h:1'}, {id: 2, listen: 'h:2'}, {id: 3, listen: 'h:3'}]\n",
                           data_dir=str(tmp_path))
    geo = parse_topology(TWO, data_dir=str(tmp_path))
    (tmp_path / "broker-1").mkdir()
    assert "data of broker-1 only" in state.foreign_data(str(tmp_path), three)
    assert "broker data (broker-1) that this topology does not use" in state.foreign_data(str(tmp_path), geo)
    for i in (2, 3):
        (tmp_path / f"broker-{i}").mkdir()
    assert state.foreign_data(str(tmp_path), three) is None  # the same region, from an older mq


def test_links_without_a_running_link_process(tmp_path):
    """Links() on a cluster.json whose link process is not running: list says `down` with the
    recorded settings; a change says the process does not answer and how to start it."""
    from mq.deploy.links import LinkError, Links

    with pytest.raises(LinkError, match="nothing runs under"):
        Links(tmp_path).list()
    d = parse_topology(TWO.replace("link_port_base: 7300", "link_port_base: 1"), data_dir=str(tmp_path))
    state.write_state(str(tmp_path), d, {})
    links = Links(tmp_path / "cluster.json", timeout_s=0.5)
    assert [(s.name, s.state, s.settings.latency_ms, s.connections) for s in links.list()] == [
        ("east->west", "down", 40.0, None), ("west->east", "down", 40.0, None)]
    with pytest.raises(LinkError) as info:
        links.cut("east", "west")
    assert "the link process east-west does not answer on 127.0.0.1:4" in info.value.what
    assert "start it again with `mq up`" in info.value.todo
    with pytest.raises(LinkError, match=r"no region 'mars' here \(regions: east, west\)"):
        links.set("east", "mars", latency_ms=1)
    with pytest.raises(LinkError, match="latency_ms must be a number >= 0"):
        links.set("east", "west", latency_ms=-1)
    with pytest.raises(LinkError, match="nothing to set"):
        links.set("east", "west")
    one = Deployment.of_region(Topology.single_broker(str(tmp_path)))
    state.write_state(str(tmp_path), one, {})
    with pytest.raises(LinkError, match="has no links"):
        links.list()
