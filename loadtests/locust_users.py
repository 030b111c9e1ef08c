"""Locust users on mq's native protocol, through the blocking client (``mq.client.blocking``).

Locust runs on gevent; the blocking client runs its asyncio loop in a real OS thread and a
call parks only its own greenlet, so users do not stall each other. Every call is reported
to locust as a request event — ``produce`` (name: the topic, length: the value's bytes),
``consume`` (a poll that returned records; name: ``topic/group``, length: the bytes read)
— with its latency and any failure, so locust's statistics, CSV files, HTML report and
failure counts work as for HTTP.

==========================  ==================================================================
user                        what it does
==========================  ==================================================================
``ProducerUser``            sends one record and waits for its acknowledgement, back to back
``SmallProducerUser``       one small record per second (many of them: connection load)
``GroupConsumerUser``       a member of the scenario's group (``MQ_LOAD_GROUP``), polls and commits
``FanOutConsumerUser``      a consumer in a group of its own: each reads the whole topic
``SlowConsumerUser``        a member of the scenario's group that reads 20 records every 200 ms
==========================  ==================================================================

Settings come from the environment (``mq load run`` sets them): ``MQ_BOOTSTRAP``,
``MQ_LOAD_TOPIC``, ``MQ_LOAD_PARTITIONS``, ``MQ_LOAD_VALUE_BYTES``, ``MQ_LOAD_GROUP``,
``MQ_LOAD_ACKS``, ``MQ_LOAD_RATE`` (records/s per producer; 0: back to back) and
``MQ_LOAD_HOT_KEY_SHARE`` (that share of the records carry the key ``hot``: one
partition gets them all, as a hot key does). HTTP users (``FastHttpUser`` against the gateway) arrive with the gateway.
"""

from __future__ import annotations

import itertools
import os
import random
import time

from locust import User, between, constant, constant_throughput, events, task

from mq.client.blocking import Admin, Consumer, Producer

_ids = itertools.count()


def setting(name: str, default: str) -> str:
    return os.environ.get(f"MQ_LOAD_{name}", default)


def bootstrap_of(host: str | None) -> str:
    return host or os.environ.get("MQ_BOOTSTRAP", "localhost:9092")


@events.test_start.add_listener
def create_topic(environment, **_kwargs) -> None:  # type: ignore[no-untyped-def]
    """The topic exists before the first user starts (an existing one is fine)."""
    with Admin(bootstrap_of(environment.host)) as admin:
        brokers = len(admin.cluster().brokers)
        admin.create_topic(setting("TOPIC", "load"), int(setting("PARTITIONS", "6")), min(3, brokers),
                           exist_ok=True)


class MqUser(User):
    abstract = True

    def on_start(self) -> None:
        self.user_id = next(_ids)
        self.bootstrap = bootstrap_of(self.host)
        self.topic = setting("TOPIC", "load")

    def report(self, request_type: str, name: str, started: float, length: int, error: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type=request_type, name=name, response_time=(time.perf_counter() - started) * 1000,
            response_length=length, exception=error, context={"user": self.user_id})


RATE = float(setting("RATE", "0"))  # records/s per producer user; 0: back to back
HOT_KEY_SHARE = float(setting("HOT_KEY_SHARE", "0"))  # share of records keyed "hot": one partition gets them


class ProducerUser(MqUser):
    wait_time = constant_throughput(RATE) if RATE > 0 else constant(0)

    def on_start(self) -> None:
        super().on_start()
        acks = setting("ACKS", "1")
        self.producer = Producer(self.bootstrap, acks="all" if acks in ("all", "-1") else int(acks), linger_ms=0)
        self.sequence = itertools.count()
        self.value_bytes = int(setting("VALUE_BYTES", "100"))
        self.rng = random.Random(self.user_id)

    def on_stop(self) -> None:
        self.producer.close()

    @task
    def produce(self) -> None:
        head = f"user-{self.user_id}-{next(self.sequence)} ".encode()
        value = (head + b"x" * self.value_bytes)[:max(self.value_bytes, len(head))]
        key = b"hot" if HOT_KEY_SHARE and self.rng.random() < HOT_KEY_SHARE else head.strip()
        started = time.perf_counter()
        try:
            self.producer.send(self.topic, value, key=key)
        except Exception as error:  # noqa: BLE001 - every failure is a locust failure
            self.report("produce", self.topic, started, 0, error)
        else:
            self.report("produce", self.topic, started, len(value), None)


class SmallProducerUser(ProducerUser):
    wait_time = constant_throughput(1)


class GroupConsumerUser(MqUser):
    wait_time = constant(0)
    max_records = 500

    def group_id(self) -> str:
        return setting("GROUP", "load")

    def stats_name(self) -> str:
        return f"{self.topic}/{self.group_name}"

    def on_start(self) -> None:
        super().on_start()
        self.group_name = self.group_id()
        self.consumer = Consumer(self.bootstrap, group_id=self.group_name, auto_offset_reset="earliest",
                                 auto_commit_interval_ms=1000, max_poll_records=self.max_records)
        self.consumer.subscribe([self.topic])

    def on_stop(self) -> None:
        self.consumer.close()

    @task
    def consume(self) -> None:
        started = time.perf_counter()
        try:
            records = self.consumer.poll(timeout_ms=200, max_records=self.max_records)
        except Exception as error:  # noqa: BLE001
            self.report("consume", self.stats_name(), started, 0, error)
            return
        if records:  # an empty poll is waiting, not a request served
            self.report("consume", self.stats_name(), started,
                        sum(len(r.value or b"") for r in records), None)


class FanOutConsumerUser(GroupConsumerUser):
    def group_id(self) -> str:
        return f"{setting('GROUP', 'load')}-{self.user_id}"

    def stats_name(self) -> str:  # one row in locust's statistics for all the groups
        return f"{self.topic}/{setting('GROUP', 'load')}-*"


class SlowConsumerUser(GroupConsumerUser):
    wait_time = between(0.18, 0.22)
    max_records = 20
