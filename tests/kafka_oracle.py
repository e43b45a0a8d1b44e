"""Kafka's protocol as oracles independent of the broker see it, for tests of the Kafka listener
(docs/design.md "Two wire protocols"): valid requests written by kafka-python's own classes
(``kafka.protocol``), the APIs and versions Kafka's schemas define (kio's tables), and answers
read back by kafka-python (kio's reader for the APIs kafka-python lacks).

:func:`read_answer` decodes a response payload at the version its request asked for, or v0 for
an ApiVersions request at a version the broker does not serve (KIP-511); every byte must be
read (kafka-python writes what it read back to the same bytes). :func:`answer_problem` says why
an answer does not say what a check requires.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl  # noqa: F401  (registers the SASL response classes)
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.index import load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader

LENGTH = struct.Struct(">I")
HEADER = struct.Struct(">hhi")
INT16, INT32 = struct.Struct(">h"), struct.Struct(">i")
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
#: The requests the valid frames are built from (kafka-python's classes).
TEMPLATE_APIS = (METADATA, PRODUCE, FETCH, LIST_OFFSETS, API_VERSIONS)
UNSUPPORTED_VERSION, FETCH_SESSION_ID_NOT_FOUND = 35, 70

#: What an answer must say: UNSUPPORTED_VERSION in the API's own shape at the version asked;
#: ApiVersions v0 with UNSUPPORTED_VERSION and the advertised APIs; FETCH_SESSION_ID_NOT_FOUND.
UNSUPPORTED, VERSIONS_V0, NO_SESSION = "unsupported", "api_versions_v0", "no_fetch_session"

Served = Mapping[int, tuple[int, int]]


def kio_knows(api_key: int, version: int) -> bool:
    """Whether Kafka's schemas (as kio ships them) define this version of this API."""
    name = api_key_map.get(api_key)
    return name is not None and version in schema_name_map[name]


def kio_versions(api_key: int) -> list[int]:
    return sorted(v for v in schema_name_map[api_key_map[api_key]] if isinstance(v, int))


def _kp_response_class(api_key: int) -> Any:
    return ResponseClassRegistry._response_class_registry.get(api_key)


def kp_knows(api_key: int, version: int) -> bool:
    cls = _kp_response_class(api_key)
    return cls is not None and cls.valid_versions[0] <= version <= cls.valid_versions[1]


def uvarint(value: int) -> bytes:
    """An unsigned varint (KIP-482's lengths and tags), written here rather than by the broker."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


# -- valid requests, by kafka-python --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Built:
    """A valid request payload (no length prefix) and where its parts are."""

    api_key: int
    version: int
    payload: bytes
    header_len: int
    flexible: bool
    #: Bytes a flip must not touch: Produce's acks (acks=0 is never answered), Fetch's max wait.
    protected: range
    #: Offset of the topics array's count (Metadata, Produce, ListOffsets, Fetch).
    array_at: int


def _records(count: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"flood-%d" % i, headers=[])
    builder.close()
    return bytes(builder.buffer())


RECORDS = _records(3)


def _metadata(version: int, names: list[str]) -> Any:
    topic = MetadataRequest.MetadataRequestTopic
    return MetadataRequest[version](topics=[topic(name=n) for n in names], allow_auto_topic_creation=False)


def _produce(version: int, names: list[str]) -> Any:
    data = ProduceRequest.TopicProduceData
    topics = [
        data(name=n, partition_data=[data.PartitionProduceData(index=0, records=RECORDS)]) for n in names
    ]
    return ProduceRequest[version](transactional_id=None, acks=1, timeout_ms=5000, topic_data=topics)


def fetch_request(version: int, names: list[str], session: tuple[int, int] = (0, -1)) -> Any:
    topic = FetchRequest.FetchTopic
    part = topic.FetchPartition
    return FetchRequest[version](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session[0],
        session_epoch=session[1],
        topics=[
            topic(topic=n, partitions=[part(partition=0, fetch_offset=0, partition_max_bytes=1 << 16)])
            for n in names
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def _list_offsets(version: int, names: list[str]) -> Any:
    topic = ListOffsetsRequest.ListOffsetsTopic
    part = topic.ListOffsetsPartition
    return ListOffsetsRequest[version](
        replica_id=-1,
        isolation_level=0,
        topics=[
            topic(name=n, partitions=[part(partition_index=0, timestamp=-1, current_leader_epoch=-1)])
            for n in names
        ],
    )


def _api_versions(version: int, names: list[str]) -> Any:
    return ApiVersionsRequest[version](client_software_name=names[0], client_software_version="1.0")


_BUILDERS: dict[int, Callable[[int, list[str]], Any]] = {
    METADATA: _metadata,
    PRODUCE: _produce,
    FETCH: fetch_request,
    LIST_OFFSETS: _list_offsets,
    API_VERSIONS: _api_versions,
}


def _layout(api_key: int, version: int) -> tuple[range, int]:
    """(protected bytes, topics array offset), relative to the body (Kafka's schemas)."""
    if api_key == PRODUCE:  # transactional_id (null), acks, timeout_ms, topic_data
        txn = 1 if version >= 9 else 2
        return range(txn, txn + 2), txn + 6
    if api_key == FETCH:  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation, [session], topics
        return range(4, 8), 25 if version >= 7 else 17
    if api_key == LIST_OFFSETS:  # replica_id, [isolation_level], topics
        return range(0), 4 if version < 2 else 5
    return range(0), 0


def build(api_key: int, version: int, correlation_id: int, names: list[str], client_id: str | None) -> Built:
    """A valid request built and written by kafka-python."""
    request = _BUILDERS[api_key](version, names)
    return written(request, api_key, version, correlation_id, client_id)


def written(request: Any, api_key: int, version: int, correlation_id: int, client_id: str | None) -> Built:
    """A kafka-python request written with its header (v2 for a flexible version, else v1)."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    payload = bytes(request.encode(header=True))
    flexible = request.flexible_version_q(version)
    header_len = 10 + len((client_id or "").encode()) + (1 if flexible else 0)
    protected, array_at = _layout(api_key, version)
    at = range(protected.start + header_len, protected.stop + header_len)
    return Built(api_key, version, payload, header_len, flexible, at, array_at + header_len)


def is_flexible(api_key: int, version: int) -> bool:
    """Whether this version of a template API is flexible (KIP-482), as kafka-python has it."""
    return bool(_kp_response_class(api_key).flexible_version_q(version))


# -- reading answers -----------------------------------------------------------------------------


def answer_version(api_key: int, version: int, served: Served) -> int:
    """The version of the answer: the request's, but v0 for ApiVersions at a version not served."""
    low, high = served.get(API_VERSIONS, (0, -1))
    return 0 if api_key == API_VERSIONS and not low <= version <= high else version


def _response_flexible(api_key: int, version: int) -> bool:
    if kp_knows(api_key, version):
        return bool(_kp_response_class(api_key).flexible_version_q(version))
    return bool(load_response_schema(api_key, version).__flexible__)


def read_answer(payload: bytes, api_key: int, version: int, served: Served) -> tuple[int, dict]:
    """``(correlation id, body as plain dicts, lists and ints)`` of a response payload to a request
    with this header. Raises ValueError unless the payload is exactly one response of that API at
    :func:`answer_version` (kafka-python decodes and rewrites it to the same bytes)."""
    version = answer_version(api_key, version, served)
    if not kio_knows(api_key, version) and not kp_knows(api_key, version):
        raise ValueError(f"an answer to API {api_key} v{version}, which Kafka does not define")
    (correlation_id,) = INT32.unpack_from(payload, 0)
    offset = 4
    if api_key != API_VERSIONS and _response_flexible(api_key, version):
        if payload[4:5] != b"\x00":
            raise ValueError(f"response header v1 with tagged fields {payload[4:8]!r}")
        offset = 5
    body = payload[offset:]
    if kp_knows(api_key, version):
        message = _kp_response_class(api_key).decode(body, version=version)
        message._header = None  # decode() leaves the slot unset, and encode() reads it
        if bytes(message.encode(version=version)) != body:
            raise ValueError(f"API {api_key} v{version}: kafka-python does not read the answer as written")
        return correlation_id, message.to_dict(json=False)
    entity, size = entity_reader(load_response_schema(api_key, version))(body, 0)
    if size != len(body):
        raise ValueError(f"API {api_key} v{version}: {len(body) - size} bytes after the answer")
    return correlation_id, _plain(entity)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _walk(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    yield name, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, name)


def answer_problem(check: str | None, body: dict, served: Served) -> str | None:
    """Why an answer does not say what ``check`` requires; None when it does."""
    if check == UNSUPPORTED:
        codes = {int(v) for name, v in _walk(body) if name == "error_code"}
        filled = [name for name, v in _walk(body) if isinstance(v, list) and v]
        if codes - {UNSUPPORTED_VERSION} or filled:
            return f"not UNSUPPORTED_VERSION everywhere (codes {codes}, arrays {filled}): {body}"
    elif check == VERSIONS_V0:
        listed = {(int(a["api_key"]), a["min_version"], a["max_version"]) for a in body["api_keys"]}
        if body["error_code"] != UNSUPPORTED_VERSION or listed != {(k, *r) for k, r in served.items()}:
            return f"not ApiVersions v0 UNSUPPORTED_VERSION with the advertised APIs: {body}"
    elif check == NO_SESSION and (body["error_code"] != FETCH_SESSION_ID_NOT_FOUND or body["responses"]):
        return f"not FETCH_SESSION_ID_NOT_FOUND: {body}"
    return None
