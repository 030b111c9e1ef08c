"""Requests and responses to frames and back, driven by the dataclasses' type hints.

Request header (msgpack array): ``[api_key, api_version, correlation_id, client_id, body]``.
Response header: ``[correlation_id, body]``; an ``ErrorResponse`` (the request could
not be decoded, or its API or version is unknown) is ``[correlation_id, body, 1]`` so
it can never be mistaken for the response the client expects.
Bodies are msgpack maps keyed by field name. A field typed ``Records`` is ``[offset,
length]`` in the map and its bytes sit in the frame's tail; decoding hands it out as a
``memoryview`` of the tail, without a copy.

Decoding checks every field against its type hint (``bool`` is not an ``int``;
``bytes`` is not a ``str``), refuses unknown and missing required fields, and checks
tail ranges, raising ``ProtocolError(INVALID_REQUEST)`` tagged with the correlation id.
The per-class schemas are compiled once (``mq.protocol.schema``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mq.core.errors import ErrorCode
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import Frame, decode_frame, encode_frame_parts, pack_header
from mq.protocol.apis import REQUESTS
from mq.protocol.messages import ApiKey, ErrorResponse, Request, Response
from mq.protocol.schema import Encoder, decoder_for, encoder_for, fast_constructor

SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    key: (cls.MIN_VERSION, cls.MAX_VERSION) for key, cls in sorted(REQUESTS.items())
}
"""The version range of every API this build speaks (what ApiVersions answers)."""

_ERROR_MARKER = 1
_API_KEYS = {int(key): key for key in ApiKey}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str


_new_request_header = fast_constructor(RequestHeader)


def encode_request(
    request: Request, *, correlation_id: int, client_id: str = "", api_version: int | None = None
) -> bytes:
    """The whole frame for ``request`` (length prefix included)."""
    cls = type(request)
    version = cls.MAX_VERSION if api_version is None else api_version
    encoder = Encoder()
    body = encoder_for(cls)(request, encoder)
    header = pack_header([int(cls.API_KEY), version, correlation_id, client_id, body])
    return encode_frame_parts(header, encoder.tail_parts, encoder.tail_size)


def encode_response(response: Response, *, correlation_id: int) -> bytes:
    """The whole frame for ``response``; also for ``ErrorResponse``."""
    encoder = Encoder()
    body = encoder_for(type(response))(response, encoder)
    if isinstance(response, ErrorResponse):
        header = pack_header([correlation_id, body, _ERROR_MARKER])
    else:
        header = pack_header([correlation_id, body])
    return encode_frame_parts(header, encoder.tail_parts, encoder.tail_size)


def _as_frame(frame: Frame | bytes | bytearray | memoryview) -> Frame:
    return frame if isinstance(frame, Frame) else decode_frame(frame)


def peek_correlation_id(frame: Frame) -> int | None:
    """The correlation id of a request (5-element header) or a response (2 or 3
    elements) if it can be read, else ``None``. Never raises."""
    header = frame.header
    if type(header) is not list:
        return None
    if len(header) == 5:
        cid = header[2]
    elif len(header) in (2, 3):
        cid = header[0]
    else:
        return None
    return cid if type(cid) is int else None


def decode_request(
    frame: Frame, *, apis: Mapping[int, type[Request]] = REQUESTS
) -> tuple[RequestHeader, Request]:
    """The header and the typed request; ``ProtocolError`` for anything malformed.
    ``apis`` are the requests the caller serves: a key outside it is ``UNSUPPORTED_API``
    (a broker keeps the default; inter-broker peers pass ``messages.ALL_REQUESTS``)."""
    frame = _as_frame(frame)
    header = frame.header
    if type(header) is not list or len(header) != 5:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, "request header must be a 5-element array",
            correlation_id=peek_correlation_id(frame),
        )
    api_key, api_version, correlation_id, client_id, body = header
    if type(correlation_id) is not int:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "correlation_id must be an int")
    cls = apis.get(api_key) if type(api_key) is int else None
    if cls is None:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_API, f"unknown api key {api_key!r}", correlation_id=correlation_id
        )
    if type(api_version) is not int or not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"{cls.__name__} version {api_version!r} outside "
            f"[{cls.MIN_VERSION}, {cls.MAX_VERSION}]",
            correlation_id=correlation_id,
        )
    if type(client_id) is not str:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, "client_id must be a string", correlation_id=correlation_id
        )
    try:
        request = decoder_for(cls)(body, frame.tail)
    except ProtocolError as exc:
        raise exc.with_correlation_id(correlation_id) from None
    header = _new_request_header(_API_KEYS[api_key], api_version, correlation_id, client_id)
    return header, request


def decode_response(frame: Frame, request_type: type[Request]) -> tuple[int, Response]:
    """``(correlation_id, response)``; the response is ``request_type.RESPONSE`` or an
    ``ErrorResponse``."""
    frame = _as_frame(frame)
    header = frame.header
    if type(header) is not list or len(header) not in (2, 3):
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, "response header must be a 2- or 3-element array"
        )
    correlation_id, body = header[0], header[1]
    if type(correlation_id) is not int:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "correlation_id must be an int")
    if len(header) == 3:
        if header[2] != _ERROR_MARKER or type(header[2]) is not int:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST, "bad response kind", correlation_id=correlation_id
            )
        cls: type[Response] = ErrorResponse
    else:
        cls = request_type.RESPONSE
    try:
        response = decoder_for(cls)(body, frame.tail)
    except ProtocolError as exc:
        raise exc.with_correlation_id(correlation_id) from None
    return correlation_id, response
