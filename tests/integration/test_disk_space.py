"""Disk space as a budget on a real cluster (issue 25; docs/design.md "Disk space as a budget
(issue 25)"; broker/log/disk_space.py).

Real ZooKeeper and broker processes, each broker's log dir on its own small disk (devcluster/disk.py:
a FUSE passthrough over a 32 MiB tmpfs) with ``log.dir.min.free.bytes`` at 12 MiB. Real writes
fill every disk at once: every leader ends up refusing appends with the retriable
NOT_ENOUGH_REPLICAS and every broker stays up (no ENOSPC, no halt), while reads, metadata and
/metrics go on being served. Deleting the topic that filled the disks frees the space, and the
brokers take writes again by themselves: a write the client kept retrying meanwhile completes,
and nothing acknowledged is lost. Needs root and /dev/fuse; fails with the reason rather than skip.

The floor is also a dynamic broker config: on an ordinary cluster, a cluster-wide floor above
every dir's free space stops every leader's writes at once, one broker's own override beats it,
and removing both brings writes back (no disk filled).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from client.admin import AdminClient
from client.cluster_admin import AlterConfigOp, AlterConfigOpType
from client.producer import Producer
from client.protocol.api import ConfigResourceType
from client.protocol.errors import ErrorCode, KafkaError
from client.types import ConfigResource
from devcluster.cluster import LocalCluster
from devcluster.disk import unavailable_reason
from devcluster.ports import free_port_block
from tests.integration.cluster_fixtures import TEST_SETTINGS, scrape_metrics, start_cluster
from tests.integration.failover_helpers import (
    assert_replicas_identical,
    create_topic,
    describe,
    eventually,
    high_watermarks,
    produce_outcomes,
    produce_values,
    read_all,
)

pytestmark = pytest.mark.integration

MiB = 1 << 20
FLOOR = 12 * MiB
SETTINGS = {
    **TEST_SETTINGS,
    "log.dir.min.free.bytes": str(FLOOR),
    "replica.lag.time.max.ms": "4000",
    "log.segment.delete.delay.ms": "200",  # a deleted topic's files go at once
}
PARTITIONS = 3
BULK = b"x" * (64 * 1024)
FILL_ROUNDS = 200  # bounded: 1.5 MiB a round, the disks are full within about 15
FILL_SECONDS = 40.0
BELOW_LINE = "is below its free-space floor"
RECOVERED_LINE = "has recovered free space"
BELOW_COUNT = "kafka_log_logmanager_belowminfreelogdirectorycount"


def start_small_disk_cluster(data_dir: Path) -> LocalCluster:
    reason = unavailable_reason()
    if reason:
        pytest.fail(reason)
    base = free_port_block(3)
    cluster = LocalCluster(data_dir)
    cluster.up(3, zookeeper_port=base - 1, base_port=base, overrides=SETTINGS, timeout=60, disk_size="32m")
    return cluster


def refused_for_space(exc: BaseException | None) -> bool:
    return (
        isinstance(exc, KafkaError)
        and exc.code == ErrorCode.NOT_ENOUGH_REPLICAS
        and "below its floor" in str(exc)  # the broker's reason, passed on by the client
    )


async def fill_every_disk(cluster: LocalCluster) -> int:
    """acks=1 writes of 64 KiB records to every partition of ``bulk`` until every leader refuses
    them; returns the bytes acknowledged. Any other failure fails the test."""
    written, deadline = 0, time.monotonic() + FILL_SECONDS
    async with Producer(cluster.bootstrap_servers, acks="1", retries=0, batch_size=256 * 1024) as producer:
        for _ in range(FILL_ROUNDS):
            assert time.monotonic() < deadline, f"the disks did not fill within {FILL_SECONDS}s"
            sends = [
                (p, await producer.send("bulk", BULK, partition=p))
                for p in range(PARTITIONS)
                for _ in range(8)
            ]
            await producer.flush()
            refused = set()
            for p, future in sends:
                exc = future.exception()
                if exc is None:
                    written += len(BULK)
                elif refused_for_space(exc):
                    refused.add(p)
                else:
                    raise AssertionError(f"bulk write to partition {p} failed otherwise: {exc!r}")
            if refused == set(range(PARTITIONS)):
                return written
    raise AssertionError(f"not every leader refused within {FILL_ROUNDS} rounds")


def broker_out(cluster: LocalCluster, broker: int) -> str:
    return Path(cluster.state.brokers[broker].out).read_text(errors="replace")


def below_counts(cluster: LocalCluster) -> dict[int, float]:
    counts = {}
    for b in cluster.state.brokers:
        address = cluster.state.metrics_address(b)
        assert address, f"broker {b} serves no /metrics"
        counts[b] = scrape_metrics(address)[BELOW_COUNT]
    return counts


async def test_full_disks_on_every_broker_stop_writes_keep_reads_and_resume_when_space_returns(tmp_path):
    cluster = start_small_disk_cluster(tmp_path / "cluster")
    started = time.monotonic()
    try:
        await create_topic(cluster, "kept", PARTITIONS, 3, {"min.insync.replicas": "2"})
        await create_topic(cluster, "bulk", PARTITIONS, 3)
        acked = await produce_values(cluster, "kept", [f"before-{i}".encode() for i in range(300)])
        assert len(acked) == 300

        # Real writes fill every broker's disk at once: each leader refuses at the floor.
        filled = await fill_every_disk(cluster)
        assert filled > 10 * MiB
        pids = {b.id: b.pid for b in cluster.state.brokers.values()}

        # Writes stop: the producer sees the retriable refusal, with the broker's reason.
        _, failed = await produce_outcomes(cluster, "kept", [b"refused"] * 30, retries=0)
        assert len(failed) == 30 and all(refused_for_space(exc) for _, exc in failed), failed[:3]

        # Reads, metadata and /metrics are served; no broker halted; each said why.
        got = await read_all(cluster, "kept", PARTITIONS)
        assert_all_present(acked, got)
        parts = (await describe(cluster, "kept")).partitions
        assert all(p.leader in pids for p in parts), parts
        assert below_counts(cluster) == {b: 1.0 for b in pids}
        for b, pid in pids.items():
            assert cluster._procs.exit_code(pid) is None, f"broker {b} exited"
            out = broker_out(cluster, b)
            assert BELOW_LINE in out and "No space left on device" not in out, f"broker {b}"

        # A write the client keeps retrying meanwhile (the default retries)...
        async def retried() -> list[tuple[int, int, bytes]]:
            return await produce_values(cluster, "kept", [b"retried"], delivery_timeout_ms=60_000)

        pending = asyncio.get_running_loop().create_task(retried())
        await asyncio.sleep(1.0)
        assert not pending.done()

        # ... completes once an operator frees space (the topic that filled the disks goes).
        async with AdminClient(cluster.bootstrap_servers) as admin:
            await admin.delete_topic("bulk")
        acked += await asyncio.wait_for(pending, 45)
        assert acked[-1][2] == b"retried"
        after = await produce_values(cluster, "kept", [f"after-{i}".encode() for i in range(300)])
        assert len(after) == 300
        acked += after
        await eventually(lambda: all_zero(below_counts(cluster)), "every log dir above its floor", 15)
        for b in pids:
            assert RECOVERED_LINE in broker_out(cluster, b), f"broker {b}"

        # Nothing acknowledged is lost, and every replica is whole again.
        await eventually(lambda: full_isrs(cluster), "every replica back in the ISR of kept", 20)
        assert_all_present(acked, await read_all(cluster, "kept", PARTITIONS))
        assert_replicas_identical(cluster, "kept", await high_watermarks(cluster, "kept", PARTITIONS))
        assert all(cluster._procs.exit_code(pid) is None for pid in pids.values())
        assert time.monotonic() - started < 90  # the scenario itself; the budget is about 60 s
    finally:
        cluster.down(timeout=20)


def assert_all_present(acked: list[tuple[int, int, bytes]], got: dict[int, list]) -> None:
    held = {(p, offset): value for p, records in got.items() for offset, value in records}
    missing = [(p, o, v) for p, o, v in acked if held.get((p, o)) != v]
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {missing[:3]}"


async def all_zero(counts: dict[int, float]) -> bool:
    return all(v == 0 for v in counts.values())


async def full_isrs(cluster: LocalCluster) -> bool:
    return all(len(p.isr) == 3 for p in (await describe(cluster, "kept")).partitions)


async def test_the_floor_is_a_dynamic_broker_config_per_broker_and_cluster_wide(tmp_path) -> None:
    """``log.dir.min.free.bytes`` changed at run time (KIP-226's dynamic broker configs; Redpanda's
    ``storage_min_free_bytes`` is a live cluster property too), on an ordinary cluster whose disks
    are far from full: a cluster-wide floor above every dir's free space stops every leader's
    writes at once; one broker's own override of 0 beats the default and that broker takes writes
    again while the others still refuse; removing both overrides brings every broker back to its
    server.properties value (here no floor), and writes resume. A bad value is refused with the
    key's name and changes nothing."""
    cluster = start_cluster(tmp_path / "cluster", overrides={"log.dir.min.free.bytes": "0"})
    try:
        await create_topic(cluster, "t", PARTITIONS, 3)
        leaders = {p.partition: p.leader for p in (await describe(cluster, "t")).partitions}
        assert sorted(leaders.values()) == [1, 2, 3], leaders  # each broker leads one partition
        default, own = (
            ConfigResource(ConfigResourceType.BROKER, ""),
            ConfigResource(ConfigResourceType.BROKER, "1"),
        )
        async with AdminClient(cluster.bootstrap_servers) as admin:
            with pytest.raises(KafkaError) as refused:
                await admin.incremental_alter_configs(
                    {default: [AlterConfigOp("log.dir.min.free.bytes", "-2")]}
                )
            assert refused.value.code == ErrorCode.INVALID_CONFIG and "log.dir.min.free.bytes" in str(
                refused.value
            )
            assert await writes_refused(cluster, leaders) == set()

            await admin.incremental_alter_configs(
                {default: [AlterConfigOp("log.dir.min.free.bytes", str(HUGE))]}
            )
            await eventually(
                lambda: writes_refused_by(cluster, leaders, {1, 2, 3}), "every leader refusing", 15
            )
            assert below_counts(cluster) == {1: 1.0, 2: 1.0, 3: 1.0}
            assert {b: floors(cluster, b) for b in (1, 2, 3)} == {b: {HUGE} for b in (1, 2, 3)}

            await admin.incremental_alter_configs({own: [AlterConfigOp("log.dir.min.free.bytes", "0")]})
            await eventually(
                lambda: writes_refused_by(cluster, leaders, {2, 3}), "broker 1 writing again", 15
            )
            assert floors(cluster, 1) == {0.0}

            delete = AlterConfigOp("log.dir.min.free.bytes", op_type=AlterConfigOpType.DELETE)
            await admin.incremental_alter_configs({default: [delete]})
            await admin.incremental_alter_configs({own: [delete]})
            await eventually(lambda: writes_refused_by(cluster, leaders, set()), "every leader writing", 15)
            assert await all_zero(below_counts(cluster))
        for b in (1, 2, 3):
            out = broker_out(cluster, b)
            assert "log.dir.min.free.bytes is now" in out and BELOW_LINE in out and RECOVERED_LINE in out, b
    finally:
        cluster.down(timeout=20)


HUGE = 1 << 60  # more than any filesystem here holds


async def writes_refused(cluster: LocalCluster, leaders: dict[int, int]) -> set[int]:
    """The brokers whose partition refused one acks=1 write for space (any other failure fails)."""
    out = set()
    for partition, leader in leaders.items():
        _, failed = await produce_outcomes(cluster, "t", [b"w"], acks="1", partition=partition, retries=0)
        for _, exc in failed:
            assert refused_for_space(exc), exc
            out.add(leader)
    return out


async def writes_refused_by(cluster: LocalCluster, leaders: dict[int, int], brokers: set[int]) -> bool:
    return await writes_refused(cluster, leaders) == brokers


def floors(cluster: LocalCluster, broker: int) -> set[float]:
    metrics = scrape_metrics(cluster.state.metrics_address(broker))
    return {v for k, v in metrics.items() if k.startswith("kafka_log_logmanager_logdirectoryminfreebytes")}
