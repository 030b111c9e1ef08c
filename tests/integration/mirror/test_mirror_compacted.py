"""The mirror process on a compacted topic, through the link: holes the source's cleaner
left before the copy started are kept (byte-identical batches at the same offsets), and
the source compacting what the mirror has not copied yet, while the mirror is down, costs
nothing: after a restart the copy has every record the source still holds at its offset,
and each key's latest value is the same in both regions."""

from __future__ import annotations

import asyncio

import pytest

from mq.client import blocking
from mq.core.types import TopicPartition
from tests.integration.client.test_client_mirror_compacted import (
    COMPACTED,
    PARTITIONS,
    TOPIC,
    _produce,
    _records,
    _wait_for_cleaning,
)
from tests.integration.mirror.conftest import Regions
from tests.integration.mirror.harness import (
    Link,
    MirrorProcess,
    high_watermarks,
    mirror_args,
    produce,
    raw_batches,
    wait_for,
)

TPS = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]


@pytest.fixture
def compacting_regions(broker_factory, tmp_path):
    """east's cleaner runs every 50 ms; west's is off, so the copy stays as it arrived
    (its own cleaner would compact it further, as any replica's may)."""
    east = broker_factory({"log.cleaner.backoff.ms": "50"})
    west = broker_factory({"log.cleaner.enable": "false"})
    east_link, west_link = Link((east.host, east.port)), Link((west.host, west.port))
    yield Regions(east, west, east_link, west_link, tmp_path)
    east_link.close()
    west_link.close()


def _caught_up(regions: Regions) -> bool:
    try:
        return high_watermarks(regions.west.bootstrap, TPS) == high_watermarks(regions.east.bootstrap, TPS)
    except Exception:  # noqa: BLE001 - the mirror has not created the topic yet
        return False


def _read(bootstrap: str) -> list[tuple]:
    return asyncio.run(_records(bootstrap, high_watermarks(bootstrap, TPS)))


def _latest(records: list[tuple]) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for _partition, _offset, key, value, _ts in records:  # sorted by partition, then offset
        latest[key] = value
    return latest


def test_a_compacted_topic_is_mirrored_by_the_process_with_its_holes(compacting_regions, mirrors) -> None:
    regions = compacting_regions
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 1, COMPACTED)
    asyncio.run(_produce(regions.east.bootstrap))
    _wait_for_cleaning(regions.east.data_dir)
    state_dir = regions.tmp / "mirror-compacted"
    mirror = MirrorProcess(mirror_args("east->west", regions.east.bootstrap, regions.west.bootstrap, state_dir,
                                       address_map=regions.east_link.address_map), state_dir)
    mirrors.append(mirror)
    mirror.start()
    wait_for(lambda: _caught_up(regions), 30, "west to reach east's ends")
    for tp in TPS:
        assert raw_batches(regions.west.bootstrap, tp) == raw_batches(regions.east.bootstrap, tp), tp
    assert _read(regions.west.bootstrap) == _read(regions.east.bootstrap)

    # The mirror is down while east takes overwrites and compacts them (the dirty part
    # the mirror never copied included); the restarted mirror resumes in the holes.
    mirror.kill()
    produce(regions.east.bootstrap, TOPIC, 400, prefix="later", batch=1)
    _wait_for_cleaning(regions.east.data_dir)
    mirror.start()
    wait_for(lambda: _caught_up(regions), 30, "west to reach east's ends after the restart")
    east, west = _read(regions.east.bootstrap), _read(regions.west.bootstrap)
    at = {(p, o): (k, v) for p, o, k, v, _ in west}
    assert all(at.get((p, o)) == (k, v) for p, o, k, v, _ in east), "a record east holds is missing in west"
    assert _latest(west) == _latest(east)
    assert "Traceback" not in mirror.log_text()
