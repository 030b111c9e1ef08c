"""Which brokers a client command talks to: --bootstrap, --region, $MQ_BOOTSTRAP,
$MQ_REGION, the one region recorded in cluster.json, else localhost:9092."""

from __future__ import annotations

import argparse
import json

import pytest

from mq.cli.common import CliError, bootstrap_of


def args(**kw) -> argparse.Namespace:
    return argparse.Namespace(bootstrap=kw.get("bootstrap"), region=kw.get("region"))


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("MQ_BOOTSTRAP", "MQ_REGION", "MQ_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def record(directory, regions: list[tuple[str, str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"format": 2, "regions": [{"name": n, "bootstrap": b} for n, b in regions]}
    if len(regions) == 1:
        doc["bootstrap"] = regions[0][1]
    (directory / "cluster.json").write_text(json.dumps(doc))


def test_nothing_recorded_means_localhost(here):
    assert bootstrap_of(args()) == "localhost:9092"


def test_one_region_is_the_default(here):
    record(here / ".mq", [("local", "h:1,h:2")])
    assert bootstrap_of(args()) == "h:1,h:2"
    assert bootstrap_of(args(region="local")) == "h:1,h:2"


def test_several_regions_need_a_name(here, monkeypatch):
    record(here / ".mq", [("east", "e:1"), ("west", "w:1")])
    with pytest.raises(CliError) as info:
        bootstrap_of(args())
    assert info.value.what == "2 regions run under .mq: east (e:1); west (w:1)"
    assert "--region east or --region west (or set MQ_REGION)" in info.value.todo and info.value.exit_code == 2
    assert bootstrap_of(args(region="west")) == "w:1"
    monkeypatch.setenv("MQ_REGION", "east")
    assert bootstrap_of(args()) == "e:1"
    assert bootstrap_of(args(region="west")) == "w:1"  # the flag beats the environment
    monkeypatch.setenv("MQ_BOOTSTRAP", "b:9")
    assert bootstrap_of(args()) == "b:9"  # a bootstrap beats a region name at the same level
    assert bootstrap_of(args(region="west")) == "w:1"
    assert bootstrap_of(args(bootstrap="x:1", region="west")) == "x:1"  # --bootstrap wins


def test_mq_data_dir_points_elsewhere(here, monkeypatch):
    record(here / "elsewhere", [("east", "e:1"), ("west", "w:1")])
    monkeypatch.setenv("MQ_DATA_DIR", str(here / "elsewhere"))
    assert bootstrap_of(args(region="east")) == "e:1"


def test_unknown_region_and_no_topology(here, monkeypatch):
    with pytest.raises(CliError, match="--region east: no topology runs under .mq"):
        bootstrap_of(args(region="east"))
    record(here / ".mq", [("east", "e:1"), ("west", "w:1")])
    with pytest.raises(CliError, match=r"--region north: no such region under .mq \(regions: east, west\)"):
        bootstrap_of(args(region="north"))
    monkeypatch.setenv("MQ_REGION", "north")
    with pytest.raises(CliError, match="MQ_REGION north: no such region"):
        bootstrap_of(args())


def test_a_cluster_json_written_before_regions(here):
    (here / ".mq").mkdir()
    (here / ".mq" / "cluster.json").write_text(json.dumps(
        {"format": 1, "bootstrap": "o:1", "topology": {"name": "local"}, "processes": {}}))
    assert bootstrap_of(args()) == "o:1" and bootstrap_of(args(region="local")) == "o:1"


@pytest.mark.parametrize("argv", [["status"], ["down"], ["link", "list"], ["broker", "kill", "2"]])
def test_topology_commands_follow_mq_data_dir(here, monkeypatch, argv):
    """`mq up` tells the user to export MQ_DATA_DIR; the commands that read its data dir
    (status, down, link, broker) look there too unless --data-dir says otherwise."""
    from mq.cli.main import build_parser

    monkeypatch.setenv("MQ_DATA_DIR", str(here / "elsewhere"))
    assert build_parser().parse_args(argv).data_dir == str(here / "elsewhere")
    assert build_parser().parse_args([*argv, "--data-dir", "d"]).data_dir == "d"
