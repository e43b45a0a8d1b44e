"""API keys and the shape of every request and response body (Kafka's ``ApiKeys`` and its
protocol JSON; docs/design.md "Wire protocol").

Bodies are msgpack maps whose field names are Kafka's (``fetch_offset``,
``current_leader_epoch``, ``high_watermark`` ...). Each API has a request schema and a
response schema written in the small vocabulary below; :func:`validate` checks a
decoded body against one, fills in defaults of optional fields, and raises
:class:`InvalidBody` naming the first offending field. The broker validates every
request before any handler sees it, so handlers can trust types.

All APIs are at version 0 of *our* framing; ApiVersions reports that.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from client.protocol.errors import ProtocolError


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    ELECT_LEADERS = 43


#: Fetch.replica_id of an ordinary consumer (Kafka's CONSUMER_REPLICA_ID).
CONSUMER_REPLICA_ID = -1
#: ListOffsets timestamps with special meaning.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
NO_LEADER = -1


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


class InvalidBody(ProtocolError):
    """A request or response body that does not match its schema; the message names the field."""


# ---------------------------------------------------------------------------------------------
# The schema vocabulary: "int", "str", "bytes", "bool", "any", Nullable(x), Array(x), Map(k, v),
# a dict {field: spec} for a struct, and Opt(spec, default) for a struct field that may be absent.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Nullable:
    inner: Any


@dataclass(frozen=True)
class Array:
    inner: Any


@dataclass(frozen=True)
class Map:
    key: Any
    value: Any


@dataclass(frozen=True)
class Opt:
    inner: Any
    default: Any = None


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def validate(spec: Any, value: Any, path: str = "body") -> Any:
    """Check ``value`` against ``spec``; returns it with optional struct fields defaulted."""
    if isinstance(spec, str):
        ok = {
            "int": lambda v: type(v) is int and INT64_MIN <= v <= INT64_MAX,
            "str": lambda v: type(v) is str,
            "bytes": lambda v: type(v) is bytes,
            "bool": lambda v: type(v) is bool,
            "any": lambda v: True,
        }[spec](value)
        if not ok:
            raise InvalidBody(f"{path} must be {spec}, got {type(value).__name__}")
        return value
    if isinstance(spec, Nullable):
        return None if value is None else validate(spec.inner, value, path)
    if isinstance(spec, Array):
        if type(value) is not list:
            raise InvalidBody(f"{path} must be an array, got {type(value).__name__}")
        return [validate(spec.inner, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(spec, Map):
        if type(value) is not dict:
            raise InvalidBody(f"{path} must be a map, got {type(value).__name__}")
        return {
            validate(spec.key, k, f"{path} key"): validate(spec.value, v, f"{path}[{k!r}]")
            for k, v in value.items()
        }
    if isinstance(spec, dict):
        if type(value) is not dict:
            raise InvalidBody(f"{path} must be a map, got {type(value).__name__}")
        out = {}
        for name, field_spec in spec.items():
            if name in value:
                inner = field_spec.inner if isinstance(field_spec, Opt) else field_spec
                out[name] = validate(inner, value[name], f"{path}.{name}")
            elif isinstance(field_spec, Opt):
                out[name] = field_spec.default
            else:
                raise InvalidBody(f"{path}.{name} is missing")
        return out
    raise TypeError(f"bad schema spec {spec!r}")


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
}


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
        "topics": _topics(
            {
                "fetch_offset": "int",
                "current_leader_epoch": Opt("int", -1),
                "log_start_offset": Opt("int", -1),
                "partition_max_bytes": Opt("int", 1048576),
            }
        ),
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
    ApiKey.CREATE_TOPICS: {
        "topics": Array(
            {
                "name": "str",
                "num_partitions": Opt("int", -1),  # -1: the broker's num.partitions
                "replication_factor": Opt("int", -1),  # -1: default.replication.factor
                "assignments": Opt(Array({"partition": "int", "broker_ids": Array("int")}), []),
                "configs": Opt(Map("str", "str"), {}),
            }
        ),
        "timeout_ms": Opt("int", 30000),
        "validate_only": Opt("bool", False),
    },
    ApiKey.DELETE_TOPICS: {"topics": Array("str"), "timeout_ms": Opt("int", 30000)},
    # KIP-133 (Kafka's DescribeConfigs v1, with KIP-226's synonyms): configuration_keys nil = all.
    ApiKey.DESCRIBE_CONFIGS: {
        "resources": Array(
            {
                "resource_type": "int",
                "resource_name": "str",
                "configuration_keys": Opt(Nullable(Array("str"))),
            }
        ),
        "include_synonyms": Opt("bool", False),
    },
    # KIP-133's AlterConfigs: the configs given replace every override of the resource.
    ApiKey.ALTER_CONFIGS: {
        "resources": Array(
            {
                "resource_type": "int",
                "resource_name": "str",
                "configs": Array({"name": "str", "value": Nullable("str")}),
            }
        ),
        "validate_only": Opt("bool", False),
    },
    # Kafka's CreatePartitions (KIP-195): grow each topic to ``count`` partitions; ``assignments``
    # (nil: placed by the broker) holds the replica lists of the new partitions only, in order.
    ApiKey.CREATE_PARTITIONS: {
        "topics": Array(
            {
                "name": "str",
                "count": "int",
                "assignments": Opt(Nullable(Array({"broker_ids": Array("int")})), None),
            }
        ),
        "timeout_ms": Opt("int", 30000),
        "validate_only": Opt("bool", False),
    },
    # Kafka's ElectLeaders (KIP-460): election_type 0 preferred, 1 unclean; topic_partitions nil:
    # every partition. Answered by the controller only (NOT_CONTROLLER elsewhere).
    ApiKey.ELECT_LEADERS: {
        "election_type": Opt("int", 0),
        "topic_partitions": Nullable(Array({"topic": "str", "partitions": Array("int")})),
        "timeout_ms": Opt("int", 60000),
    },
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
    ApiKey.CREATE_TOPICS: {
        "topics": Array({"name": "str", "error_code": "int", "error_message": Opt(Nullable("str"))})
    },
    ApiKey.DELETE_TOPICS: {
        "topics": Array({"name": "str", "error_code": "int", "error_message": Opt(Nullable("str"))})
    },
    ApiKey.DESCRIBE_CONFIGS: {
        "throttle_time_ms": Opt("int", 0),
        "results": Array(
            {
                "error_code": "int",
                "error_message": Opt(Nullable("str")),
                "resource_type": "int",
                "resource_name": "str",
                "configs": Array(
                    {
                        "name": "str",
                        "value": Nullable("str"),
                        "read_only": "bool",
                        "config_source": "int",
                        "is_sensitive": "bool",
                        "synonyms": Opt(
                            Array({"name": "str", "value": Nullable("str"), "source": "int"}), []
                        ),
                    }
                ),
            }
        ),
    },
    ApiKey.ALTER_CONFIGS: {
        "throttle_time_ms": Opt("int", 0),
        "responses": Array(
            {
                "error_code": "int",
                "error_message": Opt(Nullable("str")),
                "resource_type": "int",
                "resource_name": "str",
            }
        ),
    },
    ApiKey.CREATE_PARTITIONS: {
        "throttle_time_ms": Opt("int", 0),
        "results": Array({"name": "str", "error_code": "int", "error_message": Opt(Nullable("str"))}),
    },
    ApiKey.ELECT_LEADERS: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": "int",
        "replica_election_results": Array(
            {
                "topic": "str",
                "partition_result": Array(
                    {"partition_id": "int", "error_code": "int", "error_message": Opt(Nullable("str"))}
                ),
            }
        ),
    },
    ApiKey.INIT_PRODUCER_ID: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": "int",
        "producer_id": "int",
        "producer_epoch": "int",
    },
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
