"""ShareConsumer: a member of a share group (KIP-932), queue semantics on a topic.

::

    async with ShareConsumer(bootstrap="127.0.0.1:9092", group_id="workers", topics=["jobs"]) as c:
        for r in await c.poll():
            c.acknowledge(r, "accept")        # or "release" (redeliver) or "reject" (dead-letter)

Many members may read one partition: the share coordinator locks each record it
hands out to one member for ``share.record.lock.duration.ms``. Acknowledgements are
sent with the next ``poll`` (piggybacked on ShareFetch) or by ``commit()``; a record
``poll`` returned and the application did not acknowledge is accepted at the next
``poll`` (Kafka's implicit acknowledgement) unless ``acknowledgement_mode="explicit"``,
where it is left to its lock expiring. Offsets inside an acquired run that hold no
record (compacted away, transaction markers) are acknowledged as gaps.

Dead letters: a record rejected, or delivered ``share.delivery.attempt.limit`` times
without being accepted, is handed to some member once more with a reason; the
consumer writes it to the dead-letter topic (``dead_letter_topic``, default
``<group>.dlq``, created on first use) with acks=all, adds the headers below, and only
then accepts it, so a dead letter is written at least once and never lost::

    mq.dlq.group  mq.dlq.topic  mq.dlq.partition  mq.dlq.offset  mq.dlq.delivery.count  mq.dlq.reason

``poll`` never returns those to the application.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from mq.client.admin import Admin
from mq.client.cluster import ClusterClient
from mq.client.producer import Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TimestampType, TopicPartition
from mq.protocol import share_messages as s
from mq.protocol.batch_format import iter_batches
from mq.protocol.messages import Request, Response
from mq.protocol.record_batch import decode_records

log = logging.getLogger("mq.client.share")

ACK_TYPES = {"accept": 1, "release": 2, "reject": 3}
MAX_WAIT_MS = 500
"""A ShareFetch waits on the broker at most this long for records (then poll asks again)."""
_REDISCOVER = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION,
                         ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_NOT_AVAILABLE})


class ShareRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    delivery_count: int  # 1 on the first delivery


class ShareConsumer:
    def __init__(self, bootstrap: str = "localhost:9092", *, group_id: str, topics: Iterable[str] = (),
                 client_id: str = "mq-share-consumer", max_poll_records: int = 500,
                 dead_letter_topic: str | None = None, auto_offset_reset: str = "",
                 acknowledgement_mode: str = "implicit", request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, address_map: Mapping[str, str] | None = None,
                 seed: int | None = None) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise MqError(ErrorCode.INVALID_CONFIG, "acknowledgement_mode is implicit or explicit")
        if auto_offset_reset not in ("", "earliest", "latest"):
            raise MqError(ErrorCode.INVALID_CONFIG, "auto_offset_reset is earliest or latest")
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.max_poll_records = max_poll_records
        self.dead_letter_topic = dead_letter_topic or f"{group_id}.dlq"
        self.auto_offset_reset = auto_offset_reset
        self.acknowledgement_mode = acknowledgement_mode
        self.retry_backoff_ms = retry_backoff_ms
        self._address_map = address_map
        self.cluster = ClusterClient(bootstrap, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                     seed=seed, address_map=address_map)
        self.member_id = ""
        self.member_epoch = 0
        self.assignment: list[TopicPartition] = []
        self.heartbeat_interval_ms = 5000
        self.ack_errors: list[s.AcknowledgeResult] = []  # failed acknowledgements, newest last
        self.dead_letters_written = 0
        self._coordinator: int | None = None
        self._delivered: dict[tuple[TopicPartition, int], None] = {}  # returned by poll, not yet acknowledged
        self._acks: dict[TopicPartition, list[s.AcknowledgementBatch]] = {}
        self._heartbeat_task: asyncio.Task | None = None
        self._producer: Producer | None = None
        self._closed = False

    async def __aenter__(self) -> ShareConsumer:  # noqa: PYI034
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = sorted(set(topics))

    async def start(self) -> None:
        await self._heartbeat()
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    # ------------------------------------------------------------ coordinator

    async def _send(self, request: Request) -> Response:
        """To the coordinator, found (again) as needed; retriable errors retried with backoff."""
        for attempt in range(50):
            try:
                if self._coordinator is None:
                    await self._find()
                assert self._coordinator is not None
                response = await self.cluster.request(self._coordinator, request)
            except MqError as exc:
                if exc.code not in _REDISCOVER:
                    raise
                self._coordinator = None
                await asyncio.sleep(min(1000, self.retry_backoff_ms * (attempt + 1)) / 1000)
                continue
            code = ErrorCode(getattr(response, "error_code", 0))
            if code in _REDISCOVER:
                self._coordinator = None
                await asyncio.sleep(min(1000, self.retry_backoff_ms * (attempt + 1)) / 1000)
                continue
            return response
        raise MqError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no share coordinator for {self.group_id!r}")

    async def _find(self) -> None:
        from mq.protocol.group_messages import FindCoordinatorRequest, FindCoordinatorResponse

        response = await self.cluster.request_any(FindCoordinatorRequest(self.group_id, key_type=s.SHARE_KEY_TYPE))
        assert isinstance(response, FindCoordinatorResponse)
        if response.error_code != ErrorCode.NONE:
            raise MqError(ErrorCode(response.error_code), response.error_message)
        self.cluster.add_node(response.node_id, response.host, response.port)
        self._coordinator = response.node_id

    async def _heartbeat(self) -> None:
        request = s.ShareGroupHeartbeatRequest(self.group_id, self.member_id, self.member_epoch, self.topics,
                                               self.auto_offset_reset)
        response = await self._send(request)
        assert isinstance(response, s.ShareGroupHeartbeatResponse)
        code = ErrorCode(response.error_code)
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            log.info("event=share_rejoin group=%s member=%s reason=%s", self.group_id, self.member_id, code.name)
            self._rejoin()
            return
        if code != ErrorCode.NONE:
            raise MqError(code, response.error_message)
        self.member_id, self.member_epoch = response.member_id, response.member_epoch
        self.heartbeat_interval_ms = response.heartbeat_interval_ms or self.heartbeat_interval_ms
        self.assignment = [TopicPartition(t.topic, p) for t in response.assignment for p in t.partitions]

    def _rejoin(self) -> None:
        """Out of the group: held records are gone (the coordinator released them)."""
        self.member_epoch = 0
        self._delivered.clear()
        self._acks.clear()

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            try:
                await self._heartbeat()
            except MqError as exc:
                log.info("event=share_heartbeat_failed group=%s error=%s", self.group_id, exc)

    # ------------------------------------------------------------ acknowledge

    def acknowledge(self, record: ShareRecord, ack_type: str = "accept") -> None:
        """Record the outcome of one record; sent with the next ``poll`` or ``commit``."""
        if ack_type not in ACK_TYPES:
            raise MqError(ErrorCode.INVALID_REQUEST, f"ack type {ack_type!r}: accept, release or reject")
        tp = TopicPartition(record.topic, record.partition)
        self._delivered.pop((tp, record.offset), None)
        self._add_ack(tp, record.offset, record.offset, ACK_TYPES[ack_type])

    def _add_ack(self, tp: TopicPartition, first: int, last: int, ack_type: int) -> None:
        batches = self._acks.setdefault(tp, [])
        if batches and batches[-1].ack_type == ack_type and batches[-1].last_offset + 1 == first:
            batches[-1] = s.AcknowledgementBatch(batches[-1].first_offset, last, ack_type)
        else:
            batches.append(s.AcknowledgementBatch(first, last, ack_type))

    def _take_acks(self) -> list[s.PartitionAcknowledgements]:
        if self.acknowledgement_mode == "implicit":
            for tp, offset in list(self._delivered):
                self._add_ack(tp, offset, offset, ACK_TYPES["accept"])
            self._delivered.clear()
        acks = [s.PartitionAcknowledgements(tp.topic, tp.partition, batches)
                for tp, batches in sorted(self._acks.items())]
        self._acks = {}
        return acks

    def _ack_results(self, results: list[s.AcknowledgeResult]) -> None:
        for r in results:
            if r.error_code != ErrorCode.NONE:
                log.warning("event=share_ack_failed group=%s tp=%s-%d error=%s message=%s", self.group_id,
                            r.topic, r.partition, ErrorCode(r.error_code).name, r.error_message)
                self.ack_errors.append(r)

    async def commit(self) -> list[s.AcknowledgeResult]:
        """Send the acknowledgements recorded so far (ShareAcknowledge); their results."""
        acks = self._take_acks()
        if not acks or not self.member_id:
            return []
        response = await self._send(s.ShareAcknowledgeRequest(self.group_id, self.member_id, acks))
        assert isinstance(response, s.ShareAcknowledgeResponse)
        if response.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            self._rejoin()
            raise MqError(ErrorCode(response.error_code), response.error_message)
        self._ack_results(response.acknowledgements)
        return response.acknowledgements

    # ------------------------------------------------------------ poll

    async def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        """Acknowledge what was recorded, then wait up to ``timeout_ms`` for records."""
        deadline = self.cluster.now_ms() + max(0, timeout_ms)
        backoff = 10
        acks = self._take_acks()
        while True:
            if self.member_epoch == 0:
                await self._heartbeat()
            wait_ms = max(0, min(MAX_WAIT_MS, deadline - self.cluster.now_ms()))
            asked = self.cluster.now_ms()
            response = await self._send(s.ShareFetchRequest(self.group_id, self.member_id, self.max_poll_records,
                                                            acknowledgements=acks, max_wait_ms=wait_ms))
            assert isinstance(response, s.ShareFetchResponse)
            acks = []
            code = ErrorCode(response.error_code)
            if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
                self._rejoin()
                continue
            if code != ErrorCode.NONE:
                raise MqError(code, response.error_message)
            self._ack_results(response.acknowledgements)
            records = await self._take_records(response)
            if records or self.cluster.now_ms() >= deadline:
                return records
            acks = self._take_acks()  # dead letters written meanwhile
            if self.cluster.now_ms() - asked < wait_ms // 2:  # answered at once (a broker that does not wait)
                await asyncio.sleep(min(backoff, max(1, deadline - self.cluster.now_ms())) / 1000)
                backoff = min(backoff * 2, 200)

    async def _take_records(self, response: s.ShareFetchResponse) -> list[ShareRecord]:
        out: list[ShareRecord] = []
        dead: list[tuple[ShareRecord, str]] = []
        for part in response.partitions:
            if part.error_code != ErrorCode.NONE:
                log.warning("event=share_fetch_partition_error group=%s tp=%s-%d error=%s message=%s", self.group_id,
                            part.topic, part.partition, ErrorCode(part.error_code).name, part.error_message)
                continue
            tp = TopicPartition(part.topic, part.partition)
            runs = sorted(part.acquired, key=lambda a: a.first_offset)
            found: set[int] = set()
            with memoryview(part.records) as view:
                for pos, header in iter_batches(view):
                    if header.is_control:
                        continue
                    for rec in decode_records(view[pos:pos + header.size]):
                        run = _run_of(runs, rec.offset)
                        if run is None or rec.offset in found:
                            continue
                        found.add(rec.offset)
                        record = ShareRecord(part.topic, part.partition, rec.offset, rec.timestamp,
                                             header.timestamp_type, rec.key, rec.value, tuple(rec.headers),
                                             run.delivery_count)
                        if run.dead_letter_reason:
                            dead.append((record, run.dead_letter_reason))
                        else:
                            out.append(record)
                            self._delivered[(tp, rec.offset)] = None
            for run in runs:
                for offset in range(run.first_offset, run.last_offset + 1):
                    if offset not in found:
                        self._add_ack(tp, offset, offset, 0)  # a gap: no record at this offset
        if dead:
            await self._write_dead_letters(dead)
        return out

    async def _write_dead_letters(self, dead: list[tuple[ShareRecord, str]]) -> None:
        if self._producer is None:
            admin = Admin(self.bootstrap, address_map=self._address_map)
            try:
                await admin.create_topic(self.dead_letter_topic, 1, min(3, max(1, len(self.cluster.metadata.brokers))),
                                         exist_ok=True)
            finally:
                await admin.close()
            self._producer = Producer(self.bootstrap, acks="all", linger_ms=0, client_id="mq-share-dlq",
                                      address_map=self._address_map)
            await self._producer.start()
        futures = []
        for record, reason in dead:
            headers = [*record.headers, ("mq.dlq.group", self.group_id.encode()),
                       ("mq.dlq.topic", record.topic.encode()), ("mq.dlq.partition", str(record.partition).encode()),
                       ("mq.dlq.offset", str(record.offset).encode()),
                       ("mq.dlq.delivery.count", str(record.delivery_count).encode()),
                       ("mq.dlq.reason", reason.encode())]
            futures.append(self._producer.send(self.dead_letter_topic, record.value, record.key, headers=headers))
        await self._producer.flush()
        for future in futures:
            await future
        # Written: accept (archive) them now, not with the next poll, so a consumer that
        # dies in between rarely leaves them to be written a second time.
        acks: dict[TopicPartition, list[s.AcknowledgementBatch]] = {}
        for record, _ in dead:
            acks.setdefault(TopicPartition(record.topic, record.partition), []).append(
                s.AcknowledgementBatch(record.offset, record.offset, 1))
        response = await self._send(s.ShareAcknowledgeRequest(self.group_id, self.member_id, [
            s.PartitionAcknowledgements(tp.topic, tp.partition, batches) for tp, batches in sorted(acks.items())]))
        self._ack_results(getattr(response, "acknowledgements", []))
        self.dead_letters_written += len(dead)
        log.info("event=share_dead_letters_written group=%s count=%d topic=%s", self.group_id, len(dead),
                 self.dead_letter_topic)

    # ------------------------------------------------------------ close

    async def close(self) -> None:
        """Send the acknowledgements recorded so far, leave the group (held records are
        released at once), close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        try:
            if self.member_id:
                await self.commit()
                await self._send(s.ShareGroupHeartbeatRequest(self.group_id, self.member_id, -1))
        except MqError as exc:
            log.info("event=share_leave_failed group=%s error=%s", self.group_id, exc)
        finally:
            if self._producer is not None:
                await self._producer.close()
            await self.cluster.close()


def _run_of(runs: list[s.AcquiredRecords], offset: int) -> s.AcquiredRecords | None:
    for run in runs:
        if run.first_offset <= offset <= run.last_offset:
            return run
    return None
