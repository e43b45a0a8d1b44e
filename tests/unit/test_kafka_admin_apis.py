"""The admin APIs' Kafka translations (broker/kafka_protocol/admin_apis.py and
admin_apis_cluster.py) at the oldest and newest version each advertises, and every version in
between once: CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, the two reassignment
APIs, DescribeCluster and DescribeLogDirs (the config APIs: test_kafka_admin_config_apis.py). The
round trips and their oracle, kafka-python 3.0's decoders: tests/unit/kafka_admin_roundtrip.py.
The requests kafka-python itself encodes: test_kafka_admin_client_requests.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.kafka_protocol import entities
from broker.kafka_protocol.admin_apis import CANCEL_UNSUPPORTED
from client.protocol.admin_schemas import AUTHORIZED_OPERATIONS_OMITTED
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from tests.unit.kafka_admin_roundtrip import (
    APIS,
    RANGES,
    as_read,
    body_of,
    decoded,
    ends,
    ms,
    request_module,
)

# -- CreateTopics, DeleteTopics, CreatePartitions -----------------------------------------------------


def create_topics_request(version: int) -> Any:
    m = request_module(ApiKey.CREATE_TOPICS, version)

    def topic(name: str, partitions: int, factor: int, assignments: dict, configs: dict) -> Any:
        return m.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=factor,
            assignments=tuple(
                m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                for p, b in assignments.items()
            ),
            configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
        )

    return m.CreateTopicsRequest(
        topics=(
            topic("a", 3, 2, {}, {"retention.ms": "1000", "cleanup.policy": "compact"}),
            topic("b", -1, -1, {0: [1, 2], 1: [2, 3]}, {}),
            topic("nulls", 1, 1, {}, {"retention.ms": None, "segment.ms": None}),
        ),
        timeout=ms(5000),
        validate_only=True,
    )


@pytest.mark.parametrize("version", ends(ApiKey.CREATE_TOPICS))
def test_create_topics(version: int) -> None:
    request = create_topics_request(version)
    assert body_of(ApiKey.CREATE_TOPICS, version, request) == {
        "topics": [
            {
                "name": "a",
                "num_partitions": 3,
                "replication_factor": 2,
                "assignments": [],
                "configs": {"retention.ms": "1000", "cleanup.policy": "compact"},
            },
            {
                "name": "b",
                "num_partitions": -1,
                "replication_factor": -1,
                "assignments": [
                    {"partition": 0, "broker_ids": [1, 2]},
                    {"partition": 1, "broker_ids": [2, 3]},
                ],
                "configs": {},
            },
        ],  # "nulls" is answered without the handler
        "timeout_ms": 5000,
        "validate_only": True,
    }
    answer = {
        "topics": [
            {"name": "a", "error_code": 0, "error_message": None},
            {
                "name": "b",
                "error_code": ErrorCode.INVALID_REPLICATION_FACTOR,
                "error_message": "too few brokers",
            },
        ]
    }
    got = decoded(ApiKey.CREATE_TOPICS, version, answer, as_read(ApiKey.CREATE_TOPICS, version, request))
    assert got["throttle_time_ms"] == 0
    expected = [
        ("a", 0, None),
        ("b", 38, "too few brokers"),
        ("nulls", 40, "Null value not supported for topic configs: retention.ms,segment.ms"),
    ]
    assert [(t["name"], t["error_code"], t["error_message"]) for t in got["topics"]] == expected
    if version >= 5:  # not returned: Kafka's defaults
        assert {(t["num_partitions"], t["replication_factor"], len(t["configs"])) for t in got["topics"]} == {
            (-1, -1, 0)
        }
    if version >= 7:
        assert {t["topic_id"] for t in got["topics"]} == {None}  # kafka-python's name for the zero UUID


@pytest.mark.parametrize("version", ends(ApiKey.DELETE_TOPICS))
def test_delete_topics(version: int) -> None:
    m = request_module(ApiKey.DELETE_TOPICS, version)
    request = m.DeleteTopicsRequest(topic_names=("a", "b"), timeout=ms(3000))
    assert body_of(ApiKey.DELETE_TOPICS, version, request) == {"topics": ["a", "b"], "timeout_ms": 3000}
    answer = {
        "topics": [
            {"name": "a", "error_code": 0, "error_message": None},
            {"name": "b", "error_code": 3, "error_message": "Topic 'b' does not exist."},
        ]
    }
    got = decoded(ApiKey.DELETE_TOPICS, version, answer)
    assert [(t["name"], t["error_code"]) for t in got["responses"]] == [("a", 0), ("b", 3)]
    if version >= 5:
        assert got["responses"][1]["error_message"] == "Topic 'b' does not exist."


@pytest.mark.parametrize("version", ends(ApiKey.CREATE_PARTITIONS))
def test_create_partitions(version: int) -> None:
    m = request_module(ApiKey.CREATE_PARTITIONS, version)
    request = m.CreatePartitionsRequest(
        topics=(
            m.CreatePartitionsTopic(name="a", count=6, assignments=None),
            m.CreatePartitionsTopic(
                name="b",
                count=4,
                assignments=(
                    m.CreatePartitionsAssignment(broker_ids=(1, 2)),
                    m.CreatePartitionsAssignment(broker_ids=(2, 3)),
                ),
            ),
        ),
        timeout=ms(1000),
        validate_only=False,
    )
    assert body_of(ApiKey.CREATE_PARTITIONS, version, request) == {
        "topics": [
            {"name": "a", "count": 6, "assignments": None},
            {"name": "b", "count": 4, "assignments": [{"broker_ids": [1, 2]}, {"broker_ids": [2, 3]}]},
        ],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    answer = {
        "throttle_time_ms": 7,
        "results": [
            {"name": "a", "error_code": 0, "error_message": None},
            {"name": "b", "error_code": 37, "error_message": "Topic already has 4 partitions."},
        ],
    }
    got = decoded(ApiKey.CREATE_PARTITIONS, version, answer)
    assert got["throttle_time_ms"] == 7
    assert [(r["name"], r["error_code"], r["error_message"]) for r in got["results"]] == [
        ("a", 0, None),
        ("b", 37, "Topic already has 4 partitions."),
    ]


# -- ElectLeaders, the reassignment APIs -----------------------------------------------------------


def elect_request(version: int, partitions: dict[str, list[int]] | None) -> Any:
    m = request_module(ApiKey.ELECT_LEADERS, version)
    wanted = (
        None
        if partitions is None
        else tuple(m.TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in partitions.items())
    )
    return entities.make(m.ElectLeadersRequest, election_type=1, topic_partitions=wanted, timeout=ms(2000))


@pytest.mark.parametrize("version", ends(ApiKey.ELECT_LEADERS))
def test_elect_leaders(version: int) -> None:
    request = elect_request(version, {"t": [0, 1]})
    assert body_of(ApiKey.ELECT_LEADERS, version, request) == {
        "election_type": 0 if version == 0 else 1,  # v0 elects the preferred leader
        "topic_partitions": [{"topic": "t", "partitions": [0, 1]}],
        "timeout_ms": 2000,
    }
    assert body_of(ApiKey.ELECT_LEADERS, version, elect_request(version, None))["topic_partitions"] is None
    answer = {
        "error_code": 0,
        "replica_election_results": [
            {
                "topic": "t",
                "partition_result": [
                    {"partition_id": 0, "error_code": 0, "error_message": None},
                    {"partition_id": 1, "error_code": 84, "error_message": "Leader election not needed"},
                ],
            }
        ],
    }
    got = decoded(ApiKey.ELECT_LEADERS, version, answer, as_read(ApiKey.ELECT_LEADERS, version, request))
    (topic,) = got["replica_election_results"]
    assert topic["topic"] == "t"
    assert [(p["partition_id"], p["error_code"], p["error_message"]) for p in topic["partition_result"]] == [
        (0, 0, None),
        (1, 84, "Leader election not needed"),
    ]
    assert got.get("error_code", 0) == 0


@pytest.mark.parametrize("version", ends(ApiKey.ELECT_LEADERS))
def test_a_refused_election_names_its_error_in_every_version(version: int) -> None:
    request = as_read(ApiKey.ELECT_LEADERS, version, elect_request(version, {"t": [0, 1], "u": [2]}))
    got = decoded(ApiKey.ELECT_LEADERS, version, {"error_code": 41, "replica_election_results": []}, request)
    if version == 0:  # no top-level error code: on every partition asked
        codes = {
            (r["topic"], p["partition_id"], p["error_code"])
            for r in got["replica_election_results"]
            for p in r["partition_result"]
        }
        assert codes == {("t", 0, 41), ("t", 1, 41), ("u", 2, 41)}
    else:
        assert (got["error_code"], got["replica_election_results"]) == (41, [])


def test_alter_partition_reassignments() -> None:
    m = request_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0)
    request = m.AlterPartitionReassignmentsRequest(
        timeout=ms(4000),
        topics=(
            m.ReassignableTopic(
                name="t",
                partitions=(
                    m.ReassignablePartition(partition_index=0, replicas=(3, 1, 2)),
                    m.ReassignablePartition(partition_index=1, replicas=None),  # a cancellation
                ),
            ),
        ),
    )
    assert body_of(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, request) == {
        "timeout_ms": 4000,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "replicas": [3, 1, 2]},
                    {"partition_index": 1, "replicas": []},
                ],
            }
        ],
    }
    answer = {
        "error_code": 0,
        "error_message": None,
        "responses": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 42,
                        "error_message": "not written: another partition ...",
                    },
                    {
                        "partition_index": 1,
                        "error_code": 39,
                        "error_message": "Replica list for partition t-1 is empty.",
                    },
                ],
            }
        ],
    }
    got = decoded(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        answer,
        as_read(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, request),
    )
    assert (got["error_code"], got["error_message"]) == (0, None)
    (topic,) = got["responses"]
    assert topic["name"] == "t"
    assert [(p["partition_index"], p["error_code"], p["error_message"]) for p in topic["partitions"]] == [
        (0, 42, "not written: another partition ..."),
        (1, 42, CANCEL_UNSUPPORTED),
    ]


def test_list_partition_reassignments() -> None:
    m = request_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0)
    some = m.ListPartitionReassignmentsRequest(
        timeout=ms(1500), topics=(m.ListPartitionReassignmentsTopics(name="t", partition_indexes=(0, 2)),)
    )
    assert body_of(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, some) == {
        "timeout_ms": 1500,
        "topics": [{"name": "t", "partition_indexes": [0, 2]}],
    }
    every = m.ListPartitionReassignmentsRequest(timeout=ms(1500), topics=None)
    assert body_of(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, every)["topics"] is None
    answer = {
        "error_code": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 2,
                        "replicas": [1, 2, 3, 4],
                        "adding_replicas": [4],
                        "removing_replicas": [1],
                    }
                ],
            }
        ],
    }
    got = decoded(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, answer)
    assert got["error_code"] == 0 and got["error_message"] is None
    assert got["topics"] == [
        {
            "name": "t",
            "partitions": [
                {
                    "partition_index": 2,
                    "replicas": [1, 2, 3, 4],
                    "adding_replicas": [4],
                    "removing_replicas": [1],
                }
            ],
        }
    ]


# -- DescribeCluster, DescribeLogDirs ----------------------------------------------------------------


@pytest.mark.parametrize("version", ends(ApiKey.DESCRIBE_CLUSTER))
def test_describe_cluster(version: int) -> None:
    m = request_module(ApiKey.DESCRIBE_CLUSTER, version)
    request = entities.make(
        m.DescribeClusterRequest, include_cluster_authorized_operations=True, endpoint_type=2
    )
    assert body_of(ApiKey.DESCRIBE_CLUSTER, version, request) == {
        "include_cluster_authorized_operations": True,
        "endpoint_type": 1 if version == 0 else 2,  # v0 asks for brokers
    }
    answer = {
        "error_code": 0,
        "cluster_id": "c-1",
        "controller_id": 2,
        "brokers": [
            {"broker_id": 1, "host": "h1", "port": 9092, "rack": None},
            {"broker_id": 2, "host": "h2", "port": 9093, "rack": "r1"},
        ],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    got = decoded(ApiKey.DESCRIBE_CLUSTER, version, answer)
    assert (got["error_code"], got["error_message"], got["cluster_id"], got["controller_id"]) == (
        0,
        None,
        "c-1",
        2,
    )
    assert got["brokers"] == [
        {"broker_id": 1, "host": "h1", "port": 9092, "rack": None},
        {"broker_id": 2, "host": "h2", "port": 9093, "rack": "r1"},
    ]
    assert got["authorized_operations"] is None  # kafka-python's reading of INT32_MIN: not provided
    if version >= 1:
        assert got["endpoint_type"] == 1
    assert decoded(ApiKey.DESCRIBE_CLUSTER, version, {**answer, "cluster_id": None})["cluster_id"] == ""


@pytest.mark.parametrize("version", ends(ApiKey.DESCRIBE_LOG_DIRS))
def test_describe_log_dirs(version: int) -> None:
    m = request_module(ApiKey.DESCRIBE_LOG_DIRS, version)
    some = m.DescribeLogDirsRequest(topics=(m.DescribableLogDirTopic(topic="t", partitions=(0, 1)),))
    assert body_of(ApiKey.DESCRIBE_LOG_DIRS, version, some) == {
        "topics": [{"topic": "t", "partitions": [0, 1]}]
    }
    assert body_of(ApiKey.DESCRIBE_LOG_DIRS, version, m.DescribeLogDirsRequest(topics=None)) == {
        "topics": None
    }
    partition = {
        "partition_index": 1,
        "partition_size": 5_000_000_000,
        "offset_lag": 0,
        "is_future_key": False,
    }
    answer = {
        "error_code": 0,
        "results": [
            {
                "error_code": 0,
                "log_dir": "/data/a",
                "topics": [{"name": "t", "partitions": [partition]}],
                "total_bytes": 10**12,
                "usable_bytes": 4 * 10**11,
            },
            {"error_code": 56, "log_dir": "/data/b", "topics": []},
        ],
    }
    got = decoded(ApiKey.DESCRIBE_LOG_DIRS, version, answer)
    online, offline = got["results"]
    assert (online["error_code"], online["log_dir"]) == (0, "/data/a")
    assert online["topics"] == [{"name": "t", "partitions": [partition]}]
    assert (offline["error_code"], offline["log_dir"], offline["topics"]) == (56, "/data/b", [])
    if version >= 3:
        assert got["error_code"] == 0
    if version >= 4:  # KIP-827
        assert (online["total_bytes"], online["usable_bytes"]) == (10**12, 4 * 10**11)
        assert (offline["total_bytes"], offline["usable_bytes"]) == (-1, -1)


# -- every version in between ----------------------------------------------------------------------

#: The per-API tests above, run again at each version strictly inside the advertised range.
BY_VERSION = {
    ApiKey.CREATE_TOPICS: test_create_topics,
    ApiKey.DELETE_TOPICS: test_delete_topics,
    ApiKey.CREATE_PARTITIONS: test_create_partitions,
    ApiKey.ELECT_LEADERS: test_elect_leaders,
    ApiKey.DESCRIBE_CLUSTER: test_describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: test_describe_log_dirs,
}


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k, (low, high) in RANGES.items() if k in BY_VERSION for v in range(low + 1, high)],
)
def test_the_versions_between(key: ApiKey, version: int) -> None:
    BY_VERSION[key](version)


def test_the_advertised_ranges_are_kios_and_the_docstrings() -> None:
    assert {k: (a.min_version, a.max_version) for k, a in APIS.items()} == RANGES
    for key, api in APIS.items():
        for version in range(api.min_version, api.max_version + 1):
            assert entities.known_version(key, version), (key.name, version)
