"""Log compaction on a real cluster (broker/log/cleaner.py, Kafka's LogCleaner; docs/design.md "Log
compaction"): ZooKeeper plus three broker processes with a short ``log.cleaner.backoff.ms``; a keyed
topic with ``cleanup.policy=compact``, small ``segment.bytes`` and ``segment.ms``, many updates
per key and some deletes. Once cleaned, floodmark's consumer reading from the beginning gets the
last value of every key and none of the deleted keys (their tombstones gone after
``delete.retention.ms``), the segment files on disk shrank, and every replica, each cleaning its
own log, holds the same record at every offset it still holds. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from client.admin import AdminClient
from client.consumer.consumer import Consumer
from client.producer.producer import Producer
from client.types import TopicPartition
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

TOPIC = "compacted"
TP = TopicPartition(TOPIC, 0)
KEYS = 20
ROUNDS = 25
DELETED = {b"k%d" % k for k in range(5)}
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "3000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("compaction"), brokers=3, overrides={"log.cleaner.backoff.ms": "500"}
    )
    yield c
    c.down()


async def consume_from_beginning(cluster) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of the partition, read with floodmark's consumer."""
    async with Consumer(
        cluster.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=100
    ) as consumer:
        consumer.assign([TP])
        await consumer.seek_to_beginning(TP)
        end = (await consumer.end_offsets([TP]))[TP]
        out = []
        deadline = time.monotonic() + 30
        while await consumer.position(TP) < end and time.monotonic() < deadline:
            out += [(r.offset, r.key, r.value) for r in await consumer.poll(timeout_ms=500)]
        assert await consumer.position(TP) >= end, "the consumer did not reach the end offset"
        return out


def replica_files(cluster, broker_id: int) -> list[Path]:
    return sorted((Path(cluster.state.brokers[broker_id].log_dir) / f"{TOPIC}-0").glob("*.log"))


def replica_records(cluster, broker_id: int) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of the broker's segment files, decoded by kafka-python."""
    out = {}
    for path in replica_files(cluster, broker_id):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            out.update({r.offset: (r.key, r.value) for r in batch})
    return out


async def test_a_compacted_topic_keeps_the_last_value_per_key_on_every_replica(cluster) -> None:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(TOPIC, 1, 3, configs=TOPIC_CONFIGS)
    latest: dict[bytes, bytes] = {}
    produced_bytes = 0
    async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=5) as producer:
        for r in range(ROUNDS):
            futures = []
            for k in range(KEYS):
                key, value = b"k%d" % k, b"value-%d-%d-" % (k, r) + b"x" * 100
                latest[key] = value
                produced_bytes += len(key) + len(value)
                futures.append(await producer.send(TOPIC, value, key=key, partition=0))
            await asyncio.gather(*futures)
        for key in sorted(DELETED):
            await producer.send_and_wait(TOPIC, None, key=key, partition=0)

        async def tick() -> None:
            # Later writes, so the active segment rolls (segment.ms) and the cleaned section keeps
            # moving: Kafka 2.x drops a tombstone once data written delete.retention.ms after it
            # has been cleaned too.
            while True:
                await producer.send_and_wait(TOPIC, b"%d" % time.monotonic_ns(), key=b"tick", partition=0)
                await asyncio.sleep(0.2)

        ticker = asyncio.create_task(tick())
        try:

            async def compacted() -> list | None:
                records = await consume_from_beginning(cluster)
                keys = [k for _, k, _ in records if k != b"tick"]
                view = {k: v for _, k, v in records}
                expected = {k: v for k, v in latest.items() if k not in DELETED}
                if sorted(keys) == sorted(expected) and all(view[k] == v for k, v in expected.items()):
                    return records
                return None

            records = await eventually(
                compacted, "the last value of every live key, no deleted key", timeout=120
            )
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and len(offsets) == len(set(offsets))
    assert not DELETED & {k for _, k, _ in records}

    async def replicas_cleaned() -> dict | None:
        views = {b: replica_records(cluster, b) for b in cluster.state.brokers}
        for view in views.values():
            keys = [k for k, _ in view.values() if k != b"tick"]
            if len(keys) != len(set(keys)) or DELETED & set(keys):
                return None
        return views

    views = await eventually(replicas_cleaned, "every replica compacted", timeout=60)
    for a in views.values():  # identical per offset wherever two replicas both hold it
        for b in views.values():
            assert all(a[o] == b[o] for o in a.keys() & b.keys())
    for broker_id in cluster.state.brokers:
        on_disk = sum(p.stat().st_size for p in replica_files(cluster, broker_id))
        assert 0 < on_disk < produced_bytes / 4, f"broker {broker_id}: {on_disk} bytes on disk"
        checkpoint = Path(cluster.state.brokers[broker_id].log_dir) / "cleaner-offset-checkpoint"
        assert f"{TOPIC} 0 " in checkpoint.read_text()
