"""mq.lab: the handles notebooks lean on do what they say (start, crash, restart, files)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mq.deploy.process import is_alive
from mq.lab import (
    BrokerHandle,
    Cluster,
    consume,
    list_segments,
    make_values,
    produce,
    table,
    wait_until,
)
from mq.lab.process import port_open


def test_make_values_is_seeded_and_sized() -> None:
    a = make_values(1, 50, size_bytes=100)
    assert a == make_values(1, 50, size_bytes=100)
    assert a != make_values(2, 50, size_bytes=100)
    assert {len(v) for v in a} == {100}
    assert a[3].startswith(b"order-0000003 ")


def test_wait_until_returns_the_value_or_names_what_timed_out() -> None:
    calls = iter([0, None, "ready"])
    assert wait_until(lambda: next(calls), timeout_s=5, interval_s=0.001) == "ready"
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="the moon"):
        wait_until(lambda: False, timeout_s=0.1, interval_s=0.01, what="the moon")
    assert time.monotonic() - started < 2


def test_table_formats_rows() -> None:
    text = table([{"offset": 0, "value": b"abc"}, {"offset": 1, "value": b"d" * 40}])
    lines = text.splitlines()
    assert lines[0].split() == ["offset", "value"]
    assert lines[2].split() == ["0", "abc"]
    assert lines[3].endswith("…")


def test_broker_handle_survives_kill_and_restart(tmp_path) -> None:
    data_dir = tmp_path / "broker"
    with Cluster.start(data_dir=data_dir) as cluster:
        broker = cluster.broker()
        assert broker.running and broker.rss_mb() > 0
        admin = cluster.admin()
        admin.create_topic("lab", partitions=1, configs={"segment.bytes": "4096"})
        values = make_values(3, 300, size_bytes=100)
        producer = cluster.producer(linger_ms=1)
        run = produce(producer, "lab", values, chunk_records=50, progress=False)
        assert run.last.offset == 299 and len(run.points) == 6
        segments = cluster.segments("lab")
        assert len(segments) > 1 and segments[0].base_offset == 0
        assert segments[0].index_path.exists() and segments[0].timeindex_path.exists()
        assert cluster.partition_dir("lab") == data_dir / "lab-0"
        cluster.close_clients()

        broker.kill()
        assert not broker.running and not port_open(broker.host, broker.port)
        broker.restart()
        assert broker.running
        consumer = cluster.consumer(auto_offset_reset="earliest")
        records = consume(consumer, "lab", count=300, progress=False, timeout_s=20)
        assert [r.value for r in records] == values
        assert [s.base_offset for s in list_segments(data_dir / "lab-0")][:len(segments) - 1] == \
            [s.base_offset for s in segments][:-1]
    assert not broker.running
    assert data_dir.is_dir(), "a data dir the caller gave is kept"


def test_temporary_data_is_removed_on_close() -> None:
    cluster = Cluster.start()
    data_dir = cluster.broker().data_dir
    assert data_dir.is_dir()
    cluster.close()
    assert not data_dir.exists()
    broker = BrokerHandle.start()
    assert broker.data_dir.is_dir()
    broker.close()
    assert not broker.running and not broker.data_dir.exists()


def test_a_broker_does_not_outlive_the_process_that_started_it(tmp_path) -> None:
    """A notebook kernel that crashes must not leave its broker running."""
    script = (
        "import os, sys\n"
        "from mq.lab import BrokerHandle\n"
        "broker = BrokerHandle.start(data_dir=sys.argv[1])\n"
        "print(broker.pid, flush=True)\n"
        "os._exit(1)  # no cleanup at all, as in a crash\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data")],
                            capture_output=True, text=True,
                            timeout=60, check=False)
    pid = int(result.stdout.strip())
    wait_until(lambda: not is_alive(pid), timeout_s=10, what=f"orphaned broker {pid} to exit")
