"""Helpers for failover tests on a real cluster: polling the metadata, producing and reading
back with the real client, and checking that replicas hold byte-identical batches below the HW."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from client.admin import AdminClient
from client.consumer import Consumer
from client.producer import Producer
from client.types import PartitionDescription, TopicDescription, TopicPartition
from devcluster.cluster import LocalCluster
from verify.segments import compare_replicas, read_replica

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 30.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        try:
            last = await probe()
        except Exception as exc:  # a broker may be restarting: keep polling
            last = None
            error = exc
        else:
            error = None
            if last:
                return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}, error: {error!r})")


async def describe(cluster: LocalCluster, topic: str) -> TopicDescription:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        (description,) = await admin.describe_topics([topic])
        return description


async def create_topic(
    cluster: LocalCluster, topic: str, partitions: int, rf: int, configs: dict | None = None
):
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(topic, partitions, rf, configs or {})


async def partition_state(cluster: LocalCluster, topic: str, partition: int) -> PartitionDescription:
    return (await describe(cluster, topic)).partitions[partition]


async def produce_values(
    cluster: LocalCluster,
    topic: str,
    values: list[bytes],
    acks: str = "all",
    partition: int | None = None,
    **config,
) -> list[tuple[int, int, bytes]]:
    """Produce and return (partition, offset, value) of every acknowledged record; failures are
    dropped, so a caller that expects every record acknowledged must check the count (or use
    :func:`produce_outcomes`)."""
    acked, _ = await produce_outcomes(cluster, topic, values, acks, partition, **config)
    return acked


async def produce_outcomes(
    cluster: LocalCluster,
    topic: str,
    values: list[bytes],
    acks: str = "all",
    partition: int | None = None,
    **config,
) -> tuple[list[tuple[int, int, bytes]], list[tuple[bytes, BaseException]]]:
    """Produce; return the acknowledged records as (partition, offset, value) and the failed
    ones as (value, the exception their send failed with)."""
    async with Producer(cluster.bootstrap_servers, acks=acks, **config) as producer:
        futures = [await producer.send(topic, v, key=v, partition=partition) for v in values]
        await producer.flush()
    acked, failed = [], []
    for value, future in zip(values, futures, strict=True):
        if (exc := future.exception()) is None:
            md = future.result()
            acked.append((md.partition, md.offset, value))
        else:
            failed.append((value, exc))
    return acked, failed


async def read_all(
    cluster: LocalCluster, topic: str, partitions: int, timeout: float = 30.0
) -> dict[int, list]:
    """Every committed record of the topic, as {partition: [(offset, value)]}, read up to the HW."""
    async with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        got: dict[int, list] = defaultdict(list)
        deadline = time.monotonic() + timeout
        while any((got[tp.partition][-1][0] + 1 if got[tp.partition] else 0) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {topic} up to {ends}"
            for record in await consumer.poll(timeout_ms=500):
                got[record.partition].append((record.offset, record.value))
        return dict(got)


def assert_replicas_identical(cluster: LocalCluster, topic: str, high_watermarks: dict[int, int]) -> None:
    """SPEC 5.4: every replica of every partition holds byte-identical batches below the HW."""
    for partition, hw in high_watermarks.items():
        replicas = {
            f"broker-{b}": read_replica(cluster.data_dir / f"broker-{b}" / "data" / f"{topic}-{partition}")
            for b in cluster_broker_ids(cluster)
            if (cluster.data_dir / f"broker-{b}" / "data" / f"{topic}-{partition}").is_dir()
        }
        assert replicas, f"no replica of {topic}-{partition} on disk"
        assert not compare_replicas(topic, partition, replicas, hw), compare_replicas(
            topic, partition, replicas, hw
        )
        for name, batches in replicas.items():
            assert any(b.last_offset == hw - 1 for b in batches) or hw == 0, (
                f"{name} lacks {topic}-{partition}@{hw - 1}"
            )


def cluster_broker_ids(cluster: LocalCluster) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in cluster.data_dir.glob("broker-*") if p.is_dir())


async def high_watermarks(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    async with Consumer(cluster.bootstrap_servers) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}
