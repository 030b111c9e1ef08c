"""Storage faults seen from the wire: corrupt stored bytes get a named error and are
never served; a wide broker shuts down fast (idle checkpoints are not rewritten); the
FileIO journal env var lets chaos tests simulate power loss on a killed broker."""

from __future__ import annotations

import time
from pathlib import Path

from mq.core.errors import ErrorCode
from mq.storage.fileio import power_loss

from .raw import RawClient, batch, values_of

WIDE_PARTITIONS = 1000
SHUTDOWN_BUDGET_S = 3.0


def _flip_bit_in_first_batch(partition_dir: Path) -> None:
    first = min(partition_dir.glob("*.log"))
    data = bytearray(first.read_bytes())
    data[70] ^= 0x10  # inside the first batch's payload: covered by its CRC
    first.write_bytes(bytes(data))


def test_corrupt_closed_segment_gets_named_error_and_other_data_is_served(broker):
    with RawClient.to(broker) as c:
        c.create_topic("bits", 2, {"segment.bytes": "1024"})
        for i in range(12):
            assert c.produce("bits", 0, batch([b"p0-%02d" % i + b"." * 300])).error_code == 0
            assert c.produce("bits", 1, batch([b"p1-%02d" % i])).error_code == 0
    assert broker.stop() == 0
    p0 = broker.data_dir / "bits-0"
    assert len(list(p0.glob("*.log"))) > 2
    _flip_bit_in_first_batch(p0)
    broker.start()
    with RawClient.to(broker) as c:
        for _ in range(3):  # a retrying consumer: same answer, one log line
            bad = c.fetch("bits", 0, 0)
            assert bad.error_code == ErrorCode.KAFKA_STORAGE_ERROR, bad
            assert len(bad.records) == 0 and "CRC" in bad.error_message
            assert str(broker.data_dir) not in bad.error_message
        good = c.fetch("bits", 1, 0)
        assert good.error_code == 0
        assert [v for _, v in values_of(good.records)][:2] == [b"p1-00", b"p1-01"]
        later = c.fetch("bits", 0, 6)
        assert later.error_code == 0 and values_of(later.records)
        assert all(v.startswith(b"p0-") for _, v in values_of(later.records))
        assert c.produce("bits", 0, batch([b"after"])).error_code == 0
    text = broker.stderr_text()
    assert text.count("corrupt_data_not_served") == 1, text
    assert "WARNING" in text.split("corrupt_data_not_served")[0].rsplit("\n", 1)[-1]
    assert "Traceback" not in text


def _timed_stop(broker) -> float:
    started = time.monotonic()
    assert broker.stop(timeout_s=30) == 0
    return time.monotonic() - started


def test_sigterm_with_1000_partitions_exits_within_budget(broker):
    with RawClient.to(broker, timeout_s=60) as c:
        c.create_topic("wide", WIDE_PARTITIONS)
        for p in range(0, WIDE_PARTITIONS, 100):
            assert c.produce("wide", p, batch([b"x"])).error_code == 0
    first = _timed_stop(broker)  # ten partitions moved their recovery point
    broker.start(timeout_s=60)
    second = _timed_stop(broker)  # nothing moved: no file is rewritten
    print(f"shutdown with {WIDE_PARTITIONS} partitions: {first:.2f}s after produce, {second:.2f}s idle")
    assert first <= SHUTDOWN_BUDGET_S and second <= SHUTDOWN_BUDGET_S, (first, second)
    assert "Traceback" not in broker.stderr_text()


def test_fileio_journal_env_allows_power_loss_after_kill(broker_factory, monkeypatch, tmp_path):
    journal = tmp_path / "fileio.journal"
    monkeypatch.setenv("MQ_FILEIO_JOURNAL", str(journal))
    broker = broker_factory({"log.flush.policy": "always"})
    with RawClient.to(broker) as c:
        c.create_topic("pl", 1)
        for i in range(5):
            assert c.produce("pl", 0, batch([b"v%d" % i])).error_code == 0
    broker.kill()
    assert "sync" in journal.read_text()
    power_loss(str(journal))
    broker.start()
    with RawClient.to(broker) as c:
        fetched = c.fetch("pl", 0, 0)
        assert fetched.error_code == 0
        assert [v for _, v in values_of(fetched.records)] == [b"v%d" % i for i in range(5)]
