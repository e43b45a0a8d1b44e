"""The file budget and max.broker.partitions on a real cluster (issue 19 item 6, issue 25 items 2
and 5; docs/design.md "Open files at scale (issue 25)", docs/guarantees.md "Resources").

Three real broker processes started under an open-file limit the test sets (``prlimit
--nofile=512:512``, so raising the soft limit to the hard one gives 512) and
``max.broker.partitions=150``: each publishes its budget in /brokers/ids/<id>: a reserve of 128,
a segment file cache of 384, no file per replica, at most 150 replicas.

1. A CreateTopics, a CreatePartitions and a reassignment that would take a broker past 150
   replicas are refused with POLICY_VIOLATION, naming the broker, the setting and the count, and
   nothing is written to ZooKeeper.
2. Two creations that raced (each checked the budget before the other was written: driven step
   by step, the second one's check done before the first one lands) put 220 replicas on every
   broker, past the maximum: before issue 25 (three files per replica) that needed about 660
   descriptors and every broker met EMFILE; now the segment file cache bounds them, so every
   broker hosts them all, and serves them, without EMFILE, no log dir goes offline, no broker
   halts or loses its ZooKeeper session (same broker epoch), and the topic served throughout goes
   on. The raced replicas count from then on: one more is refused.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from client.admin import AdminClient
from client.consumer import Consumer
from client.producer import Producer
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller import topic_admin
from devcluster.cluster import LocalCluster
from devcluster.ports import free_port_block
from devcluster.processes import default_broker_command
from tests.integration.cluster_fixtures import TEST_SETTINGS, scrape_metrics
from tests.integration.failover_helpers import eventually
from zk.bridge import ZkBridge
from zk.data import decode_broker_registration
from zk.paths import REASSIGN_PARTITIONS_PATH, broker_id_path, config_topic_path, topic_path

pytestmark = pytest.mark.integration

LIMIT = 512
BUDGET = 150  # max.broker.partitions; the files bound none (broker/file_budget.py: 0 per replica)
STEADY = 20  # partitions of the topic served throughout (one replica of each on every broker)
RACER = 100  # each racer fits beside STEADY; both together do not
EMFILE_LINE = "Too many open files"
HALT_LINE = "Shutdown broker because all log dirs in"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    base = free_port_block(3)
    command = ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", *default_broker_command()]
    cluster = LocalCluster(tmp_path_factory.mktemp("file-budget"), broker_command=command)
    overrides = {**TEST_SETTINGS, "max.broker.partitions": str(BUDGET)}
    cluster.up(3, zookeeper_port=base - 1, base_port=base, overrides=overrides, timeout=60)
    yield cluster
    cluster.down(timeout=60)


@pytest.fixture
async def zk(cluster: LocalCluster):
    bridge = ZkBridge(cluster.zookeeper_connect, session_timeout_ms=10_000)
    await bridge.start(timeout=30)
    yield bridge
    await bridge.close()


def broker_logs(cluster: LocalCluster) -> dict[int, str]:
    assert cluster.state is not None
    return {b.id: Path(b.out).read_text(errors="replace") for b in cluster.state.brokers.values()}


async def registrations(zk: ZkBridge) -> dict[int, tuple[int, object]]:
    """Broker id -> (broker epoch, published file budget)."""
    out = {}
    for broker_id in (1, 2, 3):
        got = await zk.get(broker_id_path(broker_id))
        assert got is not None, f"broker {broker_id} is not registered"
        data, stat = got
        out[broker_id] = (stat.czxid, decode_broker_registration(data, broker_id, stat.czxid).file_budget)
    return out


async def test_replicas_past_max_broker_partitions_are_refused_before_anything_is_written(
    cluster, zk
) -> None:
    registered = await registrations(zk)
    for _, budget in registered.values():
        assert (budget.open_files_limit, budget.reserve, budget.segment_files) == (
            LIMIT,
            LIMIT // 4,
            LIMIT - LIMIT // 4,
        )
        assert (budget.files_per_replica, budget.max_partitions, budget.max_replicas) == (0, BUDGET, BUDGET)
    async with AdminClient(cluster.bootstrap_servers) as admin:
        try:
            await refused_and_nothing_written(admin, zk)
        finally:  # the next test counts every broker's replicas: leave none of these behind
            for name in ("grows", "moved"):
                if await zk.exists(topic_path(name)) is not None:
                    await admin.delete_topic(name)
            for name in ("grows", "moved"):  # deleted replicas count until the deletion completes
                await eventually(lambda name=name: gone(zk, name), f"the deletion of {name}", 60)


async def refused_and_nothing_written(admin: AdminClient, zk: ZkBridge) -> None:
    """A CreateTopics, a CreatePartitions and a reassignment past max.broker.partitions."""
    with pytest.raises(KafkaError) as refused:
        await admin.create_topic("big", BUDGET + 1, 3)
    assert refused.value.code == ErrorCode.POLICY_VIOLATION, refused.value
    message = refused.value.message
    assert re.search(rf"broker [123] would hold {BUDGET + 1} replicas", message), message
    assert f"past its max.broker.partitions={BUDGET}" in message
    assert await zk.exists(topic_path("big")) is None
    assert await zk.exists(config_topic_path("big")) is None

    await admin.create_topic("grows", BUDGET - 10, 3)
    grown = await admin.create_partitions({"grows": BUDGET + 1})
    assert grown["grows"] is not None and grown["grows"].code == ErrorCode.POLICY_VIOLATION
    assert f"would hold {BUDGET + 1} replicas" in grown["grows"].message
    assert len((await admin.describe_topics(["grows"]))[0].partitions) == BUDGET - 10
    await admin.create_topic("moved", 20, 1)  # about 7 replicas on each broker: 147 each
    moves = {TopicPartition("moved", p): [1] for p in range(20)}  # broker 1: 160
    moved = await admin.alter_partition_reassignments(moves)
    errors = {error.code for error in moved.values() if error is not None}
    assert errors == {ErrorCode.POLICY_VIOLATION}, moved
    assert any("broker 1 would hold 160 replicas" in e.message for e in moved.values() if e), moved
    assert await zk.exists(REASSIGN_PARTITIONS_PATH) is None


async def gone(zk: ZkBridge, topic: str) -> bool:
    return await zk.exists(topic_path(topic)) is None


async def test_raced_creations_past_the_maximum_are_hosted_within_the_file_bound(
    cluster, zk, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic("steady", STEADY, 3)
    epochs = {b: epoch for b, (epoch, _) in (await registrations(zk)).items()}
    tps = [TopicPartition("steady", p) for p in range(STEADY)]
    async with (
        Producer(cluster.bootstrap_servers, acks="all") as producer,
        Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer,
    ):
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)

        async def round_trip(value: bytes) -> None:
            """One acks=all record to every partition (every broker leads some), all read back."""
            sent = [await producer.send("steady", value, partition=tp.partition) for tp in tps]
            await producer.flush()
            assert all(f.exception() is None for f in sent), [f.exception() for f in sent]
            seen: set[int] = set()
            while len(seen) < len(tps):
                seen |= {r.partition for r in await consumer.poll(timeout_ms=500) if r.value == value}

        await asyncio.wait_for(round_trip(b"before"), 30)  # connections to every broker, opened now

        first = topic_admin.placement.assign_replicas([1, 2, 3], RACER, 3, topic_admin.random.Random(1))
        second = topic_admin.placement.assign_replicas([1, 2, 3], RACER, 3, topic_admin.random.Random(2))
        await topic_admin.check_file_budget(zk, first)  # both pass: neither sees the other
        await topic_admin.check_file_budget(zk, second)
        await topic_admin.create_topic(zk, "racer-1", first)

        async def checked_before_racer_1_landed(_zk, _assignment) -> None:
            return None

        monkeypatch.setattr(topic_admin, "check_file_budget", checked_before_racer_1_landed)
        await topic_admin.create_topic(zk, "racer-2", second)
        monkeypatch.undo()

        addresses = cluster.metrics_addresses()

        async def every_broker_hosts_them_all() -> bool:
            counts = [
                scrape_metrics(url)["kafka_server_replicamanager_partitioncount"]
                for url in addresses.values()
            ]
            return counts == [STEADY + 2 * RACER] * 3

        await eventually(every_broker_hosts_them_all, f"{STEADY + 2 * RACER} replicas on every broker", 60)
        await asyncio.wait_for(round_trip(b"after"), 30)
        racers = [(t, p) for t in ("racer-1", "racer-2") for p in range(RACER)]
        sent = [await producer.send(t, b"raced", partition=p) for t, p in racers]
        await producer.flush()
        assert all(f.exception() is None for f in sent), [f.exception() for f in sent if f.exception()][:3]
        for url in addresses.values():
            metrics = scrape_metrics(url)
            assert metrics["kafka_log_segmentfilecache_openfiles"] <= LIMIT - LIMIT // 4
            assert metrics["kafka_server_filebudget_openfiles"] < LIMIT

    logs = broker_logs(cluster)
    for broker_id, text in logs.items():
        assert EMFILE_LINE not in text, f"broker {broker_id} met EMFILE"
        assert HALT_LINE not in text, f"broker {broker_id} halted"
        assert "is now offline" not in text, f"broker {broker_id} took a log dir offline"
    status = cluster.status()
    assert all(b["alive"] for b in status["brokers"]), status
    after = {b: epoch for b, (epoch, _) in (await registrations(zk)).items()}
    assert after == epochs, "a broker lost its ZooKeeper session and registered again"
    with pytest.raises(KafkaError) as refused:  # the raced replicas count from now on
        await topic_admin.create_topic(zk, "one-more", {0: [1]})
    assert refused.value.code == ErrorCode.POLICY_VIOLATION
