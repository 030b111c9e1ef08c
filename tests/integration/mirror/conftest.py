"""Fixtures of the mirror tests: two one-broker regions, east and west, and a WAN link in
front of each (the mirror east->west reaches east through ``east_link``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess
from tests.integration.mirror.harness import Link, MirrorProcess


@dataclass
class Regions:
    east: BrokerProcess
    west: BrokerProcess
    east_link: Link
    west_link: Link
    tmp: Path


@pytest.fixture
def regions(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> Iterator[Regions]:
    east = broker_factory({"log.retention.check.interval.ms": "200"})
    west = broker_factory()
    east_link = Link((east.host, east.port))
    west_link = Link((west.host, west.port))
    yield Regions(east, west, east_link, west_link, tmp_path)
    east_link.close()
    west_link.close()


@pytest.fixture
def mirrors() -> Iterator[list[MirrorProcess]]:
    """Mirror processes a test starts; all stopped at the end."""
    started: list[MirrorProcess] = []
    yield started
    for m in started:
        m.stop()
