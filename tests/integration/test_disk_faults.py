"""Disk faults on a real cluster (KIP-112; docs/guarantees.md "Disk faults").

Real ZooKeeper, real broker processes whose log dirs are faultable disks (devcluster/disk.py: a
FUSE passthrough over a size-limited tmpfs, so a write really gets ENOSPC or EIO), acks=all
writers running through the fault. After each scenario: every acknowledged record is readable,
every replica holds byte-identical batches below the HW, and kafka-python (the independent
oracle) decodes every segment of every replica with every CRC valid. Needs root and
/dev/fuse; fails with the reason rather than skip.

``replica.lag.time.max.ms`` is 30 s (Kafka's default) here, so a replica that leaves the ISRs
within a few seconds left because of the log dir failure handling, not the lag rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords
from kazoo.client import KazooClient

from client.producer import Producer
from client.protocol.records import build_batch
from devcluster.cluster import LocalCluster
from devcluster.disk import unavailable_reason
from devcluster.ports import free_port_block
from tests.integration.cluster_fixtures import TEST_SETTINGS
from tests.integration.failover_helpers import (
    create_topic,
    describe,
    eventually,
    high_watermarks,
    read_all,
)
from verify.segments import compare_replicas, read_replica

pytestmark = pytest.mark.integration

HALT_LINE = "Shutdown broker because all log dirs in"
SETTINGS = {**TEST_SETTINGS, "replica.lag.time.max.ms": "30000"}


def start_disk_cluster(data_dir: Path, log_dirs_per_broker: int = 1) -> LocalCluster:
    reason = unavailable_reason()
    if reason:
        pytest.fail(reason)
    base = free_port_block(3)
    cluster = LocalCluster(data_dir)
    cluster.up(
        3,
        zookeeper_port=base - 1,
        base_port=base,
        overrides=SETTINGS,
        timeout=60,
        disk_size="48m",
        log_dirs_per_broker=log_dirs_per_broker,
    )
    return cluster


class Writer:
    """acks=all idempotent writes in the background until stopped, every acknowledgement kept."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def acked_more_than(self, n: int, timeout: float = 60.0) -> None:
        await eventually(lambda: _true(len(self.acked) > n), f"more than {n} acknowledged writes", timeout)

    async def _run(self) -> None:
        async with Producer(self.cluster.bootstrap_servers, acks="all", linger_ms=5) as producer:
            for round_ in range(2_000):  # bounded: about 100 rounds a minute
                if self._stop.is_set():
                    break
                values = [f"{self.topic}-{round_}-{i}".encode() for i in range(40)]
                futures = [await producer.send(self.topic, v, key=v) for v in values]
                await producer.flush()
                for value, future in zip(values, futures, strict=True):
                    if future.exception() is None:
                        md = future.result()
                        self.acked.append((md.partition, md.offset, value))
                    else:
                        self.failed += 1
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 180)


async def _true(value: bool) -> bool:
    return value


def broker_dirs(cluster: LocalCluster) -> dict[int, list[Path]]:
    return {b.id: [Path(d) for d in b.log_dirs] for b in cluster.state.brokers.values()}


def replica_dir(cluster: LocalCluster, broker: int, topic: str, partition: int) -> Path | None:
    for d in broker_dirs(cluster)[broker]:
        if (d / f"{topic}-{partition}").is_dir():
            return d / f"{topic}-{partition}"
    return None


def assert_valid_kafka_log(segment: Path) -> None:
    """kafka-python decodes the whole file as whole batches, each with a valid CRC. Its iterator
    stops quietly at a partial batch at the end (a consumer's fetch may end mid-batch), so the
    bytes it framed must also be all of the file: a torn tail is not a valid Kafka log."""
    data = segment.read_bytes()
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None, f"{segment}: bytes that are not a whole batch"
        assert batch.validate_crc(), f"{segment}: a batch with a bad CRC"
    assert records.valid_bytes() == len(data), (
        f"{segment}: only {records.valid_bytes()} of its {len(data)} bytes are whole batches (a torn tail)"
    )


def test_the_segment_oracle_sees_a_torn_tail(tmp_path: Path) -> None:
    """Without the size check kafka-python's iterator skipped a partial batch at the end."""
    batches = [build_batch([(None, b"v%d" % i, 0, [])], base_offset=i) for i in range(3)]
    whole = tmp_path / "00000000000000000000.log"
    whole.write_bytes(b"".join(batches))
    assert_valid_kafka_log(whole)
    torn = tmp_path / "00000000000000000003.log"
    torn.write_bytes(b"".join(batches) + batches[0][: len(batches[0]) // 2])
    with pytest.raises(AssertionError, match="a torn tail"):
        assert_valid_kafka_log(torn)


def check_every_replica(cluster: LocalCluster, topic: str, hws: dict[int, int]) -> None:
    """Byte-identical below the HW on every replica, and every segment a valid Kafka log."""
    for partition, hw in hws.items():
        replicas = {}
        for broker in broker_dirs(cluster):
            found = replica_dir(cluster, broker, topic, partition)
            if found is None:
                continue
            replicas[f"broker-{broker}"] = read_replica(found)
            for segment in sorted(found.glob("*.log")):
                assert_valid_kafka_log(segment)
            assert any(b.last_offset == hw - 1 for b in replicas[f"broker-{broker}"]) or hw == 0, (
                f"broker {broker} lacks {topic}-{partition} up to its HW {hw}"
            )
        assert len(replicas) == 3, f"{topic}-{partition}: replicas on {sorted(replicas)}"
        problems = compare_replicas(topic, partition, replicas, hw)
        assert not problems, problems


def assert_all_acknowledged_present(acked: list[tuple[int, int, bytes]], logs: dict[int, list]) -> None:
    stored = {(p, offset): value for p, records in logs.items() for offset, value in records}
    missing = [(p, o, v) for p, o, v in acked if stored.get((p, o)) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    values = [v for records in logs.values() for _, v in records]
    assert len(values) == len(set(values)), "a value is stored twice"


async def stop_and_check(cluster: LocalCluster, writer: Writer, partitions: int) -> None:
    """Stop the writer; every acknowledged record is committed, every replica identical and valid."""
    await writer.stop()
    hws = await high_watermarks(cluster, writer.topic, partitions)
    assert_all_acknowledged_present(writer.acked, await read_all(cluster, writer.topic, partitions))
    check_every_replica(cluster, writer.topic, hws)


async def full_isrs(cluster: LocalCluster, topic: str) -> bool:
    return all(len(p.isr) == 3 for p in (await describe(cluster, topic)).partitions)


async def test_a_full_or_failing_only_log_dir_halts_the_broker_and_nothing_acknowledged_is_lost(tmp_path):
    """Seed scenario of the issue: the broker leading partition 0 (and following 1 and 2) gets a
    full disk, then, once back, a failing one. Each time it halts (its only log dir is
    offline), leadership and ISR membership move within seconds, writes go on with acks=all,
    and after the heal and a restart it catches up byte-identical."""
    cluster = start_disk_cluster(tmp_path / "cluster")
    try:
        await create_topic(cluster, "full", 3, 3, {"min.insync.replicas": "2"})
        writer = Writer(cluster, "full")
        writer.start()
        for action, errno_text in (("fill", "No space left on device"), ("break", "Input/output error")):
            await writer.acked_more_than(len(writer.acked) + 400)
            victim = (await describe(cluster, "full")).partitions[0].leader
            pid = cluster.state.brokers[victim].pid
            faulted = time.monotonic()
            cluster.disk(victim, action)
            await eventually(lambda pid=pid: _true(cluster._procs.exit_code(pid) is not None), "the halt", 30)
            assert cluster._procs.exit_code(pid) == 1
            out = Path(cluster.state.brokers[victim].out).read_text()
            assert HALT_LINE in out and errno_text in out

            async def moved(victim: int = victim) -> bool:
                parts = (await describe(cluster, "full")).partitions
                return all(p.leader not in (victim, -1) and victim not in p.isr for p in parts)

            await eventually(moved, f"broker {victim} out of every leadership and ISR", 20)
            # Well within replica.lag.time.max.ms (30 s): the halt closed the ZooKeeper session.
            assert time.monotonic() - faulted < 25
            during = len(writer.acked)
            await writer.acked_more_than(during + 400)  # acks=all goes on with two replicas

            cluster.disk(victim, "heal")
            cluster.start(victim, timeout=60)
            await eventually(lambda: full_isrs(cluster, "full"), f"broker {victim} back in every ISR", 60)
        await stop_and_check(cluster, writer, 3)
    finally:
        cluster.down(timeout=20)


async def test_a_failing_jbod_dir_goes_offline_alone_and_the_broker_serves_the_rest(tmp_path):
    """JBOD (log.dirs = data on the faultable disk, data-2 on the real one): EIO in ``data`` takes
    that dir offline; the controller, told through /log_dir_event_notification, moves the
    leadership and ISR membership of exactly the replicas in it, at once; the broker stays up
    and keeps leading and following the partitions in ``data-2``. A restart on the fixed disk
    recovers the dir and the replicas catch up byte-identical."""
    cluster = start_disk_cluster(tmp_path / "cluster", log_dirs_per_broker=2)
    try:
        await create_topic(cluster, "jbod", 6, 3, {"min.insync.replicas": "2"})
        writer = Writer(cluster, "jbod")
        writer.start()
        await writer.acked_more_than(400)
        victim = (await describe(cluster, "jbod")).partitions[0].leader
        failing_dir, healthy_dir = broker_dirs(cluster)[victim]
        in_failing = sorted(p for p in range(6) if (failing_dir / f"jbod-{p}").is_dir())
        in_healthy = sorted(p for p in range(6) if (healthy_dir / f"jbod-{p}").is_dir())
        assert in_failing and in_healthy and sorted(in_failing + in_healthy) == list(range(6))
        pid = cluster.state.brokers[victim].pid

        faulted = time.monotonic()
        cluster.disk(victim, "break")

        async def split(victim: int = victim) -> bool:
            parts = (await describe(cluster, "jbod")).partitions
            gone = all(parts[p].leader != victim and victim not in parts[p].isr for p in in_failing)
            kept = all(victim in parts[p].isr for p in in_healthy)
            return gone and kept and all(p.leader != -1 for p in parts)

        # The writer's next append on each of the victim's partitions in ``data`` fails, the dir
        # goes offline, and the controller acts on the notification.
        await eventually(split, "the failed dir's replicas offline, the others untouched", 20)
        assert time.monotonic() - faulted < 25, "not the lag rule (30 s)"
        assert cluster._procs.exit_code(pid) is None, "one dir of two failed: the broker must stay up"
        zk = KazooClient(hosts=cluster.zookeeper_connect)
        zk.start(timeout=15)
        try:
            await eventually(
                lambda: _true(not zk.get_children("/log_dir_event_notification")),
                "the notification consumed",
                10,
            )
        finally:
            zk.stop()
            zk.close()
        during = len(writer.acked)
        await writer.acked_more_than(during + 400)

        cluster.stop(victim, timeout=60)
        cluster.disk(victim, "heal")
        cluster.start(victim, timeout=60)
        await eventually(lambda: full_isrs(cluster, "jbod"), f"broker {victim} back in every ISR", 60)
        await stop_and_check(cluster, writer, 6)
        # The restart recovered the failed dir: the replicas are where they were.
        assert sorted(p for p in range(6) if (failing_dir / f"jbod-{p}").is_dir()) == in_failing
    finally:
        with contextlib.suppress(Exception):
            cluster.down(timeout=20)
