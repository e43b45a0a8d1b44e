"""The file budget on a real cluster (issue 19 item 6; docs/guarantees.md "Resources").

Three real broker processes started under an open-file limit the test sets (``prlimit
--nofile=512:512``, so raising the soft limit to the hard one gives 512): each publishes its budget
in /brokers/ids/<id>, (512 - 128 reserve) // 3 files = 128 replicas.

1. A CreateTopics whose replicas would take the brokers past that is refused with
   POLICY_VIOLATION, naming the broker, the budget and the count, and nothing is written to
   ZooKeeper.
2. Two creations that raced (each checked the budget before the other was written: driven step
   by step, the second one's check done before the first one lands) put 220 replicas on every
   broker, which needs about 660 descriptors: every broker meets EMFILE creating the logs. No log
   dir goes offline, no broker halts or loses its ZooKeeper session (same broker epoch), and
   produce and fetch on the topic they already served go on, on connections opened before.
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
from tests.integration.cluster_fixtures import TEST_SETTINGS
from tests.integration.failover_helpers import eventually
from zk.bridge import ZkBridge
from zk.data import decode_broker_registration
from zk.paths import broker_id_path, config_topic_path, topic_path

pytestmark = pytest.mark.integration

LIMIT = 512
BUDGET = (LIMIT - LIMIT // 4) // 3  # broker/file_budget.py: a quarter reserved, 3 files a replica
STEADY = 20  # partitions of the topic served throughout (one replica of each on every broker)
RACER = 100  # each racer fits beside STEADY; both together do not
EMFILE_LINE = "[Errno 24] Too many open files"
HALT_LINE = "Shutdown broker because all log dirs in"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    base = free_port_block(3)
    command = ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", *default_broker_command()]
    cluster = LocalCluster(tmp_path_factory.mktemp("file-budget"), broker_command=command)
    cluster.up(3, zookeeper_port=base - 1, base_port=base, overrides=TEST_SETTINGS, timeout=60)
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


async def test_a_topic_past_the_file_budget_is_refused_before_anything_is_written(cluster, zk) -> None:
    registered = await registrations(zk)
    assert {b: budget.max_replicas for b, (_, budget) in registered.items()} == {
        1: BUDGET,
        2: BUDGET,
        3: BUDGET,
    }
    async with AdminClient(cluster.bootstrap_servers) as admin:
        with pytest.raises(KafkaError) as refused:
            await admin.create_topic("big", BUDGET + 1, 3)
    assert refused.value.code == ErrorCode.POLICY_VIOLATION, refused.value
    message = refused.value.message
    assert re.search(rf"broker [123] would hold {BUDGET + 1} replicas", message), message
    assert f"file budget of {BUDGET} replicas" in message and f"open-file limit {LIMIT}" in message
    assert await zk.exists(topic_path("big")) is None
    assert await zk.exists(config_topic_path("big")) is None


async def test_raced_creations_past_the_budget_meet_emfile_and_no_broker_fails(
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

        async def every_broker_met_emfile() -> bool:
            return all(EMFILE_LINE in text for text in broker_logs(cluster).values())

        await eventually(every_broker_met_emfile, "EMFILE creating the racers' logs on every broker", 60)
        await asyncio.wait_for(round_trip(b"after"), 30)

    logs = broker_logs(cluster)
    for broker_id, text in logs.items():
        assert HALT_LINE not in text, f"broker {broker_id} halted"
        assert "is now offline" not in text, f"broker {broker_id} took a log dir offline"
    status = cluster.status()
    assert all(b["alive"] for b in status["brokers"]), status
    after = {b: epoch for b, (epoch, _) in (await registrations(zk)).items()}
    assert after == epochs, "a broker lost its ZooKeeper session and registered again"
    with pytest.raises(KafkaError) as refused:  # the raced replicas count from now on
        await topic_admin.create_topic(zk, "one-more", {0: [1]})
    assert refused.value.code == ErrorCode.POLICY_VIOLATION
