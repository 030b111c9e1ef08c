"""The default regions in containers, end to end, with a real Docker engine.

The image is built offline (tests/docker/images.py); the compose file is what `mq docker
compose regions/default.yaml` writes, with every port moved by a free offset (the
committed docker/compose.yaml uses 10000; the tests must not take the ports a person's
cluster may hold) and its own container names. Then, from this host as a user would: `mq
docker attach`, `mq status`, produce in east, read the mirror in west at the same
offsets, kill a broker's container and see leadership move, cut the link and heal it,
pause a broker, stop one (SIGTERM: a controlled shutdown), and bring everything down with
nothing left behind. The tests run in file order on one cluster (it takes seconds to start).
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mq.deploy.compose import published_ports
from mq.deploy.compose_runtime import compose_command
from mq.deploy.regions_file import load_topology
from mq.lab.compose import ComposeLab
from mq.lab.process import wait_until
from tests.integration.cli.helpers import base_env, run_mq

from .conftest import TIMINGS
from .images import Built, docker

REPO = Path(__file__).resolve().parents[2]
PROJECT = "mqci"
RECORDS = 2000


def free_offset() -> int:
    """A port offset that puts every published port of regions/default.yaml on a free port
    below the kernel's ephemeral range (which free_port() hands to other tests)."""
    deployment = load_topology(REPO / "regions" / "default.yaml")
    offsets = list(range(11_000, 13_000, 7))
    random.shuffle(offsets)
    for offset in offsets:
        socks = []
        try:
            for p in published_ports(deployment, offset):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", p.port))
            return offset
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free port offset for the default regions")


def leftovers() -> list[str]:
    containers = docker("ps", "-a", "--filter", f"name=^{PROJECT}-", "--format", "{{.Names}}").stdout.split()
    volumes = docker("volume", "ls", "--filter", f"name=^{PROJECT}_", "--format", "{{.Name}}").stdout.split()
    networks = docker("network", "ls", "--filter", f"name=^{PROJECT}_", "--format", "{{.Name}}").stdout.split()
    return containers + volumes + networks


@pytest.fixture(scope="module")
def cluster(mq_image: Built, compose_binary: str, tmp_path_factory) -> Iterator[tuple[ComposeLab, dict]]:
    assert not leftovers(), f"containers of a previous run are still there: {leftovers()}"
    root = tmp_path_factory.mktemp("compose")
    compose_file = root / "compose.yaml"
    env = base_env()
    done = run_mq("docker", "compose", str(REPO / "regions" / "default.yaml"), "--port-offset", str(free_offset()),
                  "--project", PROJECT, "--image", mq_image.tag, "-o", str(compose_file), env=env)
    assert done.returncode == 0, done.stderr
    command = [*compose_command(), "-f", str(compose_file), "-p", PROJECT]
    started = time.monotonic()
    up = subprocess.run([*command, "up", "-d"], capture_output=True, text=True, timeout=300, check=False)
    TIMINGS["compose_up_s"] = time.monotonic() - started
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        done = run_mq("docker", "attach", str(compose_file), env=env, cwd=root)
        assert done.returncode == 0, done.stderr
        lab = ComposeLab.attach(compose_file, project=PROJECT, root=root)
        env["MQ_TEST_CWD"] = str(root)  # where `mq docker attach` wrote .mq/cluster.json, as a user would
        yield lab, env
        lab.close()
    finally:
        if up.returncode != 0 or any(s.status != "running" for s in _states(command)):
            print(subprocess.run([*command, "logs", "--tail", "40"], capture_output=True, text=True,
                                 timeout=120, check=False).stdout[-6000:])
        started = time.monotonic()
        down = subprocess.run([*command, "down", "-v", "--timeout", "10"], capture_output=True, text=True,
                              timeout=300, check=False)
        TIMINGS["compose_down_s"] = time.monotonic() - started
        assert down.returncode == 0, down.stderr[-3000:]
        assert leftovers() == [], "compose down left these behind"


def _states(command: list[str]) -> list:
    from mq.deploy.compose_runtime import Containers

    names = docker("ps", "-a", "--filter", f"name=^{PROJECT}-", "--format", "{{.Names}}").stdout.split()
    return list(Containers({n: n for n in names}).states().values())


def mq(env: dict, *args: str, timeout: float = 60, input: bytes | None = None) -> str:
    done = run_mq(*args, env=env, timeout=timeout, input=input, cwd=env["MQ_TEST_CWD"])
    assert done.returncode == 0, (args, done.stderr.decode(errors="replace"))
    return done.stdout.decode()


def records(env: dict, region: str, topic: str) -> set[tuple[int, int, str]]:
    out = mq(env, "consume", topic, "--region", region, "--from-beginning", "--format", "json", "--timeout-ms", "2000")
    return {(r["partition"], r["offset"], r["value"]) for r in map(json.loads, out.splitlines())}


def test_status_sees_both_regions_the_link_and_the_mirror(cluster):
    _, env = cluster
    doc = wait_until(lambda: _flow_running(env), timeout_s=60, interval_s=0.5, what="the mirror flow running")
    assert [r["name"] for r in doc["regions"]] == ["east", "west"]
    for region in doc["regions"]:
        assert [b["state"] for b in region["brokers"]] == ["alive"] * 3
        assert all(b["pid"] and not b["fenced"] for b in region["brokers"])
        assert region["controller"] is not None
    assert {x["name"]: x["state"] for x in doc["links"]} == {"east->west": "up", "west->east": "up"}
    assert doc["flows"][0]["process"]["alive"]
    # and with nothing but a published address, as `mq status --bootstrap localhost:19092` in the how-to
    first = doc["regions"][1]["bootstrap"].split(",")[0]
    seen = json.loads(mq(env, "status", "--bootstrap", first, "--json"))
    assert [(b["endpoint"], b["state"]) for b in seen["brokers"]] == [
        (b["endpoint"], "alive") for b in doc["regions"][1]["brokers"]]


def _flow_running(env: dict) -> dict | None:
    done = run_mq("status", "--json", env=env, timeout=60, cwd=env["MQ_TEST_CWD"])
    doc = json.loads(done.stdout) if done.returncode == 0 else {}
    flows = doc.get("flows") or [{}]
    return doc if (flows[0].get("mirror_status") or {}).get("state") == "running" else None


def test_produce_in_east_read_the_mirror_in_west_at_the_same_offsets(cluster):
    lab, env = cluster
    mq(env, "topic", "create", "orders", "--partitions", "3", "--replication-factor", "3", "--region", "east")
    lines = "".join(f"order-{i}\n" for i in range(RECORDS)).encode()
    mq(env, "produce", "orders", "--region", "east", "--acks", "all", input=lines)
    lab.wait_mirrored("orders", timeout_s=60)
    east, west = records(env, "east", "orders"), records(env, "west", "orders")
    assert len(east) == RECORDS and {v for _, _, v in east} == {f"order-{i}" for i in range(RECORDS)}
    assert west == east  # same partitions, same offsets, same values


def test_a_killed_broker_container_gives_up_its_leaderships(cluster):
    lab, env = cluster
    leader = lab.leader_of("east", "orders", 0)
    assert leader in (1, 2, 3)
    assert f"killed east/broker-{leader}" in mq(env, "broker", "kill", str(leader), "--region", "east")
    assert lab.broker("east", leader).state == "down"
    new = lab.wait_for_leader("east", "orders", 0, not_in=[leader], timeout_s=30)
    assert new != leader
    mq(env, "produce", "orders", "--region", "east", "--acks", "all", input=b"after-kill\n")
    lab.wait_mirrored("orders", timeout_s=60)
    assert "after-kill" in {v for _, _, v in records(env, "west", "orders")}
    out = mq(env, "broker", "restart", str(leader), "--region", "east", timeout=120)
    assert f"restarted east/broker-{leader}" in out
    assert lab.broker("east", leader).state == "up"


def test_a_cut_link_stalls_the_mirror_and_healing_it_catches_up(cluster):
    lab, env = cluster
    before = lab.ends("west", "orders")
    mq(env, "link", "cut", "east", "west")
    assert {x.name: x.state for x in lab.link_status()}["east->west"] == "cut"
    mq(env, "produce", "orders", "--region", "east", "--acks", "all", input=b"".join(b"cut-%d\n" % i for i in range(50)))
    goal = lab.ends("east", "orders")
    stalled = wait_until(lambda: (s := lab.mirror_status()) and s.get("state") == "stalled" and s,
                         timeout_s=60, interval_s=0.5, what="the mirror saying stalled")
    assert lab.ends("west", "orders") == before != goal, stalled.get("reason")
    mq(env, "link", "heal", "east", "west")
    assert lab.wait_mirrored("orders", timeout_s=90) == goal


def test_a_paused_broker_container_shows_paused_and_resumes(cluster):
    lab, env = cluster
    mq(env, "broker", "pause", "1", "--region", "west")
    doc = json.loads(mq(env, "status", "--json"))
    west = next(r for r in doc["regions"] if r["name"] == "west")
    assert [b["state"] for b in west["brokers"]] == ["paused", "alive", "alive"]
    mq(env, "broker", "resume", "1", "--region", "west")
    assert lab.broker("west", 1).state == "up"


def test_sigterm_to_a_broker_container_is_a_controlled_shutdown(cluster):
    lab, _ = cluster
    broker = lab.broker("east", 3)
    led = [p for p in range(3) if lab.leader_of("east", "orders", p) == 3]
    assert broker.stop(timeout_s=30) == 0  # exited by itself, not SIGKILLed after the grace period
    logs = broker.logs(tail=30)
    assert "broker_controlled_shutdown_complete node_id=3" in logs, logs
    assert "Traceback" not in logs
    for p in led:  # it handed its leaderships over before leaving
        assert lab.leader_of("east", "orders", p) not in (-1, 3)
    broker.start(ready_timeout_s=60)
    assert broker.state == "up"


def test_mirror_status_in_its_container_and_failover_from_the_host(cluster):
    lab, env = cluster
    inside = docker("exec", f"{PROJECT}-mirror-east-to-west", "mq", "mirror", "status")
    assert inside.returncode == 0 and "flow east-to-west: east -> west" in inside.stdout, inside.stderr
    lab.containers.stop("mirror-east-to-west", timeout_s=20)  # its process is no child of this host
    out = mq(env, "mirror", "failover", "--to", "west", timeout=120)
    assert "promoted in west: orders" in out, out
    mq(env, "produce", "orders", "--region", "west", "--acks", "all", input=b"written-in-west\n")
    assert "written-in-west" in {v for _, _, v in records(env, "west", "orders")}
