"""The AdminClient's ``describe_cluster`` (DescribeCluster, KIP-700, with the Metadata fallback),
``describe_log_dirs`` (KIP-113, KIP-827) and ``incremental_alter_configs`` (KIP-339) against
tests/unit/fake_cluster.py (real sockets, every request body checked against our schemas), and
the pure pieces: the request body and the reading of a DescribeLogDirs answer.
"""

from __future__ import annotations

import pytest

from client.admin import AdminClient
from client.cluster_admin import (
    AlterConfigOp,
    AlterConfigOpType,
    LogDirDescription,
    ReplicaInfo,
    incremental_body,
    log_dir_descriptions,
)
from client.protocol.api import ApiKey, ConfigResourceType, validate_request
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch
from client.types import ConfigResource, TopicPartition
from tests.unit.fake_cluster import FakeCluster

TOPIC_T = ConfigResource(ConfigResourceType.TOPIC, "t")


@pytest.fixture
async def fake():
    cluster = await FakeCluster().start()
    cluster.create("t", 3)
    yield cluster
    await cluster.stop()


async def test_describe_cluster_asks_describe_cluster(fake: FakeCluster) -> None:
    fake.controller_id = 2
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        cluster = await admin.describe_cluster()
    assert (cluster.cluster_id, cluster.controller_id) == ("fake-cluster", 2)
    assert [(b.node_id, b.port) for b in cluster.brokers] == [(n, fake.ports[n]) for n in (1, 2, 3)]
    assert len(fake.of(ApiKey.DESCRIBE_CLUSTER)) == 1


async def test_describe_cluster_falls_back_to_metadata_on_a_broker_without_it(fake: FakeCluster) -> None:
    fake.describe_cluster_unknown = True
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        cluster = await admin.describe_cluster()
    assert (cluster.cluster_id, cluster.controller_id) == ("fake-cluster", 1)
    assert [b.node_id for b in cluster.brokers] == [1, 2, 3]


async def test_describe_log_dirs_asks_each_broker_about_itself(fake: FakeCluster) -> None:
    fake.topics["t"][0].batches.append((0, build_batch([(None, b"v", 0, [])])))
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        every = await admin.describe_log_dirs()
        some = await admin.describe_log_dirs([2], [TopicPartition("t", 0), TopicPartition("t", 2)])
    assert sorted(every) == [1, 2, 3]
    dirs = every[1]
    assert list(dirs) == ["/fake/1"]
    one = dirs["/fake/1"]
    assert (one.error, one.total_bytes, one.usable_bytes) == (None, 1000, 400)
    held = one.replica_infos
    assert set(held) == {TopicPartition("t", p) for p in range(3)}  # three replicas on three brokers
    assert held[TopicPartition("t", 0)].size > 0 and held[TopicPartition("t", 1)].size == 0
    assert set(some) == {2} and set(some[2]["/fake/2"].replica_infos) == {
        TopicPartition("t", 0),
        TopicPartition("t", 2),
    }
    asked = [r.node for r in fake.of(ApiKey.DESCRIBE_LOG_DIRS)]
    assert asked == [1, 2, 3, 2]


async def test_incremental_alter_configs_changes_only_what_it_names(fake: FakeCluster) -> None:
    fake.topic_configs["t"] = {"retention.ms": "1000", "leader.replication.throttled.replicas": "0:1"}
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        await admin.incremental_alter_configs(
            {
                TOPIC_T: [
                    AlterConfigOp("min.insync.replicas", "2"),
                    AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE),
                    AlterConfigOp("leader.replication.throttled.replicas", "1:2", AlterConfigOpType.APPEND),
                ]
            }
        )
        assert fake.topic_configs["t"] == {
            "min.insync.replicas": "2",
            "leader.replication.throttled.replicas": "0:1,1:2",
        }
        await admin.incremental_alter_configs(
            {TOPIC_T: [AlterConfigOp("min.insync.replicas", "3")]}, validate_only=True
        )
        assert fake.topic_configs["t"]["min.insync.replicas"] == "2"
        with pytest.raises(KafkaError) as info:
            await admin.incremental_alter_configs(
                {TOPIC_T: [AlterConfigOp("retention.ms", "5", AlterConfigOpType.APPEND)]}
            )
        assert info.value.code == ErrorCode.INVALID_CONFIG
        assert str(info.value).startswith("INVALID_CONFIG: incremental alter configs of topic 't' failed: ")
        broker = ConfigResource(ConfigResourceType.BROKER, "3")
        await admin.incremental_alter_configs(
            {broker: [AlterConfigOp("leader.replication.throttled.rate", "10")]}
        )
    assert fake.broker_configs["3"] == {"leader.replication.throttled.rate": "10"}
    assert (
        fake.of(ApiKey.INCREMENTAL_ALTER_CONFIGS)[-1].node == 3
    )  # a broker's configs go to that broker, as alter_configs sends them


def test_the_request_body_follows_our_schema() -> None:
    configs = {
        TOPIC_T: [
            AlterConfigOp("a", "1"),
            AlterConfigOp("b", "ignored", AlterConfigOpType.DELETE),
            AlterConfigOp("c", "x,y", AlterConfigOpType.SUBTRACT),
        ]
    }
    body = incremental_body(configs, [TOPIC_T], validate_only=False)
    assert validate_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body) == {
        "resources": [
            {
                "resource_type": int(ConfigResourceType.TOPIC),
                "resource_name": "t",
                "configs": [
                    {"name": "a", "config_operation": 0, "value": "1"},
                    {"name": "b", "config_operation": 1, "value": None},
                    {"name": "c", "config_operation": 3, "value": "x,y"},
                ],
            }
        ],
        "validate_only": False,
    }
    with pytest.raises(TypeError):
        incremental_body({TOPIC_T: [("a", "1")]}, [TOPIC_T], validate_only=False)  # type: ignore[dict-item]


def test_a_log_dirs_answer_reads_as_kafkas_descriptions() -> None:
    partition = {"partition_index": 4, "partition_size": 12, "offset_lag": 0, "is_future_key": False}
    body = {
        "error_code": 0,
        "results": [
            {
                "error_code": 0,
                "log_dir": "/a",
                "topics": [{"name": "t", "partitions": [partition]}],
                "total_bytes": 9,
                "usable_bytes": 3,
            },
            {
                "error_code": ErrorCode.KAFKA_STORAGE_ERROR,
                "log_dir": "/b",
                "topics": [],
                "total_bytes": -1,
                "usable_bytes": -1,
            },
        ],
    }
    described = log_dir_descriptions(body)
    assert described["/a"] == LogDirDescription(
        None, {TopicPartition("t", 4): ReplicaInfo(12, 0, False)}, 9, 3
    )
    offline = described["/b"]
    assert offline.error is not None and offline.error.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (offline.replica_infos, offline.total_bytes, offline.usable_bytes) == ({}, None, None)
    with pytest.raises(KafkaError):
        log_dir_descriptions({**body, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
