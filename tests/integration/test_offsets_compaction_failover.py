"""A consumer group resumes from its committed offsets after its coordinator is killed, on a
compacted ``__consumer_offsets`` (broker/coordinator/group_metadata_manager.py, Kafka's
GroupMetadataManager.doLoadGroupsAndOffsets; docs/design.md "Consumer groups").

The oracle is a real client: librdkafka (confluent-kafka) members of one group on the KAFKA
listener of ZooKeeper plus three broker processes, with one offsets partition
(``offsets.topic.num.partitions=1``) of small segments (``offsets.topic.segment.bytes``), a cleaner
that runs every half second at any dirty ratio. The member commits after every record, the same
key again and again, so every cleaned segment but the last holds only its last batch, emptied of
its records (the cleaner keeps it for its offsets). Once every replica of the offsets partition
holds such an empty batch, the coordinator broker is killed with SIGKILL and a new member joins:
the new coordinator must load the partition past the empty batches, and the member must start
exactly at the committed offset (``auto.offset.reset=earliest`` would start it at 0 were the
offsets lost; a load that never ends answers COORDINATOR_LOAD_IN_PROGRESS for ever and the member
gets no assignment). Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from client import Consumer
from client.protocol.api import ApiKey
from client.protocol.records import valid_prefix
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import create_topic, eventually, produce_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "resume-compacted"
GROUP = "compacted-offsets"
COMMITS = 150
SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.segment.bytes": "2048",
    "log.cleaner.backoff.ms": "500",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "group.initial.rebalance.delay.ms": "300",
}


def member(cluster, name: str) -> CkConsumer:
    return CkConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": GROUP,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def consume_and_commit_each(cluster, count: int, timeout: float) -> list[int]:
    """One member reads ``count`` records, committing synchronously after each; the offsets read."""
    consumer = member(cluster, "committer")
    offsets: list[int] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + timeout
        while len(offsets) < count:
            assert time.monotonic() < deadline, f"only {len(offsets)} records read and committed"
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            offsets.append(message.offset())
            consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    return offsets


def first_offsets(cluster, timeout: float) -> list[int]:
    """A new member of the group: the offsets of the first records it is given."""
    consumer = member(cluster, "resumer")
    got: list[int] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + timeout
        while len(got) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.offset())
        if not got:
            try:
                committed: object = consumer.committed([CkTopicPartition(TOPIC, 0)], timeout=5)
            except KafkaException as exc:
                committed = exc
            raise AssertionError(
                f"the new member got no record in {timeout}s (its committed offsets: {committed})"
            )
    finally:
        consumer.close()
    return got


def empty_batches(cluster, broker_id: int) -> int:
    """Empty batches (header, no records) in the broker's replica of __consumer_offsets-0."""
    directory = Path(cluster.state.brokers[broker_id].log_dir) / "__consumer_offsets-0"
    found = 0
    for path in sorted(directory.glob("*.log")):
        _, batches = valid_prefix(path.read_bytes())
        found += sum(1 for _, header in batches if header.record_count == 0)
    return found


async def find_coordinator(cluster) -> int:
    c = Consumer(cluster.bootstrap_servers)
    await c.start()
    try:
        conn = await c.cluster.any_connection()
        answer = await conn.request(ApiKey.FIND_COORDINATOR, {"key": GROUP, "key_type": 0})
        assert answer["error_code"] == 0, answer
        return answer["node_id"]
    finally:
        await c.close()


def test_a_group_resumes_from_its_offsets_after_a_coordinator_kill_on_a_compacted_offsets_topic(
    tmp_path: Path,
) -> None:
    cluster = start_cluster(tmp_path / "cluster", brokers=3, overrides=SETTINGS)
    try:
        asyncio.run(create_topic(cluster, TOPIC, 1, 3))
        asyncio.run(produce_values(cluster, TOPIC, [b"r%04d" % i for i in range(COMMITS + 50)]))
        read = consume_and_commit_each(cluster, COMMITS, 120)
        assert read == list(range(COMMITS))

        async def cleaned_everywhere() -> bool | None:
            return all(empty_batches(cluster, b) > 0 for b in cluster.state.brokers) or None

        asyncio.run(
            eventually(cleaned_everywhere, "an empty batch in every replica of __consumer_offsets-0", 90)
        )
        coordinator = asyncio.run(find_coordinator(cluster))
        cluster.kill(coordinator)

        resumed = first_offsets(cluster, 90)
        assert resumed[0] == COMMITS, f"the group restarted at {resumed[0]}, not at its committed {COMMITS}"
        assert resumed == list(range(COMMITS, COMMITS + len(resumed)))
    finally:
        cluster.down()
