"""Heartbeats (MirrorMaker 2's MirrorHeartbeatConnector): every interval the mirror writes
one small record to the ``heartbeats`` topic of the *source* region, keyed by the flow's
name, with the time it was made as its timestamp. The flow mirrors ``heartbeats`` like any
topic, so its arrival in the target minus that timestamp is the replication latency end
to end (producer, source log, link, target append), measured even when no application
writes. The record value says who wrote it, for people reading the topic::

    {"flow": "east->west", "source": "east", "target": "west", "timestamp_ms": 1764163200123}
"""

from __future__ import annotations

import asyncio
import json
import logging

from mirror.flow_config import FlowConfig
from mirror.topics import HEARTBEATS_TOPIC
from mq.client import Producer
from mq.core.clock import Clock
from mq.core.errors import ErrorCode, MqError

log = logging.getLogger("mirror")


def heartbeat_value(flow: FlowConfig, wall_ms: int) -> bytes:
    return json.dumps({"flow": flow.name, "source": flow.source_region, "target": flow.target_region,
                       "timestamp_ms": wall_ms}, separators=(",", ":")).encode()


class Heartbeats:
    def __init__(self, flow: FlowConfig, producer: Producer, clock: Clock) -> None:
        self.flow = flow
        self.producer = producer
        self.clock = clock
        self.disabled_reason = "heartbeats topic not checked yet"
        self.sent = 0
        self.failed = 0

    async def run(self) -> None:
        interval_s = self.flow.emit_heartbeats_interval_ms / 1000
        pending: set[asyncio.Task] = set()
        while True:
            if not self.disabled_reason:
                task = asyncio.get_running_loop().create_task(self._send_one())
                pending.add(task)  # not awaited here: a cut link must not delay the next beat
                task.add_done_callback(pending.discard)
            await asyncio.sleep(interval_s)

    async def _send_one(self) -> None:
        wall = self.clock.wall_ms()
        try:
            await self.producer.send(HEARTBEATS_TOPIC, heartbeat_value(self.flow, wall),
                                     key=self.flow.name.encode(), timestamp_ms=wall)
            self.sent += 1
        except MqError as exc:
            self.failed += 1
            if exc.code == ErrorCode.MIRROR_TOPIC_READ_ONLY:
                self.disabled_reason = f"{HEARTBEATS_TOPIC} in {self.flow.source_region} is read-only: {exc.message}"
                log.info("event=heartbeats_off flow=%s reason=\"%s\"", self.flow.name, self.disabled_reason)
            else:
                log.info("event=heartbeat_failed flow=%s error=%s", self.flow.name, exc)
