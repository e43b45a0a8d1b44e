"""Kafka's request and response headers (``RequestHeader`` v1-v2, ``ResponseHeader`` v0-v1,
KIP-482; docs/design.md "Two wire protocols"). Sans-IO: bytes in, values out.

A request header is ``api_key`` int16, ``api_version`` int16, ``correlation_id`` int32,
``client_id`` nullable int16-length string (never compact, even in v2), then in v2 (an API
version that is flexible) a tagged-field section. A response header is the correlation id, plus
an empty tagged-field section in v1 (flexible versions), except that ApiVersions always answers
with header v0: a client that does not know the broker's versions yet must be able to read it.
"""

from __future__ import annotations

import struct

from client.protocol.errors import ProtocolError

API_VERSIONS_KEY = 18

_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
#: At most this many tagged fields in a header; no client sends any.
MAX_HEADER_TAGS = 64


class BadHeader(ProtocolError):
    """A request header that cannot be read: nothing to answer, the connection is closed."""


def peek_fixed(payload: bytes) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``, readable before anything else is known."""
    if len(payload) < _FIXED.size:
        raise BadHeader(f"a request of {len(payload)} bytes is shorter than a request header")
    return _FIXED.unpack_from(payload, 0)


def read_uvarint(payload: bytes, offset: int) -> tuple[int, int]:
    """An unsigned varint at ``offset``: ``(value, offset after it)``; at most 5 bytes."""
    value = shift = 0
    for i in range(5):
        if offset + i >= len(payload):
            raise BadHeader("a varint runs past the end of the request")
        byte = payload[offset + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset + i + 1
        shift += 7
    raise BadHeader("a varint longer than 5 bytes")


def uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(payload: bytes, offset: int) -> int:
    """Skip a tagged-field section (KIP-482): a count, then (tag, size, bytes) each."""
    count, offset = read_uvarint(payload, offset)
    if count > MAX_HEADER_TAGS:
        raise BadHeader(f"{count} tagged fields in a request header")
    for _ in range(count):
        _, offset = read_uvarint(payload, offset)
        size, offset = read_uvarint(payload, offset)
        if offset + size > len(payload):
            raise BadHeader("a tagged field says it is longer than the request")
        offset += size
    return offset


def read_client_id(payload: bytes, flexible: bool) -> tuple[str | None, int]:
    """The client id after the fixed fields, and the offset of the body (after the header's
    tagged fields when ``flexible``)."""
    offset = _FIXED.size
    if len(payload) < offset + 2:
        raise BadHeader("the request header ends before its client id")
    (length,) = _INT16.unpack_from(payload, offset)
    offset += 2
    client_id = None
    if length >= 0:
        if offset + length > len(payload):
            raise BadHeader("the client id says it is longer than the request")
        try:
            client_id = payload[offset : offset + length].decode()
        except UnicodeDecodeError:
            raise BadHeader("the client id is not UTF-8") from None
        offset += length
    elif length != -1:
        raise BadHeader(f"client id length {length}")
    if flexible:
        offset = skip_tagged_fields(payload, offset)
    return client_id, offset


def response_header(api_key: int, correlation_id: int, flexible: bool) -> bytes:
    """Header v1 (an empty tagged-field section) for a flexible version, v0 otherwise, and v0
    always for ApiVersions."""
    header = _INT32.pack(correlation_id)
    return header + b"\x00" if flexible and api_key != API_VERSIONS_KEY else header
