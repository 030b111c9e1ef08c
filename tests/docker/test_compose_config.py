"""Compose itself accepts the generated files: `docker-compose config` (v1, 1.29: what these
machines have) and, where installed, `docker compose config` (v2). No engine needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.cli.helpers import base_env, run_mq

REPO = Path(__file__).resolve().parents[2]


def config(command: list[str], path: Path) -> dict:
    done = subprocess.run([*command, "-f", str(path), "-p", "mqcheck", "config"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def compose_commands(compose_binary: str) -> list[list[str]]:
    commands = [[compose_binary]]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, check=False,
                                 timeout=30).returncode == 0:
        commands.append([docker, "compose"])
    return commands


@pytest.mark.parametrize("region_file", ["default.yaml", "three-regions.yaml"])
def test_compose_accepts_the_generated_file(tmp_path: Path, compose_binary: str, region_file: str):
    out = tmp_path / "compose.yaml"
    done = run_mq("docker", "compose", str(REPO / "regions" / region_file), "-o", str(out), env=base_env())
    assert done.returncode == 0, done.stderr
    source = yaml.safe_load(out.read_text())
    for command in compose_commands(compose_binary):
        resolved = config(command, out)
        assert set(resolved["services"]) == set(source["services"])
        for name, service in resolved["services"].items():
            if name.startswith("mirror-"):
                # compose resolved the alias and the $$ escapes: the containers get plain JSON
                assert service["environment"]["MQ_CLUSTER_JSON"].lstrip().startswith("{")
                links = [d for d in service["depends_on"] if d.startswith("link-")]
                assert len(links) == 1 and service["depends_on"][links[0]]["condition"] == "service_healthy"


def test_the_committed_file_is_accepted_as_it_is(compose_binary: str):
    for command in compose_commands(compose_binary):
        resolved = config(command, REPO / "docker" / "compose.yaml")
        port = resolved["services"]["east"]["ports"][0]  # v1 writes a string, v2 a mapping
        if isinstance(port, dict):
            assert (port["host_ip"], int(port["published"]), int(port["target"])) == ("127.0.0.1", 19092, 19092)
        else:
            assert port.startswith("127.0.0.1:19092:19092")
