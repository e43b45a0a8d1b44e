"""Running out of file descriptors inside a roll or a load (issue 19 item 6, leftovers; docs/design.md
"The file budget"): the roll's "flush-log" job, a roll that replaces an empty active segment,
and :func:`broker.log.log_loader.load_log` part way through its opens.

EMFILE is injected at the ``os.open`` boundary of real logs on disk, one path suffix at a time,
as in test_resource_errors.py; a resource error never takes the dir offline, so each case checks
what it must leave behind instead: no unflushed data under the recovery point, a log that still
has its segments, no descriptor leaked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.log.log import Log, LogConfig
from broker.log.log_dir_failure import KafkaResourceError
from broker.log.log_manager import LogManager
from client.protocol.records import build_batch
from tests.unit.test_resource_errors import REAL_OS_OPEN, fail_os_open, open_fds

#: one record per batch (about 70 bytes): with segment.bytes 100 every second append rolls
CONFIG = LogConfig(segment_bytes=100)


def clock() -> int:
    return 1_000_000


def batch(base_offset: int = 0) -> bytes:
    return build_batch([(None, b"v" * 8, 1_000_000, [])], base_offset=base_offset)


def record_os_open(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path ``os.open`` is called with from now on."""
    opened: list[str] = []

    def recording(path, flags, *args, **kwargs):  # noqa: ANN001, ANN202
        opened.append(str(path))
        return REAL_OS_OPEN(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording)
    return opened


# -- 1a: the roll's "flush-log" job meets EMFILE ---------------------------------------------------


def test_emfile_in_the_rolls_flush_fails_neither_the_append_nor_moves_the_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log opened on its own runs the roll's flush at once, on the append's thread: fsyncing
    the new segment's producer snapshot meets EMFILE. The append was written and stands; the
    recovery point stays below the unflushed rolled segment; the next flush moves it."""
    lg = Log.open(tmp_path / "t-0", CONFIG, clock)
    try:
        lg.append_as_leader(batch(), 0)
        refused = fail_os_open(monkeypatch, ".snapshot")
        info = lg.append_as_leader(batch(), 0)  # rolls at 1, then the flush-log job runs
        monkeypatch.setattr(os, "open", REAL_OS_OPEN)
        assert refused, "the fault was never met"
        assert info.first_offset == 1 and lg.log_end_offset == 2 and len(lg.segments) == 2
        assert lg.recovery_point == 0, "the recovery point moved past a segment that was never fsynced"
        assert not lg.is_offline and lg.failure_channel.resource_errors == {"EMFILE": 1}
        lg.flush()
        assert lg.recovery_point == 2
    finally:
        lg.close()


def test_a_failed_flush_log_job_is_caught_and_the_flush_scheduler_fsyncs_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the log manager the job runs on the flusher thread, where a raised error is lost in
    a future: it is caught there, and the periodic flush (``flush_dirty_logs``) does the job's
    whole work, the rolled segment's producer snapshot included, before the recovery point
    passes it."""
    jobs: list[Callable[[], None]] = []
    manager = LogManager([tmp_path / "logs"], CONFIG, clock, schedule_once=lambda name, job: jobs.append(job))
    try:
        lg = manager.get_or_create_log("t", 0)
        lg.append_as_leader(batch(), 0)
        lg.append_as_leader(batch(), 0)  # rolls at 1
        (job,) = jobs
        fail_os_open(monkeypatch, ".snapshot")
        job()
        opened = record_os_open(monkeypatch)
        assert lg.recovery_point == 0 and not lg.is_offline
        manager.flush_dirty_logs()
        assert str(lg.dir / f"{1:020d}.snapshot") in opened, "the rolled segment's snapshot was never fsynced"
        assert lg.recovery_point == 1
    finally:
        manager.shutdown()


# -- 1b: a roll that replaces an empty active segment meets EMFILE ---------------------------------


@pytest.mark.parametrize("before", ["rolled", "truncated fully"])
def test_emfile_creating_the_segment_that_replaces_an_empty_one_leaves_the_log_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    """The active segment is empty (a roll just made it, or a full truncation, and then it is
    the log's only segment) and a follower's batch starts past it and does not fit: the roll
    replaces the empty segment. Creating the new one meets EMFILE: the append fails retriably,
    the log keeps its segments, and the retry lands."""
    lg = Log.open(tmp_path / "t-0", CONFIG, clock)
    try:
        lg.append_as_follower(batch(0))
        if before == "rolled":
            lg.roll()  # an empty active segment at 1
        else:
            lg.truncate_fully_and_start_at(1)  # the only segment, empty, at 1
        bases = [s.base_offset for s in lg.segments]
        big = build_batch([(None, b"v" * 200, 1_000_000, [])], base_offset=5)  # > segment.bytes
        fail_os_open(monkeypatch, f"{5:020d}.log")
        with pytest.raises(KafkaResourceError):
            lg.append_as_follower(big)
        monkeypatch.setattr(os, "open", REAL_OS_OPEN)
        assert [s.base_offset for s in lg.segments] == bases, "the failed roll lost the active segment"
        assert lg.log_end_offset == 1 and not lg.is_offline
        lg.append_as_follower(big)
        assert [s.base_offset for s in lg.segments] == [*bases[:-1], 5] and lg.log_end_offset == 6
        assert not (lg.dir / f"{1:020d}.log").exists()
    finally:
        lg.close()
    # The files are what the log says (an unclean load would read the follower's gap 1-4 as a
    # torn tail, issue 19 item 1: a leader's log never has one).
    reopened = Log.open(tmp_path / "t-0", CONFIG, clock, clean_shutdown=True)
    try:
        assert [s.base_offset for s in reopened.segments] == [*bases[:-1], 5]
        assert reopened.log_end_offset == 6
    finally:
        reopened.close()


# -- 1c: the loader meets EMFILE part way ----------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "clean"),
    [
        (f"{2:020d}.log", True),  # opening the third segment
        (f"{2:020d}.timeindex", True),  # half way through opening it
        ("t-0", False),  # the directory fsync after recovery, every segment open
    ],
)
def test_a_load_that_meets_emfile_closes_the_segments_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, clean: bool
) -> None:
    lg = Log.open(tmp_path / "t-0", CONFIG, clock)
    for _ in range(3):
        lg.append_as_leader(batch(), 0)
    assert [s.base_offset for s in lg.segments] == [0, 1, 2]
    lg.close()
    before = open_fds()
    refused = fail_os_open(monkeypatch, suffix)
    with pytest.raises(OSError) as raised:
        Log.open(tmp_path / "t-0", CONFIG, clock, clean_shutdown=clean)
    monkeypatch.setattr(os, "open", REAL_OS_OPEN)
    assert refused and raised.value.errno == 24
    assert open_fds() == before, "the segments opened before the failure leaked their descriptors"
    reopened = Log.open(tmp_path / "t-0", CONFIG, clock, clean_shutdown=clean)
    try:
        assert reopened.log_end_offset == 3
    finally:
        reopened.close()
