"""The shape of every request and response body (Kafka's ``ApiKeys`` and its protocol JSON;
docs/design.md "Wire protocol"): the ``REQUESTS`` and ``RESPONSES`` tables, their checks, and the
protocol's constants.

Bodies are msgpack maps whose field names are Kafka's (``fetch_offset``,
``current_leader_epoch``, ``high_watermark`` ...). Each API has a request schema and a
response schema written in the vocabulary of :mod:`client.protocol.schema`;
:func:`validate_request` and :func:`validate_response` check a decoded body against one, fill in
defaults of optional fields, and raise :class:`InvalidBody` naming the first offending field.
The broker validates every request before any handler sees it, so handlers can trust types.
The data-path and inter-broker schemas live here, the admin APIs' in
:mod:`client.protocol.admin_schemas`; :class:`ApiKey` comes from :mod:`client.protocol.api_keys`.
This module re-exports all of those names: import them from here.

All APIs are at version 0 of *our* framing; ApiVersions reports that.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from client.protocol.admin_schemas import ADMIN_REQUESTS, ADMIN_RESPONSES
from client.protocol.api_keys import ApiKey
from client.protocol.group_schemas import GROUP_REQUESTS, GROUP_RESPONSES
from client.protocol.schema import (
    INT64_MAX,
    INT64_MIN,
    Array,
    InvalidBody,
    Map,
    Nullable,
    Opt,
    validate,
)
from client.protocol.topic_id import ZERO_UUID

__all__ = [
    "CONSUMER_REPLICA_ID",
    "DEBUGGING_REPLICA_ID",
    "EARLIEST_TIMESTAMP",
    "INT64_MAX",
    "INT64_MIN",
    "LATEST_TIMESTAMP",
    "NO_LEADER",
    "REQUESTS",
    "RESPONSES",
    "SUPPORTED_APIS",
    "ApiKey",
    "Array",
    "ConfigResourceType",
    "ConfigSource",
    "ControlRequestType",
    "InvalidBody",
    "Map",
    "Nullable",
    "Opt",
    "UnknownApi",
    "UnsupportedVersion",
    "error_body",
    "validate",
    "validate_request",
    "validate_response",
]


#: Fetch.replica_id of an ordinary consumer (Kafka's CONSUMER_REPLICA_ID).
CONSUMER_REPLICA_ID = -1
#: Fetch.replica_id of a debugging consumer (Kafka's DEBUGGING_CONSUMER_ID, Request.DebuggingConsumerId):
#: the leader and the followers serve it, up to their own HW (``floodmark verify-replicas``).
DEBUGGING_REPLICA_ID = -2
#: ListOffsets timestamps with special meaning.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
NO_LEADER = -1


class ControlRequestType(IntEnum):
    """LeaderAndIsr ``type`` (Kafka's AbstractControlRequest.Type, KIP-516): FULL names every
    partition the addressee hosts (``hosted_topics``), so its logs of any other partition or topic
    id are strays (docs/design.md "Topic ids (KIP-516)"); a sender that sets none sends UNKNOWN."""

    UNKNOWN = 0
    INCREMENTAL = 1
    FULL = 2


class ConfigResourceType(IntEnum):
    """DescribeConfigs/AlterConfigs ``resource_type`` (Kafka's ConfigResource.Type, KIP-133)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4


class ConfigSource(IntEnum):
    """Where a config's value comes from (Kafka's DescribeConfigsResponse.ConfigSource, KIP-226)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


# ---------------------------------------------------------------------------------------------
# Schemas. Shared pieces first.
# ---------------------------------------------------------------------------------------------

TOPIC_PARTITION = {"topic": "str", "partition": "int"}
PARTITION_ERROR = {"topic": "str", "partition": "int", "error_code": "int"}
#: A broker in LeaderAndIsr / UpdateMetadata: ``host``/``port`` on the controller's inter-broker
#: listener, ``endpoints`` every advertised listener (KIP-103; absent from older senders).
LISTENER_ENDPOINT = {
    "listener_name": "str",
    "host": "str",
    "port": "int",
    "security_protocol": Opt("str", "PLAINTEXT"),
}
BROKER_ENDPOINT = {
    "id": "int",
    "host": "str",
    "port": "int",
    "rack": Opt(Nullable("str")),
    "endpoints": Opt(Nullable(Array(LISTENER_ENDPOINT))),
}
PARTITION_STATE = {
    "topic": "str",
    "partition": "int",
    "controller_epoch": "int",
    "leader": "int",
    "leader_epoch": "int",
    "isr": Array("int"),
    "zk_version": "int",
    "replicas": Array("int"),
    "offline_replicas": Opt(Array("int"), []),
    # KIP-455's fields of LeaderAndIsr: while a reassignment moves the partition, the target
    # replicas not yet in the ISR and the replicas that will leave (both empty otherwise)
    "adding_replicas": Opt(Array("int"), []),
    "removing_replicas": Opt(Array("int"), []),
    # KIP-516: the topic's id (Kafka's Uuid text); ZERO_UUID: the sender knows none
    "topic_id": Opt("str", ZERO_UUID),
}
#: One topic of a FULL LeaderAndIsr's ``hosted_topics``: its id and the partitions hosted here.
HOSTED_TOPIC = {"topic": "str", "topic_id": Opt("str", ZERO_UUID), "partitions": Array("int")}


def _topics(partition_fields: dict) -> Array:
    """Kafka's usual nesting: [{topic, partitions: [{partition, ...}]}]."""
    return Array({"topic": "str", "partitions": Array({"partition": "int", **partition_fields})})


REQUESTS: dict[ApiKey, Any] = {
    ApiKey.API_VERSIONS: {},
    ApiKey.METADATA: {
        "topics": Nullable(Array("str")),  # nil = all topics
        "allow_auto_topic_creation": Opt("bool", False),
    },
    ApiKey.PRODUCE: {
        "acks": "int",
        "timeout_ms": "int",
        "transactional_id": Opt(Nullable("str")),
        "topics": _topics({"records": "bytes"}),
    },
    ApiKey.FETCH: {
        "replica_id": Opt("int", CONSUMER_REPLICA_ID),
        "max_wait_ms": "int",
        "min_bytes": "int",
        "max_bytes": Opt("int", 52428800),
        "isolation_level": Opt("int", 0),
        # KIP-227 (broker/replica/fetch_session.py): epoch -1 is sessionless, 0 opens a session
        "session_id": Opt("int", 0),
        "session_epoch": Opt("int", -1),
        "topics": _topics(
            {
                "fetch_offset": "int",
                "current_leader_epoch": Opt("int", -1),
                "log_start_offset": Opt("int", -1),
                "partition_max_bytes": Opt("int", 1048576),
            }
        ),
        "forgotten_topics": Opt(Array({"topic": "str", "partitions": Array("int")}), []),
    },
    ApiKey.LIST_OFFSETS: {
        "replica_id": Opt("int", CONSUMER_REPLICA_ID),
        "isolation_level": Opt("int", 0),
        "topics": _topics({"timestamp": "int", "current_leader_epoch": Opt("int", -1)}),
    },
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {
        "replica_id": Opt("int", CONSUMER_REPLICA_ID),
        "topics": _topics({"leader_epoch": "int", "current_leader_epoch": Opt("int", -1)}),
    },
    # KIP-380: broker_epoch is the czxid of the addressee's /brokers/ids/<id>; -1 = unknown.
    ApiKey.LEADER_AND_ISR: {
        "controller_id": "int",
        "controller_epoch": "int",
        "broker_epoch": Opt("int", -1),
        "partition_states": Array({**PARTITION_STATE, "is_new": Opt("bool", False)}),
        "live_leaders": Array(BROKER_ENDPOINT),
        "type": Opt("int", ControlRequestType.UNKNOWN),
        "hosted_topics": Opt(Array(HOSTED_TOPIC), []),
    },
    ApiKey.UPDATE_METADATA: {
        "controller_id": "int",
        "controller_epoch": "int",
        "broker_epoch": Opt("int", -1),
        "partition_states": Array(PARTITION_STATE),
        "live_brokers": Array(BROKER_ENDPOINT),
    },
    ApiKey.STOP_REPLICA: {
        "controller_id": "int",
        "controller_epoch": "int",
        "broker_epoch": Opt("int", -1),
        "delete_partitions": "bool",
        "partitions": Array(TOPIC_PARTITION),
    },
    ApiKey.CONTROLLED_SHUTDOWN: {"broker_id": "int", "broker_epoch": Opt("int", -1)},
    # Kafka's InitProducerId (KIP-98; docs/design.md "Idempotent producer"). Only
    # transactional_id = nil (the idempotent producer) is served: there are no transactions.
    # producer_id / producer_epoch are v3's (KIP-360): the caller's current id and epoch, to be
    # bumped; -1 (or absent, an older client) asks for a new id.
    ApiKey.INIT_PRODUCER_ID: {
        "transactional_id": Nullable("str"),
        "transaction_timeout_ms": "int",
        "producer_id": Opt("int", -1),
        "producer_epoch": Opt("int", -1),
    },
    **ADMIN_REQUESTS,
    **GROUP_REQUESTS,
}

RESPONSES: dict[ApiKey, Any] = {
    ApiKey.API_VERSIONS: {
        "error_code": "int",
        "api_keys": Array({"api_key": "int", "min_version": "int", "max_version": "int"}),
    },
    ApiKey.METADATA: {
        "brokers": Array({"node_id": "int", "host": "str", "port": "int", "rack": Opt(Nullable("str"))}),
        "cluster_id": Nullable("str"),
        "controller_id": "int",
        "topics": Array(
            {
                "error_code": "int",
                "topic": "str",
                "topic_id": Opt("str", ZERO_UUID),  # KIP-516 (Kafka's Metadata v10+)
                "is_internal": Opt("bool", False),
                "partitions": Array(
                    {
                        "error_code": "int",
                        "partition": "int",
                        "leader": "int",
                        "leader_epoch": "int",
                        "replicas": Array("int"),
                        "isr": Array("int"),
                        "offline_replicas": Opt(Array("int"), []),
                    }
                ),
            }
        ),
    },
    ApiKey.PRODUCE: {
        "topics": _topics(
            {
                "error_code": "int",
                "base_offset": "int",
                "log_append_time": Opt("int", -1),
                "log_start_offset": Opt("int", -1),
                "error_message": Opt(Nullable("str")),
            }
        ),
        "throttle_time_ms": Opt("int", 0),
    },
    ApiKey.FETCH: {
        "error_code": Opt("int", 0),
        "throttle_time_ms": Opt("int", 0),
        "session_id": Opt("int", 0),
        "topics": _topics(
            {
                "error_code": "int",
                "high_watermark": "int",
                "last_stable_offset": Opt("int", -1),
                "log_start_offset": Opt("int", -1),
                "records": "bytes",
            }
        ),
    },
    ApiKey.LIST_OFFSETS: {
        "topics": _topics(
            {"error_code": "int", "timestamp": "int", "offset": "int", "leader_epoch": Opt("int", -1)}
        )
    },
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {
        "topics": _topics({"error_code": "int", "leader_epoch": "int", "end_offset": "int"})
    },
    ApiKey.LEADER_AND_ISR: {"error_code": "int", "partitions": Array(PARTITION_ERROR)},
    ApiKey.UPDATE_METADATA: {"error_code": "int"},
    ApiKey.STOP_REPLICA: {"error_code": "int", "partitions": Array(PARTITION_ERROR)},
    ApiKey.CONTROLLED_SHUTDOWN: {"error_code": "int", "remaining_partitions": Array(TOPIC_PARTITION)},
    ApiKey.INIT_PRODUCER_ID: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": "int",
        "producer_id": "int",
        "producer_epoch": "int",
    },
    **ADMIN_RESPONSES,
    **GROUP_RESPONSES,
}

#: What ApiVersions advertises: every API with a request schema, at version 0.
SUPPORTED_APIS: tuple[ApiKey, ...] = tuple(sorted(REQUESTS))


def validate_request(api_key: int, api_version: int, body: Any) -> dict:
    """Validate a request body. Raises UnknownApi or InvalidBody."""
    try:
        key = ApiKey(api_key)
    except ValueError:
        raise UnknownApi(api_key) from None
    if key not in REQUESTS:
        raise UnknownApi(api_key)
    if api_version != 0:
        raise UnsupportedVersion(f"{key.name} version {api_version} is not supported (only 0)")
    return validate(REQUESTS[key], {} if body is None and key is ApiKey.API_VERSIONS else body, key.name)


def validate_response(api_key: ApiKey, body: Any) -> dict:
    return validate(RESPONSES[api_key], body, f"{api_key.name} response")


class UnknownApi(InvalidBody):
    def __init__(self, api_key: int) -> None:
        super().__init__(f"unknown API key {api_key}")
        self.api_key = api_key


class UnsupportedVersion(InvalidBody):
    pass


def error_body(code: int, message: str) -> dict:
    """The body the broker sends for a request it cannot handle at all (bad shape, unknown API):
    exactly ``{"error_code", "error_message"}``. Clients raise it as a KafkaError."""
    return {"error_code": int(code), "error_message": message}
