"""Locust load on mq's native protocol, through the blocking client.

    MQ_BOOTSTRAP=127.0.0.1:9092 locust -f loadtests/locustfile_native.py \\
        --headless -u 50 -r 10 -t 60s --csv results/native

(``--host 127.0.0.1:9092`` works too and wins over ``MQ_BOOTSTRAP``.) Each simulated
user holds one producer and one consumer. ``produce`` sends one record and waits for
its acknowledgement; ``fetch`` polls the consumer once. Both report to locust as
request events (type ``produce``/``fetch``, name = topic) with their latency and
the bytes moved, so locust's statistics, CSV files and failure counts work as for
HTTP.

Locust runs on gevent. The blocking client runs its asyncio loop in a real OS
thread and the calls here block on it, so users do not stall each other.
"""

from __future__ import annotations

import itertools
import os
import time

from locust import User, constant, events, task

from mq.client.blocking import Admin, Consumer, Producer
from mq.core.types import TopicPartition

TOPIC = os.environ.get("MQ_LOCUST_TOPIC", "locust")
PARTITIONS = int(os.environ.get("MQ_LOCUST_PARTITIONS", "1"))
VALUE_BYTES = int(os.environ.get("MQ_LOCUST_VALUE_BYTES", "100"))


def bootstrap_of(host: str | None) -> str:
    return host or os.environ.get("MQ_BOOTSTRAP", "localhost:9092")


@events.test_start.add_listener
def create_topic(environment, **_kwargs) -> None:
    """The topic must exist before users produce to it; an existing one is fine."""
    admin = Admin(bootstrap_of(environment.host))
    try:
        admin.create_topic(TOPIC, partitions=PARTITIONS, exist_ok=True)
    finally:
        admin.close()


_user_ids = itertools.count()


class NativeUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        bootstrap = bootstrap_of(self.host)
        self.user_id = next(_user_ids)
        self.sequence = itertools.count()
        self.producer = Producer(bootstrap, acks=1, linger_ms=0)
        self.consumer = Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=500)
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.consumer.assign(partitions)
        self.consumer.seek_to_beginning(*partitions)

    def on_stop(self) -> None:
        self.producer.close()
        self.consumer.close()

    def _report(self, request_type: str, started: float, length: int, error: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type=request_type, name=TOPIC, response_time=(time.perf_counter() - started) * 1000,
            response_length=length, exception=error, context={"user": self.user_id},
        )

    @task(3)
    def produce(self) -> None:
        head = f"user-{self.user_id}-{next(self.sequence)} ".encode()
        value = (head + b"x" * VALUE_BYTES)[:VALUE_BYTES]
        started = time.perf_counter()
        try:
            self.producer.send(TOPIC, value)
        except Exception as error:  # noqa: BLE001 - every failure is a locust failure
            self._report("produce", started, 0, error)
        else:
            self._report("produce", started, len(value), None)

    @task(1)
    def fetch(self) -> None:
        started = time.perf_counter()
        try:
            records = self.consumer.poll(timeout_ms=100)
        except Exception as error:  # noqa: BLE001
            self._report("fetch", started, 0, error)
        else:
            self._report("fetch", started, sum(len(r.value or b"") for r in records), None)
