"""Issue 2 on a real cluster: ZooKeeper + 3 broker processes + real sockets (SPEC 3-7)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from client.admin import AdminClient
from client.consumer import Consumer
from client.partitioner import partition_for_key
from client.producer import Producer
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from tests.integration.cluster_fixtures import start_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("cluster"), brokers=3)
    yield c
    c.down()


async def create(cluster, name, partitions, rf, configs=None):
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topic(name, partitions, rf, configs or {})
        return await admin.describe_topics([name])
    finally:
        await admin.close()


async def test_topics_get_placement_epoch_zero_and_full_isr(cluster, zk):
    (six,) = await create(cluster, "six", 6, 1)
    (three,) = await create(cluster, "three", 3, 3)
    assert [p.partition for p in six.partitions] == list(range(6))
    for p in six.partitions:
        assert (
            len(p.replicas) == 1 and p.leader == p.replicas[0] and p.leader_epoch == 0 and p.isr == p.replicas
        )
    for p in three.partitions:
        assert sorted(p.replicas) == [1, 2, 3] and p.leader == p.replicas[0] and p.leader_epoch == 0
        assert p.isr == p.replicas
    # seed 004: the first replicas of consecutive partitions walk the broker list
    firsts = [p.replicas[0] for p in six.partitions]
    assert all((b - a) % 3 == 1 for a, b in zip(firsts, firsts[1:], strict=False))

    # SPEC 3: exactly these JSON shapes
    assignment = json.loads(zk.get("/brokers/topics/three")[0])
    assert assignment == {  # Kafka's TopicZNode v3: KIP-455's moves (none) and KIP-516's id
        "version": 3,
        "partitions": {str(p.partition): p.replicas for p in three.partitions},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": three.topic_id,
    }
    for p in three.partitions:
        data, stat = zk.get(f"/brokers/topics/three/partitions/{p.partition}/state")
        state = json.loads(data)
        assert set(state) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
        assert state["leader"] == p.leader and state["leader_epoch"] == 0 and state["isr"] == p.isr
        assert state["version"] == 1 and state["controller_epoch"] >= 1
    for broker_id in (1, 2, 3):
        reg = json.loads(zk.get(f"/brokers/ids/{broker_id}")[0])
        assert set(reg) == {
            "version",
            "host",
            "port",
            "timestamp",
            "endpoints",
            "jmx_port",
            "listener_security_protocol_map",
            "file_budget",  # floodmark's extra field (docs/design.md "The file budget"); Kafka ignores it
        }
        assert reg["host"] == "127.0.0.1" and reg["jmx_port"] == -1 and isinstance(reg["timestamp"], str)
        plaintext, kafka = reg["endpoints"]  # the runner gives every broker a KAFKA listener too
        assert plaintext == f"PLAINTEXT://127.0.0.1:{reg['port']}"
        assert kafka.removeprefix("KAFKA://") in cluster.kafka_bootstrap_servers.split(",")
        assert reg["version"] == 4
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "KAFKA": "PLAINTEXT"}
        assert zk.get(f"/brokers/ids/{broker_id}")[1].ephemeralOwner != 0
    controller = json.loads(zk.get("/controller")[0])
    assert set(controller) == {"version", "brokerid", "timestamp"} and controller["brokerid"] in (1, 2, 3)
    assert int(zk.get("/controller_epoch")[0]) >= 1


async def test_hundred_thousand_keyed_records_round_trip_in_order(cluster):
    await create(cluster, "keyed", 6, 1)
    n = 100_000
    producer = Producer(cluster.bootstrap_servers, acks=1, linger_ms=5, batch_size=65536)
    await producer.start()
    futures = []
    for i in range(n):
        key = b"k%d" % (i % 997)
        futures.append(await producer.send("keyed", b"%d" % i, key=key))
    await producer.flush()
    metadata = [f.result() for f in futures]
    await producer.close()
    for i, md in enumerate(metadata):
        assert md.partition == partition_for_key(b"k%d" % (i % 997), 6)  # Kafka's murmur2 placement

    consumer = Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition("keyed", p) for p in range(6)])
    await consumer.seek_to_beginning(*consumer.assignment())
    seen: dict[int, list[int]] = defaultdict(list)
    deadline = time.monotonic() + 120
    total = 0
    while total < n and time.monotonic() < deadline:
        for record in await consumer.poll(timeout_ms=1000, max_records=5000):
            seen[record.partition].append(int(record.value))
            assert record.offset == len(seen[record.partition]) - 1
            total += 1
    await consumer.close()
    assert total == n
    # per-partition order = send order
    by_partition: dict[int, list[int]] = defaultdict(list)
    for i, md in enumerate(metadata):
        by_partition[md.partition].append(i)
    assert dict(seen) == dict(by_partition)


async def test_replicated_topic_is_readable_from_every_replica_log(cluster):
    """Every replica's own segment files hold every acknowledged record at its offset: read from
    each broker's log dir with kafka-python (the consumer would fetch from the leaders only)."""
    (topic,) = await create(cluster, "replicated", 2, 3)
    assert all(sorted(p.replicas) == [1, 2, 3] for p in topic.partitions)
    producer = Producer(cluster.bootstrap_servers, acks="all")
    await producer.start()
    futures = [await producer.send("replicated", b"v%d" % i, partition=i % 2) for i in range(500)]
    await producer.flush()
    await producer.close()
    expected: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for i, future in enumerate(futures):
        md = future.result()  # raises if any record was not acknowledged
        expected[md.partition].append((md.offset, b"v%d" % i))
    assert {p: len(records) for p, records in expected.items()} == {0: 250, 1: 250}

    # acks=all was answered once every ISR member (all three: checked below) had fetched past
    # each record, and a follower appends (os.write) before it fetches again.
    async with AdminClient(cluster.bootstrap_servers) as admin:
        (described,) = await admin.describe_topics(["replicated"])
    assert all(sorted(p.isr) == [1, 2, 3] for p in described.partitions), described
    held = {
        (broker, p): replica_records(cluster.data_dir / f"broker-{broker}" / "data" / f"replicated-{p}")
        for broker in (1, 2, 3)
        for p in (0, 1)
    }
    short = {key: len(records) for key, records in held.items() if records != sorted(expected[key[1]])}
    assert not short, f"replicas (broker, partition) without every acknowledged record: {short}"


def replica_records(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a replica's segment files, decoded by kafka-python."""
    records: list[tuple[int, bytes]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        memory = MemoryRecords(segment.read_bytes())
        while memory.has_next():
            batch = memory.next_batch()
            assert batch.validate_crc(), f"{segment}: a batch with a bad CRC"
            records += [(r.offset, r.value) for r in batch]
    return records


async def test_admin_errors_carry_kafka_codes(cluster):
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        with pytest.raises(KafkaError) as too_many:
            await admin.create_topic("too-many", 1, 4)
        assert too_many.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
        with pytest.raises(KafkaError) as bad_name:
            await admin.create_topic("bad/name", 1, 1)
        assert bad_name.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
        await admin.create_topic("dup", 1, 1)
        with pytest.raises(KafkaError) as dup:
            await admin.create_topic("dup", 1, 1)
        assert dup.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        with pytest.raises(KafkaError) as bad_config:
            await admin.create_topic("cfg", 1, 1, {"segment.byte": "1"})
        assert bad_config.value.code == ErrorCode.INVALID_CONFIG
        (unknown,) = await admin.describe_topics(["nope"])
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        await admin.close()


async def test_a_producer_creates_a_missing_topic_with_the_broker_defaults(cluster, zk):
    """auto.create.topics.enable (Kafka's default, true): the producer's Metadata request creates
    the topic with num.partitions and default.replication.factor (1 and 1 here, Kafka's), and the
    first send lands once its leader is elected. The AdminClient's requests never create one."""
    async with AdminClient(cluster.bootstrap_servers) as admin:
        (unknown,) = await admin.describe_topics(["made-by-a-producer"])
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert zk.exists("/brokers/topics/made-by-a-producer") is None
    producer = Producer(cluster.bootstrap_servers, acks=1, max_block_ms=20000)
    await producer.start()
    try:
        metadata = await producer.send_and_wait("made-by-a-producer", b"x")
        assert (metadata.partition, metadata.offset) == (0, 0)
    finally:
        await producer.close()
    assignment = json.loads(zk.get("/brokers/topics/made-by-a-producer")[0])["partitions"]
    assert list(assignment) == ["0"] and len(assignment["0"]) == 1


async def test_with_auto_creation_off_a_send_fails_after_max_block_ms_with_kafkas_message(tmp_path: Path):
    single = start_cluster(
        tmp_path / "no-auto-create", brokers=1, overrides={"auto.create.topics.enable": "false"}
    )
    producer = Producer(single.bootstrap_servers, acks=1, max_block_ms=2000)
    try:
        await producer.start()
        started = time.monotonic()
        with pytest.raises(KafkaError) as err:
            await producer.send_and_wait("no-such-topic", b"x")
        assert err.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
        assert err.value.message == "Topic no-such-topic not present in metadata after 2000 ms."
        assert time.monotonic() - started < 15  # bounded by max_block_ms, not a default wait
    finally:
        await producer.close()
        single.down()


def test_killing_the_controller_elects_another_with_higher_epoch(cluster, zk):
    old = json.loads(zk.get("/controller")[0])["brokerid"]
    old_epoch = int(zk.get("/controller_epoch")[0])
    cluster.kill(old, "KILL")
    deadline = time.monotonic() + 30
    new = None
    while time.monotonic() < deadline:
        node = zk.exists("/controller")
        if node is not None:
            new = json.loads(zk.get("/controller")[0])["brokerid"]
            if new != old:
                break
        time.sleep(0.2)
    assert new is not None and new != old
    assert int(zk.get("/controller_epoch")[0]) > old_epoch
    cluster.start(old)
    deadline = time.monotonic() + 30
    while zk.exists(f"/brokers/ids/{old}") is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert zk.exists(f"/brokers/ids/{old}") is not None


async def test_delete_topics_through_the_api_removes_the_topic_everywhere(cluster, zk):
    """DeleteTopics (Kafka's AdminZkClient.deleteTopic: /admin/delete_topics/<t>, then the
    controller's TopicDeletionManager): answered NONE, then gone from the metadata, from
    ZooKeeper and from every broker's log dir. (The API handler called a function that did not
    exist until this test: every DeleteTopics answered with an error.)"""
    from tests.integration.failover_helpers import eventually

    await create(cluster, "doomed", 2, 3)
    producer = Producer(cluster.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for i in range(10):
            await (await producer.send("doomed", f"v{i}".encode()))
    finally:
        await producer.close()
    dirs = [cluster.data_dir / f"broker-{b}" / "data" / f"doomed-{p}" for b in (1, 2, 3) for p in (0, 1)]
    assert all(d.is_dir() for d in dirs)
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        errors = await admin.delete_topics(["doomed"])
        assert errors == {"doomed": None}, errors

        async def gone() -> bool:
            return (
                zk.exists("/brokers/topics/doomed") is None
                and zk.exists("/admin/delete_topics/doomed") is None
                and not any(d.exists() for d in dirs)
                and "doomed" not in await admin.list_topics()
            )

        await eventually(gone, "the topic gone from ZooKeeper, the log dirs and the metadata")
    finally:
        await admin.close()


def test_consume_timeout_bounds_the_wait_for_a_missing_topic(cluster, zk):
    """``consume --timeout-ms`` bounds the whole wait, the missing topic's metadata included
    (it used to wait request_timeout_ms, 30 s); reading never creates a topic."""
    from click.testing import CliRunner

    from cli.main import build_cli

    started = time.monotonic()
    result = CliRunner().invoke(
        build_cli(),
        [
            "consume",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--topic",
            "nosuch",
            "--timeout-ms",
            "3000",
        ],
    )
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: UNKNOWN_TOPIC_OR_PARTITION: Topic nosuch not present in metadata after 3000 ms."
    )
    assert time.monotonic() - started < 20  # 3 s and the command's start, not 30 s
    assert zk.exists("/brokers/topics/nosuch") is None
