"""The client's metadata cache (sans-IO) and the Cluster's refresh / connection pool."""

from __future__ import annotations

import asyncio
import socket

import pytest

from client.metadata import Cluster, ClusterMetadata
from client.protocol import api
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import BrokerInfo, TopicPartition
from tests.unit.fake_cluster import FakeCluster


def partition(p, leader, epoch=0, replicas=(1, 2), isr=(1, 2), error=0):
    return {
        "error_code": error,
        "partition": p,
        "leader": leader,
        "leader_epoch": epoch,
        "replicas": list(replicas),
        "isr": list(isr),
    }


def body(topics, brokers=(1, 2), controller=1):
    raw = {
        "brokers": [{"node_id": n, "host": f"h{n}", "port": 9000 + n} for n in brokers],
        "cluster_id": "c1",
        "controller_id": controller,
        "topics": topics,
    }
    return api.validate_response(ApiKey.METADATA, raw)  # exactly what a connection hands back


TOPIC_T = {
    "error_code": 0,
    "topic": "t",
    "partitions": [partition(1, 2, epoch=4), partition(0, 1, epoch=3), partition(2, -1, error=5)],
}


def test_parses_brokers_controller_and_leaders():
    md = ClusterMetadata()
    md.update(body([TOPIC_T]), now_ms=1000)
    assert md.brokers[2] == BrokerInfo(2, "h2", 9002, None)
    assert md.controller_id == 1 and md.cluster_id == "c1"
    assert md.leader_for(TopicPartition("t", 0)) == 1
    assert md.leader_for(TopicPartition("t", 1)) == 2
    assert md.leader_for(TopicPartition("t", 2)) is None  # leader -1: no leader
    assert md.leader_for(TopicPartition("t", 9)) is None
    assert md.leader_for(TopicPartition("nope", 0)) is None
    assert md.leader_epoch_for(TopicPartition("t", 1)) == 4
    assert md.leader_epoch_for(TopicPartition("nope", 0)) == -1
    assert md.partitions_for("t") == [0, 1, 2]
    assert md.available_partitions_for("t") == [0, 1]
    assert md.partition_info(TopicPartition("t", 0)).isr == [1, 2]
    assert md.partitions_for("nope") is None
    assert md.last_response["topics"][0]["topic"] == "t"


def test_leader_that_is_not_a_live_broker_is_unknown():
    md = ClusterMetadata()
    md.update(body([{"error_code": 0, "topic": "t", "partitions": [partition(0, 3)]}]), now_ms=0)
    assert md.leader_for(TopicPartition("t", 0)) is None
    assert md.available_partitions_for("t") == []


def test_unknown_topic_and_empty_topic_are_absent():
    md = ClusterMetadata()
    md.update(
        body(
            [
                {"error_code": 3, "topic": "gone", "partitions": []},
                {"error_code": 5, "topic": "creating", "partitions": []},
            ]
        ),
        now_ms=0,
    )
    assert "gone" not in md.topics
    assert md.partitions_for("creating") is None  # LEADER_NOT_AVAILABLE while being created


def test_partial_response_merges_and_full_response_replaces():
    md = ClusterMetadata()
    md.update(body([TOPIC_T]), now_ms=0)
    other = {"error_code": 0, "topic": "u", "partitions": [partition(0, 2)]}
    md.update(body([other]), now_ms=1, requested=["u"])
    assert set(md.topics) == {"t", "u"}
    md.update(body([{"error_code": 3, "topic": "t", "partitions": []}]), now_ms=2, requested=["t"])
    assert set(md.topics) == {"u"}  # deleted topic dropped
    md.update(body([TOPIC_T]), now_ms=3)
    assert set(md.topics) == {"t"}
    assert md.version == 4


def test_invalidation_and_age():
    md = ClusterMetadata()
    assert md.stale and md.needs_refresh(0, 1000)
    md.update(body([TOPIC_T]), now_ms=100)
    assert not md.stale and not md.needs_refresh(1099, 1000)
    assert md.needs_refresh(1100, 1000)
    md.invalidate()
    assert md.stale and md.needs_refresh(101, 1000)
    assert md.leader_for(TopicPartition("t", 0)) == 1  # stale, but still the best guess
    md.update(body([TOPIC_T]), now_ms=200)
    assert not md.stale


# -- Cluster over real sockets --------------------------------------------------------------------


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def fake():
    cluster = await FakeCluster().start()
    cluster.create("t", 2)
    yield cluster
    await cluster.stop()


async def test_refresh_tries_each_bootstrap_address(fake):
    cluster = Cluster([("127.0.0.1", dead_port()), f"127.0.0.1:{fake.ports[2]}"], "test")
    await cluster.start()
    assert sorted(cluster.brokers) == [1, 2, 3] and cluster.controller_id == 1
    assert cluster.topics == {}  # start() asks for no topics
    await cluster.refresh(["t"])
    assert cluster.leader_for(TopicPartition("t", 1)) == 2
    assert cluster.cluster_id == "fake-cluster"
    await cluster.close()


async def test_no_reachable_broker_is_a_network_exception():
    cluster = Cluster(f"127.0.0.1:{dead_port()},127.0.0.1:{dead_port()}", "test", request_timeout_ms=500)
    with pytest.raises(KafkaError) as info:
        await cluster.refresh()
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION
    assert str(info.value).startswith("NETWORK_EXCEPTION: no broker reachable among 127.0.0.1:")
    await cluster.close()


async def test_connections_are_pooled_and_reopened(fake):
    cluster = Cluster(fake.bootstrap, "test")
    await cluster.start()
    c1 = await cluster.connection(2)
    assert await cluster.connection(2) is c1
    c1.close()
    assert not cluster.stale
    c2 = await cluster.connection(2)
    assert c2 is not c1 and c2.is_open
    assert cluster.stale  # a lost connection invalidates metadata
    with pytest.raises(KafkaError) as info:
        await cluster.connection(42)
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION and "broker 42" in str(info.value)
    assert (await cluster.any_connection()).is_open
    await cluster.close()


async def test_concurrent_refreshes_are_coalesced(fake):
    cluster = Cluster(fake.bootstrap, "test")
    await cluster.start()
    before = len(fake.of(ApiKey.METADATA))
    await asyncio.gather(*(cluster.refresh(None) for _ in range(10)), cluster.refresh(["t"]))
    assert len(fake.of(ApiKey.METADATA)) - before == 1
    await cluster.close()


async def test_wait_for_topic_retries_until_it_appears(fake):
    cluster = Cluster(fake.bootstrap, "test", retry_backoff_ms=10)
    await cluster.start()
    asyncio.get_running_loop().call_later(0.05, fake.create, "late", 4)
    assert await cluster.wait_for_topic("late", 2000) == [0, 1, 2, 3]
    with pytest.raises(KafkaError) as info:
        await cluster.wait_for_topic("never", 50)
    assert (
        info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        and "Topic never not present in metadata after 50 ms." in str(info.value)
    )
    await cluster.close()


async def test_maybe_refresh_only_when_needed(fake):
    cluster = Cluster(fake.bootstrap, "test", retry_backoff_ms=10)
    await cluster.start()
    assert not await cluster.maybe_refresh(["t"])
    cluster.invalidate()
    assert await cluster.maybe_refresh(["t"])
    assert not cluster.stale and cluster.partitions_for("t") == [0, 1]
    await cluster.close()
