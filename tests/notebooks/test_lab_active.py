"""mq.lab.active: lab 06's two-region active-active file is a valid topology with a flow each
way, and a skewed clock is off by what it says (the real run is the notebook's)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mq.core.clock import SystemClock
from mq.deploy import parse_topology
from mq.lab.active import FLOWS, SkewedClock, active_active_file


def test_the_region_file_has_a_flow_each_way_in_active_active_mode(tmp_path: Path) -> None:
    doc = active_active_file(str(tmp_path), latency_ms=25)
    deployment = parse_topology(yaml.safe_dump(doc), source="lab")
    assert deployment.region_names == ["east", "west"]
    assert sorted(f.name for f in deployment.flows) == sorted(FLOWS)
    assert {(f.source, f.target) for f in deployment.flows} == {("east", "west"), ("west", "east")}
    assert all(f.mode == "active-active" and not f.forward for f in deployment.flows)
    assert all(link.settings.latency_ms == 25 for link in deployment.links)
    ports = [b["listen"] for r in doc["regions"] for b in r["brokers"]]
    assert len(set(ports)) == len(ports) == 2


def test_a_skewed_clock_is_off_by_its_skew() -> None:
    system, fast, slow = SystemClock(), SkewedClock(300), SkewedClock(-300)
    before = system.wall_ms()
    assert before + 300 <= fast.wall_ms() <= system.wall_ms() + 300
    assert slow.wall_ms() <= system.wall_ms() - 300
    assert abs(fast.monotonic_ms() - system.monotonic_ms()) < 50
