"""The round trips that check the admin APIs' Kafka translations (broker/kafka_protocol/admin_apis*.py),
for tests/unit/test_kafka_admin_apis.py and tests/unit/test_kafka_admin_config_apis.py.

Requests: built with kio, written to bytes and read back with kio's reader (as the listener reads
them); ``to_body`` must give a body our schema accepts (client.protocol.api.validate_request) as
it is. Responses: a body in our schema through ``to_response``, written with kio's writer, and the
bytes decoded by an independent oracle, kafka-python 3.0: its hand-written structs
(kafka/protocol/old/admin.py) where it has the version, else its message classes built from
Kafka's JSON schemas by its own codec; every byte must be consumed.
"""

from __future__ import annotations

import datetime
import io
from typing import Any

from kafka.protocol import admin as kp
from kafka.protocol.old import admin as old
from kafka.protocol.old.types import Array, Schema
from kio.index import load_payload_module
from kio.serial import entity_writer
from kio.static.constants import EntityType

from broker.kafka_protocol import entities
from broker.kafka_protocol.admin_apis import ADMIN_APIS
from broker.kafka_protocol.kafka_api import KafkaApi, api_table
from client.protocol.api import ApiKey, ConfigResourceType, validate_request, validate_response

APIS: dict[ApiKey, KafkaApi] = api_table(ADMIN_APIS)
TOPIC, BROKER = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)

#: What each API advertises, as the module docstrings explain it.
RANGES = {
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
}

#: kafka-python's hand-written response structs, where it has the version (DescribeLogDirs v1 is
#: v0's message, as Kafka's JSON says).
OLD = {
    (ApiKey.CREATE_TOPICS, 2): old.CreateTopicsResponse_v2,
    (ApiKey.DELETE_TOPICS, 1): old.DeleteTopicsResponse_v1,
    (ApiKey.CREATE_PARTITIONS, 0): old.CreatePartitionsResponse_v0,
    (ApiKey.DESCRIBE_CONFIGS, 1): old.DescribeConfigsResponse_v1,
    (ApiKey.ALTER_CONFIGS, 0): old.AlterConfigsResponse_v0,
    (ApiKey.ELECT_LEADERS, 0): old.ElectLeadersResponse_v0,
    (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0): old.AlterPartitionReassignmentsResponse_v0,
    (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0): old.ListPartitionReassignmentsResponse_v0,
    (ApiKey.DESCRIBE_LOG_DIRS, 1): old.DescribeLogDirsResponse_v0,
}
#: kafka-python's message classes (its own codec over Kafka's JSON schemas).
NEW = {
    ApiKey.CREATE_TOPICS: kp.CreateTopicsResponse,
    ApiKey.DELETE_TOPICS: kp.DeleteTopicsResponse,
    ApiKey.CREATE_PARTITIONS: kp.CreatePartitionsResponse,
    ApiKey.DESCRIBE_CONFIGS: kp.DescribeConfigsResponse,
    ApiKey.ALTER_CONFIGS: kp.AlterConfigsResponse,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: kp.IncrementalAlterConfigsResponse,
    ApiKey.ELECT_LEADERS: kp.ElectLeadersResponse,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: kp.AlterPartitionReassignmentsResponse,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: kp.ListPartitionReassignmentsResponse,
    ApiKey.DESCRIBE_CLUSTER: kp.DescribeClusterResponse,
    ApiKey.DESCRIBE_LOG_DIRS: kp.DescribeLogDirsResponse,
}


def ends(key: ApiKey) -> list[int]:
    low, high = RANGES[key]
    return sorted({low, high})


# -- the round trips -------------------------------------------------------------------------------


def request_module(key: ApiKey, version: int) -> Any:
    return load_payload_module(key, version, EntityType.request)


def as_read(key: ApiKey, version: int, request: Any) -> Any:
    """``request`` written to bytes with kio and read back as the listener reads it."""
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    data = buf.getvalue()
    entity, end = entities.request_reader(key, version)(data, 0)
    assert end == len(data)
    return entity


def body_of(key: ApiKey, version: int, request: Any) -> dict:
    """``to_body`` of the request as read; the body must be complete by our schema already."""
    body = APIS[key].to_body(as_read(key, version, request), version)
    assert validate_request(key, 0, body) == body
    return body


def _plain(kind: Any, value: Any) -> Any:
    """A decoded old-style struct as dicts; empty tagged fields, which it drops, left out."""
    if isinstance(kind, Schema):
        names = [n for n in kind.names if n != "tags"]
        assert len(value) in (len(names), len(names) + 1)
        return {n: _plain(t, v) for n, t, v in zip(names, kind.fields, value, strict=False)}
    if isinstance(kind, Array):
        return None if value is None else [_plain(kind.array_of, v) for v in value]
    return value


def decoded(key: ApiKey, version: int, body: dict, request: Any = None) -> dict:
    """``body`` through ``to_response``, written by kio, decoded by kafka-python as plain dicts."""
    validate_response(key, body)  # the test's body is one our handlers could send
    entity = APIS[key].to_response(body, request, version)
    buf = io.BytesIO()
    entities.response_writer(key, version)(buf, entity)
    data = buf.getvalue()
    if (key, version) in OLD:
        struct = OLD[(key, version)]
        stream = io.BytesIO(data)
        values = struct.SCHEMA.decode(stream)
        assert stream.tell() == len(data)
        return _plain(struct.SCHEMA, values)
    cls = NEW[key]
    flexible = cls.flexible_version_q(version)
    decode = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
    message, end = decode(memoryview(data), 0)
    assert end == len(data)
    return message.to_dict()


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)
