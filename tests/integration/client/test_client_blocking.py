"""The blocking facade: from plain code, from inside an event loop, and under gevent."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from mq.client.blocking import Admin, Consumer, Producer
from mq.core.types import TopicPartition
from tests.integration.conftest import REPO


def test_blocking_round_trip(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2)
        assert topic_name in admin.list_topics()
    with Producer(bootstrap, linger_ms=1) as producer:
        meta = producer.send(topic_name, b"one", key=b"k", partition=1)
        future = producer.send_nowait(topic_name, b"two", partition=1)
        assert future.result(5).offset == meta.offset + 1
        bulk = producer.send_many(topic_name, [(None, b"b%d" % i) for i in range(100)], partition=0)
        assert [m.offset for m in bulk] == list(range(100))
        assert producer.partitions_for(topic_name) == [0, 1]
    tp1 = TopicPartition(topic_name, 1)
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
        consumer.assign([TopicPartition(topic_name, 0), tp1])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 102 and time.monotonic() < deadline:
            got += consumer.poll(200)
        assert len(got) == 102
        assert [r.value for r in got if r.partition == 1] == [b"one", b"two"]
        consumer.seek(tp1, 1)
        assert consumer.position(tp1) == 1
        assert consumer.end_offsets([tp1]) == {tp1: 2}


async def test_blocking_client_works_inside_a_running_loop(shared_broker, topic_name) -> None:
    # A notebook cell runs inside an event loop: the blocking client must not use it.
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topic(topic_name)
        [desc] = admin.describe_topics([topic_name])
        assert desc.name == topic_name


GEVENT_SCRIPT = """
from gevent import monkey; monkey.patch_all()
import sys, time, gevent
from mq.client.blocking import Admin, Producer
bootstrap, topic = sys.argv[1], sys.argv[2]
with Admin(bootstrap) as admin:
    admin.create_topic(topic)
producer = Producer(bootstrap, linger_ms=20)
def worker(i):
    return [producer.send(topic, b"g%d-%d" % (i, j)).offset for j in range(5)]
started = time.monotonic()
greenlets = [gevent.spawn(worker, i) for i in range(20)]
gevent.joinall(greenlets, timeout=30)
offsets = sorted(o for g in greenlets for o in g.get())
producer.close()
elapsed = time.monotonic() - started
assert offsets == list(range(100)), offsets
# 100 sends each waiting >= linger_ms: only concurrent greenlets finish this fast
assert elapsed < 100 * 0.02, elapsed
print("ok", elapsed)
"""


def test_blocking_producer_under_gevent(shared_broker, topic_name) -> None:
    """Locust runs users as greenlets with threading monkey-patched."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(GEVENT_SCRIPT),
                             shared_broker.bootstrap, topic_name], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
