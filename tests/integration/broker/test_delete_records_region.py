"""DeleteRecords in a three-broker region (real broker processes): the answer waits until
every in-sync replica moved its log start (Kafka's DelayedDeleteRecords), so once it says
NONE no replica that could be elected still serves the deleted records. A paused
in-sync follower makes it REQUEST_TIMED_OUT (the leader and the running follower deleted
all the same); resumed, the retry is answered, every replica's checkpointed log start
already at the offset; a follower that stays paused leaves the ISR, and then no longer
holds the answer back. Through the Admin client the timeout is the broker's named
answer; through ``mq records delete`` the command returns with every replica moved."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mq.client import Admin, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol import messages as m
from mq.storage.checkpoint import LOG_START_OFFSET_FILE
from tests.chaos.harness.region import Region
from tests.integration.cli.helpers import base_env, run_mq

TOPIC = "trimmed"


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory):
    with Region(tmp_path_factory.mktemp("region"), proxy=False).start() as started:
        yield started


def delete_records(region: Region, node: int, offset: int, *, timeout_ms: int) -> tuple[int, int, float]:
    """(error, low watermark, seconds until the answer)."""
    request = m.DeleteRecordsRequest([m.DeleteRecordsTopic(TOPIC, [m.DeleteRecordsPartition(0, offset)])],
                                     timeout_ms=timeout_ms)
    started = time.monotonic()
    response = region.ask(node, request, timeout_s=timeout_ms / 1000 + 10)
    assert isinstance(response, m.DeleteRecordsResponse), response
    part = response.topics[0].partitions[0]
    return part.error_code, part.low_watermark, time.monotonic() - started


def log_start(region: Region, node: int, topic: str = TOPIC) -> int:
    """The node's checkpointed log start of the partition (0: never moved)."""
    path = Path(region.node(node).data_dir) / f"{topic}-0" / LOG_START_OFFSET_FILE
    return int(path.read_text().split()[1]) if path.exists() else 0


async def filled(region: Region, topic: str, records: int) -> None:
    region.wait_registered()  # a broker paused by the previous test is fenced for a while
    async with Admin(region.bootstrap, request_timeout_ms=10_000) as admin:
        await admin.create_topic(topic, 1, 3, configs={"min.insync.replicas": "2"})
        region.wait_healthy(topic, 1)
        async with Producer(region.bootstrap, acks="all", linger_ms=1) as producer:
            for future in [producer.send(topic, value=b"%03d" % i, partition=0) for i in range(records)]:
                await future
    region.wait_isr(topic, 0, region.ids)


async def test_delete_records_waits_for_every_in_sync_replica(region: Region) -> None:
    await filled(region, TOPIC, 60)
    leader = region.leader_of(TOPIC, 0)
    assert leader is not None
    paused, running = (n for n in region.ids if n != leader)
    region.pause(paused)
    try:
        code, low, waited = delete_records(region, leader, 20, timeout_ms=1000)
        assert code == ErrorCode.REQUEST_TIMED_OUT and low == 0 and waited >= 0.9, (code, low, waited)
        assert (log_start(region, leader), log_start(region, running), log_start(region, paused)) == (20, 20, 0)
    finally:
        region.resume(paused)
    code, low, waited = delete_records(region, leader, 20, timeout_ms=10_000)
    assert (code, low) == (ErrorCode.NONE, 20), (code, low)
    assert [log_start(region, n) for n in region.ids] == [20, 20, 20]  # at the answer, not eventually
    print(f"\nDeleteRecords answered {waited * 1000:.0f} ms after the paused follower resumed")
    # a follower that stays away leaves the ISR (replica.lag.time.max.ms 3 s), then the
    # remaining in-sync replicas answer
    region.pause(paused)
    try:
        code, low, waited = delete_records(region, leader, 40, timeout_ms=15_000)
        assert (code, low) == (ErrorCode.NONE, 40), (code, low)
        assert waited > 1.0  # held until the ISR shrank
        isr = region.partition_state(TOPIC, 0, nodes=[leader])
        assert isr is not None and paused not in isr.isr, isr
        assert (log_start(region, leader), log_start(region, running), log_start(region, paused)) == (40, 40, 20)
    finally:
        region.resume(paused)
    assert not region.stderr_tracebacks()


@pytest.mark.nightly  # flaky (the delete sometimes succeeds with a follower paused; cause not found yet)
async def test_admin_names_the_timeout_and_the_cli_returns_with_every_replica_moved(region: Region) -> None:
    topic = "trimmed-cli"
    await filled(region, topic, 30)
    leader = region.leader_of(topic, 0)
    assert leader is not None
    paused = next(n for n in region.ids if n != leader)
    region.pause(paused)
    try:
        started = time.monotonic()
        # bootstrap at the leader: a paused broker in the bootstrap list would cost the client its
        # connection timeouts, and meanwhile the follower could leave the ISR and release the wait
        async with Admin(region.node(leader).bootstrap, request_timeout_ms=1500) as admin:
            with pytest.raises(MqError) as caught:
                await admin.delete_records({TopicPartition(topic, 0): 10})
        waited = time.monotonic() - started
        # the leader's own answer after its timeout_ms, not the client's connection timeout
        assert caught.value.code == ErrorCode.REQUEST_TIMED_OUT and "not every in-sync replica" in caught.value.message
        assert waited < 5, waited
    finally:
        region.resume(paused)
    result = run_mq("records", "delete", topic, "--partition", "0", "--before-offset", "20", "--json",
                    "--bootstrap", region.bootstrap, env=base_env())
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == [{"topic": topic, "partition": 0, "log_start_offset": 20}]
    assert [log_start(region, n, topic) for n in region.ids] == [20, 20, 20]  # when the command returned
