"""Consumer groups of Kafka's own clients on the KAFKA listener (seed 004 through another
implementation of the member's side): kcat's balanced consumer, two confluent-kafka consumers
splitting six partitions and rebalancing when one leaves, and kafka-python and aiokafka
committing offsets and resuming from them. The group coordinator is floodmark's
(broker/coordinator/); the members are librdkafka's, kafka-python's and aiokafka's. Real
ZooKeeper and broker processes.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Consumer as CkConsumer

from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import create_topic, produce_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("kafka-groups"), brokers=3)
    yield c
    c.down()


async def committed_offsets(cluster, group: str) -> dict[tuple[str, int], int]:
    from client.admin import AdminClient

    async with AdminClient(cluster.bootstrap_servers) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


async def test_kcat_balanced_consumer_reads_everything_and_commits_it(cluster):
    await create_topic(cluster, "kcat-group", 3, 3)
    acked = await produce_values(cluster, "kcat-group", [f"g-{i}".encode() for i in range(90)])
    assert len(acked) == 90
    answer = await asyncio.to_thread(
        subprocess.run,
        [
            "kcat",
            "-b",
            cluster.kafka_bootstrap_servers,
            "-G",
            "kcat-g",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            "auto.commit.interval.ms=100",
            "-c",
            "90",
            "-f",
            "%s\\n",
            "-q",
            "kcat-group",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert sorted(answer.stdout.split()) == sorted(f"g-{i}" for i in range(90))
    ends: dict[tuple[str, int], int] = {}
    for partition, offset, _ in acked:
        ends[("kcat-group", partition)] = max(ends.get(("kcat-group", partition), 0), offset + 1)
    assert await committed_offsets(cluster, "kcat-g") == ends


def group_consumer(cluster, group: str, name: str) -> CkConsumer:
    return CkConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def poll_until(consumers: list[CkConsumer], done, timeout: float) -> dict[str, list]:
    """Poll every consumer in turn until ``done(assignments)``; returns what each consumed."""
    got: dict[str, list] = {str(i): [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got[str(i)].append((message.partition(), message.offset()))
        if done([c.assignment() for c in consumers]):
            return got
    raise AssertionError(f"timed out: assignments {[c.assignment() for c in consumers]}")


async def test_two_confluent_consumers_split_six_partitions_and_one_takes_all_when_the_other_leaves(
    cluster,
):
    await create_topic(cluster, "ck-group", 6, 3)
    await produce_values(cluster, "ck-group", [f"c-{i}".encode() for i in range(600)])
    a, b = group_consumer(cluster, "ck-g", "a"), group_consumer(cluster, "ck-g", "b")
    try:
        a.subscribe(["ck-group"])
        b.subscribe(["ck-group"])

        def split(assignments) -> bool:
            sets = [{tp.partition for tp in assigned} for assigned in assignments]
            return all(len(s) == 3 for s in sets) and sets[0] | sets[1] == set(range(6))

        await asyncio.to_thread(poll_until, [a, b], split, 60)
        # range assignor: member ids sort, the first gets 0-2, the second 3-5 (seed 004's example)
        ranges = sorted(sorted(tp.partition for tp in c.assignment()) for c in (a, b))
        assert ranges == [[0, 1, 2], [3, 4, 5]]
        b.close()

        def a_has_all(assignments) -> bool:
            return {tp.partition for tp in assignments[0]} == set(range(6))

        await asyncio.to_thread(poll_until, [a], a_has_all, 60)
    finally:
        a.close()


async def test_kafka_python_commits_and_aiokafka_resumes_from_the_committed_offsets(cluster):
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    await create_topic(cluster, "kp-group", 2, 3)
    values = [f"r-{i}".encode() for i in range(200)]
    await produce_values(cluster, "kp-group", values)

    def first_half() -> list[bytes]:
        consumer = KafkaConsumer(
            "kp-group",
            bootstrap_servers=cluster.kafka_bootstrap_servers,
            group_id="kp-g",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=20000,
        )
        seen: list[bytes] = []
        for message in consumer:
            seen.append(message.value)
            if len(seen) == 100:
                break
        consumer.commit()
        consumer.close()
        return seen

    first = await asyncio.to_thread(first_half)
    committed = await committed_offsets(cluster, "kp-g")
    assert sum(committed.values()) == 100

    consumer = AIOKafkaConsumer(
        "kp-group",
        bootstrap_servers=cluster.kafka_bootstrap_servers,
        group_id="kp-g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        rest: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(rest) < 100 and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            rest += [m.value for messages in batches.values() for m in messages]
        await consumer.commit()
    finally:
        await consumer.stop()
    assert sorted(first + rest) == sorted(values)
    assert sum((await committed_offsets(cluster, "kp-g")).values()) == 200
