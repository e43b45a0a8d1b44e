"""Request and response schemas of the admin APIs (Kafka's protocol JSON for CreateTopics,
DeleteTopics, DescribeConfigs and AlterConfigs (KIP-133), CreatePartitions (KIP-195),
ElectLeaders (KIP-460), AlterPartitionReassignments and ListPartitionReassignments (KIP-455),
IncrementalAlterConfigs (KIP-339), DescribeCluster (KIP-700) and DescribeLogDirs (KIP-113);
docs/design.md "Wire protocol"; docs/operations.md "Incremental changes, the cluster and log dirs").

Written in the vocabulary of :mod:`client.protocol.schema`; :mod:`client.protocol.api` merges
:data:`ADMIN_REQUESTS` and :data:`ADMIN_RESPONSES` into its ``REQUESTS`` and ``RESPONSES``.

The two reassignment APIs are answered by any broker, which writes or reads the
``/admin/reassign_partitions`` znode the controller watches. AlterPartitionReassignments is all
or nothing: when any partition is refused nothing is written, the refused partitions carry
their error (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, REASSIGNMENT_IN_PROGRESS
...) and the others INVALID_REQUEST ``not written: ...``. ListPartitionReassignments with
``topics`` nil lists every reassignment in progress.

IncrementalAlterConfigs changes each named config of a resource by its :class:`AlterConfigOpType`
and leaves the others as they are; APPEND and SUBTRACT apply to list-typed configs only.
DescribeCluster describes the brokers on the listener the request arrived on; DescribeLogDirs,
answered by each broker about itself, each of its log dirs with the partitions in it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from client.protocol.api_keys import ApiKey
from client.protocol.schema import Array, Map, Nullable, Opt

#: The per-item outcome most admin responses share.
_NAME_ERROR = {"name": "str", "error_code": "int", "error_message": Opt(Nullable("str"))}

#: Kafka's value for "authorized operations not computed" (no authorizer: KIP-430's INT32_MIN).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class AlterConfigOpType(IntEnum):
    """IncrementalAlterConfigs ``config_operation`` (Kafka's AlterConfigOp.OpType, KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class EndpointType(IntEnum):
    """DescribeCluster ``endpoint_type`` (KIP-919): a ZooKeeper-era broker serves BROKER only."""

    UNKNOWN = 0
    BROKER = 1
    CONTROLLER = 2


#: The answer AlterConfigs and IncrementalAlterConfigs share.
_ALTER_CONFIGS_RESPONSE = {
    "throttle_time_ms": Opt("int", 0),
    "responses": Array(
        {
            "error_code": "int",
            "error_message": Opt(Nullable("str")),
            "resource_type": "int",
            "resource_name": "str",
        }
    ),
}

ADMIN_REQUESTS: dict[ApiKey, Any] = {
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
    # Kafka's AlterPartitionReassignments (KIP-455): the target replica list of each partition.
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {
        "timeout_ms": Opt("int", 60000),
        "topics": Array(
            {"name": "str", "partitions": Array({"partition_index": "int", "replicas": Array("int")})}
        ),
    },
    # Kafka's ListPartitionReassignments (KIP-455): topics nil = every reassignment in progress.
    ApiKey.LIST_PARTITION_REASSIGNMENTS: {
        "timeout_ms": Opt("int", 60000),
        "topics": Nullable(Array({"name": "str", "partition_indexes": Array("int")})),
    },
    # KIP-339: each config changed by its config_operation (an AlterConfigOpType); value nil for
    # DELETE only. The configs not named keep their overrides.
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {
        "resources": Array(
            {
                "resource_type": "int",
                "resource_name": "str",
                "configs": Array({"name": "str", "config_operation": "int", "value": Nullable("str")}),
            }
        ),
        "validate_only": Opt("bool", False),
    },
    # KIP-700 (endpoint_type: KIP-919's EndpointType).
    ApiKey.DESCRIBE_CLUSTER: {
        "include_cluster_authorized_operations": Opt("bool", False),
        "endpoint_type": Opt("int", int(EndpointType.BROKER)),
    },
    # Kafka's DescribeLogDirs (KIP-113): topics nil = every partition the broker holds.
    ApiKey.DESCRIBE_LOG_DIRS: {
        "topics": Nullable(Array({"topic": "str", "partitions": Array("int")})),
    },
}

ADMIN_RESPONSES: dict[ApiKey, Any] = {
    ApiKey.CREATE_TOPICS: {"topics": Array(_NAME_ERROR)},
    ApiKey.DELETE_TOPICS: {"topics": Array(_NAME_ERROR)},
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
    ApiKey.ALTER_CONFIGS: _ALTER_CONFIGS_RESPONSE,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _ALTER_CONFIGS_RESPONSE,
    ApiKey.CREATE_PARTITIONS: {"throttle_time_ms": Opt("int", 0), "results": Array(_NAME_ERROR)},
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
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": "int",
        "error_message": Opt(Nullable("str")),
        "responses": Array(
            {
                "name": "str",
                "partitions": Array(
                    {"partition_index": "int", "error_code": "int", "error_message": Opt(Nullable("str"))}
                ),
            }
        ),
    },
    ApiKey.LIST_PARTITION_REASSIGNMENTS: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": "int",
        "error_message": Opt(Nullable("str")),
        "topics": Array(
            {
                "name": "str",
                "partitions": Array(
                    {
                        "partition_index": "int",
                        "replicas": Array("int"),
                        "adding_replicas": Array("int"),
                        "removing_replicas": Array("int"),
                    }
                ),
            }
        ),
    },
    ApiKey.DESCRIBE_CLUSTER: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": "int",
        "error_message": Opt(Nullable("str")),
        "endpoint_type": Opt("int", int(EndpointType.BROKER)),
        "cluster_id": Nullable("str"),
        "controller_id": "int",
        "brokers": Array({"broker_id": "int", "host": "str", "port": "int", "rack": Opt(Nullable("str"))}),
        "cluster_authorized_operations": Opt("int", AUTHORIZED_OPERATIONS_OMITTED),
    },
    ApiKey.DESCRIBE_LOG_DIRS: {
        "throttle_time_ms": Opt("int", 0),
        "error_code": Opt("int", 0),
        "results": Array(
            {
                "error_code": "int",
                "log_dir": "str",
                "topics": Array(
                    {
                        "name": "str",
                        "partitions": Array(
                            {
                                "partition_index": "int",
                                "partition_size": "int",
                                "offset_lag": "int",
                                "is_future_key": "bool",
                            }
                        ),
                    }
                ),
                # KIP-827 (v4): the file system's size and the bytes left to use; -1 unknown
                "total_bytes": Opt("int", -1),
                "usable_bytes": Opt("int", -1),
            }
        ),
    },
}
