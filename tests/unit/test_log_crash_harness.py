"""The log's crash-and-power-loss harness (issue 19; docs/guarantees.md "Process crash and power
loss"): a seeded workload through the real LogManager and Log (appends as leader and follower,
rolls, the rolls' deferred flushes, flushes, checkpoints, a truncation below the recovery point,
a producer snapshot, retention, ``truncate_fully_and_start_at``, a clean shutdown) is run once
per system call with a crash injected there (the call half done, :mod:`tests.crash_fs`), and
once per system call with a power loss there (only fsynced bytes and fsynced directory entries
survive). After each, the log dir is reloaded as after an unclean shutdown and checked by
:func:`tests.log_invariants.check_reload`: kafka-python decodes every batch, offsets are
contiguous, index entries sit on batch boundaries, the epoch cache and the producer state equal
a rebuild from the batches (and the lineage's history), log start <= HW <= LEO, recovery point
<= LEO. A failure names the seed, the mode, the crash point and the operation it interrupted.

``FLOODMARK_CRASH_SEED`` picks another workload (the default runs in a few seconds).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.log import Log, LogConfig, LogManager
from client.protocol.records import build_batch, set_partition_leader_epoch
from tests.crash_fs import Crash, CrashFS
from tests.log_invariants import ALL_OR_NONE, ANY, EXACT, Lineage, check_reload, read_lineage

SEED = int(os.environ.get("FLOODMARK_CRASH_SEED", "19"))
TOPIC, PARTITION = "t", 0
RECORD = b"v" * 20
BATCH = len(build_batch([(None, RECORD, 0, [])] * 3))
CONFIG = LogConfig(segment_bytes=3 * BATCH, index_interval_bytes=BATCH)

Op = tuple[str, str, Callable[[], None]]  # (name, kind, run); kind "wipe" starts a new lineage


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Workload:
    """One seeded sequence of operations on partition t-0 of a LogManager over ``root``/d."""

    def __init__(self, root: Path, seed: int) -> None:
        self.log_dir = root / "d"
        self.clock = Clock()
        self.pending: list[Callable[[], None]] = []  # the rolls' "flush-log" jobs, run by "run-flushes"
        self.manager: LogManager | None = None
        self.log: Log | None = None
        self.follower_seq = 0
        self.timestamp = 1_000_000
        self.ops = self._plan(random.Random(seed))

    def _plan(self, rng: random.Random) -> list[Op]:
        ops: list[Op] = [("open", "", self._open)]
        ops += self._leader_appends(rng.randint(3, 5), epoch=1)
        ops += [("run-flushes", "", self._run_flushes), ("checkpoint", "", self._checkpoint)]
        ops += self._leader_appends(rng.randint(2, 4), epoch=1)
        ops += [("flush", "", lambda: self._log().flush()), ("checkpoint", "", self._checkpoint)]
        depth = rng.randint(1, 7)
        ops += [(f"truncate below the recovery point by {depth}", "", lambda: self._truncate(depth))]
        ops += [
            (f"follower append {i}", "", lambda: self._follower_append(2)) for i in range(rng.randint(3, 5))
        ]
        ops += [("snapshot", "", lambda: self._log().take_producer_snapshot())]
        ops += [("run-flushes", "", self._run_flushes)]
        ops += [("become leader", "", lambda: self._log().assign_leader_epoch(3, self._log().log_end_offset))]
        ops += self._leader_appends(rng.randint(1, 3), epoch=3)
        advance = rng.randint(1, 8)
        ops += [(f"retention (log start +{advance})", "", lambda: self._retention(advance))]
        ops += [("checkpoint", "", self._checkpoint)]
        gap = rng.randint(1, 30)
        ops += [(f"truncate fully (LEO + {gap})", "wipe", lambda: self._truncate_fully(gap))]
        ops += [
            (f"follower append {i}", "", lambda: self._follower_append(4)) for i in range(rng.randint(2, 4))
        ]
        ops += [("run-flushes", "", self._run_flushes), ("shutdown", "", lambda: self._manager().shutdown())]
        return ops

    def _log(self) -> Log:
        assert self.log is not None
        return self.log

    def _manager(self) -> LogManager:
        assert self.manager is not None
        return self.manager

    def _open(self) -> None:
        self.manager = LogManager([self.log_dir], CONFIG, self.clock, schedule_once=self._schedule)
        self.manager.load_logs()
        self.log = self.manager.get_or_create_log(TOPIC, PARTITION)
        self.log.assign_leader_epoch(1, 0)

    def _schedule(self, name: str, job: Callable[[], None]) -> None:
        self.pending.append(job)

    def _run_flushes(self) -> None:
        jobs, self.pending = self.pending, []
        for job in jobs:
            job()

    def _checkpoint(self) -> None:
        self._manager().checkpoint_recovery_points()
        self._manager().checkpoint_high_watermarks()
        self._manager().checkpoint_log_start_offsets()

    def _records(self) -> list[tuple[None, bytes, int, list]]:
        self.timestamp += 10
        return [(None, RECORD, self.timestamp + i, []) for i in range(3)]

    def _leader_appends(self, count: int, epoch: int) -> list[Op]:
        def append(idempotent: bool) -> None:
            entry = self._log().producer_state.last_entry(7)
            seq = entry.last_seq + 1 if entry is not None else 0
            records = self._records()
            if idempotent:
                batch = build_batch(records, producer_id=7, producer_epoch=0, base_sequence=seq)
            else:
                batch = build_batch(records)
            self._log().append_as_leader(batch, leader_epoch=epoch)

        return [
            (f"leader append {i} (epoch {epoch})", "", lambda i=i: append(i % 2 == 0)) for i in range(count)
        ]

    def _follower_append(self, epoch: int) -> None:
        log = self._log()
        buf = bytearray(
            build_batch(
                self._records(),
                base_offset=log.log_end_offset,
                producer_id=8,
                producer_epoch=0,
                base_sequence=self.follower_seq,
            )
        )
        set_partition_leader_epoch(buf, 0, epoch)
        self.follower_seq += 3
        log.append_as_follower(bytes(buf))
        log.update_high_watermark(log.log_end_offset - 3)

    def _truncate(self, depth: int) -> None:
        log = self._log()
        log.truncate_to(max(log.segments[0].base_offset, log.recovery_point - depth))

    def _retention(self, advance: int) -> None:
        log = self._log()
        log.update_high_watermark(log.log_end_offset)
        log.maybe_increment_log_start_offset(min(log.log_start_offset + advance, log.high_watermark))
        self._manager().cleanup_logs()

    def _truncate_fully(self, gap: int) -> None:
        log = self._log()
        log.truncate_fully_and_start_at(log.log_end_offset + gap)


def reference_lineages(root: Path) -> list[Lineage]:
    """The lineage after each operation of a crash-free run."""
    workload = Workload(root, SEED)
    lineage = Lineage((), 0)
    after: list[Lineage] = []
    for _name, kind, run in workload.ops:
        run()
        start = workload._log().log_start_offset if kind == "wipe" else lineage.start
        history = [] if kind == "wipe" else list(lineage.headers)
        lineage = read_lineage(workload.log_dir / f"{TOPIC}-{PARTITION}", history, start)
        after.append(lineage)
    return after


def candidates(lineages: list[Lineage], crashed_in: int) -> list[Lineage]:
    """The lineages a crash inside operation ``crashed_in`` may leave: before it or after it."""
    before = lineages[crashed_in - 1] if crashed_in > 0 else Lineage((), 0)
    return [before] if crashed_in == len(lineages) else [before, lineages[crashed_in]]


def crash_run(root: Path, crash_at: int | None) -> tuple[int, CrashFS]:
    """Run the workload on CrashFS until the crash; the index of the op it interrupted."""
    workload = Workload(root, SEED)
    workload.log_dir.mkdir(parents=True)  # the broker's log dir exists before it starts
    with CrashFS(root, crash_at=crash_at) as fs:
        for i, (_, _, run) in enumerate(workload.ops):
            try:
                run()
            except Crash:
                return i, fs
    return len(workload.ops), fs


def reload_and_check(root: Path, candidates: list[Lineage], history_loss: str, crashed_in: int) -> str | None:
    manager = LogManager([root / "d"], CONFIG, Clock(), schedule_once=lambda name, job: None)
    manager.load_logs()
    try:
        log = manager.get_log(TOPIC, PARTITION)
        if log is None:
            return None if crashed_in == 0 else "the partition's log is gone"
        return check_reload(log, candidates, history_loss)
    finally:
        for log in manager.all_logs().values():
            log.close()


@pytest.mark.parametrize("mode", ["crash", "power loss"])
def test_every_crash_point_of_the_workload_reloads_to_a_sound_log(tmp_path: Path, mode: str):
    lineages = reference_lineages(tmp_path / "reference")
    ops = Workload(tmp_path / "unused", SEED).ops
    total = len(crash_run(tmp_path / "count", None)[1].calls)
    assert total > 200, total  # the workload reaches every kind of call
    power_loss = mode == "power loss"
    failures = []
    for n in range(1, total + 1 + power_loss):  # a power loss after the last call too
        root = tmp_path / f"{n}"
        crashed_in, fs = crash_run(root, n)
        if power_loss:
            fs.power_loss()
        wiping = crashed_in < len(ops) and ops[crashed_in][1] == "wipe"
        history_loss = ANY if power_loss else ALL_OR_NONE if wiping else EXACT
        problem = reload_and_check(root, candidates(lineages, crashed_in), history_loss, crashed_in)
        if problem is not None:
            op = ops[crashed_in][0] if crashed_in < len(ops) else "(after the workload)"
            failures.append(f"seed {SEED}, {mode} at {fs.crashed or 'the end'}, during '{op}': {problem}")
        shutil.rmtree(root)
    assert not failures, f"{len(failures)} of {total} crash points fail:\n" + "\n".join(failures)
