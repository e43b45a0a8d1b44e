"""The log under a process crash and a power loss (issue 19, items 1-5; docs/guarantees.md
"Process crash and power loss"): each test replays one sequence of the review through the
real Log and LogManager on :class:`tests.crash_fs.CrashFS`, which crashes at a chosen system
call or, at a power loss, keeps only fsynced bytes and fsynced directory entries."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from broker.log import RECOVERY_POINT_CHECKPOINT, Log, LogConfig, LogManager, OffsetCheckpointFile
from broker.log.leader_epoch import EpochEntry
from broker.log.log_dir_failure import KafkaStorageError
from client.protocol.records import build_batch, decode_records, iter_batches, set_partition_leader_epoch
from tests.crash_fs import Crash, CrashFS

PRODUCER = 7


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def batch(seq: int = -1, epoch: int = -1) -> bytes:
    """Three records of the same size (so segment.bytes counts batches), idempotent with ``seq``."""
    pid = PRODUCER if seq >= 0 else -1
    return build_batch(
        [(None, b"v" * 20, 1_000_000, []) for _ in range(3)],
        producer_id=pid,
        producer_epoch=0 if seq >= 0 else -1,
        base_sequence=seq,
    )


BATCH = len(batch())


def follower_batch(base_offset: int, leader_epoch: int) -> bytes:
    buf = bytearray(
        build_batch([(None, b"v" * 20, 1_000_000, []) for _ in range(3)], base_offset=base_offset)
    )
    set_partition_leader_epoch(buf, 0, leader_epoch)
    return bytes(buf)


def readable_offsets(log: Log) -> list[int]:
    """Every offset a fetch from the log start finds, stopping at the first read that returns nothing."""
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        got = [r.offset for _, r in decode_records(data) if r.offset >= offset]
        if not got:
            break
        out.extend(got)
        offset = got[-1] + 1
    return out


def epochs_from_batches(log: Log) -> list[EpochEntry]:
    """The leader epoch cache a rebuild from the batches gives (KIP-101's assignment rule)."""
    entries: list[EpochEntry] = []
    for segment in log.segments:
        with open(segment.log_path, "rb") as f:
            for _, header in iter_batches(f.read()):
                epoch = header.partition_leader_epoch
                if not entries or epoch > entries[-1].epoch:
                    entries.append(EpochEntry(epoch, header.base_offset))
    return entries


def four_segments(log: Log) -> None:
    """[0,12) [12,24) [24,36) [36,42): four batches of 3 per segment, one leader epoch each."""
    for i in range(14):
        log.append_as_leader(batch(), leader_epoch=1 + i // 4)
        if i == 4:
            log.flush(12)  # the recovery point is 12


SEGMENTS_OF_4 = LogConfig(segment_bytes=4 * BATCH)


# ---------------------------------------------------------------------------------------------- item 1


def test_a_rolled_segment_is_flushed_so_a_power_loss_leaves_no_hole(tmp_path: Path):
    """Kafka flushes the old segment after each roll: the rolled segments survive a power loss
    that only the active segment's unflushed tail is lost to."""
    clock = Clock()
    (tmp_path / "t-0").mkdir()
    with CrashFS(tmp_path) as fs:
        log = Log.open(tmp_path / "t-0", SEGMENTS_OF_4, clock)
        four_segments(log)
        log.assign_leader_epoch(5, 42)  # every segment name is durable now (a dir fsync)
    fs.power_loss()
    recovered = Log.open(tmp_path / "t-0", SEGMENTS_OF_4, clock, recovery_point=12)
    assert readable_offsets(recovered) == list(range(recovered.log_end_offset))
    assert recovered.log_end_offset == 36  # only the active segment's unflushed batches are gone
    assert recovered.leader_epoch_cache.entries == epochs_from_batches(recovered)


def test_an_empty_segment_before_the_last_is_a_torn_tail(tmp_path: Path):
    """A roll's flush still pending at the power loss: the rolled segments come back empty with
    their names durable; recovery ends the log at the first one instead of counting past it."""
    clock = Clock()
    (tmp_path / "t-0").mkdir()
    pending: list[object] = []
    with CrashFS(tmp_path) as fs:
        log = Log.open(tmp_path / "t-0", SEGMENTS_OF_4, clock)
        log.schedule_once = lambda name, job: pending.append(job)  # the scheduler never got to run them
        four_segments(log)
        log.assign_leader_epoch(5, 42)
    fs.power_loss()
    recovered = Log.open(tmp_path / "t-0", SEGMENTS_OF_4, clock, recovery_point=12)
    assert readable_offsets(recovered) == list(range(recovered.log_end_offset))
    assert recovered.log_end_offset == 12
    assert [s.base_offset for s in recovered.segments] == [0, 12]
    assert recovered.leader_epoch_cache.entries == epochs_from_batches(recovered)


# ---------------------------------------------------------------------------------------------- item 2


def test_truncation_checkpoints_the_recovery_point_at_once(tmp_path: Path):
    """Kafka's LogManager.truncateTo checkpoints the dir's recovery points: a stale checkpoint
    above the truncation would let recovery trust rewritten, unflushed segments."""
    clock = Clock()
    log_dir = tmp_path / "d"
    manager = LogManager([log_dir], SEGMENTS_OF_4, clock)
    manager.load_logs()
    log = manager.get_or_create_log("t", 0)
    four_segments(log)
    log.flush(30)
    manager.checkpoint_recovery_points()
    log.truncate_to(12)
    assert OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()[("t", 0)] <= 12
    for _ in range(10):  # refill 12..41 across two rolls, as the new leader in epoch 5
        log.append_as_leader(batch(), leader_epoch=5)
    torn = log.segments[1].log_path  # [12, 24): tear the batch at 21 (the 4th of the segment)
    log.close()
    os.truncate(torn, 3 * BATCH + BATCH // 2)
    reloaded = LogManager([log_dir], SEGMENTS_OF_4, clock)
    reloaded.load_logs()
    recovered = reloaded.get_log("t", 0)
    assert recovered.log_end_offset == 21
    assert readable_offsets(recovered) == list(range(21))


# ---------------------------------------------------------------------------------------------- item 3


def _idempotent_log(dir: Path, clock: Clock) -> Log:
    """Producer 7's seq 0-14 in five batches, a roll (and snapshot) at 9."""
    log = Log.open(dir, LogConfig(segment_bytes=3 * BATCH), clock)
    for seq in range(0, 15, 3):
        log.append_as_leader(batch(seq), leader_epoch=1)
    assert [s.base_offset for s in log.segments] == [0, 9]
    return log


@pytest.mark.parametrize("fault", ["crash", "eio"])
def test_a_fault_inside_truncate_fully_never_revives_wiped_producer_state(tmp_path: Path, fault: str):
    """A crash (or I/O error) at every system call of ``truncate_fully_and_start_at(100)``:
    after the restart, producer 7 is either as the surviving batches say or gone, never restored
    from a snapshot of the wiped history (a retry of seq 6-8 answered as a duplicate at offsets
    below the log start, nothing written)."""
    clock = Clock()
    (tmp_path / "dry" / "t-0").mkdir(parents=True)
    with CrashFS(tmp_path / "dry") as fs:
        log = _idempotent_log(tmp_path / "dry" / "t-0", clock)
        before = len(fs.calls)
        log.truncate_fully_and_start_at(100)
        total = len(fs.calls) - before
    for n in range(1, total + 1):
        root = tmp_path / f"at-{n}"
        (root / "t-0").mkdir(parents=True)
        with CrashFS(root, fault=fault) as fs:
            log = _idempotent_log(root / "t-0", clock)
            fs.crash_at = len(fs.calls) + n
            with pytest.raises((Crash, KafkaStorageError)):
                log.truncate_fully_and_start_at(100)
        where = f"{fault} at {fs.calls[-1] if fs.crashed is None else fs.crashed}"
        recovered = Log.open(root / "t-0", LogConfig(segment_bytes=3 * BATCH), clock)
        in_log = {
            r.offset for _, r in decode_records(recovered.read(recovered.log_start_offset, 1 << 20).records)
        }
        retry = recovered.append_as_leader(batch(6), leader_epoch=1)
        if retry.duplicate:
            assert {6, 7, 8} <= in_log, f"{where}: a duplicate of offsets 6-8 the log no longer holds"
        if recovered.log_end_offset >= 100:
            assert not retry.duplicate, f"{where}: producer 7 restored from the wiped history"


# ---------------------------------------------------------------------------------------------- item 4


def test_a_crash_during_recovery_never_leaves_a_hole(tmp_path: Path):
    """Segment [0,12) torn at 6, later segments [12,24) [24,36) [36,42): recovery crashed at
    each of its system calls, then run again, always ends the log at 6 (the later segments are
    deleted before the torn one is cut, so a crash in between leaves the tear to find again)."""
    clock = Clock()
    template = tmp_path / "template" / "t-0"
    log = Log.open(template, SEGMENTS_OF_4, clock)
    four_segments(log)
    log.close()
    first = template / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[2 * BATCH + BATCH // 2] ^= 0xFF  # corrupt the batch at offset 6: its CRC fails
    first.write_bytes(bytes(data))
    dry = tmp_path / "dry"
    shutil.copytree(template.parent, dry)
    with CrashFS(dry) as fs:
        Log.open(dry / "t-0", SEGMENTS_OF_4, clock).close()
    total = len(fs.calls)
    assert total > 10
    for n in range(1, total + 1):
        root = tmp_path / f"at-{n}"
        shutil.copytree(template.parent, root)
        with CrashFS(root, crash_at=n) as fs, pytest.raises(Crash):
            Log.open(root / "t-0", SEGMENTS_OF_4, clock)
        recovered = Log.open(root / "t-0", SEGMENTS_OF_4, clock)
        assert recovered.log_end_offset == 6, f"crash at {fs.crashed}: {recovered}"
        assert readable_offsets(recovered) == list(range(6)), f"crash at {fs.crashed}"
        assert recovered.leader_epoch_cache.entries == epochs_from_batches(recovered), (
            f"crash at {fs.crashed}"
        )


# ---------------------------------------------------------------------------------------------- item 5


def test_a_truncation_is_durable_before_the_new_epoch_entry(tmp_path: Path):
    """Truncate to 12, then the new leader's epoch 4 arrives (the epoch checkpoint is fsynced);
    a power loss must not bring back the old epoch-3 batches at 12-17 under a cache that says
    epoch 4 starts at 12 (the replica would never truncate them: silent divergence)."""
    clock = Clock()
    (tmp_path / "t-0").mkdir()
    with CrashFS(tmp_path) as fs:
        log = Log.open(tmp_path / "t-0", LogConfig(), clock)
        for i in range(6):  # 0-17 in epochs 1, 1, 2, 2, 3, 3
            log.append_as_leader(batch(), leader_epoch=1 + i // 2)
        log.flush()
        log.truncate_to(12)
        log.append_as_follower(follower_batch(12, leader_epoch=4))
    fs.power_loss()
    recovered = Log.open(tmp_path / "t-0", LogConfig(), clock, recovery_point=12)
    assert recovered.leader_epoch_cache.entries == epochs_from_batches(recovered)
    assert recovered.log_end_offset == 12  # the truncation held; the unflushed epoch-4 batch is gone
