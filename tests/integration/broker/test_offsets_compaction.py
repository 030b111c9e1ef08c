"""Compaction keeps ``__consumer_offsets`` small (issue 4 acceptance: 100,000 commits).

A real broker with one small-segment offsets partition and a fast cleaner backoff; a
member of one group commits 100,000 offsets (pipelined requests of
``PARTITIONS`` offsets each). The partition shrinks to a few segments' worth while the
log's readable records keep the latest value of every key, and a restart (the
coordinator replays the compacted partition) gives back exactly the last committed
offset of every partition, and the group with its generation and member.

Also: a cleaning pass that fails (a corrupt batch in a compacted topic) is one WARNING
line ``log_cleaner_error``, not a stack trace, and the broker keeps serving the log.
"""

from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from mq.coordinator import OFFSETS_TOPIC, CoordinatorRecord
from mq.coordinator.records import GroupMetadataKey, OffsetCommitKey, decode
from mq.core.errors import ErrorCode
from mq.protocol.group_messages import (
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
)
from mq.protocol.record_batch import build_batch, iter_batches, iter_records

from .raw import RawClient, until

GROUP = "compaction"
TOPIC = "events"
PARTITIONS = 20
COMMITS = 100_000
IN_FLIGHT = 64
SAMPLE_EVERY_ROUNDS = 100
SEGMENT_BYTES = 64 * 1024
SMALL_BYTES = 4 * SEGMENT_BYTES
COMPACTION_TIMEOUT_S = 60.0
CONFIGS = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": str(SEGMENT_BYTES),
    "log.cleaner.backoff.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "10",
}
RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)




def _dir_bytes(path: Path) -> tuple[int, int, int]:
    """(bytes of every file, bytes of .log files, .log files) in a partition directory
    (files the cleaner swaps away while we look are skipped)."""
    total = logs = count = 0
    for child in path.iterdir():
        try:
            size = child.stat().st_size
        except FileNotFoundError:
            continue
        total += size
        if child.suffix == ".log":
            logs += size
            count += 1
    return total, logs, count


def _metric(broker, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(f"http://{broker.host}:{broker.metrics_port}/metrics", timeout=5).read().decode()
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name}{labels} not in /metrics"
    return float(match.group(1))


def _read_partition(client: RawClient, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every readable record (offset, key, value) of a partition, from offset 0 to the
    high watermark (a compacted log has gaps, and batches the cleaner left empty)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = 0
    while True:
        got = client.fetch(topic, partition, offset, partition_max_bytes=1 << 20)
        assert got.error_code == ErrorCode.NONE, got
        if offset >= got.high_watermark:
            return out
        with memoryview(got.records) as view:
            batches = list(iter_batches(view))
            assert batches, f"no batch at offset {offset} below the high watermark {got.high_watermark}"
            offset = batches[-1][1].next_offset
        out.extend((r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
                   for r in iter_records(got.records))


def _commit_storm(client: RawClient, generation: int, member_id: str, partition_dir: Path) -> tuple[dict[int, int], int]:
    """COMMITS offsets in COMMITS / PARTITIONS requests, IN_FLIGHT at a time; returns
    the last committed offset per partition and the largest on-disk size seen."""
    rounds = COMMITS // PARTITIONS
    in_flight: list[int] = []
    last: dict[int, int] = {}
    peak = 0

    def receive_one() -> None:
        cid, response = client.recv(OffsetCommitRequest)
        assert cid == in_flight.pop(0)
        codes = [p.error_code for t in response.topics for p in t.partitions]
        assert codes == [ErrorCode.NONE] * PARTITIONS, (response.error_message, set(codes))

    for i in range(rounds):
        offsets = {p: 1000 * (i + 1) + p for p in range(PARTITIONS)}
        request = OffsetCommitRequest(
            GROUP, [OffsetCommitTopic(TOPIC, [OffsetCommitPartition(p, o, metadata=f"r{i}") for p, o in offsets.items()])],
            generation_id=generation, member_id=member_id)
        in_flight.append(client.send(request))
        last = offsets
        if len(in_flight) >= IN_FLIGHT:
            receive_one()
        if i % SAMPLE_EVERY_ROUNDS == 0:
            peak = max(peak, _dir_bytes(partition_dir)[0])
    while in_flight:
        receive_one()
    return last, peak


def test_hundred_thousand_commits_stay_small_and_survive_a_restart(broker_factory):
    broker = broker_factory(CONFIGS)
    partition_dir = broker.data_dir / f"{OFFSETS_TOPIC}-0"
    with RawClient.to(broker, timeout_s=30) as c:
        c.create_topic(TOPIC, PARTITIONS)
        until(lambda: c.request(FindCoordinatorRequest(GROUP)))
        join = JoinGroupRequest(GROUP, session_timeout_ms=120_000, rebalance_timeout_ms=5000,
                                assignors=["range"], topics=[TOPIC])
        required = until(lambda: c.request(join), ok=lambda r: r.error_code not in RETRIABLE)
        assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED, required  # KIP-394: rejoin with this id
        joined = c.request(replace(join, member_id=required.member_id))
        assert joined.error_code == ErrorCode.NONE, joined

        started = time.monotonic()
        last, peak = _commit_storm(c, joined.generation_id, joined.member_id, partition_dir)
        storm_s = time.monotonic() - started
        appended = _metric(broker, "mq_topic_bytes_in_total", f'{{topic="{OFFSETS_TOPIC}"}}')
        records_in = _metric(broker, "mq_topic_records_in_total", f'{{topic="{OFFSETS_TOPIC}"}}')
        assert records_in >= COMMITS
        at_end = _dir_bytes(partition_dir)

        deadline = time.monotonic() + COMPACTION_TIMEOUT_S
        while (now := _dir_bytes(partition_dir))[0] > SMALL_BYTES:
            assert time.monotonic() < deadline, f"{OFFSETS_TOPIC}-0 still {now} bytes after {COMPACTION_TIMEOUT_S}s"
            time.sleep(0.1)  # polling the cleaner's progress, with a deadline
        compacted_s = time.monotonic() - started - storm_s
        after = now
        cleaned_bytes = _metric(broker, "mq_log_cleaner_cleaned_bytes_total")
        runs = _metric(broker, "mq_log_cleaner_runs_total")
        assert cleaned_bytes > 0 and runs > 0

        # What is readable keeps the latest value of every key.
        records = _read_partition(c, OFFSETS_TOPIC, 0)
        latest: dict[tuple, int] = {}
        for _, key, value in records:
            assert key is not None
            decoded = decode(CoordinatorRecord(key, value))
            assert decoded is not None
            k, v = decoded
            if isinstance(k, OffsetCommitKey):
                latest[(k.tp.topic, k.tp.partition)] = v.offset  # type: ignore[union-attr]
            else:
                assert isinstance(k, GroupMetadataKey) and v is not None
                latest[("group", k.group_id)] = v.generation  # type: ignore[union-attr]
        assert latest == {**{(TOPIC, p): o for p, o in last.items()}, ("group", GROUP): joined.generation_id}

    print(f"\n{COMMITS} commits ({records_in:.0f} records, {appended / 1e6:.1f} MB appended) in {storm_s:.1f} s; "
          f"{OFFSETS_TOPIC}-0 on disk: at most {peak / 1024:.0f} KiB during the storm, at its end {at_end[0] / 1024:.0f} KiB in {at_end[2]} segments, "
          f"{after[0] / 1024:.1f} KiB in {after[2]} segments ({after[1]} log bytes) {compacted_s:.1f} s later; "
          f"{len(records)} records readable; cleaner read {cleaned_bytes / 1e6:.1f} MB in {runs:.0f} passes")

    broker.stop()
    started = time.monotonic()
    broker.start()
    with RawClient.to(broker) as c:
        fetched = until(lambda: c.request(OffsetFetchRequest(GROUP, [OffsetFetchTopic(TOPIC, list(range(PARTITIONS)))])))
        print(f"restart to offsets served: {time.monotonic() - started:.1f} s")
        assert {p.partition: p.offset for p in fetched.topics[0].partitions} == last
        assert {p.metadata for p in fetched.topics[0].partitions} == {f"r{COMMITS // PARTITIONS - 1}"}
        assert [g.group_id for g in c.request(ListGroupsRequest()).groups] == [GROUP]
        described = c.request(DescribeGroupsRequest([GROUP])).groups[0]
        assert (described.error_code, described.generation_id) == (ErrorCode.NONE, joined.generation_id)
        assert [m.member_id for m in described.members] == [joined.member_id]
    text = broker.stderr_text()
    assert "Traceback" not in text and "log_cleaner_error" not in text and " ERROR " not in text, text


def _keyed_batch(keys: list[bytes], value: bytes) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(k, value, (), now) for k in keys])


def test_a_failed_cleaning_pass_is_one_warning_line(broker_factory):
    """The cleaner leaves a corrupt log uncleanable until it is reopened; the shell logs
    the failure once as a WARNING, and the log's other records are still served."""
    broker = broker_factory({"log.cleaner.enable": "false"})  # nothing cleaned before the corruption
    with RawClient.to(broker) as c:
        c.create_topic("keyed", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        for i in range(30):
            assert c.produce("keyed", 0, _keyed_batch([b"k%d" % (i % 3)], b"v%03d" % i + b"." * 200)).error_code == 0
    broker.stop()
    first = min((broker.data_dir / "keyed-0").glob("*.log"))
    data = bytearray(first.read_bytes())
    data[70] ^= 0x10  # inside the first batch: covered by its CRC
    first.write_bytes(bytes(data))
    broker.configs.update({"log.cleaner.enable": "true", "log.cleaner.backoff.ms": "50"})
    broker.start()
    deadline = time.monotonic() + 15
    while "log_cleaner_error" not in broker.stderr_text():
        assert time.monotonic() < deadline, broker.stderr_text()
        time.sleep(0.05)  # polling the broker's log, with a deadline
    time.sleep(0.5)  # ten backoffs: a corrupt log is left uncleanable, not retried (KIP-346)
    with RawClient.to(broker) as c:
        later = c.fetch("keyed", 0, 10)
        assert later.error_code == ErrorCode.NONE and list(iter_records(later.records))
        assert c.produce("keyed", 0, _keyed_batch([b"k0"], b"after")).error_code == ErrorCode.NONE
    text = broker.stderr_text()
    lines = [line for line in text.splitlines() if "log_cleaner_error" in line]
    assert len(lines) == 1, lines
    assert " WARNING " in lines[0] and "tp=keyed-0 reason=" in lines[0], lines
    assert "Traceback" not in text
