"""Kafka's admin clients on the KAFKA listener (seed 000's operations through another
implementation): confluent-kafka's AdminClient creates, describes, reconfigures, grows, elects
and deletes; kafka-python's KafkaAdminClient moves partitions with AlterPartitionReassignments and
watches them with ListPartitionReassignments (confluent-kafka's Python AdminClient has no
reassignment call), and describes log dirs. Each outcome is checked through floodmark's own
client and listener. Real ZooKeeper and broker processes.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import describe, eventually, produce_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("kafka-admin"), brokers=3)
    yield c
    c.down()


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})


def wait(futures: dict, timeout: float = 60) -> dict:
    """Each future's result (raising the first failure)."""
    return {key: future.result(timeout) for key, future in futures.items()}


async def test_confluent_admin_creates_describes_reconfigures_grows_and_deletes_a_topic(cluster):
    client = admin(cluster)
    new = NewTopic("ck-admin", num_partitions=3, replication_factor=3, config={"retention.ms": "3600000"})
    await asyncio.to_thread(wait, client.create_topics([new]))
    ours = await eventually(lambda: _described(cluster, "ck-admin"), "the created topic")
    assert len(ours.partitions) == 3 and all(len(p.replicas) == 3 for p in ours.partitions)

    metadata = await asyncio.to_thread(client.list_topics, "ck-admin", 30)
    assert sorted(metadata.topics["ck-admin"].partitions) == [0, 1, 2]
    assert sorted(metadata.brokers) == [1, 2, 3]

    resource = ConfigResource(ResourceType.TOPIC, "ck-admin")
    (described,) = (await asyncio.to_thread(wait, client.describe_configs([resource]))).values()
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "delete" and described["cleanup.policy"].is_default

    change = ConfigResource(
        ResourceType.TOPIC,
        "ck-admin",
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    await asyncio.to_thread(wait, client.incremental_alter_configs([change]))
    (after,) = (await asyncio.to_thread(wait, client.describe_configs([resource]))).values()
    assert after["segment.bytes"].value == "1048576"
    assert after["retention.ms"].value == "3600000", "an incremental change keeps the other overrides"

    await asyncio.to_thread(wait, client.create_partitions([NewPartitions("ck-admin", 5)]))
    grown = await eventually(lambda: _with_partitions(cluster, "ck-admin", 5), "five partitions")
    assert len(grown.partitions) == 5

    await asyncio.to_thread(wait, client.delete_topics(["ck-admin"]))
    gone = await asyncio.to_thread(_topic_gone, client, "ck-admin")
    assert gone


async def _described(cluster, topic: str):
    try:
        description = await describe(cluster, topic)
    except Exception:
        return None
    led = description.partitions and all(p.leader >= 0 for p in description.partitions)
    return description if led else None


async def _with_partitions(cluster, topic: str, count: int):
    description = await describe(cluster, topic)
    return description if len(description.partitions) == count else None


def _topic_gone(client: AdminClient, topic: str) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if topic not in client.list_topics(timeout=30).topics:
            return True
        time.sleep(0.5)
    return False


async def test_confluent_admin_describes_the_cluster_and_elects_preferred_leaders(cluster):
    client = admin(cluster)
    description = await asyncio.to_thread(lambda: client.describe_cluster().result(30))
    assert sorted(node.id for node in description.nodes) == [1, 2, 3]
    assert description.controller.id in (1, 2, 3)
    kafka_ports = {int(a.rpartition(":")[2]) for a in cluster.kafka_bootstrap_servers.split(",")}
    assert {node.port for node in description.nodes} == kafka_ports

    # the preferred replica is not the controller: killing it must not also move the controller
    # (ElectLeaders goes to the controller librdkafka knows)
    preferred = min({1, 2, 3} - {description.controller.id})
    others = sorted({1, 2, 3} - {preferred})
    new = NewTopic("ck-elect", num_partitions=1, replica_assignment=[[preferred, *others]])
    await asyncio.to_thread(wait, client.create_topics([new]))
    state = await eventually(lambda: _described(cluster, "ck-elect"), "a leader")
    assert state.partitions[0].replicas == [preferred, *others]
    cluster.kill(preferred, "KILL")
    moved = await eventually(lambda: _leader_not(cluster, "ck-elect", preferred), "a new leader", 60)
    assert moved != preferred
    cluster.start(preferred)
    await eventually(
        lambda: _in_isr(cluster, "ck-elect", preferred), "the preferred replica back in the ISR", 60
    )
    result = await asyncio.to_thread(
        lambda: client.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition("ck-elect", 0)]).result(60)
    )
    assert all(error is None for error in result.values()), result
    # answered once the controller wrote the election; every broker's metadata follows
    await eventually(lambda: _leader_is(cluster, "ck-elect", preferred), "the preferred leader", 30)


async def _leader_not(cluster, topic: str, old: int) -> int | None:
    leader = (await describe(cluster, topic)).partitions[0].leader
    return leader if leader not in (old, -1) else None


async def _leader_is(cluster, topic: str, broker: int) -> bool:
    return (await describe(cluster, topic)).partitions[0].leader == broker


async def _in_isr(cluster, topic: str, broker: int) -> bool:
    return broker in (await describe(cluster, topic)).partitions[0].isr


async def test_kafka_python_reassigns_a_partition_and_lists_it_until_done(cluster):
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        client.create_topics([KpNewTopic("kp-move", 1, 2)])
        state = await eventually(lambda: _described(cluster, "kp-move"), "a leader")
        await produce_values(cluster, "kp-move", [f"m-{i}".encode() for i in range(2000)])
        before = list(state.partitions[0].replicas)
        (outside,) = {1, 2, 3} - set(before)
        target = [outside, before[0]]
        answer = client.alter_partition_reassignments({KpTopicPartition("kp-move", 0): target})
        assert answer is not None
        listed = client.list_partition_reassignments()
        moved = await eventually(lambda: _replicas_are(cluster, "kp-move", target), "the move", 90)
        assert moved
        assert client.list_partition_reassignments() == {}
        if listed:  # caught while moving: it names the target
            (entry,) = listed.values()
            # the replicas now: the old set until the controller starts the move, then old + new
            assert set(before) <= set(entry["replicas"]) <= set(before) | set(target), listed
            assert set(entry["adding_replicas"]) <= set(target), listed
        dirs = client.describe_log_dirs(topic_partitions=["kp-move"])
        sizes = {
            answer["broker"]: p["partition_size"]
            for answer in dirs
            for log_dir in answer["log_dirs"]
            for t in log_dir["topics"]
            if t["name"] == "kp-move"
            for p in t["partitions"]
        }
        assert set(sizes) == set(target), dirs  # the replica that left holds only a renamed dir
        assert len(set(sizes.values())) == 1 and min(sizes.values()) > 0, sizes
    finally:
        client.close()


async def _replicas_are(cluster, topic: str, replicas: list[int]) -> bool:
    partition = (await describe(cluster, topic)).partitions[0]
    return list(partition.replicas) == replicas and sorted(partition.isr) == sorted(replicas)
