"""Wire codecs: how one listener's frames become requests and responses become frames
(docs/design.md "Two wire protocols").

Every listener frames the same way (a 4-byte big-endian length, then the payload: Kafka's and
ours agree), so the :class:`~broker.network.receive.FrameReceive`, the memory pool, muting and
the rest of the pipeline are shared. What differs is the payload: ``FLOODMARK`` listeners carry
msgpack (client/protocol/framing.py), ``KAFKA`` listeners Kafka's binary protocol
(broker/kafka_protocol/). ``listener.wire.protocol.map`` says which listener speaks which, and
the socket server hands each connection the codec of its listener.

A codec turns a payload into a :class:`Decoded` request (its header, its API, a body in the
shapes of client/protocol/api.py, and a ``context`` the codec wants back when it answers) or
raises :class:`FrameRejected`, which carries the answer to write, if any, and whether to close.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from client.protocol.api import ApiKey, UnsupportedVersion, error_body, validate_request
from client.protocol.errors import ErrorCode, ProtocolError
from client.protocol.framing import RequestHeader, decode_request, encode_response

#: The wire protocols of ``listener.wire.protocol.map``.
FLOODMARK = "FLOODMARK"
KAFKA = "KAFKA"
WIRE_PROTOCOLS = (FLOODMARK, KAFKA)


@dataclass(frozen=True, slots=True)
class Decoded:
    header: RequestHeader
    api_key: ApiKey
    body: dict
    #: Whatever the codec needs again to encode the answer (Kafka's: the decoded request).
    context: Any = None


class FrameRejected(Exception):
    """A frame that is not a request the handlers can see. ``kind`` names the metric
    (``network_errors_total{kind}``); ``answer`` is a whole response frame to write first, if
    the protocol answers such a frame; ``close`` closes the connection after it."""

    def __init__(self, kind: str, message: str, answer: bytes | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.answer = answer
        self.close = close


class WireCodec(Protocol):
    name: str

    def decode(self, payload: bytes) -> Decoded: ...

    def encode_response(self, header: RequestHeader, api_key: ApiKey, body: dict, context: Any) -> bytes: ...


class MsgpackCodec:
    """floodmark's own protocol: ``[api_key, api_version, correlation_id, client_id, body]``.
    A frame without a readable correlation id closes the connection; a bad body, an unknown
    API or a version other than 0 is answered with an error body and the connection stays."""

    name = FLOODMARK

    def decode(self, payload: bytes) -> Decoded:
        try:
            header, raw_body = decode_request(payload)
        except ProtocolError as exc:
            raise FrameRejected("bad_header", str(exc), close=True) from None
        try:
            body = validate_request(header.api_key, header.api_version, raw_body)
        except UnsupportedVersion as exc:
            raise self._refusal(
                header, ErrorCode.UNSUPPORTED_VERSION, "unsupported_version", str(exc)
            ) from None
        except ProtocolError as exc:  # InvalidBody, UnknownApi
            raise self._refusal(header, ErrorCode.INVALID_REQUEST, "invalid_request", str(exc)) from None
        except Exception as exc:  # a validator bug must not take the connection's processor down
            message = f"cannot validate the request: {exc.__class__.__name__}: {exc}"[:500]
            raise self._refusal(header, ErrorCode.INVALID_REQUEST, "invalid_request", message) from None
        return Decoded(header, ApiKey(header.api_key), body)

    def encode_response(self, header: RequestHeader, api_key: ApiKey, body: dict, context: Any) -> bytes:
        return encode_response(header.correlation_id, body)

    @staticmethod
    def _refusal(header: RequestHeader, code: ErrorCode, kind: str, message: str) -> FrameRejected:
        answer = encode_response(header.correlation_id, error_body(code, message))
        return FrameRejected(kind, f"answered {code.name}: {message}", answer=answer)


MSGPACK_CODEC = MsgpackCodec()
