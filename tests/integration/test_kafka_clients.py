"""Kafka's own clients, unmodified, against the KAFKA listener of a real three-broker cluster
(docs/design.md "Two wire protocols"; docs/operations.md "Using Kafka's clients").

The clients are the oracles: kcat (Debian's, librdkafka inside), confluent-kafka (librdkafka
2.x), kafka-python and aiokafka, each with its own implementation of Kafka's protocol. What they
write is read back through floodmark's own msgpack listener and client too, so the two listeners
are checked to serve the same log. ZooKeeper and the brokers are real processes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka import TopicPartition as CkTopicPartition

from client.consumer import Consumer
from client.partitioner import partition_for_key
from client.types import TopicPartition
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import create_topic, eventually, partition_state, produce_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("kafka-clients"), brokers=3)
    yield c
    c.down()


def kcat(cluster, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    answer = subprocess.run(
        ["kcat", "-b", cluster.kafka_bootstrap_servers, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert answer.returncode == 0, f"kcat {' '.join(args)} failed: {answer.stderr[-2000:]}"
    return answer.stdout


async def read_all(cluster, topic: str, partitions: int, expected: int, settle_s: float = 1.0) -> list:
    """Every committed record of ``topic``, through floodmark's own client and listener; keeps
    polling ``settle_s`` after ``expected`` are in, so a duplicate would be seen."""
    consumer = Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        await consumer.seek_to_beginning(*consumer.assignment())
        records: list = []
        deadline, settled_at = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            records += await consumer.poll(timeout_ms=200)
            if len(records) >= expected:
                settled_at = settled_at or time.monotonic()
                if time.monotonic() - settled_at >= settle_s:
                    break
        return records
    finally:
        await consumer.close()


async def test_kcat_metadata_names_every_broker_on_the_kafka_listener(cluster):
    await create_topic(cluster, "kcat-meta", 6, 3)
    expected = {p.partition: p for p in (await partition_state_all(cluster, "kcat-meta", 6))}
    metadata = json.loads(kcat(cluster, "-L", "-J", "-t", "kcat-meta"))
    kafka_ports = sorted(int(a.rpartition(":")[2]) for a in cluster.kafka_bootstrap_servers.split(","))
    assert sorted(int(b["name"].rpartition(":")[2]) for b in metadata["brokers"]) == kafka_ports
    assert sorted(b["id"] for b in metadata["brokers"]) == [1, 2, 3]
    (topic,) = metadata["topics"]
    assert topic["topic"] == "kcat-meta" and len(topic["partitions"]) == 6
    for p in topic["partitions"]:
        ours = expected[p["partition"]]
        assert p["leader"] == ours.leader
        assert [r["id"] for r in p["replicas"]] == list(ours.replicas)
        assert sorted(r["id"] for r in p["isrs"]) == sorted(ours.isr)


async def partition_state_all(cluster, topic: str, partitions: int) -> list:
    return [await partition_state(cluster, topic, p) for p in range(partitions)]


async def test_kcat_produces_keyed_records_that_both_listeners_read_back(cluster):
    await create_topic(cluster, "kcat-keys", 6, 3)
    lines = [f"key-{i}:value-{i}" for i in range(300)]
    # murmur2_random is the Java client's partitioner (and floodmark's): keys land where ours put them
    kcat(
        cluster,
        "-P",
        "-t",
        "kcat-keys",
        "-K:",
        "-X",
        "partitioner=murmur2_random",
        stdin="\n".join(lines) + "\n",
    )
    consumed = kcat(cluster, "-C", "-t", "kcat-keys", "-e", "-J", "-q")
    seen = [json.loads(line) for line in consumed.splitlines() if line.strip()]
    assert len(seen) == 300
    for message in seen:
        assert message["payload"] == message["key"].replace("key-", "value-")
        assert message["partition"] == partition_for_key(message["key"].encode(), 6)
    by_partition: dict[int, list[int]] = {}
    for message in seen:
        by_partition.setdefault(message["partition"], []).append(message["offset"])
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())

    ours = await read_all(cluster, "kcat-keys", 6, 300)
    assert sorted((r.key, r.value) for r in ours) == sorted(
        (m["key"].encode(), m["payload"].encode()) for m in seen
    )


def produce_idempotently(bootstrap: str, topic: str, count: int, stop_after_s: float) -> dict:
    """An idempotent acks=all confluent-kafka producer writing ``count`` distinct values at about
    4,000 a second; returns each value's delivery outcome (None: acknowledged) and when."""
    producer = CkProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
        }
    )
    outcomes: dict[str, tuple[str | None, float]] = {}

    def delivered(err, message) -> None:
        outcomes[message.value().decode()] = (None if err is None else str(err), time.monotonic())

    deadline = time.monotonic() + stop_after_s
    for i in range(count):
        while time.monotonic() < deadline:
            try:
                producer.produce(topic, value=f"v{i:07d}".encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if i % 40 == 0:
            time.sleep(0.01)  # spread the writes over the leader kill
    producer.flush(120)
    return outcomes


async def test_an_idempotent_confluent_producer_through_a_leader_sigkill_loses_and_duplicates_nothing(
    cluster,
):
    topic = "ck-idempotent"
    await create_topic(cluster, topic, 3, 3, {"min.insync.replicas": "2"})
    count = 30_000
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.update(produce_idempotently(cluster.kafka_bootstrap_servers, topic, count, 150))
    )
    worker.start()
    await asyncio.sleep(2.0)
    leader = (await partition_state(cluster, topic, 0)).leader
    cluster.kill(leader, "KILL")
    killed_at = time.monotonic()
    await eventually(
        lambda: _leader_moved(cluster, topic, leader), "a new leader for partition 0", timeout=60
    )
    await asyncio.to_thread(worker.join, 170)
    assert not worker.is_alive(), "the producer did not finish"
    cluster.start(leader)
    failed = {v: e for v, (e, _) in result.items() if e is not None}
    acked = {v for v, (e, _) in result.items() if e is None}
    assert not failed, f"{len(failed)} deliveries failed, e.g. {list(failed.items())[:3]}"
    assert len(acked) == count
    after_kill = sum(1 for _, at in result.values() if at > killed_at)
    assert count // 10 < after_kill < count - count // 10, "the kill did not fall inside the writes"

    records = await read_all(cluster, topic, 3, count)
    values = Counter(r.value.decode() for r in records)
    assert not [v for v, n in values.items() if n > 1], "duplicates"
    assert acked - set(values) == set(), "acknowledged values lost"
    through_kcat = kcat(cluster, "-C", "-t", topic, "-e", "-q", "-f", "%s\\n", timeout=120).split()
    assert Counter(through_kcat) == values


async def _leader_moved(cluster, topic: str, old: int) -> bool:
    state = await partition_state(cluster, topic, 0)
    return state.leader not in (old, -1)


async def test_kafka_python_writes_and_aiokafka_reads_the_same_records(cluster):
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaProducer

    await create_topic(cluster, "kp-aio", 3, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all")
    futures = [producer.send("kp-aio", key=f"k{i}".encode(), value=f"kp-{i}".encode()) for i in range(500)]
    producer.flush(60)
    acked = [f.get(timeout=30) for f in futures]
    producer.close()
    assert {m.partition for m in acked} == {0, 1, 2}

    consumer = AIOKafkaConsumer(
        "kp-aio", bootstrap_servers=cluster.kafka_bootstrap_servers, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 500 and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got += [m for messages in batches.values() for m in messages]
    finally:
        await consumer.stop()
    assert sorted(m.value for m in got) == sorted(f"kp-{i}".encode() for i in range(500))
    assert {(m.partition, m.offset) for m in got} == {(m.partition, m.offset) for m in acked}


async def test_a_confluent_consumer_reads_what_floodmark_wrote(cluster):
    await create_topic(cluster, "fm-to-ck", 2, 3)
    acked = await produce_values(cluster, "fm-to-ck", [f"fm-{i}".encode() for i in range(200)])
    assert len(acked) == 200
    consumer = CkConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CkTopicPartition("fm-to-ck", p, 0) for p in range(2)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 200 and time.monotonic() < deadline:
            message = await asyncio.to_thread(consumer.poll, 0.5)
            if message is not None and message.error() is None:
                got.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    assert sorted(got) == sorted(acked)
