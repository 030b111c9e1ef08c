"""Every multi-region file in regions/, started for real by `mq up` from a scratch directory:
produce keyed records in each region, let the flows drain, and check that each record appears
exactly once in each region under each name it should have there (the local `orders`,
`<origin>.orders` copies, `<via>.<origin>.orders` where a flow forwards, or the same name in an
active-passive mirror topic), with the right provenance headers and hop counts, and under no
other name.

The file is rewritten before it starts: free ports, faster topic refresh, and **one broker per
region**. The full files fit this machine (`mq up regions/three-regions.yaml`: 9 brokers, 3
links and 6 mirrors, 18 processes, ~750 MiB RSS, ready in ~8 s), but one broker per region
keeps each variant to seconds and a fraction of the CPU on CI's two shared cores; replication
inside a region is what other tests show.

The expected names come from a model of the documented rules written here, not from the
mirror's code: a flow S -> T copies a record sitting in S under name N with path P unless T is
in P, or P has more than one region and the flow does not forward; the copy is `S.N` with path
P + T (active-active), or `N` with the same bytes (active-passive)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.integration.cli.helpers import base_env, free_listens, run_mq
from tests.integration.cli.test_cli_geo import free_block
from tests.integration.mirror.harness import wait_for
from tests.integration.mirror.test_mirror_active_active import consume, shell

REGIONS_DIR = Path(__file__).resolve().parents[3] / "regions"
N = 150  # records produced in each region
PARTITIONS = 3
READY_S = 90
CI_FILES = {"three-regions.yaml", "chain.yaml"}  # the others run nightly


def multi_region_files() -> list:
    out = []
    for path in sorted(REGIONS_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and len(doc.get("regions") or []) > 1:
            marks = () if path.name in CI_FILES else (pytest.mark.nightly,)
            out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


def shrunk(doc: dict) -> dict:
    """The topology on free ports, one broker per region, topics refreshed every 300 ms."""
    doc = dict(doc, data_dir=".mq")
    listens = free_listens(len(doc["regions"]))
    doc["regions"] = [dict(r, voters=[1], brokers=[{"id": 1, "listen": listen}])
                      for r, listen in zip(doc["regions"], listens, strict=True)]
    pairs = {frozenset((link["source"], link["target"])) for link in doc.get("links", [])}
    doc["link_port_base"] = free_block(3 * len(pairs))  # per pair: a broker each side, the control port
    doc["mirrors"] = [dict(f, **{"refresh.topics.interval.ms": 300}) for f in doc.get("mirrors", [])]
    return doc


def expected_names(doc: dict) -> dict[tuple[str, str], tuple[str, tuple[str, ...], bool]]:
    """``(region, topic) -> (origin region, path, active-active)`` for every copy of every
    region's ``orders``, by the rules in the module docstring."""
    flows = doc.get("mirrors", [])
    passive_targets = {f["target"] for f in flows if f.get("mode", "active-passive") == "active-passive"}
    found: dict[tuple[str, str], tuple[str, tuple[str, ...], bool]] = {}
    todo = [(r["name"], "orders", (r["name"],), True) for r in doc["regions"] if r["name"] not in passive_targets]
    while todo:
        region, name, path, active = todo.pop()
        assert (region, name) not in found, f"two routes lead to {name} in {region}: {path}, {found[(region, name)]}"
        found[(region, name)] = (path[0], path, active)
        for f in flows:
            if f["source"] != region or f["target"] in path:
                continue
            if f.get("mode", "active-passive") == "active-passive":
                todo.append((f["target"], name, (*path, f["target"]), False))
            elif len(path) == 1 or f.get("forward", False):
                todo.append((f["target"], f"{region}.{name}", (*path, f["target"]), True))
    return found


def producers(doc: dict) -> list[str]:
    passive_targets = {f["target"] for f in doc.get("mirrors", []) if f.get("mode", "active-passive") == "active-passive"}
    return [r["name"] for r in doc["regions"] if r["name"] not in passive_targets]


@pytest.mark.slow
@pytest.mark.parametrize("path", multi_region_files())
def test_each_record_once_per_region_per_name(path: Path, tmp_path: Path) -> None:
    doc = shrunk(yaml.safe_load(path.read_text()))
    (tmp_path / path.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    expected = expected_names(doc)
    env = base_env()
    up = run_mq("up", path.name, "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 60)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        origins = producers(doc)
        for region in origins:
            created = run_mq("topic", "create", "orders", "--region", region, "--partitions", str(PARTITIONS),
                             env=env, cwd=tmp_path)
            assert created.returncode == 0, created.stderr
        for region in origins:
            produced = shell(f"seq 1 {N} | awk '{{print \"k\" $1 % 31 \":{region}-\" $1}}' | mq produce orders "
                             f"--region {region} --key-separator : --acks all", env, tmp_path)
            assert produced.returncode == 0, produced.stderr
        source = {region: {r["value"]: r for r in consume(f"orders --region {region}", env, tmp_path)}
                  for region in origins}
        assert all(len(v) == N for v in source.values())

        def drained(region: str) -> dict[str, list[dict]] | None:
            by_topic: dict[str, list[dict]] = {}
            for r in consume(f"--region {region} --include '^([a-z]+\\.)*orders$'", env, tmp_path):
                by_topic.setdefault(r["topic"], []).append(r)
            wanted = {name for (reg, name) in expected if reg == region}
            return by_topic if all(len(by_topic.get(n, ())) >= N for n in wanted) else None

        for region in [r["name"] for r in doc["regions"]]:
            by_topic = wait_for(lambda region=region: drained(region), 90, f"the flows into {region} to drain")
            wanted = {name: v for (reg, name), v in expected.items() if reg == region}
            assert set(by_topic) == set(wanted), f"{region}: names {sorted(by_topic)}, expected {sorted(wanted)}"
            for name, (origin, route, active) in wanted.items():
                records = by_topic[name]
                values = Counter(r["value"] for r in records)
                assert set(values) == set(source[origin]) and max(values.values()) == 1, \
                    f"{name} in {region}: {len(records)} records, {values.most_common(2)}"
                for r in records:
                    o = source[origin][r["value"]]
                    assert (r["partition"], r["key"], r["timestamp"]) == (o["partition"], o["key"], o["timestamp"])
                    headers = dict(r["headers"])
                    if len(route) == 1 or not active:
                        assert not any(h.startswith("mq.") for h in headers), f"{name} in {region}: {headers}"
                        assert r["offset"] == o["offset"]
                        continue
                    assert headers == {"mq.origin.region": origin, "mq.origin.partition": str(o["partition"]),
                                       "mq.origin.offset": str(o["offset"]),
                                       "mq.origin.timestamp": str(o["timestamp"]),
                                       "mq.hops": str(len(route) - 1), "mq.path": ",".join(route)}, \
                        f"{name} in {region}"
        print(f"{path.name}: {len(expected)} (region, name) pairs, {N} records each, each once")
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=90)
        assert down.returncode == 0, down.stderr
