"""Leader-side ISR management on a real cluster (SPEC 5.4; seed 001): ZooKeeper plus three
broker processes, real sockets, faults by SIGSTOP / SIGCONT.

The followers' ZooKeeper sessions outlive every pause here (30 s), so what shrinks the ISR is
the leader's isr-expiration (``replica.lag.time.max.ms`` = 3 s), not the controller noticing a
dead broker: the state znode keeps its leader epoch, and the leader's state-change log says so.
Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.replica.isr_manager import ZkIsrStore
from client.admin import AdminClient
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch, decode_records
from client.types import TopicPartition
from devcluster.cluster import LocalCluster
from devcluster.ports import HOST
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually
from zk.bridge import ZkBridge
from zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch, encode_partition_state
from zk.paths import ISR_CHANGE_NOTIFICATION_PATH, partition_state_path

pytestmark = pytest.mark.integration

LAG_MS = 3000
OVERRIDES = {"replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "30000"}
# isr-expiration runs every LAG/2; propagation waits for 5 s without changes, checked every 2.5 s
SHRINK_WITHIN_S = 15.0
PROPAGATE_WITHIN_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("isr"), brokers=3, overrides=OVERRIDES)
    yield c
    c.down()


# -- helpers --------------------------------------------------------------------------------------


def zk_state(zk: KazooClient, topic: str) -> dict:
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    return {**json.loads(data), "zk_version": stat.version}


def controller_id(zk: KazooClient) -> int:
    return json.loads(zk.get("/controller")[0])["brokerid"]


async def connect(cluster: LocalCluster, broker_id: int) -> BrokerConnection:
    return await BrokerConnection.open(HOST, cluster.state.brokers[broker_id].port, "test-isr")


async def produce(
    conn: BrokerConnection, topic: str, value: bytes, acks: int, timeout_ms: int = 20_000
) -> dict:
    body = {
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "records": build_batch([(None, value, int(time.time() * 1000), [])])}
                ],
            }
        ],
    }
    response = await conn.request(ApiKey.PRODUCE, body, timeout=timeout_ms / 1000 + 10)
    return response["topics"][0]["partitions"][0]


async def consume(conn: BrokerConnection, topic: str, offset: int = 0) -> tuple[int, list[tuple[int, bytes]]]:
    """A consumer's FETCH: (the HW the leader reports, the (offset, value) records it hands out)."""
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset}]}],
    }
    part = (await conn.request(ApiKey.FETCH, body, timeout=10))["topics"][0]["partitions"][0]
    assert part["error_code"] == ErrorCode.NONE, part
    records = [(r.offset, r.value) for _, r in decode_records(part["records"]) if r.offset >= offset]
    return part["high_watermark"], records


async def metadata_isr(admin: AdminClient, topic: str) -> set[int]:
    (description,) = await admin.describe_topics([topic])  # what `floodmark topics describe` prints
    return set(description.partitions[0].isr)


def state_changes(cluster: LocalCluster, broker_id: int, event: str, topic: str) -> list[dict]:
    path = Path(cluster.state.brokers[broker_id].log_dir).parent / "state-change.log"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in lines if e.get("event") == event and e.get("topic") == topic]


async def create_topic(cluster: LocalCluster, zk: KazooClient, topic: str) -> dict:
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    finally:
        await admin.close()
    state = zk_state(zk, topic)
    assert sorted(state["isr"]) == [1, 2, 3]
    # The admin client saw a leader in some broker's metadata; the leader itself may not have
    # applied its LeaderAndIsr yet. Its own metadata naming itself means it has (the controller
    # sends a broker LeaderAndIsr before UpdateMetadata, and one connection's requests are
    # handled in order).
    conn = await connect(cluster, state["leader"])
    try:

        async def leader_knows() -> bool:
            body = await conn.request(ApiKey.METADATA, {"topics": [topic]}, timeout=5.0)
            parts = body["topics"][0]["partitions"] if body["topics"] else []
            return bool(parts) and parts[0]["leader"] == state["leader"]

        await eventually(leader_knows, f"broker {state['leader']} leads {topic}-0", timeout=10.0)
    finally:
        conn.close()
    return state


# -- the ZooKeeper side, in process ---------------------------------------------------------------


async def test_isr_writes_are_conditional_on_the_zk_version_and_announced(cluster, zk):
    chroot = "/test_isr_store"  # the cluster's ZooKeeper, out of the brokers' way
    zk.ensure_path(chroot)
    bridge = ZkBridge(cluster.zookeeper_connect + chroot, session_timeout_ms=6000)
    await bridge.start(10)
    try:
        store = ZkIsrStore(bridge)
        tp = TopicPartition("t", 0)
        path = partition_state_path("t", 0)
        initial = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 4, (1, 2, 3), 0), 7)
        await bridge.create(path, encode_partition_state(initial), makepath=True)

        written = await store.update_leader_and_isr(tp, LeaderAndIsr(1, 4, (1, 2), 0), 7)
        assert written == LeaderAndIsr(1, 4, (1, 2), 1)
        data, stat = await bridge.get(path)
        assert json.loads(data) == {
            "controller_epoch": 7,
            "leader": 1,
            "version": 1,
            "leader_epoch": 4,
            "isr": [1, 2],
        }
        # A leader that missed a change (its zkVersion 0 is stale) cannot write: ISR to itself refused.
        assert await store.update_leader_and_isr(tp, LeaderAndIsr(1, 4, (1,), 0), 7) is None
        assert json.loads((await bridge.get(path))[0])["isr"] == [1, 2]

        await store.propagate_isr_change([tp, TopicPartition("u", 2)])
        (child,) = await bridge.get_children(ISR_CHANGE_NOTIFICATION_PATH)
        assert child.startswith("isr_change_")
        note = json.loads((await bridge.get(f"{ISR_CHANGE_NOTIFICATION_PATH}/{child}"))[0])
        assert note == {
            "version": 1,
            "partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 2}],
        }
    finally:
        await bridge.close()


# -- a real cluster -------------------------------------------------------------------------------


async def test_paused_follower_leaves_the_isr_and_rejoins_after_it_resumes(cluster, zk):
    topic = "isr-pause"
    state = await create_topic(cluster, zk, topic)
    leader, epoch = state["leader"], state["leader_epoch"]
    controller = controller_id(zk)
    victim = next(b for b in (1, 2, 3) if b not in (leader, controller))  # keep metadata flowing
    survivors = {1, 2, 3} - {victim}
    conn = await connect(cluster, leader)
    admin = AdminClient(f"{HOST}:{cluster.state.brokers[leader].port}", request_timeout_ms=5000)
    await admin.start()
    try:
        assert (await produce(conn, topic, b"before", acks=-1))["error_code"] == ErrorCode.NONE

        cluster.kill(victim, "STOP")
        try:
            # acks=all waits for the paused follower until the leader drops it, then succeeds
            answer = await produce(conn, topic, b"during", acks=-1)
            assert answer["error_code"] == ErrorCode.NONE and answer["base_offset"] == 1
            shrunk = zk_state(zk, topic)
            assert set(shrunk["isr"]) == survivors
            assert shrunk["leader"] == leader and shrunk["leader_epoch"] == epoch  # the leader wrote it
            assert shrunk["zk_version"] > state["zk_version"]
            shrinks = state_changes(cluster, leader, "IsrShrink", topic)
            assert any(e["replicas"] == [victim] and e["outcome"] == "written" for e in shrinks), shrinks
            assert "Shrinking ISR from" in Path(cluster.state.brokers[leader].out).read_text()
            # the controller hears of it through /isr_change_notification and sends UpdateMetadata
            await eventually(
                lambda: _isr_is(admin, topic, survivors),
                f"metadata ISR {sorted(survivors)}",
                timeout=PROPAGATE_WITHIN_S,
            )
            assert (await produce(conn, topic, b"still", acks=-1))["error_code"] == ErrorCode.NONE
        finally:
            cluster.kill(victim, "CONT")

        async def rejoined() -> bool:
            return set(zk_state(zk, topic)["isr"]) == {1, 2, 3}

        await eventually(rejoined, "the resumed follower back in the ZooKeeper ISR", timeout=SHRINK_WITHIN_S)
        expands = state_changes(cluster, leader, "IsrExpand", topic)
        assert any(e["replicas"] == [victim] and e["outcome"] == "written" for e in expands), expands
        await eventually(
            lambda: _isr_is(admin, topic, {1, 2, 3}), "metadata ISR 1,2,3", timeout=PROPAGATE_WITHIN_S
        )
        high_watermark, records = await consume(conn, topic)
        assert [v for _, v in records] == [b"before", b"during", b"still"] and high_watermark == 3
    finally:
        await admin.close()
        conn.close()


async def _isr_is(admin: AdminClient, topic: str, expected: set[int]) -> bool:
    return await metadata_isr(admin, topic) == expected


async def test_without_enough_replicas_acks_all_is_refused_and_unreplicated_records_stay_hidden(cluster, zk):
    topic = "isr-alone"
    state = await create_topic(cluster, zk, topic)
    leader = state["leader"]
    followers = [b for b in (1, 2, 3) if b != leader]
    conn = await connect(cluster, leader)
    try:
        assert (await produce(conn, topic, b"committed", acks=-1))["error_code"] == ErrorCode.NONE

        for follower in followers:
            cluster.kill(follower, "STOP")
        try:
            # Appended on the leader only: beyond the HW, so no consumer sees it.
            written = await produce(conn, topic, b"unreplicated", acks=1)
            assert written["error_code"] == ErrorCode.NONE and written["base_offset"] == 1
            high_watermark, records = await consume(conn, topic)
            assert high_watermark == 1 and records == [(0, b"committed")]
            assert (await consume(conn, topic, 1))[1] == []
            assert len(zk_state(zk, topic)["isr"]) == 3  # all of that was before the shrink

            # acks=all appended before the shrink: Kafka 3.7 (KAFKA-15583) holds the HW while the
            # ISR is under min.insync.replicas, so the shrink fails nothing; the write waits for
            # the ISR to come back and, with both followers stopped, times out
            # (its timeout twice the shrink's usual time: lag 3 s + a check every 1.5 s)
            parked = asyncio.ensure_future(produce(conn, topic, b"parked", acks=-1, timeout_ms=10_000))

            async def shrunk() -> bool:
                return zk_state(zk, topic)["isr"] == [leader]

            await eventually(shrunk, "the ISR shrunk to the leader", timeout=SHRINK_WITHIN_S)
            assert (await parked)["error_code"] == ErrorCode.REQUEST_TIMED_OUT
            # ... and from now on acks=all is refused before anything is appended
            refused = await produce(conn, topic, b"refused", acks=-1)
            assert refused["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
            assert "min.insync.replicas=2" in (refused.get("error_message") or "")
            # Under min ISR the HW stays where it was: what the leader alone holds is invisible
            assert (await produce(conn, topic, b"alone", acks=1))["error_code"] == ErrorCode.NONE
            high_watermark, records = await consume(conn, topic)
            assert high_watermark == 1 and records == [(0, b"committed")]
        finally:
            for follower in followers:
                cluster.kill(follower, "CONT")

        async def full_isr() -> bool:
            return set(zk_state(zk, topic)["isr"]) == {1, 2, 3}

        await eventually(full_isr, "both followers back in the ISR", timeout=SHRINK_WITHIN_S)
        assert (await produce(conn, topic, b"after", acks=-1))["error_code"] == ErrorCode.NONE
        _, records = await consume(conn, topic)
        assert [v for _, v in records] == [b"committed", b"unreplicated", b"parked", b"alone", b"after"]
    finally:
        conn.close()
