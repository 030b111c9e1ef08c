"""The Docker tier: one image per tree (tests/docker/images.py), built at most once per
session; skipped, with the reason printed, only where no Docker engine can run."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .images import Built, build_image, docker, engine_problem

TIMINGS: dict[str, float] = {}
NOTES: list[str] = []


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = engine_problem()
    if problem is not None:
        pytest.skip(f"Docker cannot run here: {problem}")


@pytest.fixture(scope="session")
def compose_binary() -> str:
    """docker-compose (v1) is what these machines have; `docker compose` (v2) is used by
    mq.lab when installed."""
    found = shutil.which("docker-compose")
    if found is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install docker-compose)")
    return found


@pytest.fixture(scope="session")
def mq_image(docker_engine: None) -> Iterator[Built]:
    built = build_image()
    TIMINGS.update(built.timings)
    NOTES.extend(built.notes)
    size = docker("image", "inspect", "--format", "{{.Size}}", built.tag).stdout.strip()
    NOTES.append(f"image size {int(size) / 1e6:.0f} MB")
    yield built


def pytest_terminal_summary(terminalreporter) -> None:
    if TIMINGS or NOTES:
        terminalreporter.write_sep("-", "docker")
        for note in NOTES:
            terminalreporter.write_line(note)
        if TIMINGS:
            terminalreporter.write_line(", ".join(f"{k} {v:.1f}" for k, v in TIMINGS.items()))
