"""Ask a broker a question over one short blocking connection.

The launcher needs to know when a broker it started is ready (it answers
ApiVersions), and ``mq status`` wants a count of topics (Metadata). Both are one
request and one response, so a blocking socket with a deadline is simpler and more
honest than starting an event loop and a full client.
"""

from __future__ import annotations

import socket
import time

from mq.deploy.topology import split_host_port
from mq.protocol.codec import decode_response, encode_request
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import FrameDecoder
from mq.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    Request,
    Response,
)

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class ProbeError(Exception):
    """The address did not answer the request (refused, timed out, closed, or garbled)."""


def request(address: str, req: Request, *, timeout_s: float = 2.0) -> Response:
    """Send ``req`` to ``address`` ("host:port") and return its decoded response."""
    host, port = split_host_port(address)
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(encode_request(req, correlation_id=1, client_id="mq-probe"))
            decoder = FrameDecoder(MAX_RESPONSE_BYTES)
            while True:
                frame = decoder.next_frame()
                if frame is not None:
                    _, response = decode_response(frame, type(req))
                    return response
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(65536)
                if not chunk:
                    raise ProbeError(f"{address} closed the connection without answering")
                decoder.feed(chunk)
    except ProbeError:
        raise
    except OSError as exc:  # refused, unreachable, timed out
        raise ProbeError(f"{address}: {exc.strerror or exc}") from None
    except ProtocolError as exc:  # something answered, but not an mq broker
        raise ProbeError(f"{address} answered something that is not the mq protocol: {exc}") from None


def api_versions(address: str, *, timeout_s: float = 2.0) -> ApiVersionsResponse:
    response = request(address, ApiVersionsRequest(client_software="mq-probe"), timeout_s=timeout_s)
    if not isinstance(response, ApiVersionsResponse):
        raise ProbeError(f"{address} refused ApiVersions: {response}")
    return response


def metadata(address: str, *, timeout_s: float = 2.0) -> MetadataResponse:
    response = request(address, MetadataRequest(topics=None), timeout_s=timeout_s)
    if not isinstance(response, MetadataResponse):
        raise ProbeError(f"{address} refused Metadata: {response}")
    return response


def first_answering(addresses: list[str], *, timeout_s: float = 2.0) -> str | None:
    """The first address that answers ApiVersions, or None when none does."""
    for address in addresses:
        try:
            api_versions(address, timeout_s=timeout_s)
            return address
        except (ProbeError, ValueError):
            continue
    return None


def port_in_use(address: str) -> bool:
    """True when something accepts TCP connections at ``address``."""
    host, port = split_host_port(address)
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
