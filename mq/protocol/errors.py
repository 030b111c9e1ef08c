"""The one exception a decoder may raise.

Every parser in ``mq.protocol`` turns malformed input into a ``ProtocolError`` with a
named ``ErrorCode`` (never an ``IndexError`` or a msgpack exception), so the broker can
answer a bad client with an error frame, or close the connection, without a stack
trace in its log. ``correlation_id`` is set when it could be read from the frame, so
the answer can be matched to the request.
"""

from __future__ import annotations

from mq.core.errors import ErrorCode, MqError


class ProtocolError(MqError):
    """Malformed or unsupported input, with the code to answer it with."""

    def __init__(
        self, code: ErrorCode, message: str = "", *, correlation_id: int | None = None
    ) -> None:
        super().__init__(code, message)
        self.correlation_id = correlation_id

    def with_correlation_id(self, correlation_id: int | None) -> ProtocolError:
        """The same error, tagged with the request it answers."""
        return ProtocolError(self.code, self.message, correlation_id=correlation_id)
