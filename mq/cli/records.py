"""Record keys, values and headers as JSON.

Keys and values are bytes. In JSON (``mq consume --format json``, ``mq produce
--report``) bytes that are valid UTF-8 become a JSON string; any other bytes become
``{"base64": "<standard base64>"}``, an object, so a string can never be mistaken for
encoded data. A missing key (or null value, a tombstone) is ``null``. Headers are a
list of ``[name, value]`` pairs, because a name may repeat and order matters.
"""

from __future__ import annotations

import base64
from typing import Any


def bytes_to_json(data: bytes | memoryview | None) -> Any:
    if data is None:
        return None
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}


def json_to_bytes(value: Any) -> bytes | None:
    """The inverse of ``bytes_to_json`` (for tests and scripts reading reports)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return base64.b64decode(value["base64"])
    return str(value).encode("utf-8")


def headers_to_json(headers: Any) -> list[list[Any]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, dict) else headers
    return [[str(name), bytes_to_json(value)] for name, value in items]
