"""`python -m mirror` refuses what it cannot do with a clear message and exit code 2, and
never a traceback: an unknown flow, a mode it does not implement, a fail-over into a region
no flow goes to, a fail-back when nothing was failed over, no status to show."""

from __future__ import annotations

import json
from pathlib import Path

from mq.deploy.topology import BrokerSpec, Deployment, FlowSpec, LinkPair, ProxyRoute, Topology
from tests.integration.mirror.harness import run_cli


def cluster(tmp_path: Path, mode: str = "active-passive") -> str:
    regions = tuple(Topology(name, str(tmp_path / name), (BrokerSpec(1, f"127.0.0.1:{port}", "d"),))
                    for name, port in (("east", 1), ("west", 2)))
    flow = FlowSpec("east-to-west", "east", "west", mode=mode, data_dir=str(tmp_path / "mirror-east-to-west"))
    path = tmp_path / "cluster.json"
    pair = LinkPair(("east", "west"), "127.0.0.1:3", (ProxyRoute("east", 1, "127.0.0.1:1", "127.0.0.1:4"),
                                                      ProxyRoute("west", 1, "127.0.0.1:2", "127.0.0.1:5")),
                    str(tmp_path / "links"))
    path.write_text(json.dumps(Deployment(str(tmp_path), regions, pairs=(pair,), flows=(flow,)).to_json()))
    return str(path)


def refused(result, *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_bad_requests_are_refused_with_the_reason(tmp_path: Path) -> None:
    path = cluster(tmp_path)
    refused(run_cli("run", "--cluster", path, "--flow", "nope"), "no flow 'nope'", "flows: east-to-west")
    refused(run_cli("run", "--cluster", str(tmp_path / "missing.json"), "--flow", "x"), "does not exist", "mq up")
    refused(run_cli("run", "--flow", "x", "--source-bootstrap", "127.0.0.1:1"), "--target-bootstrap")
    refused(run_cli("run", "--flow", "x", "--source-bootstrap", "a:1", "--target-bootstrap", "b:2",
                    "--source-address-map", "a:1"), "ADVERTISED=DIAL")
    refused(run_cli("failover", "--cluster", path, "--to", "south"), "no mirror flow into region 'south'")
    refused(run_cli("failback", "--cluster", path, "--to", "east"), "nothing to fail back")
    refused(run_cli("failback", "--cluster", path, "--to", "south"), "no region 'south'")
    status = run_cli("status", "--data-dir", str(tmp_path))
    assert status.returncode == 1 and "no mirror flow status" in status.stdout


def test_an_unknown_mode_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    path = cluster(tmp_path, mode="active-ish")
    refused(run_cli("run", "--cluster", path, "--flow", "east-to-west"),
            "mode 'active-ish' is not one of active-passive, active-active")
