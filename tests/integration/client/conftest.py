"""A broker shared by all client tests (tests that pause, stop or restart
a broker use the function-scoped ``broker`` fixture of tests/integration/conftest.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess, free_port

_names = itertools.count()


@pytest.fixture(scope="package")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("client-broker") / "broker-1"
    proc = BrokerProcess(data_dir, free_port())
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test (topics outlive tests on the shared broker)."""
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(_names)}"
