"""A tiny blocking client over a raw socket and ``mq.protocol.codec`` (tests only).

The broker's tests talk the wire protocol directly, so they do not depend on
``mq.client`` and can send anything, including bytes no real client would send.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from typing import Self

from mq.protocol.codec import decode_response, encode_request
from mq.protocol.frame import FrameDecoder
from mq.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
    Request,
    Response,
)
from mq.protocol.record_batch import build_batch, iter_records

MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class RawClient:
    def __init__(self, host: str, port: int, *, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self.next_cid = 1

    @classmethod
    def to(cls, broker, **kwargs) -> RawClient:
        return cls(broker.host, broker.port, **kwargs)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: Request, *, api_version: int | None = None) -> int:
        cid = self.next_cid
        self.next_cid += 1
        self.sock.sendall(encode_request(request, correlation_id=cid, client_id="raw-test", api_version=api_version))
        return cid

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self):
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.decoder.feed(data)

    def recv(self, request_type: type[Request]) -> tuple[int, Response]:
        return decode_response(self.recv_frame(), request_type)

    def request(self, request: Request, *, api_version: int | None = None) -> Response:
        cid = self.send(request, api_version=api_version)
        got, response = self.recv(type(request))
        assert got == cid, f"correlation id {got} != {cid}"
        return response

    def is_closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True once the broker has closed the socket (EOF or reset) within the timeout."""
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                if self.sock.recv(65536) == b"":
                    return True
            except TimeoutError:
                continue
            except OSError:
                return True
        return False

    # ------------------------------------------------------------ conveniences

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        response = self.request(CreateTopicsRequest([CreatableTopic(name, partitions, 1, dict(configs or {}))]))
        assert response.topics[0].error_code == 0, response

    def produce(self, topic: str, partition: int, records: bytes, *, acks: int = 1):
        request = ProduceRequest(acks, 10_000, [ProduceTopicData(topic, [ProducePartitionData(partition, records)])])
        if acks == 0:
            self.send(request)
            return None
        return self.request(request).topics[0].partitions[0]

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
              partition_max_bytes: int = 1 << 20, max_bytes: int = 50 << 20):
        request = FetchRequest([FetchTopic(topic, [FetchPartition(partition, offset, partition_max_bytes)])],
                               max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes)
        return self.request(request).topics[0].partitions[0]


def batch(values: Iterable[bytes], *, timestamp_ms: int | None = None, **kwargs) -> bytes:
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch(((None, v, (), ts) for v in values), **kwargs)


def values_of(records: bytes | memoryview) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in iter_records(records)]


def until(send: Callable[[], object], *, ok: Callable[[object], bool] = lambda r: r.error_code == 0,  # type: ignore[attr-defined]
          timeout_s: float = 15.0) -> object:
    """Send until the answer is ``ok`` (a retriable answer, e.g. while a coordinator
    loads); fails with the last answer after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = send()
        if ok(response):
            return response
        assert time.monotonic() < deadline, response
        time.sleep(0.02)  # polling a retriable answer, with a deadline
