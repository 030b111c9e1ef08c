"""`mq docker compose`, `mq docker attach` and `mq status --bootstrap` as a user runs them
(real `mq` processes; no Docker engine needed: tests/docker runs the containers)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from mq.cli import schemas

from .helpers import base_env, run_mq

REPO = Path(__file__).resolve().parents[3]


def error_line(done) -> str:
    text = done.stderr.decode()
    assert text.startswith("error: ") and text.count("\n") == 1 and " — " in text, text
    return text


def test_the_committed_compose_file_is_what_mq_docker_compose_writes(tmp_path: Path):
    done = run_mq("docker", "compose", "regions/default.yaml", env=base_env(), cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == (REPO / "docker" / "compose.yaml").read_text(), (
        "regenerate: mq docker compose regions/default.yaml -o docker/compose.yaml")


def test_a_region_file_docker_cannot_run_is_refused_with_what_to_change(tmp_path: Path):
    collide = tmp_path / "collide.yaml"
    collide.write_text("regions:\n"
                       "  - name: east\n    brokers: [{id: 1, listen: 127.0.0.1:9092}]\n"
                       "  - name: west\n    brokers: [{id: 1, listen: 127.0.0.2:9092}]\n")
    done = run_mq("docker", "compose", str(collide), env=base_env())
    assert done.returncode == 2 and done.stdout == b""
    assert "host port 19092 would be published twice: for east broker 1 and for west broker 1" in error_line(done)
    bad_name = tmp_path / "name.yaml"
    bad_name.write_text("regions:\n  - name: US_East\n    brokers: [{id: 1, listen: 127.0.0.1:9092}]\n")
    done = run_mq("docker", "compose", str(bad_name), env=base_env())
    assert done.returncode == 2
    assert "region 'US_East' (regions[].name) cannot name a Docker service" in error_line(done)
    done = run_mq("docker", "compose", "regions/default.yaml", "--port-offset", "60000", env=base_env(), cwd=REPO)
    assert done.returncode == 2 and "past 65535" in error_line(done)


def test_attach_writes_the_hosts_view_and_refuses_what_it_cannot_use(tmp_path: Path):
    done = run_mq("docker", "attach", str(REPO / "docker" / "compose.yaml"), env=base_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    state = json.loads((tmp_path / ".mq" / "cluster.json").read_text())
    assert [r["bootstrap"] for r in state["regions"]] == ["127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094",
                                                          "127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194"]
    assert state["link_pairs"][0]["control"] == "127.0.0.1:19306"
    assert state["docker"]["containers"]["east-2"] == "mq-east-2"
    assert "mq status" in done.stdout.decode()
    # --region finds the compose cluster; mq up and mq down leave it to Docker
    listed = run_mq("topic", "list", "--region", "west", env=base_env(), cwd=tmp_path)
    # nothing runs there in this test (unless a person's compose cluster does): the error names west's brokers
    assert listed.returncode == 0 or "no broker at 127.0.0.1:19192,127.0.0.1:19193" in error_line(listed)
    for verb in ("up", "down"):
        refused = run_mq(verb, env=base_env(), cwd=tmp_path)
        assert refused.returncode == 1
        assert "describes a Docker Compose cluster" in error_line(refused)
    not_ours = tmp_path / "plain.yaml"
    not_ours.write_text("services:\n  app: {image: nginx}\n")
    done = run_mq("docker", "attach", str(not_ours), env=base_env(), cwd=tmp_path)
    assert done.returncode == 1 and "has no x-mq-cluster block" in error_line(done)


def test_status_by_bootstrap_shows_the_region_its_brokers_tell(cluster):
    text = cluster.mq("status", "--bootstrap", cluster.listen, "--data-dir", str(cluster.data_dir / "none"))
    assert text.returncode == 0, text.stderr
    out = text.stdout.decode()
    assert f"region of {cluster.listen}" in out and "active controller: broker 1" in out
    done = cluster.mq("status", "--bootstrap", cluster.listen, "--json")
    doc = json.loads(done.stdout)
    jsonschema.Draft202012Validator(schemas.schema_of("mq status").schema).validate(doc)
    assert doc["running"] and [(b["node_id"], b["endpoint"], b["state"]) for b in doc["brokers"]] == [
        (1, cluster.listen, "alive")]
    nobody = cluster.mq("status", "--bootstrap", "127.0.0.1:1")
    assert nobody.returncode == 1 and "no broker answered at 127.0.0.1:1" in error_line(nobody)
