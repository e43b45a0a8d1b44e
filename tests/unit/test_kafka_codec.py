"""The Kafka listener's codec and Kafka's request and response headers
(broker/kafka_protocol/codec.py, header.py; docs/design.md "Two wire protocols").

Requests are written by kafka-python's own classes (``kafka.protocol``) and answers read back by
them, header included: an oracle independent of kio, which the codec reads and writes with. An
answer must be one whole frame that kafka-python reads and writes back to the same bytes. The
last test runs every kind of tests/kafka_bad_frames.py through the processor's framing and the
codec, as the live flood (tests/integration/test_kafka_bad_input.py) does over sockets.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import uuid
from types import NoneType, UnionType
from typing import Any, get_args, get_origin

import pytest
from kafka.protocol.admin.acl import DescribeAclsRequest, DescribeAclsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorResponse,
    MetadataRequest,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse
from kio.serial import entity_writer

from broker.kafka_protocol.codec import KafkaCodec
from broker.kafka_protocol.entities import is_flexible as kio_flexible
from broker.kafka_protocol.entities import request_class
from broker.kafka_protocol.header import (
    MAX_HEADER_TAGS,
    BadHeader,
    peek_fixed,
    read_client_id,
    read_uvarint,
    response_header,
    uvarint,
)
from broker.network.receive import FrameReceive
from broker.network.wire_codec import Decoded, FrameRejected
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from client.protocol.framing import FrameTooLarge, RequestHeader
from tests.kafka_bad_frames import ANSWER, CLOSE, KINDS, FrameSource, bad_frames
from tests.kafka_oracle import RECORDS, answer_problem, build, read_answer

CODEC = KafkaCodec()
SERVED = {int(key): (api.min_version, api.max_version) for key, api in CODEC.apis.items()}
HEAD = struct.Struct(">hhi")


def written(request: Any, correlation_id: int = 7, client_id: str | None = "unit") -> bytes:
    """A request payload (no length prefix) as kafka-python writes it, header included."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True))


def refused(payload: bytes) -> FrameRejected:
    with pytest.raises(FrameRejected) as info:
        CODEC.decode(payload)
    return info.value


def answer(frame: bytes, response_class: Any, version: int) -> Any:
    """kafka-python's reading of a whole response frame (length prefix, header, body)."""
    (size,) = struct.unpack_from(">I", frame)
    assert size == len(frame) - 4
    message = response_class.decode(frame[4:], version=version, header=True)
    assert bytes(message.encode(header=True)) == frame[4:], "not read whole"
    return message


# -- header.py -----------------------------------------------------------------------------------


def test_the_fixed_fields_come_first() -> None:
    assert peek_fixed(HEAD.pack(3, 12, -5) + b"rest") == (3, 12, -5)
    with pytest.raises(BadHeader):
        peek_fixed(HEAD.pack(3, 12, 1)[:7])


@pytest.mark.parametrize("client_id", [None, "", "unit", "ünïcode-client"])
@pytest.mark.parametrize("version", [8, 9])  # Metadata v8: header v1; v9: header v2 (flexible)
def test_header_v1_and_v2_as_kafka_python_writes_them(client_id: str | None, version: int) -> None:
    payload = written(MetadataRequest[version](topics=None), client_id=client_id)
    text = (client_id or "").encode()
    assert read_client_id(payload, version >= 9) == (client_id, 10 + len(text) + (version >= 9))


@pytest.mark.parametrize(
    "tags",
    [b"\x00", b"\x01\x00\x00", b"\x01\x05\x03abc", b"\x03\x00\x01x\x80\x01\x02yz\xff\x7f\x00"],
)
def test_header_v2_tagged_fields_are_skipped(tags: bytes) -> None:
    payload = HEAD.pack(3, 9, 1) + b"\x00\x02id" + tags + b"BODY"
    assert read_client_id(payload, flexible=True) == ("id", len(payload) - 4)


@pytest.mark.parametrize(
    "rest",
    [
        b"",  # no client id
        b"\x00",  # half its length
        b"\xff\xfe",  # length -2
        b"\x80\x00",  # length -32768
        b"\x00\x09abc",  # longer than the request
        b"\x00\x02\xff\xfe",  # not UTF-8
        b"\xff\xff",  # v2: no tagged-field section
        b"\xff\xff\x01\x00\x09abc",  # v2: a tagged field longer than the request
        b"\xff\xff" + uvarint(MAX_HEADER_TAGS + 1) + b"\x00\x00" * (MAX_HEADER_TAGS + 1),
        b"\xff\xff\xff\xff\xff\xff\xff\x01",  # v2: a count varint longer than 5 bytes
        b"\xff\xff\x02\x00\x00\x00",  # v2: the second field cut short
    ],
)
def test_headers_that_cannot_be_read(rest: bytes) -> None:
    with pytest.raises(BadHeader):
        read_client_id(HEAD.pack(3, 9, 1) + rest, flexible=True)
    assert refused(HEAD.pack(3, 9, 1) + rest).kind == "bad_header"


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16_383, 16_384, 2**31, 2**35 - 1])
def test_unsigned_varints(value: int) -> None:
    data = uvarint(value)
    assert read_uvarint(data + b"x", 0) == (value, len(data))


def test_response_headers() -> None:
    assert response_header(3, 9, flexible=False) == b"\0\0\0\x09"
    assert response_header(3, 9, flexible=True) == b"\0\0\0\x09\0"  # v1: no tagged fields
    assert response_header(18, 9, flexible=True) == b"\0\0\0\x09"  # ApiVersions: always v0


# -- decoding what the listener serves -------------------------------------------------------------


def decoded(api_key: int, version: int, names: list[str], client_id: str | None = "unit") -> Decoded:
    out = CODEC.decode(build(api_key, version, 11, names, client_id).payload)
    assert out.header == RequestHeader(api_key, version, 11, client_id)
    return out


@pytest.mark.parametrize("version", range(SERVED[3][0], SERVED[3][1] + 1))
def test_metadata_at_every_served_version(version: int) -> None:
    assert decoded(3, version, ["a", "b"]).body["topics"] == ["a", "b"]


@pytest.mark.parametrize("version", range(SERVED[0][0], SERVED[0][1] + 1))
def test_produce_at_every_served_version(version: int) -> None:
    body = decoded(0, version, ["t"], client_id=None).body
    assert (body["acks"], body["timeout_ms"]) == (1, 5000)
    assert body["topics"] == [{"topic": "t", "partitions": [{"partition": 0, "records": RECORDS}]}]


@pytest.mark.parametrize("version", range(SERVED[1][0], SERVED[1][1] + 1))
@pytest.mark.parametrize("replica_id", [-1, 0, 2, 1000])
def test_fetch_replica_id_is_forced_to_a_consumers(version: int, replica_id: int) -> None:
    """A client claiming to be a follower would move the high watermark: never on this listener."""
    topic = FetchRequest.FetchTopic
    request = FetchRequest[version](
        replica_id=replica_id,
        max_wait_ms=100,
        min_bytes=1,
        topics=[topic(topic="t", partitions=[topic.FetchPartition(partition=3, fetch_offset=42)])],
    )
    body = CODEC.decode(written(request)).body
    assert body["replica_id"] == -1
    assert [
        (t["topic"], p["partition"], p["fetch_offset"]) for t in body["topics"] for p in t["partitions"]
    ] == [("t", 3, 42)]


@pytest.mark.parametrize("version", range(7, SERVED[1][1] + 1))
@pytest.mark.parametrize("epoch", [1, 2**31 - 1, -2])
def test_an_incremental_fetch_is_answered_fetch_session_id_not_found(version: int, epoch: int) -> None:
    request = FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=77, session_epoch=epoch
    )
    rejected = refused(written(request, correlation_id=31))
    assert (rejected.kind, rejected.close) == ("fetch_session_id_not_found", False)
    message = answer(rejected.answer, FetchResponse, version)
    assert message.header.correlation_id == 31
    assert (message.error_code, message.session_id, message.responses) == (70, 0, [])


@pytest.mark.parametrize("epoch", [0, -1])  # a full fetch: a new session, or none
def test_a_full_fetch_is_served(epoch: int) -> None:
    request = FetchRequest[11](replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=0, session_epoch=epoch)
    assert CODEC.decode(written(request)).api_key is ApiKey.FETCH


# -- versions and APIs the listener does not serve -------------------------------------------------


@pytest.mark.parametrize("version", [SERVED[18][1] + 1, 99, 2**15 - 1, -1])
def test_api_versions_at_a_version_not_served_is_answered_at_v0(version: int) -> None:
    """KIP-511: the client reads v0, finds the broker's range and retries with a version in it."""
    rejected = refused(HEAD.pack(18, version, 21) + b"\x00\x04unit" + b"\x00garbage")
    assert (rejected.kind, rejected.close) == ("unsupported_version", False)
    message = answer(rejected.answer, ApiVersionsResponse, 0)
    assert (message.header.correlation_id, message.error_code) == (21, ErrorCode.UNSUPPORTED_VERSION)
    assert {(k.api_key, k.min_version, k.max_version) for k in message.api_keys} == {
        (k, *r) for k, r in SERVED.items()
    }


def test_api_versions_v3_is_answered_with_response_header_v0() -> None:
    request = ApiVersionsRequest[3](client_software_name="unit", client_software_version="1")
    request_decoded = CODEC.decode(written(request, correlation_id=5))
    body = {"error_code": 0, "api_keys": []}
    frame = CODEC.encode_response(request_decoded.header, ApiKey.API_VERSIONS, body, request_decoded.context)
    message = answer(frame, ApiVersionsResponse, 3)
    assert (message.header.correlation_id, message.error_code) == (5, 0)
    assert {(k.api_key, k.min_version, k.max_version) for k in message.api_keys} == {
        (k, *r) for k, r in SERVED.items()
    }


@pytest.mark.parametrize("version", [0, 1])
def test_sasl_handshake_is_answered_unsupported_version_in_its_own_shape(version: int) -> None:
    rejected = refused(written(SaslHandshakeRequest[version](mechanism="PLAIN"), correlation_id=41))
    assert (rejected.kind, rejected.close) == ("unsupported_version", False)
    message = answer(rejected.answer, SaslHandshakeResponse, version)
    assert (message.header.correlation_id, message.error_code, message.mechanisms) == (41, 35, [])


def test_describe_acls_is_answered_unsupported_version_in_its_own_shape() -> None:
    request = DescribeAclsRequest[1](
        resource_type_filter=2,
        resource_name_filter=None,
        pattern_type_filter=3,
        principal_filter=None,
        host_filter=None,
        operation=2,
        permission_type=3,
    )
    message = answer(refused(written(request, correlation_id=4)).answer, DescribeAclsResponse, 1)
    assert (message.header.correlation_id, message.error_code, message.resources) == (4, 35, [])


@pytest.mark.parametrize("version", range(SERVED[0][1] + 1, ProduceRequest.max_version + 1))
def test_a_produce_version_not_advertised_closes_the_connection(version: int) -> None:
    """A Produce answer has no top-level error code: an empty one would read as success, so the
    connection is closed (Kafka closes too)."""
    rejected = refused(HEAD.pack(0, version, 17) + b"\xff\xff\x00" + b"not a produce body")
    assert (rejected.kind, rejected.close, rejected.answer) == ("unsupported_version", True, None)


def test_a_served_api_at_an_unadvertised_version_with_a_top_level_error_is_answered() -> None:
    """InitProducerId v5 is not advertised (v0-4) and its answer carries an error code."""
    rejected = refused(HEAD.pack(22, 5, 21) + b"\xff\xff\x00" + b"not a body")
    assert (rejected.kind, rejected.close) == ("unsupported_version", False)
    assert rejected.answer is not None and rejected.answer[4:8] == (21).to_bytes(4, "big")


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(1000, 0), (-1, 0), (93, 0), (3, 99), (3, -1), (0, 2), (17, 7), (2**15 - 1, 2**15 - 1)],
)
def test_unknown_apis_and_versions_close_the_connection(api_key: int, version: int) -> None:
    """No schema to answer in: nothing to say, the connection is closed."""
    rejected = refused(HEAD.pack(api_key, version, 1) + b"\xff\xff")
    assert (rejected.kind, rejected.close, rejected.answer) == ("unsupported_version", True, None)


# -- bodies ----------------------------------------------------------------------------------------


def test_a_body_that_cannot_be_read_closes_the_connection() -> None:
    payload = build(3, 1, 3, ["topic"], "unit").payload
    for cut in range(14, len(payload)):  # the header (client id 'unit') is 14 bytes
        rejected = refused(payload[:cut])
        assert (rejected.kind, rejected.close, rejected.answer) == ("invalid_request", True, None), cut


def test_bytes_after_the_body_are_ignored_as_kafka_ignores_them() -> None:
    payload = build(3, 12, 3, ["topic"], "unit").payload
    plain = CODEC.decode(payload)
    assert CODEC.decode(payload + b"\x00\x00\x01") == plain  # librdkafka's Metadata v12


def test_unknown_tagged_fields_in_the_body_are_skipped() -> None:
    """KIP-482: a receiver skips the tags it does not know, at any depth."""
    payload = build(3, 12, 3, ["topic"], "unit").payload
    plain = CODEC.decode(payload)
    at_topic = payload.index(b"topic") + 5
    top = payload[:-1] + b"\x02\x05\x03abc\x80\x01\x00"
    nested = payload[:at_topic] + b"\x01\x07\x01z" + payload[at_topic + 1 :]
    both = nested[:-1] + b"\x01\x09\x00"
    for tagged in (top, nested, both):
        assert CODEC.decode(tagged) == plain


def sample(cls: type) -> Any:
    """A kio message with every field set (arrays of one item, nullable fields not null),
    tagged fields left out."""
    values = {}
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue
        tp = f.type
        if get_origin(tp) is UnionType:
            (tp,) = (arg for arg in get_args(tp) if arg is not NoneType)
        item = get_args(tp)[0] if get_origin(tp) is tuple else tp
        value = sample(item) if dataclasses.is_dataclass(item) else SAMPLES[f.metadata["kafka_type"]]
        values[f.name] = (value,) if get_origin(tp) is tuple else value
    return cls(**values)


SAMPLES = {
    **dict.fromkeys(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"), 1),
    "bool": True,
    "float64": 1.5,
    "string": "s",
    "bytes": b"b",
    "records": b"r",
    "uuid": uuid.UUID(int=1),
    "error_code": 0,
    **dict.fromkeys(("timedelta_i32", "timedelta_i64"), datetime.timedelta(milliseconds=1)),
    "datetime_i64": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
}


def codec_outcome(payload: bytes) -> Any:
    try:
        return CODEC.decode(payload)
    except FrameRejected as rejected:
        return rejected.kind, rejected.answer, rejected.close


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(k, v) for k, (low, high) in SERVED.items() for v in range(low, high + 1) if kio_flexible(k, v)],
)
def test_unknown_tagged_fields_are_skipped_in_every_flexible_version_served(
    api_key: int, version: int
) -> None:
    """The whole body walked (every field of every struct) to reach its own tagged fields."""
    buffer = io.BytesIO()
    entity_writer(request_class(api_key, version))(buffer, sample(request_class(api_key, version)))
    body = buffer.getvalue()
    assert body[-1] == 0
    head = HEAD.pack(api_key, version, 3) + b"\x00\x04unit\x00"
    plain = codec_outcome(head + body)
    assert codec_outcome(head + body[:-1] + b"\x02\x80\x08\x02xy\x90\x4e\x00") == plain


@pytest.mark.parametrize("tags", [b"\x01\x05\x7fab", b"\x01\x05\x02a", b"\x02\x05\x00"])
def test_tagged_fields_longer_than_the_request_close_the_connection(tags: bytes) -> None:
    payload = build(3, 12, 3, ["topic"], "unit").payload
    rejected = refused(payload[:-1] + tags)
    assert (rejected.kind, rejected.close) == ("invalid_request", True)


def test_a_body_our_schema_refuses_is_answered_invalid_request() -> None:
    """A Produce v3 whose topics are null: read by kio, refused by the translation."""
    payload = HEAD.pack(0, 3, 8) + b"\xff\xff" + b"\xff\xff" + struct.pack(">hii", 1, 1000, -1)
    rejected = refused(payload)
    assert (rejected.kind, rejected.close) == ("invalid_request", False)
    assert answer(rejected.answer, ProduceResponse, 3).header.correlation_id == 8


def test_a_refusal_by_a_handler_is_answered_in_the_apis_shape() -> None:
    header = RequestHeader(10, 1, 12, "unit")
    body = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": "not yet"}
    frame = CODEC.encode_response(header, ApiKey.FIND_COORDINATOR, body, None)
    message = answer(frame, FindCoordinatorResponse, 1)
    assert (message.header.correlation_id, message.error_code, message.error_message) == (12, 15, "not yet")


# -- every kind of bad frame -----------------------------------------------------------------------


def outcome(data: bytes) -> tuple[str, bytes | None]:
    """What the processor would do with ``data`` then EOF: its framing, then the codec."""
    receive = FrameReceive(1 << 20)
    receive.feed(data)
    try:
        size = receive.frame_size()
    except FrameTooLarge:
        return "closed", None
    payload = None if size is None else receive.take(size)
    if payload is None:
        return "closed", None  # cut short by EOF
    try:
        CODEC.decode(payload)
    except FrameRejected as rejected:
        return ("closed" if rejected.close else "answered"), rejected.answer
    return "answered", None  # by a handler


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_bad_frame_gets_what_it_must(kind: str) -> None:
    frames = bad_frames(FrameSource(random.Random(kind), SERVED, "flood", 1 << 20), {kind: 60})
    for frame in frames:
        got, answered = outcome(frame.data)
        assert got == {ANSWER: "answered", CLOSE: "closed"}.get(frame.expect, got), frame
        if answered is not None:
            api_key, version, correlation_id = frame.header
            assert read_answer(answered[4:], api_key, version, SERVED)[0] == correlation_id
            body = read_answer(answered[4:], api_key, version, SERVED)[1]
            assert answer_problem(frame.check, body, SERVED) is None, frame
