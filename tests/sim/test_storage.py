"""The simulator's storage (sim/storage.py, sim/storage_model.py): a page-cache model under the
real Log, whose power loss keeps only fsynced bytes and fsynced directory entries, and injected
ENOSPC and EIO.

First the model on its own (a :class:`SimStorage` installed around a temp dir, no loop): what a
power loss keeps, agreement with the test-only :class:`tests.crash_fs.CrashFS` on the log's own
sequences, a full disk under a real append, placed and seeded faults, the real functions put
back. Then in a simulated world: a follower's unsynced tail is lost to a power loss but kept by a
process crash, and the replica refetches it; a full disk takes the leader's only log dir offline
(KIP-112: the broker halts) and leadership moves without losing an acks=all record; the same seed
replays the same storage faults. Every wait is on the state checked, in virtual time.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords

from broker.log import Log, LogConfig
from broker.log.checkpoint import atomic_write_text, fsync_dir
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from client.protocol.records import build_batch
from sim.broker_process import ProcessState
from sim.storage import SimStorage
from sim.world import STORAGE_FAULTS, World
from tests.crash_fs import CrashFS
from tests.log_invariants import index_problems, segment_headers
from tests.sim.test_world import TOPIC, produce, simulate

BROKER = "broker-1"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def batch() -> bytes:
    return build_batch([(None, b"v" * 20, 1_000_000, []) for _ in range(3)])


BATCH = len(batch())


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (relative) and its bytes (None: a directory)."""
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = None if path.is_dir() else path.read_bytes()
    return out


def disk_records(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in the partition's segment files, kafka-python decoding
    each batch and checking its CRC (a torn or corrupt batch fails the test)."""
    out: list[tuple[int, bytes]] = []
    for path in sorted(partition_dir.glob("*.log")) if partition_dir.is_dir() else []:
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch is not None and batch.validate_crc(), f"{path.name}: a bad batch"
            out.extend((record.offset, record.value) for record in batch)
        assert records.valid_bytes() == path.stat().st_size, f"{path.name}: bytes after the last batch"
    return out


# -- the model on its own ------------------------------------------------------------------------


def test_a_power_loss_keeps_only_fsynced_bytes_and_fsynced_entries(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    storage = SimStorage()
    storage.add_disk(BROKER, [root], random.Random(1))
    with storage:
        fd = os.open(root / "a.log", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"synced")
        os.fsync(fd)
        os.write(fd, b"+unsynced")  # an append after the fsync: lost
        os.close(fd)
        atomic_write_text(root / "checkpoint", "old\n")  # fsynced, renamed, dir fsynced: durable
        (root / "gone").write_bytes(b"durable, then unlinked")
        (root / "empty").write_bytes(b"a name made durable, its bytes never fsynced")
        fd = os.open(root / "gone", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        fsync_dir(root)
        os.unlink(root / "gone")  # the unlink is not made durable: the file comes back
        fd = os.open(root / "gone", os.O_RDONLY | os.O_CREAT, 0o644)  # nor this new name
        os.close(fd)
        (root / "checkpoint.tmp").write_text("new\n")
        os.replace(root / "checkpoint.tmp", root / "checkpoint")  # no fsync, no dir fsync
        fd = os.open(root / "a.log", os.O_RDWR)
        os.ftruncate(fd, 2)  # a truncation below the durable length, not fsynced
        os.close(fd)
        os.mkdir(root / "t-0")  # a directory never made durable, with a file inside
        (root / "t-0" / "x").write_bytes(b"x")
        report = storage.power_loss(BROKER)
    assert tree(root) == {
        "a.log": b"synced",
        "checkpoint": b"old\n",
        "empty": b"",
        "gone": b"durable, then unlinked",
    }
    assert report.vanished == ("logs/t-0", "logs/t-0/x")
    assert report.rolled_back == ("logs/a.log", "logs/checkpoint", "logs/empty", "logs/gone")
    assert report.restored == ()


def four_segments(log: Log) -> None:
    """[0,12) [12,24) [24,36) [36,42), the flush at 12 (tests/unit/test_log_power_loss.py's)."""
    for i in range(14):
        log.append_as_leader(batch(), leader_epoch=1 + i // 4)
        if i == 4:
            log.flush(12)


def roll_flushes_pending(log: Log) -> None:
    log.schedule_once = lambda name, job: None  # the rolls' flushes never run
    four_segments(log)
    log.assign_leader_epoch(5, 42)


def truncate_and_delete(log: Log) -> None:
    four_segments(log)
    log.assign_leader_epoch(5, 42)
    log.truncate_to(20)
    log.append_as_leader(batch(), leader_epoch=6)
    log.delete_old_segments()


@pytest.mark.parametrize("sequence", [four_segments, roll_flushes_pending, truncate_and_delete])
def test_the_model_agrees_with_crash_fs_on_the_logs_own_sequences(tmp_path: Path, sequence: Any) -> None:
    """The same sequence of the real Log under CrashFS (tests/crash_fs.py) and under the
    simulator's model leaves the same files after a power loss, byte for byte."""
    config = LogConfig(segment_bytes=4 * BATCH)
    trees = []
    for name in ("crash_fs", "sim"):
        root = tmp_path / name
        (root / "t-0").mkdir(parents=True)
        if name == "crash_fs":
            with CrashFS(root) as fs:
                sequence(Log.open(root / "t-0", config, Clock()))
            fs.power_loss()
        else:
            storage = SimStorage()
            storage.add_disk(BROKER, [root], random.Random(1))
            with storage:
                sequence(Log.open(root / "t-0", config, Clock()))
                storage.power_loss(BROKER)
        trees.append(tree(root))
    assert trees[0] == trees[1]
    recovered = Log.open(tmp_path / "sim" / "t-0", config, Clock())
    assert not index_problems(recovered, segment_headers(recovered))


def test_a_full_disk_writes_what_fits_then_fails_and_a_log_append_is_all_or_nothing(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    storage = SimStorage()
    disk = storage.add_disk(BROKER, [root], random.Random(1))
    channel = LogDirFailureChannel()
    with storage:
        log = Log.open(root / "t-0", LogConfig(), Clock(), failure_channel=channel)
        log.append_as_leader(batch(), leader_epoch=0)
        disk.fill(room=BATCH // 2)  # the next batch's write is short, then ENOSPC
        with pytest.raises(KafkaStorageError):
            log.append_as_leader(batch(), leader_epoch=0)
        assert channel.is_offline(root)
        assert [r.split(": ")[1] for r in disk.raised] == ["ENOSPC"]
        assert disk_records(root / "t-0") == [(offset, b"v" * 20) for offset in range(3)]  # cut back
        with pytest.raises(OSError) as full:
            os.mkdir(root / "t-1")
        assert full.value.errno == errno.ENOSPC
        disk.free()
        os.mkdir(root / "t-1")
        log.close()


def test_placed_faults_fail_what_they_name_and_seeded_faults_replay(tmp_path: Path) -> None:
    def run(seed: int, name: str) -> list[int]:
        root = tmp_path / name
        storage = SimStorage()
        disk = storage.add_disk(BROKER, [root], random.Random(seed))
        with storage:
            disk.fail("fsync", path_contains=".log")
            fd = os.open(root / "a.log", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(fd, b"x")
            with pytest.raises(OSError) as eio:
                os.fsync(fd)
            assert eio.value.errno == errno.EIO
            os.fsync(fd)  # once only
            assert disk.raised == [f"fsync {root / 'a.log'}: EIO"]
            disk.error_rate = 0.3
            failed = []
            for i in range(40):
                try:
                    os.write(fd, b"y")
                except OSError as e:
                    assert e.errno == errno.EIO
                    failed.append(i)
            os.close(fd)
            return failed

    first, again, other = run(7, "a"), run(7, "b"), run(8, "c")
    assert first == again and first != other
    assert 3 < len(first) < 30


def test_the_real_functions_come_back_and_other_paths_pass_through(tmp_path: Path) -> None:
    real = (os.open, os.write, os.fsync, os.replace, os.unlink, os.mkdir, open)
    storage = SimStorage()
    disk = storage.add_disk(BROKER, [tmp_path / "logs"], random.Random(1))
    disk.fail(None, count=None)  # every call on the disk fails
    with pytest.raises(RuntimeError, match="boom"), storage:
        assert os.open is not real[0]
        with pytest.raises(RuntimeError, match="one simulated world at a time"):
            SimStorage().install()
        (tmp_path / "elsewhere").write_bytes(b"passes through")
        with pytest.raises(OSError):
            (tmp_path / "logs" / "x").write_bytes(b"fails")
        raise RuntimeError("boom")
    assert (os.open, os.write, os.fsync, os.replace, os.unlink, os.mkdir, open) == real
    assert (tmp_path / "elsewhere").read_bytes() == b"passes through"


# -- in a simulated world ------------------------------------------------------------------------


def partition_dir(world: World, broker_id: int) -> Path:
    log = world.replica_log(broker_id, TOPIC, 0)
    assert log is not None
    return log.dir


def test_a_power_loss_loses_the_unsynced_tail_a_process_crash_keeps_and_the_replica_refetches(
    tmp_path: Path,
) -> None:
    """acks=1 records on a follower that fsyncs every 10 messages (flush.messages): a process
    crash keeps every byte; a power loss keeps exactly the records below its recovery point (the
    last flush), in whole batches that kafka-python decodes, and the log reopens sound; the
    restarted replica refetches the rest from the leader."""

    async def main(world: World) -> dict[str, Any]:
        admin = await world.admin()
        await admin.create_topic(TOPIC, 1, 3)
        producer = await world.producer(acks=1)
        acked = await produce(producer, 0, 15)
        leader = world.leader_of(TOPIC, 0)
        follower = min(set(world.brokers) - {leader})

        def caught_up() -> bool:
            log = world.replica_log(follower, TOPIC, 0)
            return log is not None and log.log_end_offset == len(acked)

        await world.wait_for(caught_up, "the follower fetching every record")
        directory = partition_dir(world, follower)
        world.crash(follower)  # a process crash: the page cache keeps the unsynced bytes
        assert disk_records(directory) == acked
        await world.restart(follower)
        while True:  # more records until the follower holds some it has not fsynced
            acked += await produce(producer, len(acked), 1)
            await world.wait_for(caught_up, "the follower fetching every record")
            log = world.replica_log(follower, TOPIC, 0)
            assert log is not None
            if log.recovery_point < log.log_end_offset:
                break
        synced = log.recovery_point
        report = world.power_loss(follower)
        assert report is not None and report.bytes_lost > 0
        assert disk_records(directory) == acked[:synced]  # exactly the fsynced prefix, whole batches
        copy = tmp_path / directory.name
        shutil.copytree(directory, copy)
        reopened = Log.open(copy, LogConfig(), world.clock.time_ms)
        assert reopened.log_end_offset == synced
        assert not index_problems(reopened, segment_headers(reopened))
        reopened.close()
        await world.restart(follower)
        await world.wait_for(caught_up, "the restarted follower refetching from the leader")
        assert [(r.offset, r.value) for r in world.records(follower, TOPIC, 0, below_hw=False)] == acked
        return {"synced": synced, "acked": len(acked), "lost": report.bytes_lost}

    result = simulate(main, seed=1, props={"log.flush.interval.messages": "10"})
    assert 0 < result.result["synced"] < result.result["acked"]


def test_a_full_disk_takes_the_leaders_log_dir_offline_and_no_acks_all_record_is_lost() -> None:
    async def main(world: World) -> dict[str, Any]:
        admin = await world.admin()
        await admin.create_topic(TOPIC, 1, 3)
        producer = await world.producer(acks="all", enable_idempotence=True)
        acked = await produce(producer, 0, 10)
        leader = world.leader_of(TOPIC, 0)
        assert leader is not None
        world.disk_full(leader)
        acked += await produce(producer, 10, 10)  # the producer retries until a new leader answers
        broken = world.broker(leader)
        # its only log dir went offline (KIP-112): the broker halted, leadership moved
        await world.wait_for(lambda: broken.state is ProcessState.DEAD, "the full broker halting")
        assert broken.halted == 1
        assert broken.disk is not None and any("ENOSPC" in r for r in broken.disk.raised)
        new_leader = world.leader_of(TOPIC, 0)
        assert new_leader not in (None, leader)
        assert [(r.offset, r.value) for r in world.records(new_leader, TOPIC, 0)] == acked
        world.heal_disks()
        await world.restart(leader)
        await world.wait_for(
            lambda: [(r.offset, r.value) for r in world.records(leader, TOPIC, 0)] == acked,
            f"broker {leader} recovering and catching up",
        )
        return {"leader": leader, "new_leader": new_leader}

    simulate(main, seed=2)


async def storage_fault_schedule(world: World) -> dict[str, Any]:
    """Each storage fault in turn on the partition's leader, until it shows; then heal and restart."""
    admin = await world.admin()
    await admin.create_topic(TOPIC, 1, 3)
    producer = await world.producer(acks="all", enable_idempotence=True)
    acked = await produce(producer, 0, 5)
    history = []
    for kind in STORAGE_FAULTS:
        leader = world.leader_of(TOPIC, 0)
        assert leader is not None
        disk = world.broker(leader).disk
        assert disk is not None
        raised = len(disk.raised)
        history.append(world.storage_fault(kind, leader))
        acked += await produce(producer, len(acked), 5)
        while kind != "power-loss" and len(disk.raised) == raised:  # until the disk fault shows
            acked += await produce(producer, len(acked), 5)
        world.heal_disks()
        for broker_id, broker in world.brokers.items():
            if broker.state is ProcessState.DEAD:
                await world.restart(broker_id)
        await world.wait_until_ready()
    final = world.leader_of(TOPIC, 0)
    assert final is not None
    assert [(r.offset, r.value) for r in world.records(final, TOPIC, 0)][: len(acked)] == acked
    raised = [r.split(world.root.name)[-1] for b in world.brokers.values() if b.disk for r in b.disk.raised]
    return {"history": history, "raised": raised}


def test_the_same_seed_replays_the_same_storage_faults() -> None:
    first = simulate(storage_fault_schedule, seed=5)
    again = simulate(storage_fault_schedule, seed=5)
    other = simulate(storage_fault_schedule, seed=6)
    assert first.result["history"][0].startswith("power-loss")
    assert len(first.result["raised"]) >= 2  # the disk-full and the disk-error both fired
    assert first.trace_hash == again.trace_hash and first.result == again.result
    assert other.trace_hash != first.trace_hash
