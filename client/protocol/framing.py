"""Length-prefixed msgpack frames (docs/design.md "Wire protocol").

A frame is a 4-byte big-endian length followed by that many bytes of msgpack. A request
is ``[api_key, api_version, correlation_id, client_id, body]``; a response is
``[correlation_id, body]``. The length is checked against the limit *before* any body
is buffered, so an oversized or hostile length prefix costs nothing.

:class:`FrameDecoder` is sans-IO: feed it bytes, get whole frames out. Both the broker's
processors and the client's connections use it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from client.protocol.errors import ProtocolError

LENGTH = struct.Struct(">I")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(payload: bytes | memoryview) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise ProtocolError(f"undecodable msgpack payload: {exc.__class__.__name__}") from None


def encode_frame(obj: Any) -> bytes:
    payload = pack(obj)
    return LENGTH.pack(len(payload)) + payload


class FrameDecoder:
    """Accumulates bytes and yields complete frame payloads; refuses oversize lengths at once."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def next_frame(self) -> bytes | None:
        """The next whole payload, or None if more bytes are needed. Raises FrameTooLarge."""
        size = self.frame_size()
        return None if size is None else self.take(size)

    def frame_size(self) -> int | None:
        """The payload size of the frame at the head, None until its length is in. Raises
        FrameTooLarge for a length over the limit (before any of the body is buffered)."""
        if len(self._buffer) < 4:
            return None
        (size,) = LENGTH.unpack_from(self._buffer, 0)
        if size > self.max_frame_bytes:
            raise FrameTooLarge(size, self.max_frame_bytes)
        return size

    def take(self, size: int) -> bytes | None:
        """The head frame's payload (of ``size`` bytes, from :meth:`frame_size`), or None while
        it is incomplete."""
        end = 4 + size
        if len(self._buffer) < end:
            return None
        with memoryview(self._buffer) as view:
            payload = bytes(view[4:end])  # one copy (a bytearray slice would make two)
        del self._buffer[:end]
        return payload


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request(payload: bytes) -> tuple[RequestHeader, Any]:
    """Split a request payload into header and (unvalidated) body.

    Raises ProtocolError when no correlation id can be read: the caller must close the
    connection, because there is nothing to address an error response to.
    """
    message = unpack(payload)
    if not isinstance(message, list) or len(message) != 5:
        raise ProtocolError("a request must be [api_key, api_version, correlation_id, client_id, body]")
    api_key, api_version, correlation_id, client_id, body = message
    for name, value in (
        ("api_key", api_key),
        ("api_version", api_version),
        ("correlation_id", correlation_id),
    ):
        if type(value) is not int or not -(2**31) <= value < 2**31:
            raise ProtocolError(f"request header field {name} must be a 32-bit integer")
    if client_id is not None and not isinstance(client_id, str):
        raise ProtocolError("request header field client_id must be a string or nil")
    return RequestHeader(api_key, api_version, correlation_id, client_id), body


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    return encode_frame([api_key, api_version, correlation_id, client_id, body])


def encode_response(correlation_id: int, body: Any) -> bytes:
    return encode_frame([correlation_id, body])


def decode_response(payload: bytes) -> tuple[int, Any]:
    message = unpack(payload)
    if not isinstance(message, list) or len(message) != 2 or type(message[0]) is not int:
        raise ProtocolError("a response must be [correlation_id, body]")
    return message[0], message[1]
