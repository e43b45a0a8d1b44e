"""The Kafka listener's wire codec: Kafka's binary protocol in, our request bodies out, and back
(docs/design.md "Two wire protocols").

Decoding a frame: the header's fixed fields first (fewer than 8 bytes: closed). Then:

- an API and version the listener serves: the client id and, for a flexible version, the
  header's tagged fields; the body by kio's compiled reader for that version (a body that cannot
  be read: closed, as Kafka closes on an InvalidRequestException; bytes after it are ignored, as
  Kafka ignores them; tagged fields its schema does not declare are skipped, KIP-482, which kio
  does not do itself); the translator's body, checked against our schema, goes to the handlers;
- ApiVersions at a version the listener does not know: answered at v0 with UNSUPPORTED_VERSION
  and the listener's versions (KIP-511's fallback: the client retries with one it shares);
- an API the listener does not serve but kio knows (SASL, ACLs, transactions): answered in that
  API's own response shape with UNSUPPORTED_VERSION, connection kept; a served API at a version
  it does not advertise: the same when its response has a top-level error code, else closed (an
  empty Produce or Metadata answer would read as success; Kafka closes);
- anything else: closed.

Every refusal is counted (``network_errors_total{kind}``) by the processor.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from types import NoneType, UnionType
from typing import Any, get_args, get_origin

from broker.kafka_protocol import data_apis
from broker.kafka_protocol.entities import (
    error_entity,
    has_field,
    is_flexible,
    known_version,
    request_class,
    request_reader,
    response_class,
    response_writer,
)
from broker.kafka_protocol.header import (
    API_VERSIONS_KEY,
    BadHeader,
    peek_fixed,
    read_client_id,
    read_uvarint,
    response_header,
    uvarint,
)
from broker.kafka_protocol.kafka_api import KafkaApi
from broker.kafka_protocol.kafka_apis import api_versions_entity, build_kafka_apis
from broker.network.wire_codec import KAFKA, MSGPACK_CODEC, Decoded, FrameRejected, WireCodec
from client.protocol.api import ApiKey, validate_request, validate_response
from client.protocol.errors import ErrorCode, ProtocolError
from client.protocol.framing import LENGTH, RequestHeader

#: A handler's answer to a request it refused whole (client/protocol/api.py error_body).
_ERROR_BODY_KEYS = frozenset(("error_code", "error_message"))


class KafkaCodec:
    """Decodes Kafka requests into our bodies and encodes our answers as Kafka responses."""

    name = KAFKA

    def __init__(self, apis: dict[ApiKey, KafkaApi] | None = None) -> None:
        self.apis = apis if apis is not None else build_kafka_apis()

    # -- decoding ---------------------------------------------------------------------------------
    def decode(self, payload: bytes) -> Decoded:
        try:
            api_key, version, correlation_id = peek_fixed(payload)
        except BadHeader as exc:
            raise FrameRejected("bad_header", str(exc), close=True) from None
        api = self.apis.get(api_key)  # type: ignore[call-overload]
        if api is None or not api.supports(version):
            raise self._unsupported(api_key, version, correlation_id, api)
        flexible = is_flexible(api_key, version)
        try:
            client_id, offset = read_client_id(payload, flexible)
        except BadHeader as exc:
            raise FrameRejected("bad_header", str(exc), close=True) from None
        header = RequestHeader(api_key, version, correlation_id, client_id)
        try:
            request = _read_body(api_key, version, flexible, payload, offset)
        except Exception as exc:  # kio raises several types for garbage
            raise FrameRejected(
                "invalid_request",
                f"cannot read {api.key.name} v{version}: {exc.__class__.__name__}: {exc}"[:500],
                close=True,
            ) from None
        # Bytes after the body are ignored, as Kafka's parser ignores them: librdkafka 2.x sends
        # Metadata v12 with three (a stray bool and a tagged field), and real Kafka answers it.
        if api.key is ApiKey.FETCH and data_apis.is_incremental_fetch(request):
            raise self._answered(
                header,
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                "fetch_session_id_not_found",
                "no fetch sessions",
            )
        try:
            body = validate_request(api_key, 0, api.to_body(request, version))
        except (ProtocolError, ValueError, TypeError, AttributeError) as exc:
            raise self._answered(header, ErrorCode.INVALID_REQUEST, "invalid_request", str(exc)) from None
        return Decoded(header, api.key, body, request)

    def _unsupported(
        self, api_key: int, version: int, correlation_id: int, api: KafkaApi | None
    ) -> FrameRejected:
        what = f"API key {api_key}" if api is None else f"{api.key.name} v{version}"
        message = f"{what} is not supported"
        if api_key == API_VERSIONS_KEY:
            entity = api_versions_entity(self.apis, 0, ErrorCode.UNSUPPORTED_VERSION)
            answer = self._frame(api_key, 0, correlation_id, entity)
            return FrameRejected("unsupported_version", message, answer=answer)
        # A served API at a version it does not advertise, whose answer has no top-level error
        # code (Produce, Metadata, ListOffsets...): an empty answer would read as success, so the
        # connection is closed, as Kafka closes it. A client that negotiated never gets here.
        says_error = known_version(api_key, version) and has_field(
            response_class(api_key, version), "error_code"
        )
        if known_version(api_key, version) and (api is None or says_error):
            entity = error_entity(api_key, version, ErrorCode.UNSUPPORTED_VERSION, message)
            answer = self._frame(api_key, version, correlation_id, entity)
            return FrameRejected(
                "unsupported_version", f"answered UNSUPPORTED_VERSION: {message}", answer=answer
            )
        return FrameRejected("unsupported_version", message, close=True)

    def _answered(self, header: RequestHeader, code: ErrorCode, kind: str, message: str) -> FrameRejected:
        entity = error_entity(header.api_key, header.api_version, code, message)
        answer = self._frame(header.api_key, header.api_version, header.correlation_id, entity)
        return FrameRejected(kind, f"answered {code.name}: {message}", answer=answer)

    # -- encoding ---------------------------------------------------------------------------------
    def encode_response(self, header: RequestHeader, api_key: ApiKey, body: dict, context: Any) -> bytes:
        version = header.api_version
        if body.keys() == _ERROR_BODY_KEYS:
            entity = error_entity(api_key, version, body["error_code"], body["error_message"])
        else:
            # checked and defaulted as our own client checks it: translators see every field
            entity = self.apis[api_key].to_response(validate_response(api_key, body), context, version)
        return self._frame(api_key, version, header.correlation_id, entity)

    @staticmethod
    def _frame(api_key: int, version: int, correlation_id: int, entity: Any) -> bytes:
        buffer = io.BytesIO()
        buffer.write(b"\0\0\0\0")
        buffer.write(response_header(api_key, correlation_id, is_flexible(api_key, version)))
        response_writer(api_key, version)(buffer, entity)
        frame = buffer.getbuffer()
        LENGTH.pack_into(frame, 0, len(frame) - 4)
        del frame
        return buffer.getvalue()


# -- KIP-482: tagged fields the schema does not declare ------------------------------------------

#: Wire sizes of kio's fixed-size field types.
_FIXED_SIZES = {
    **dict.fromkeys(("bool", "int8", "uint8"), 1),
    **dict.fromkeys(("int16", "uint16", "error_code"), 2),
    **dict.fromkeys(("int32", "uint32", "timedelta_i32"), 4),
    **dict.fromkeys(("int64", "uint64", "float64", "timedelta_i64", "datetime_i64"), 8),
    "uuid": 16,
}


def _read_body(api_key: int, version: int, flexible: bool, payload: bytes, offset: int) -> Any:
    """kio's reading of the body at ``offset``. kio refuses a tagged field its schema does not
    declare (KeyError), where Kafka skips it (KIP-482: tags are added to released versions and
    older receivers ignore them), so such a body is read again without those fields."""
    reader = request_reader(api_key, version)
    try:
        return reader(payload, offset)[0]
    except KeyError as exc:
        if not flexible:
            raise
        # raises what is wrong with the body when it cannot be walked (a field longer than it)
        stripped = _without_unknown_tags(request_class(api_key, version), payload, offset)
        if stripped is None:
            raise exc from None
    return reader(stripped, 0)[0]


def _without_unknown_tags(cls: type, payload: bytes, offset: int) -> bytes | None:
    """The flexible body at ``offset`` with every tagged field that ``cls`` (a kio message) or its
    nested structs do not declare taken out, bytes after the body kept; None when there is none.
    Raises ProtocolError, ValueError or KeyError for a body that cannot be walked."""
    out = bytearray()
    end, dropped = _copy_struct(cls, payload, offset, out)
    return bytes(out) + payload[end:] if dropped else None


def _copy_struct(cls: type, data: bytes, pos: int, out: bytearray) -> tuple[int, int]:
    """Copy one struct (its fields, then its tagged fields but the unknown ones) into ``out``:
    ``(offset after it, tagged fields dropped)``."""
    dropped = 0
    known = set()
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            known.add(f.metadata["tag"])
        else:
            pos, more = _copy_value(f.type, f.metadata.get("kafka_type", ""), data, pos, out)
            dropped += more
    count, pos = read_uvarint(data, pos)
    kept = []
    for _ in range(count):
        start = pos
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise BadHeader("a tagged field says it is longer than the request")
        if tag in known:
            kept.append(data[start:pos])
    out += uvarint(len(kept)) + b"".join(kept)
    return pos, dropped + count - len(kept)


def _copy_value(tp: Any, kafka_type: str, data: bytes, pos: int, out: bytearray) -> tuple[int, int]:
    """Copy one field of a flexible version (compact arrays, strings and bytes) into ``out``."""
    nullable = get_origin(tp) is UnionType
    if nullable:
        (tp,) = (arg for arg in get_args(tp) if arg is not NoneType)
    if get_origin(tp) is tuple:  # a compact array: its length + 1 (0: null), then its items
        count, end = read_uvarint(data, pos)
        out += data[pos:end]
        dropped = 0
        for _ in range(count - 1):
            end, more = _copy_value(get_args(tp)[0], kafka_type, data, end, out)
            dropped += more
        return end, dropped
    if dataclasses.is_dataclass(tp):
        if nullable:
            raise ValueError("a nullable struct")  # none in the versions served
        return _copy_struct(tp, data, pos, out)  # type: ignore[arg-type]
    if kafka_type in ("string", "bytes", "records"):
        length, end = read_uvarint(data, pos)
        end += max(length - 1, 0)
    else:
        end = pos + _FIXED_SIZES[kafka_type]
    if end > len(data):
        raise BadHeader("a field runs past the end of the request")
    out += data[pos:end]
    return end, 0


def wire_codecs(listener_wire_protocols: Mapping[str, str]) -> dict[str, WireCodec]:
    """Each listener's codec by name, from ``listener.wire.protocol.map`` (one Kafka codec
    shared by the Kafka listeners)."""
    kafka: KafkaCodec | None = None
    out: dict[str, WireCodec] = {}
    for name, wire in listener_wire_protocols.items():
        if wire == KAFKA:
            kafka = kafka or KafkaCodec()
            out[name] = kafka
        else:
            out[name] = MSGPACK_CODEC
    return out
