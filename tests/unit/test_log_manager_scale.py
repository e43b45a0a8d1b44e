"""The log manager with thousands of logs (docs/design.md "Open files at scale (issue 25)"):
placement reads per-dir counts kept as logs come and go (no scan of every log per creation),
a StopReplica's deletions checkpoint each dir once, and start-up opens a dir's logs on
``num.recovery.threads.per.data.dir`` threads yet adopts them in directory order."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log import LogConfig, LogManager
from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.log_manager import RECOVERY_POINT_CHECKPOINT
from client.protocol.records import build_batch
from tests.unit.test_log_write_failures import Clock


def test_placement_counts_follow_deletions_and_failed_dirs(tmp_path: Path):
    dirs = [tmp_path / "d1", tmp_path / "d2", tmp_path / "d3"]
    manager = LogManager(dirs, LogConfig(), Clock())
    placed = {p: manager.get_or_create_log("t", p).log_dir for p in range(6)}
    in_d1 = [p for p, d in placed.items() if d == dirs[0]]
    for p in in_d1:
        manager.delete_log("t", p)
    # d1 now holds nothing: the next two logs go there, then the three dirs take turns
    assert [manager.get_or_create_log("u", p).log_dir for p in range(2)] == [dirs[0], dirs[0]]
    manager.failure_channel.maybe_add_offline_log_dir(dirs[1], "test")
    manager.handle_log_dir_failure(dirs[1])
    assert sorted(manager.get_or_create_log("v", p).log_dir for p in range(4)) == sorted(
        [dirs[0], dirs[2]] * 2
    )
    manager.shutdown()


def test_deletions_without_checkpoint_leave_it_to_one_write_per_dir(tmp_path: Path):
    manager = LogManager([tmp_path / "d"], LogConfig(), Clock())
    for p in range(4):
        manager.get_or_create_log("t", p)
    manager.checkpoint_recovery_points()
    checkpoint = OffsetCheckpointFile(tmp_path / "d" / RECOVERY_POINT_CHECKPOINT)
    assert set(checkpoint.read()) == {("t", p) for p in range(4)}
    touched = {manager.delete_log("t", p, checkpoint=False) for p in (0, 1, 2)}
    assert touched == {tmp_path / "d"}
    assert set(checkpoint.read()) == {("t", p) for p in range(4)}, "not yet: the caller's batch writes it"
    manager.checkpoint_log_dirs(touched)
    assert set(checkpoint.read()) == {("t", 3)}
    assert manager.delete_log("t", 0, checkpoint=False) is None  # gone already
    manager.shutdown()


@pytest.mark.parametrize("threads", [1, 4])
def test_start_up_opens_on_threads_and_adopts_in_directory_order(tmp_path: Path, threads: int):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    for p in range(40):
        manager.get_or_create_log("t", p).append_as_leader(
            build_batch([(None, b"v%d" % p, 0, [])] * (p % 3 + 1)), 0
        )
    # no shutdown: an unclean start, every log recovered
    reloaded = LogManager(dirs, LogConfig(), Clock(), recovery_threads=threads)
    reloaded.load_logs()
    logs = reloaded.all_logs()
    assert {tp: lg.log_end_offset for tp, lg in logs.items()} == {("t", p): p % 3 + 1 for p in range(40)}
    expected_order = [
        tp for d in dirs for tp in sorted(logs, key=lambda tp: f"{tp[0]}-{tp[1]}") if logs[tp].log_dir == d
    ]
    assert list(logs) == expected_order
    # the per-dir counts came with them: a new log goes to the dir with fewer
    counts = {d: sum(lg.log_dir == d for lg in logs.values()) for d in dirs}
    assert reloaded.get_or_create_log("u", 0).log_dir == min(dirs, key=counts.__getitem__)
    reloaded.shutdown()


def test_a_log_that_fails_to_open_takes_its_dir_offline_and_closes_the_others(tmp_path: Path, monkeypatch):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    for p in range(10):
        manager.get_or_create_log("t", p)
    manager.shutdown()
    bad = next(lg_dir for lg_dir in sorted((tmp_path / "d1").iterdir()) if lg_dir.is_dir())
    from broker.log import log_manager as module

    real_open = module.Log.open

    def failing_open(path, *args, **kwargs):
        if Path(path) == bad:
            raise OSError(5, "Input/output error", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(module.Log, "open", staticmethod(failing_open))
    reloaded = LogManager(dirs, LogConfig(), Clock(), recovery_threads=3)
    reloaded.load_logs()
    assert reloaded.is_offline(dirs[0]) and not reloaded.is_offline(dirs[1])
    assert {lg.log_dir for lg in reloaded.all_logs().values()} == {dirs[1]}
    assert reloaded.file_cache.stats.open <= len(reloaded.all_logs()), "the failed dir's logs hold no file"
    reloaded.shutdown()
