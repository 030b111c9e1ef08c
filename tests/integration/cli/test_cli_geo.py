"""Several regions from the real `mq` command in a scratch directory: `mq up` of a
two-region file, `mq status`, `mq link set/cut/heal` measured on the wire, `--region`
routing of client commands, the mirror processes `mq up` starts and `mq down` stops,
the default 2x3 file once, and a data directory of another topology refused.

Regions of one broker each where the point is not the three-voter quorum."""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import textwrap
import time
from pathlib import Path

import jsonschema

from mq.cli import schemas
from mq.deploy import probe
from mq.deploy.process import is_alive

from .helpers import base_env, free_listen, run_mq

REPO = Path(__file__).resolve().parents[3]
READY_S = 60


def free_block(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65536:
            continue
        socks = []
        try:
            for port in range(base, base + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def free_listens(n: int) -> list[str]:
    found: list[str] = []
    while len(found) < n:
        candidate = free_listen()
        if candidate not in found:
            found.append(candidate)
    return found


def two_regions(tmp_path: Path, *, mirrors: str = "") -> tuple[Path, dict]:
    east, west = free_listens(2)
    base = free_block(3)
    path = tmp_path / "two.yaml"
    path.write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {base}
        configs: {{replica.lag.time.max.ms: 5000}}
        regions:
          - name: east
            brokers: [{{id: 1, listen: '{east}'}}]
          - name: west
            brokers: [{{id: 1, listen: '{west}'}}]
        links:
          - {{source: east, target: west, latency_ms: 40}}
        """) + mirrors)
    return path, {"east": east, "west": west, "east_via_link": f"127.0.0.1:{base}",
                  "west_via_link": f"127.0.0.1:{base + 1}", "control": f"127.0.0.1:{base + 2}"}


def rtt_ms(address: str, samples: int = 3) -> float:
    """The median time of an ApiVersions round trip on a new connection to ``address``."""
    times = []
    for _ in range(samples):
        started = time.monotonic()
        probe.api_versions(address, timeout_s=5.0)
        times.append((time.monotonic() - started) * 1000)
    return statistics.median(times)


def valid(prefix: str, result) -> object:
    """The JSON a command printed, checked against its documented schema (mq/cli/schemas.py)."""
    doc = json.loads(result.stdout)
    jsonschema.Draft202012Validator(schemas.schema_of(prefix).schema).validate(doc)
    return doc


def status(env: dict, cwd: Path) -> dict:
    return valid("mq status", run_mq("status", "--json", env=env, cwd=cwd))


def pids(state: dict) -> dict[str, int]:
    return {name: entry["pid"] for name, entry in state["processes"].items()}


def test_two_regions_status_links_and_region_routing(tmp_path):
    path, ports = two_regions(tmp_path)
    env = base_env()
    up = run_mq("up", str(path), "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    state = None
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        out = up.stdout.decode()
        assert "mq is up: regions east, west, 2 brokers, 2 links" in out
        assert f"region east: bootstrap {ports['east']}" in out and "link east-west: pid" in out
        state = json.loads((tmp_path / ".mq" / "cluster.json").read_text())
        assert sorted(state["processes"]) == ["east/broker-1", "lag-exporter", "link/east-west", "west/broker-1"]
        assert [(r["name"], r["bootstrap"]) for r in state["regions"]] == [("east", ports["east"]),
                                                                         ("west", ports["west"])]
        assert (tmp_path / ".mq" / "east" / "broker-1" / "broker.log").exists()
        assert (tmp_path / ".mq" / "links" / "east-west" / "link.log").exists()

        doc = status(env, tmp_path)
        assert doc["running"] and [r["name"] for r in doc["regions"]] == ["east", "west"]
        for region in doc["regions"]:
            assert region["controller"]["id"] == 1 and region["brokers"][0]["state"] == "alive"
        assert [(x["name"], x["state"], x["latency_ms"]) for x in doc["links"]] == [
            ("east->west", "up", 40.0), ("west->east", "up", 40.0)]
        table = run_mq("status", env=env, cwd=tmp_path).stdout.decode()
        assert "region east" in table and "region west" in table and "east->west" in table

        # Without --region, a client command names the regions and asks for one.
        ambiguous = run_mq("topic", "list", env=env, cwd=tmp_path)
        assert ambiguous.returncode == 2
        assert "2 regions run under .mq: east" in ambiguous.stderr.decode()
        assert "--region east or --region west" in ambiguous.stderr.decode()
        assert run_mq("topic", "create", "orders", "--region", "east", "--partitions", "2",
                      env=env, cwd=tmp_path).returncode == 0
        produced = run_mq("produce", "orders", "--region", "east", "--partition", "1", env=env, cwd=tmp_path,
                          input=b"a\nb\nc\n")
        assert produced.returncode == 0, produced.stderr
        consumed = run_mq("consume", "orders", "--region", "east", "--from-beginning", "--max-messages", "3",
                          "--timeout-ms", "10000", env=env, cwd=tmp_path)
        assert consumed.stdout.decode().splitlines() == ["a", "b", "c"], consumed.stderr
        assert b"orders" not in run_mq("topic", "list", "--region", "west", env=env, cwd=tmp_path).stdout
        assert b"orders" in run_mq("topic", "list", env={**env, "MQ_REGION": "east"}, cwd=tmp_path).stdout

        # The link on the wire: west's clients reach east's broker only through the proxy.
        direct, linked = rtt_ms(ports["east"]), rtt_ms(ports["east_via_link"])
        assert direct < 40 and 80 <= linked < 80 + 150, (direct, linked)
        assert run_mq("link", "set", "east", "west", "--latency-ms", "150", env=env, cwd=tmp_path).returncode == 0
        slower = rtt_ms(ports["east_via_link"])
        assert 190 <= slower < 190 + 150, slower
        assert 40 <= rtt_ms(ports["west_via_link"]) < 40 + 40 + 150  # east->west carries west's answers
        cut = run_mq("link", "cut", "east", "west", env=env, cwd=tmp_path)
        assert cut.returncode == 0 and b"cut east->west: cut (blackhole)" in cut.stdout
        started = time.monotonic()
        try:
            probe.api_versions(ports["east_via_link"], timeout_s=1.0)
            raise AssertionError("an answer crossed a cut link")
        except probe.ProbeError:
            assert time.monotonic() - started >= 0.9  # silence, not a reset
        listed = valid("mq link list", run_mq("link", "list", "--json", env=env, cwd=tmp_path))
        assert [(x["name"], x["state"], x["latency_ms"]) for x in listed] == [
            ("east->west", "cut", 150.0), ("west->east", "up", 40.0)]
        recorded = json.loads((tmp_path / ".mq" / "cluster.json").read_text())["links"][0]
        assert (recorded["latency_ms"], recorded["state"]) == (150.0, "cut")  # a restarted link comes back so
        assert run_mq("link", "heal", "east", "west", env=env, cwd=tmp_path).returncode == 0
        assert 190 <= rtt_ms(ports["east_via_link"]) < 190 + 150
        assert run_mq("link", "set", "east", "west", "--both", "--latency-ms", "0", env=env,
                      cwd=tmp_path).returncode == 0
        assert rtt_ms(ports["east_via_link"]) < 40

        # Broker ids repeat across regions: the broker verbs want the region.
        which = run_mq("broker", "kill", "1", env=env, cwd=tmp_path)
        assert which.returncode == 1 and b"broker 1 is in regions east and west" in which.stderr
        killed = run_mq("broker", "kill", "1", "--region", "west", env=env, cwd=tmp_path)
        assert killed.returncode == 0 and b"killed west/broker-1" in killed.stdout
        doc = status(env, tmp_path)
        assert [r["brokers"][0]["state"] for r in doc["regions"]] == ["alive", "down"]
        restarted = run_mq("broker", "restart", "1", env={**env, "MQ_REGION": "west"}, cwd=tmp_path)
        assert restarted.returncode == 0 and b"restarted west/broker-1" in restarted.stdout, restarted.stderr
        state = json.loads((tmp_path / ".mq" / "cluster.json").read_text())
    finally:
        down = run_mq("down", env=env, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert b"stopped link/east-west" in down.stdout and b"stopped east/broker-1" in down.stdout
    assert state is not None and not any(is_alive(pid) for pid in pids(state).values())
    assert not (tmp_path / ".mq" / "cluster.json").exists()
    link_log = (tmp_path / ".mq" / "links" / "east-west" / "link.log").read_text()
    assert "link cut link=east->west mode=blackhole" in link_log and "link stopped pair=east-west" in link_log
    assert "Traceback" not in link_log, link_log


FAKE_MIRROR = '''\
"""A stand-in for the mirror service: records how it was started, writes a status file."""
import json, os, signal, sys, time

args = sys.argv[1:]
if args[:1] != ["run"]:
    print("fake mirror", " ".join(args))
    sys.exit(3)
cluster = args[args.index("--cluster") + 1]
flow = args[args.index("--flow") + 1]
doc = json.load(open(cluster))
mine = next(f for f in doc["flows"] if f["name"] == flow)
with open(os.path.join(mine["data_dir"], "argv.json"), "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "address_map": mine["source_address_map"]}, f)
with open(mine["status_file"], "w") as f:
    json.dump({"state": "mirroring", "lag_records": 7, "lag_ms": 12, "updated_at_ms": time.time() * 1000}, f)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("fake mirror running", flow, flush=True)
while True:
    time.sleep(1)
'''


def test_mq_up_starts_records_and_stops_a_mirror_per_flow(tmp_path):
    fake = tmp_path / "fake"
    (fake / "mirror").mkdir(parents=True)
    (fake / "mirror" / "__init__.py").write_text("")
    (fake / "mirror" / "__main__.py").write_text(FAKE_MIRROR)
    path, ports = two_regions(tmp_path, mirrors="mirrors:\n  - {name: e2w, source: east, target: west}\n")
    env = base_env(PYTHONPATH=os.pathsep.join([str(fake), str(REPO)]))
    up = run_mq("up", str(path), env=env, cwd=tmp_path, timeout=READY_S + 30)
    state = None
    try:
        assert up.returncode == 0, up.stderr
        assert re.search(r"mirror e2w: east -> west \(active-passive\), pid \d+", up.stdout.decode()), up.stdout
        state = json.loads((tmp_path / ".mq" / "cluster.json").read_text())
        entry = state["processes"]["mirror/e2w"]
        cluster = str(tmp_path / ".mq" / "cluster.json")
        assert entry["command"][1:] == ["-m", "mirror", "run", "--cluster", cluster, "--flow", "e2w"]
        flow_dir = tmp_path / ".mq" / "mirror-e2w"
        deadline = time.monotonic() + 20
        while not (flow_dir / "status.json").exists():
            assert time.monotonic() < deadline, (flow_dir / "mirror.log").read_text()
            time.sleep(0.05)
        started = json.loads((flow_dir / "argv.json").read_text())
        assert started["cwd"] == str(flow_dir)
        assert started["address_map"] == {ports["east"]: ports["east_via_link"]}
        assert (flow_dir / "mirror.pid").read_text().strip() == str(entry["pid"])
        doc = status(env, tmp_path)
        [flow] = doc["flows"]
        assert flow["process"]["alive"] and flow["process"]["pid"] == entry["pid"]
        assert flow["mirror_status"]["lag_records"] == 7
        table = run_mq("status", env=env, cwd=tmp_path).stdout.decode()
        assert "e2w" in table and "mirroring" in table and "12 ms" in table
        again = run_mq("up", str(path), env=env, cwd=tmp_path)
        assert again.returncode == 0 and b"mq is already up" in again.stdout
        assert json.loads((tmp_path / ".mq" / "cluster.json").read_text())["processes"]["mirror/e2w"]["pid"] == \
            entry["pid"]
        passthrough = run_mq("mirror", "status", "--json", env=env, cwd=tmp_path)
        assert passthrough.returncode == 3 and passthrough.stdout == b"fake mirror status --json\n"
    finally:
        down = run_mq("down", env=env, cwd=tmp_path)
    assert down.returncode == 0 and b"stopped mirror/e2w" in down.stdout, down.stdout
    assert state is not None and not any(is_alive(pid) for pid in pids(state).values())


def test_the_default_file_two_regions_of_three(tmp_path):
    """regions/default.yaml as shipped, moved to free ports: six voters in two quorums, the link
    pair at 40 ms, the flow recorded (the mirror starts too when installed)."""
    text = (REPO / "regions" / "default.yaml").read_text()
    listens = free_listens(6)
    for old, new in zip([f"127.0.0.1:{p}" for p in (9092, 9093, 9094, 9192, 9193, 9194)], listens, strict=True):
        text = text.replace(old, new)
    text = text.replace("link_port_base: 9300", f"link_port_base: {free_block(7)}")
    path = tmp_path / "default.yaml"
    path.write_text(text)
    env = base_env()
    up = run_mq("up", str(path), "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    state = None
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        assert "mq is up: regions east, west, 6 brokers, 2 links, 1 mirror flow" in up.stdout.decode()
        state = json.loads((tmp_path / ".mq" / "cluster.json").read_text())
        doc = status(env, tmp_path)
        for region in doc["regions"]:
            assert region["voters"] == [1, 2, 3] and region["controller"] is not None
            assert [(b["state"], b["registered"], b["fenced"]) for b in region["brokers"]] == \
                [("alive", True, False)] * 3
        assert [(x["name"], x["latency_ms"], x["state"]) for x in doc["links"]] == [
            ("east->west", 40.0, "up"), ("west->east", 40.0, "up")]
        [flow] = state["flows"]
        assert (flow["name"], flow["mode"], flow["topics"]) == (
            "east-to-west", "active-passive", {"include": [".*"], "exclude": ["__.*"]})
        assert flow["source_address_map"] == {listens[i]: route["listen"] for i, route in
                                              enumerate(state["link_pairs"][0]["routes"][:3])}
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=90)
    assert down.returncode == 0, down.stderr
    assert state is not None and not any(is_alive(pid) for pid in pids(state).values())


def test_a_data_dir_of_another_topology_is_refused(tmp_path):
    """`mq up --single`, then a three-broker region on the same .mq: refused, running or not."""
    listen = free_listen()
    env = base_env()
    three = tmp_path / "three.yaml"
    three.write_text("brokers:\n" + "".join(f"  - {{id: {i}, listen: '{a}'}}\n"
                                             for i, a in enumerate(free_listens(3), start=1)))
    single = run_mq("up", "--single", "--listen", listen, env=env, cwd=tmp_path)
    try:
        assert single.returncode == 0, single.stderr
        refused = run_mq("up", str(three), env=env, cwd=tmp_path)
        assert refused.returncode == 1
        line = refused.stderr.decode()
        assert line.startswith("error: .mq holds another topology: region local (broker 1; voters 1) (running); "
                               "asked for region local (brokers 1, 2, 3; voters 1, 2, 3)"), line
        assert "stop it with `mq down`, then remove .mq" in line and "--data-dir DIR" in line
    finally:
        assert run_mq("down", env=env, cwd=tmp_path).returncode == 0
    stopped = run_mq("up", str(three), env=env, cwd=tmp_path)
    assert stopped.returncode == 1 and b"holds another topology: region local (broker 1; voters 1);" in stopped.stderr
    assert b"mq down" not in stopped.stderr  # nothing to stop
    assert not (tmp_path / ".mq" / "cluster.json").exists()
    again = run_mq("up", "--single", "--listen", listen, env=env, cwd=tmp_path)  # the same topology: restarts
    try:
        assert again.returncode == 0 and b"mq is up" in again.stdout, again.stderr
    finally:
        assert run_mq("down", env=env, cwd=tmp_path).returncode == 0
