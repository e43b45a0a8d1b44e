"""DescribeCluster (KIP-700), DescribeLogDirs (KIP-113, KIP-827) and IncrementalAlterConfigs
(KIP-339) on a real cluster: ZooKeeper plus three broker processes, asked through the
AdminClient. The cluster description matches ZooKeeper's cluster id and controller; each broker
names its own log dir with exactly the partitions it is a replica of, a written partition larger
than zero, and its file system's sizes; incremental changes reach /config/topics/<t> and
/config/brokers/<default> touching only the configs named, and a refused change writes nothing.
Every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os

import pytest

from client.admin import AdminClient
from client.cluster_admin import AlterConfigOp, AlterConfigOpType
from client.producer import Producer
from client.protocol.api import ConfigResourceType, ConfigSource
from client.protocol.errors import ErrorCode, KafkaError
from client.types import ConfigResource, TopicPartition
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

TOPIC = "admin-apis"
RESOURCE = ConfigResource(ConfigResourceType.TOPIC, TOPIC)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("cluster-admin"), brokers=3)
    yield c
    c.down()


async def test_describe_cluster_matches_zookeeper(cluster, zk) -> None:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        described = await eventually(
            lambda: _with_controller(admin), "a controller in the description", timeout=20
        )
    assert described.cluster_id == json.loads(zk.get("/cluster/id")[0])["id"]
    assert described.controller_id == json.loads(zk.get("/controller")[0])["brokerid"]
    assert [(b.node_id, b.port) for b in described.brokers] == [
        (broker_id, cluster.state.brokers[broker_id].port) for broker_id in (1, 2, 3)
    ]


async def _with_controller(admin: AdminClient):
    described = await admin.describe_cluster()
    return described if described.controller_id >= 0 and len(described.brokers) == 3 else None


async def test_each_broker_describes_its_own_log_dir(cluster) -> None:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(TOPIC + "-dirs", 3, 2)
        async with Producer(cluster.bootstrap_servers, acks="all") as producer:
            await producer.send_and_wait(TOPIC + "-dirs", b"x" * 500, partition=0)
        (topic,) = await admin.describe_topics([TOPIC + "-dirs"])
        replicas = {p.partition: set(p.replicas) for p in topic.partitions}
        dirs = await eventually(
            lambda: _all_sized(admin, TOPIC + "-dirs"), "partition 0 sized everywhere", timeout=20
        )
    for broker_id, by_dir in dirs.items():
        (path,) = by_dir
        assert path == os.path.abspath(cluster.state.brokers[broker_id].log_dir)
        description = by_dir[path]
        assert description.error is None
        assert description.total_bytes > 0 and 0 <= description.usable_bytes <= description.total_bytes
        held = {tp.partition for tp in description.replica_infos if tp.topic == TOPIC + "-dirs"}
        assert held == {p for p, brokers in replicas.items() if broker_id in brokers}
        for tp, info in description.replica_infos.items():
            assert (info.offset_lag, info.is_future) == (0, False)
            if tp == TopicPartition(TOPIC + "-dirs", 0):
                assert info.size > 500


async def _all_sized(admin: AdminClient, topic: str):
    dirs = await admin.describe_log_dirs()
    sizes = [
        info.size
        for by_dir in dirs.values()
        for description in by_dir.values()
        for tp, info in description.replica_infos.items()
        if tp == TopicPartition(topic, 0)
    ]
    return dirs if len(sizes) == 2 and all(size > 0 for size in sizes) else None


async def test_incremental_changes_touch_only_the_configs_named(cluster, zk) -> None:
    def stored(path: str) -> dict:
        return json.loads(zk.get(path)[0])["config"]

    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(TOPIC, 2, 3, configs={"retention.ms": "60000"})
        await admin.incremental_alter_configs(
            {
                RESOURCE: [
                    AlterConfigOp("min.insync.replicas", "2"),
                    AlterConfigOp(
                        "leader.replication.throttled.replicas", "0:1,1:2", AlterConfigOpType.APPEND
                    ),
                    AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                ]
            }
        )
        path = f"/config/topics/{TOPIC}"
        assert stored(path) == {
            "retention.ms": "60000",
            "min.insync.replicas": "2",
            "leader.replication.throttled.replicas": "0:1,1:2",
            "cleanup.policy": "delete,compact",
        }
        await admin.incremental_alter_configs(
            {
                RESOURCE: [
                    AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE),
                    AlterConfigOp("leader.replication.throttled.replicas", "0:1", AlterConfigOpType.SUBTRACT),
                ]
            }
        )
        assert stored(path) == {
            "min.insync.replicas": "2",
            "leader.replication.throttled.replicas": "1:2",
            "cleanup.policy": "delete,compact",
        }
        described = (await admin.describe_configs([RESOURCE]))[RESOURCE]
        assert described.get("min.insync.replicas").source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert described.get("retention.ms").source == ConfigSource.DEFAULT_CONFIG

        before = zk.get(path)[0]
        for ops, code in (
            ([AlterConfigOp("retention.ms", "5", AlterConfigOpType.APPEND)], ErrorCode.INVALID_CONFIG),
            ([AlterConfigOp("min.insync.replicas", "0")], ErrorCode.INVALID_CONFIG),
            ([AlterConfigOp("no.such.config", "1")], ErrorCode.INVALID_CONFIG),
        ):
            with pytest.raises(KafkaError) as refused:
                await admin.incremental_alter_configs({RESOURCE: ops})
            assert refused.value.code == code
        await admin.incremental_alter_configs(
            {RESOURCE: [AlterConfigOp("min.insync.replicas", "3")]}, validate_only=True
        )
        assert zk.get(path)[0] == before

        default = ConfigResource(ConfigResourceType.BROKER, "")
        rate = AlterConfigOp("follower.replication.throttled.rate", "1048576")
        await admin.incremental_alter_configs({default: [rate]})
        assert stored("/config/brokers/<default>") == {"follower.replication.throttled.rate": "1048576"}
        (broker,) = (await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "2")])).values()
        assert (
            broker.get("follower.replication.throttled.rate").source
            == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        )
        await admin.incremental_alter_configs(
            {default: [AlterConfigOp(rate.name, op_type=AlterConfigOpType.DELETE)]}
        )
        assert stored("/config/brokers/<default>") == {}
