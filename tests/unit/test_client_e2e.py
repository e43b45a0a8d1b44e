"""Producer, consumer and admin end to end over real sockets against tests/unit/fake_cluster.py.

The fake validates every request body against api.py, so these tests also prove the client
speaks the wire contract; kafka-python (the independent oracle) decodes the batches the
producer built.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.record.memory_records import MemoryRecords

from client import (
    AdminClient,
    Consumer,
    NewTopic,
    Producer,
    SyncAdmin,
    SyncConsumer,
    SyncProducer,
    TopicPartition,
)
from client.partitioner import partition_for_key
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from tests.unit.fake_cluster import FakeCluster, running_in_a_thread


@pytest.fixture
async def fake():
    cluster = await FakeCluster().start()
    cluster.create("t", 3)
    yield cluster
    await cluster.stop()


def producer(fake: FakeCluster, **overrides) -> Producer:
    return Producer(fake.bootstrap, **{"linger_ms": 1, "retry_backoff_ms": 10, **overrides})


def consumer(fake: FakeCluster, **overrides) -> Consumer:
    return Consumer(fake.bootstrap, **{"fetch_max_wait_ms": 50, "retry_backoff_ms": 10, **overrides})


# -- producer -------------------------------------------------------------------------------------


async def test_keyed_records_land_on_murmur2_partitions_with_consecutive_offsets(fake):
    async with producer(fake) as p:
        futures = [await p.send("t", f"v{i}".encode(), key=f"k{i % 7}".encode()) for i in range(200)]
        results = await asyncio.gather(*futures)
    seen: dict[int, list[int]] = {}
    for i, md in enumerate(results):
        assert md.topic == "t"
        assert md.partition == partition_for_key(f"k{i % 7}".encode(), 3)
        seen.setdefault(md.partition, []).append(md.offset)
    for partition, offsets in seen.items():
        assert offsets == list(range(len(offsets)))
        assert len(fake.records("t", partition)) == len(offsets)


async def test_batches_decode_with_kafka_python_oracle(fake):
    async with producer(fake, compression_type="gzip") as p:
        futures = [
            await p.send("t", b"value-%d" % i, key=b"k", headers=[("h", b"x")], timestamp_ms=1000 + i)
            for i in range(50)
        ]
        await asyncio.gather(*futures)
    partition = partition_for_key(b"k", 3)
    records = MemoryRecords(fake.log_bytes("t", partition))
    decoded = []
    while records.has_next():
        batch = records.next_batch()
        batch.validate_crc()
        decoded.extend((r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch)
    assert decoded == [(i, b"k", b"value-%d" % i, 1000 + i, [("h", b"x")]) for i in range(50)]


async def test_one_produce_request_per_broker_carries_all_its_partitions(fake):
    fake.create("six", 6)  # leaders 1, 2, 3, 1, 2, 3
    async with producer(
        fake, linger_ms=60_000
    ) as p:  # nothing leaves before flush(), however slow the machine
        await p.partitions_for("six")
        futures = [await p.send("six", b"x", partition=i % 6) for i in range(60)]
        await p.flush()
        await asyncio.gather(*futures)
    produces = fake.of(ApiKey.PRODUCE)
    assert sorted(r.node for r in produces) == [1, 2, 3]
    for request in produces:
        [topic] = request.body["topics"]
        assert sorted(p["partition"] % 3 for p in topic["partitions"]) == [request.node - 1] * 2


async def test_sticky_partitioner_fills_one_partition_per_batch(fake):
    async with producer(fake, linger_ms=1000, batch_size=1000) as p:
        futures = [await p.send("t", b"x" * 100) for _ in range(8)]
        await p.flush()
        partitions = [(await f).partition for f in futures]
    # 8 records of ~116 bytes: the first batch holds them all (it fills at 1000 bytes) -> one partition
    assert len(set(partitions)) == 1


async def test_acks_zero_resolves_offsets_to_minus_one(fake):
    async with producer(fake, acks=0) as p:
        md = await p.send_and_wait("t", b"fire", partition=0)
        assert md.offset == -1
    await asyncio.sleep(0.05)
    assert [r.value for r in fake.records("t", 0)] == [b"fire"]


async def test_retriable_errors_are_retried_in_order(fake):
    fake.produce_errors[("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT]
    async with producer(fake, batch_size=200) as p:
        futures = [await p.send("t", b"%03d" % i, partition=0) for i in range(40)]
        results = await asyncio.gather(*futures)
        assert p.metrics["batches_retried"] == 2
    assert [md.offset for md in results] == list(range(40))
    assert [r.value for r in fake.records("t", 0)] == [b"%03d" % i for i in range(40)]


async def test_leader_move_refreshes_metadata_and_resends(fake):
    async with producer(fake) as p:
        assert (await p.send_and_wait("t", b"a", partition=1)).offset == 0
        fake.move_leader("t", 1, 3)
        md = await p.send_and_wait("t", b"b", partition=1)
        assert md.offset == 1
    nodes = [r.node for r in fake.of(ApiKey.PRODUCE)]
    assert nodes == [2, 2, 3]  # the second send hit the old leader, then the new one


async def test_connection_loss_is_retried(fake):
    async with producer(fake) as p:
        await p.send_and_wait("t", b"a", partition=0)
        fake.drop_next.add(ApiKey.PRODUCE)
        md = await p.send_and_wait("t", b"b", partition=0)
    assert md.offset == 1
    assert [r.value for r in fake.records("t", 0)] == [b"a", b"b"]


async def test_non_retriable_error_fails_the_batch_with_name_and_place(fake):
    fake.produce_errors[("t", 2)] = [ErrorCode.INVALID_REQUIRED_ACKS]
    async with producer(fake) as p:
        with pytest.raises(KafkaError) as info:
            await p.send_and_wait("t", b"x", partition=2)
        assert info.value.code == ErrorCode.INVALID_REQUIRED_ACKS
        assert str(info.value).startswith("INVALID_REQUIRED_ACKS")
        assert "t-2" in str(info.value) and "broker 3" in str(info.value)
        # the partition is usable again afterwards
        assert (await p.send_and_wait("t", b"y", partition=2)).offset == 0


async def test_delivery_timeout_expires_records(fake):
    fake.produce_errors[("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000
    async with producer(fake, delivery_timeout_ms=200, retry_backoff_ms=20) as p:
        with pytest.raises(KafkaError) as info:
            await p.send_and_wait("t", b"x", partition=0)
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert "expir" in str(info.value) and "NOT_ENOUGH_REPLICAS" in str(info.value)


async def test_retries_are_warned_as_kafkas_sender_warns_them_not_silently(fake, caplog):
    """A newcomer's `produce --acks all` with too few replicas in sync was silent for the whole
    delivery.timeout.ms. Every retried error is now warned, once per partition and error code per
    interval, in the words of Kafka's Sender, with what is left of the delivery timeout."""
    fake.produce_errors[("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 20
    with caplog.at_level("WARNING", logger="client.producer.sender"):
        async with producer(fake, retry_backoff_ms=5) as p:
            assert (await p.send_and_wait("t", b"x", partition=0)).offset == 0
    warned = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(warned) == 1, warned  # 20 retries within the interval: one line, not twenty
    assert warned[0].startswith("Got error produce response on topic-partition t-0, retrying (")
    assert "delivery.timeout.ms left). Error: NOT_ENOUGH_REPLICAS" in warned[0]


async def test_unknown_topic_and_partition_are_refused_at_send(fake):
    async with producer(fake, max_block_ms=100) as p:
        with pytest.raises(KafkaError) as info:
            await p.send("nope", b"x")
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "nope" in str(info.value)
        with pytest.raises(KafkaError):
            await p.send("t", b"x", partition=9)
        with pytest.raises(KafkaError) as info:
            await p.send("t", b"x" * 2_000_000)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert await p.partitions_for("t") == [0, 1, 2]


async def test_buffer_memory_applies_backpressure(fake):
    fake.produce_delay = 0.05
    async with producer(fake, buffer_memory=3000, batch_size=1000) as p:
        futures = [await p.send("t", b"x" * 200, partition=i % 3) for i in range(60)]
        assert p._acc.buffered_bytes <= 3000
        await asyncio.gather(*futures)
    assert sum(len(fake.records("t", i)) for i in range(3)) == 60


async def test_unreachable_bootstrap_is_a_network_exception():
    p = Producer("127.0.0.1:1", request_timeout_ms=500)
    with pytest.raises(KafkaError) as info:
        await p.start()
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION and "no broker reachable" in str(info.value)
    await p.close()


async def test_close_flushes_lingering_records(fake):
    p = producer(fake, linger_ms=60_000)
    await p.start()
    future = await p.send("t", b"late", partition=0)
    await p.close()
    assert (await future).offset == 0


def test_unknown_override_is_named():
    with pytest.raises(ValueError, match="lingerms"):
        Producer("h:1", lingerms=5)
    with pytest.raises(ValueError, match="acks"):
        Producer("h:1", acks=2)
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer("h:1", auto_offset_reset="middle")


# -- consumer -------------------------------------------------------------------------------------


async def fill(fake: FakeCluster, partition: int, n: int, batch: int = 10, topic: str = "t") -> None:
    async with producer(fake, linger_ms=1000, batch_size=10**6) as p:
        for start in range(0, n, batch):
            for i in range(start, min(n, start + batch)):
                await p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=partition, timestamp_ms=10_000 + i)
            await p.flush()


async def consume(c: Consumer, n: int, timeout: float = 5.0) -> list:
    out: list = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(out) < n and loop.time() < deadline:
        out.extend(await c.poll(100))
    return out


async def test_consumer_reads_back_in_offset_order_across_partitions(fake):
    for partition in range(3):
        await fill(fake, partition, 35)
    async with consumer(fake, auto_offset_reset="earliest", max_poll_records=7) as c:
        c.assign([TopicPartition("t", i) for i in range(3)])
        records = await consume(c, 105)
        for partition in range(3):
            mine = [r for r in records if r.partition == partition]
            assert [r.offset for r in mine] == list(range(35))
            assert [r.value for r in mine] == [b"v%d" % i for i in range(35)]
            assert mine[3].key == b"k3" and mine[3].timestamp == 10_003 and mine[3].leader_epoch == 0
        assert await c.position(TopicPartition("t", 0)) == 35
        fetches = fake.of(ApiKey.FETCH)
        assert all(len(f.body["topics"][0]["partitions"]) == 1 for f in fetches)  # one partition per leader


async def test_seek_skips_records_below_position_inside_a_batch(fake):
    await fill(fake, 0, 30, batch=10)
    async with consumer(fake) as c:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 13)
        records = await consume(c, 17)
        assert [r.offset for r in records] == list(range(13, 30))


async def test_auto_offset_reset_latest_and_seek_to(fake):
    await fill(fake, 1, 20)
    tp = TopicPartition("t", 1)
    async with consumer(fake) as c:
        c.assign([tp])
        assert await c.position(tp) == 20
        assert await c.poll(50) == []
        await c.seek_to_beginning(tp)
        assert await c.position(tp) == 0
        await c.seek_to_end()
        assert await c.position(tp) == 20
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: 20}
        assert await c.offsets_for_times({tp: 10_005}) == {tp: (5, 10_005)}
        assert await c.offsets_for_times({tp: 99_999}) == {tp: None}
        assert await c.partitions_for_topic("t") == [0, 1, 2]


async def test_offset_out_of_range_resets(fake):
    await fill(fake, 0, 10)
    tp = TopicPartition("t", 0)
    async with consumer(fake, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 500)
        records = await consume(c, 10)
        assert [r.offset for r in records] == list(range(10))
    async with consumer(fake, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 500)
        with pytest.raises(KafkaError) as info:
            await consume(c, 1)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and "t-0" in str(info.value)


async def test_fetch_follows_a_leader_move_and_fenced_epochs(fake):
    await fill(fake, 2, 10)
    tp = TopicPartition("t", 2)
    async with consumer(fake, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert len(await consume(c, 10)) == 10
        fake.move_leader("t", 2, 1)
        await fill(fake, 2, 5)
        fake.fetch_errors[("t", 2)] = [ErrorCode.UNKNOWN_LEADER_EPOCH]
        records = await consume(c, 5)
        assert [r.offset for r in records] == list(range(10, 15))
        assert records[0].leader_epoch == 1
    nodes = [f.node for f in fake.of(ApiKey.FETCH)]
    assert 3 in nodes and 1 in nodes


async def test_long_poll_wakes_on_new_data(fake):
    tp = TopicPartition("t", 0)
    async with consumer(fake, fetch_max_wait_ms=2000) as c:
        c.assign([tp])
        assert await c.position(tp) == 0
        task = asyncio.create_task(c.poll(3000))
        await asyncio.sleep(0.1)
        await fill(fake, 0, 1)
        records = await asyncio.wait_for(task, 2)
        assert [r.value for r in records] == [b"v0"]


# -- admin ----------------------------------------------------------------------------------------


async def test_admin_topics_lifecycle(fake):
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        await admin.create_topic("new", num_partitions=4, replication_factor=2)
        with pytest.raises(KafkaError) as info:
            await admin.create_topic("new")
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and "already exists" in str(info.value)
        with pytest.raises(KafkaError) as info:
            await admin.create_topic("big", replication_factor=9)
        assert str(info.value).startswith("INVALID_REPLICATION_FACTOR") and "larger than available" in str(
            info.value
        )
        results = await admin.create_topics([NewTopic("v", 2)], validate_only=True)
        assert results == {"v": None} and "v" not in fake.topics
        assert await admin.list_topics() == ["new", "t"]
        described = await admin.describe_topics(["t", "missing", "new"])
        assert [d.name for d in described] == ["missing", "new", "t"]
        assert described[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert [p.partition for p in described[1].partitions] == [0, 1, 2, 3]
        assert described[2].partitions[1].leader == 2
        cluster = await admin.describe_cluster()
        assert cluster.controller_id == 1 and [b.node_id for b in cluster.brokers] == [1, 2, 3]
        assert {v["name"] for v in await admin.api_versions()} >= {"PRODUCE", "FETCH", "METADATA"}
        assert (await admin.delete_topics(["new"])) == {"new": None}
        assert await admin.list_topics() == ["t"]


async def test_admin_follows_a_moved_controller(fake):
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        fake.controller_id = 2
        await admin.create_topic("moved", 1)
        assert "moved" in fake.topics
        creates = fake.of(ApiKey.CREATE_TOPICS)
        assert [r.node for r in creates][-1] == 2


async def test_admin_delete_reports_per_topic(fake):
    async with AdminClient(fake.bootstrap) as admin:
        results = await admin.delete_topics(["t", "missing"])
        assert results["t"] is None
        assert results["missing"].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "missing" in str(results["missing"])


async def test_admin_create_partitions_resent_after_a_lost_answer_counts_as_done(fake):
    """The first CreatePartitions lands but its answer is lost; the resend meets the refusal
    that success causes ("Topic already has 5 partitions."), which for a request whose answer
    was lost means done. Asked without a lost answer, the same refusal stays an error (Kafka's)."""
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        fake.drop_response_next.add(ApiKey.CREATE_PARTITIONS)
        assert await admin.create_partitions({"t": 5}, timeout_ms=5000) == {"t": None}
        assert len(fake.topics["t"]) == 5 and len(fake.of(ApiKey.CREATE_PARTITIONS)) == 2
        again = await admin.create_partitions({"t": 5}, timeout_ms=5000)
        assert again["t"] is not None and again["t"].code == ErrorCode.INVALID_PARTITIONS
        assert "Topic already has 5 partitions." in again["t"].message


# -- sync facade ----------------------------------------------------------------------------------


@pytest.fixture
def threaded_fake():
    """The fake cluster on its own loop in a thread, so sync clients can block this one."""
    with running_in_a_thread(lambda cluster: cluster.create("t", 2)) as cluster:
        yield cluster


def test_sync_facade_round_trip(threaded_fake):
    with SyncAdmin(threaded_fake.bootstrap) as admin:
        admin.create_topic("s", 1)
        assert admin.list_topics() == ["s", "t"]
    with SyncProducer(threaded_fake.bootstrap, linger_ms=1) as p:
        future = p.send("s", b"one")
        assert p.send_and_wait("s", b"two").offset == 1
        assert future.result(5).offset == 0
        p.flush()
    with SyncConsumer(threaded_fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as c:
        c.assign([TopicPartition("s", 0)])
        records = []
        for _ in range(20):
            records += c.poll(100)
            if len(records) == 2:
                break
        assert [r.value for r in records] == [b"one", b"two"]
        assert c.end_offsets([TopicPartition("s", 0)]) == {TopicPartition("s", 0): 2}


def test_sync_facades_are_ready_once_constructed(threaded_fake):
    """kafka-python's way: no start() call, no async instruction to a sync user."""
    producer = SyncProducer(threaded_fake.bootstrap, linger_ms=1)
    try:
        assert producer.send_and_wait("t", b"ready").offset >= 0
    finally:
        producer.close()
    consumer = SyncConsumer(threaded_fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    try:
        assert consumer.partitions_for_topic("t") == [0, 1]
    finally:
        consumer.close()


def test_a_sync_facade_that_cannot_connect_raises_and_leaves_no_thread():
    import threading

    from client.protocol.errors import KafkaError
    from devcluster.ports import free_port_block

    before = {t.name for t in threading.enumerate()}
    with pytest.raises(KafkaError, match="NETWORK_EXCEPTION"):
        SyncAdmin(f"127.0.0.1:{free_port_block(1)}", request_timeout_ms=2000)
    assert {t.name for t in threading.enumerate() if t.is_alive()} <= before
