"""The idempotent producer on a real cluster: ZooKeeper + 3 broker processes + real sockets
(SPEC 5.4 "Idempotent producer", SPEC 6).

Produce requests are built by hand (a RecordBatch v2 with producer id, epoch and base sequence)
and sent through :class:`client.connection.BrokerConnection`, so each test controls exactly
which bytes reach which broker: the same batch twice after a lost response, a gap, a resend to
a new leader after the old one was SIGKILLed. Every wait is bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from client.admin import AdminClient
from client.connection import BrokerConnection
from client.consumer import Consumer
from client.producer import Producer
from client.protocol.api import LATEST_TIMESTAMP, ApiKey
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch
from client.types import TopicPartition
from tests.integration.cluster_fixtures import start_cluster
from zk.bridge import ZkBridge
from zk.client import allocate_producer_id_block

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("idempotence"), brokers=3)
    yield c
    c.down()


# -- helpers ------------------------------------------------------------------------------------


async def create(cluster, name: str, partitions: int, rf: int):
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topic(name, partitions, rf, {})
        (topic,) = await admin.describe_topics([name])
        return topic
    finally:
        await admin.close()


async def connect(cluster, broker_id: int) -> BrokerConnection:
    return await BrokerConnection.open(HOST, cluster.state.brokers[broker_id].port, "idempotence-test")


async def init_producer_id(conn: BrokerConnection) -> tuple[int, int]:
    response = await conn.request(
        ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000}, timeout=15
    )
    assert response["error_code"] == ErrorCode.NONE, response
    return response["producer_id"], response["producer_epoch"]


def idempotent_batch(pid: int, seq: int, n: int, epoch: int = 0, tag: str = "v") -> bytes:
    return build_batch(
        [(None, f"{tag}-{pid}-{seq + i}".encode(), int(time.time() * 1000), []) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def produce_body(topic: str, records: bytes, acks: int = -1, partition: int = 0) -> dict:
    return {
        "acks": acks,
        "timeout_ms": 15000,
        "transactional_id": None,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "records": records}]}],
    }


async def produce(conn: BrokerConnection, body: dict) -> dict:
    response = await conn.request(ApiKey.PRODUCE, body, timeout=30)
    (topic,) = response["topics"]
    (partition,) = topic["partitions"]
    return partition


async def high_watermark(conn: BrokerConnection, topic: str, partition: int = 0) -> int:
    body = {
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "timestamp": LATEST_TIMESTAMP}]}]
    }
    response = await conn.request(ApiKey.LIST_OFFSETS, body, timeout=15)
    result = response["topics"][0]["partitions"][0]
    assert result["error_code"] == ErrorCode.NONE, result
    return result["offset"]


async def consume_all(cluster, topic: str, expected: int, settle_s: float = 1.5) -> list[bytes]:
    """Every committed value of partition 0; keeps polling ``settle_s`` after ``expected`` are in,
    so a duplicate would be seen."""
    consumer = Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning(*consumer.assignment())
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        settled_at = None
        while time.monotonic() < deadline:
            values += [r.value for r in await consumer.poll(timeout_ms=200)]
            if len(values) >= expected:
                settled_at = settled_at or time.monotonic()
                if time.monotonic() - settled_at >= settle_s:
                    break
        return values
    finally:
        await consumer.close()


async def leader_of(cluster, topic: str, partition: int = 0) -> int:
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        return next(p.leader for p in described.partitions if p.partition == partition)
    finally:
        await admin.close()


# -- (a) lost response ----------------------------------------------------------------------------


async def test_a_retried_produce_after_a_lost_response_is_not_duplicated(cluster):
    topic = await create(cluster, "idem-lost-response", 1, 3)
    leader = topic.partitions[0].leader
    first_conn = await connect(cluster, leader)
    retry_conn = await connect(cluster, leader)
    try:
        pid, epoch = await init_producer_id(retry_conn)
        assert epoch == 0
        body = produce_body("idem-lost-response", idempotent_batch(pid, 0, 5))
        # The first attempt is written and replicated, but its answer never reaches the client:
        # the connection goes away first.
        first_conn.send(ApiKey.PRODUCE, body).add_done_callback(lambda f: f.exception())
        deadline = time.monotonic() + 30
        while await high_watermark(retry_conn, "idem-lost-response") < 5:
            assert time.monotonic() < deadline, "the first attempt never committed"
            await asyncio.sleep(0.05)
        first_conn.close()
        # The retry: the very same request body, on a new connection.
        retry = await produce(retry_conn, body)
        assert retry["error_code"] == ErrorCode.NONE and retry["base_offset"] == 0
        assert await high_watermark(retry_conn, "idem-lost-response") == 5
        # ... and once more, for good measure, then a new batch goes right after the original
        again = await produce(retry_conn, body)
        assert (again["error_code"], again["base_offset"]) == (ErrorCode.NONE, 0)
        following = await produce(retry_conn, produce_body("idem-lost-response", idempotent_batch(pid, 5, 2)))
        assert (following["error_code"], following["base_offset"]) == (ErrorCode.NONE, 5)
    finally:
        first_conn.close()
        retry_conn.close()
    values = await consume_all(cluster, "idem-lost-response", 7)
    assert values == [f"v-{pid}-{i}".encode() for i in range(7)]  # every record exactly once, in order


# -- (b) a gap ------------------------------------------------------------------------------------


async def test_a_sequence_gap_is_out_of_order_and_a_fenced_epoch_is_refused(cluster):
    topic = await create(cluster, "idem-gap", 1, 3)
    conn = await connect(cluster, topic.partitions[0].leader)
    try:
        pid, _ = await init_producer_id(conn)
        ok = await produce(conn, produce_body("idem-gap", idempotent_batch(pid, 0, 3)))
        assert (ok["error_code"], ok["base_offset"]) == (ErrorCode.NONE, 0)
        gap = await produce(conn, produce_body("idem-gap", idempotent_batch(pid, 5, 2)))
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER == 45
        assert gap["base_offset"] == -1 and "out of order sequence number" in gap["error_message"]
        # nothing of the refused batch was written: the next in-sequence batch follows at once
        ok = await produce(conn, produce_body("idem-gap", idempotent_batch(pid, 3, 2)))
        assert (ok["error_code"], ok["base_offset"]) == (ErrorCode.NONE, 3)
        # a newer epoch must start at 0; then the older epoch is fenced
        bumped = await produce(conn, produce_body("idem-gap", idempotent_batch(pid, 0, 1, epoch=1)))
        assert (bumped["error_code"], bumped["base_offset"]) == (ErrorCode.NONE, 5)
        fenced = await produce(conn, produce_body("idem-gap", idempotent_batch(pid, 5, 1, epoch=0)))
        assert fenced["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH == 47
        assert await high_watermark(conn, "idem-gap") == 6
    finally:
        conn.close()


# -- (c) producer ids ------------------------------------------------------------------------------


async def test_producer_ids_are_unique_across_brokers_and_blocks_live_in_zookeeper(cluster, zk):
    ids: dict[int, list[int]] = {}
    for broker_id in (1, 2, 3):
        conn = await connect(cluster, broker_id)
        try:
            ids[broker_id] = [(await init_producer_id(conn))[0] for _ in range(3)]
        finally:
            conn.close()
    every = [pid for pids in ids.values() for pid in pids]
    assert len(set(every)) == len(every)
    for pids in ids.values():
        assert pids == list(range(pids[0], pids[0] + 3))  # one broker hands out its block in order
    # each broker drew its own block of 1000 (a block is never shared)
    assert len({pids[0] // 1000 for pids in ids.values()}) == 3
    data, _ = zk.get("/latest_producer_id_block")
    block = json.loads(data)
    assert list(block) == ["version", "broker", "block_start", "block_end"]
    assert block["version"] == 1 and block["broker"] in (1, 2, 3)
    assert int(block["block_end"]) - int(block["block_start"]) + 1 == 1000
    assert max(every) <= int(block["block_end"])

    # the client's own start-up, through two producers bootstrapped at different brokers
    ports = {b: cluster.state.brokers[b].port for b in (1, 2, 3)}
    one = Producer(f"{HOST}:{ports[1]}", acks="all")
    two = Producer(f"{HOST}:{ports[2]}", acks="all")
    await one.start()
    await two.start()
    try:
        assert one.producer_id >= 0 and two.producer_id >= 0
        assert len({one.producer_id, two.producer_id, *every}) == len(every) + 2
    finally:
        await one.close()
        await two.close()


async def test_concurrent_block_claims_never_overlap(cluster, zk):
    zk.ensure_path("/idem-race")
    bridges = [ZkBridge(cluster.zookeeper_connect + "/idem-race") for _ in range(4)]
    for bridge in bridges:
        await bridge.start(timeout=10)
    try:
        claims = await asyncio.gather(
            *(
                allocate_producer_id_block(bridge, broker, block_size=10)
                for broker, bridge in enumerate(bridges)
                for _ in range(5)
            )
        )
    finally:
        for bridge in bridges:
            await bridge.close()
    ranges = sorted((c.block_start, c.block_end) for c in claims)
    assert ranges == [(10 * i, 10 * i + 9) for i in range(20)]  # 20 claims, 20 disjoint blocks


# -- (d) failover ------------------------------------------------------------------------------------


async def test_the_duplicate_window_survives_a_leader_change(cluster):
    topic = await create(cluster, "idem-failover", 1, 3)
    partition = topic.partitions[0]
    old_leader = partition.leader
    assert sorted(partition.isr) == [1, 2, 3]
    conn = await connect(cluster, old_leader)
    try:
        pid, _ = await init_producer_id(conn)
        batches = [idempotent_batch(pid, seq, 3) for seq in range(0, 18, 3)]  # 6 batches, 18 records
        for i, records in enumerate(batches):
            # acks=all: answered only once every ISR follower has copied the batch
            result = await produce(conn, produce_body("idem-failover", records))
            assert (result["error_code"], result["base_offset"]) == (ErrorCode.NONE, 3 * i)
    finally:
        conn.close()

    cluster.kill(old_leader, "KILL")
    try:
        deadline = time.monotonic() + 60
        new_leader = old_leader
        while new_leader in (old_leader, -1):
            assert time.monotonic() < deadline, "no new leader within 60s"
            await asyncio.sleep(0.25)
            try:
                new_leader = await leader_of(cluster, "idem-failover")
            except Exception:  # a broker of the bootstrap list is the dead one: try again
                continue

        conn = await connect(cluster, new_leader)
        try:
            # The producer never got the answers for the last batches and resends them to the new
            # leader, which built its producer state from the batches it copied as a follower.
            # acks=1: the duplicate answer must not wait on the dead replica still in the ISR.
            for i in (5, 4, 1):  # the last one, and older ones still inside the 5-batch window
                resent = await produce(conn, produce_body("idem-failover", batches[i], acks=1))
                assert (resent["error_code"], resent["base_offset"]) == (ErrorCode.NONE, 3 * i), (i, resent)
            # the oldest one has left the window: neither a duplicate nor next in line
            stale = await produce(conn, produce_body("idem-failover", batches[0], acks=1))
            assert stale["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            gap = await produce(conn, produce_body("idem-failover", idempotent_batch(pid, 19, 1), acks=1))
            assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            nxt = await produce(conn, produce_body("idem-failover", idempotent_batch(pid, 18, 2), acks=1))
            assert (nxt["error_code"], nxt["base_offset"]) == (ErrorCode.NONE, 18)
        finally:
            conn.close()
    finally:
        cluster.start(old_leader)
