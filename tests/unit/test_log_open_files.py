"""Logs hold descriptors bounded by a setting, not by partitions or segments (issue 25 items 1, 2
and 5; docs/design.md "Open files at scale (issue 25)").

Counted in ``/proc/self/fd``: index files hold no descriptor after a load, an append, a flush, a
roll or a truncation; a log manager whose segment file cache is bounded to a few descriptors
hosts hundreds of logs, appends to and reads all of them, and never holds more. Durability is
unchanged (docs/design.md "Durability: flush and fsync rules"): an index entry reaches the disk
when its segment is flushed (and the recovery point covers it only then), and after an unclean
stop recovery rebuilds what the recovery point did not cover, byte for byte what a clean run
writes. The file budget's arithmetic says 10,000 replicas fit where 20,000 files are allowed.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker.file_budget import FILES_PER_REPLICA, current_budget, file_budget, segment_files_max
from broker.log import Log, LogConfig, LogManager
from broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from broker.log.segment import LogSegment
from client.protocol.records import build_batch, iter_batches
from tests.unit.test_resource_errors import FakeResource
from tests.unit.test_segment_file_cache import fds_under


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def batch(n: int, tag: str, ts: int) -> bytes:
    return build_batch([(None, f"{tag}{i}".encode(), ts + i, []) for i in range(n)])


def index_fds(root: Path) -> list[str]:
    return [p for p in fds_under(root) if p.endswith((".index", ".timeindex"))]


def on_disk(path: Path, entry) -> list[tuple[int, ...]]:  # noqa: ANN001
    return list(entry.iter_unpack(path.read_bytes()))


# -- index files hold no descriptor -------------------------------------------------------------


def test_a_segment_holds_no_index_descriptor_after_create_append_flush_truncate_and_load(
    tmp_path: Path,
) -> None:
    kwargs = {"index_interval_bytes": 0, "max_index_bytes": 4096, "time_ms": Clock()}
    segment = LogSegment.create(tmp_path, 0, **kwargs)
    assert index_fds(tmp_path) == [] and (tmp_path / f"{0:020d}.index").exists()
    for i in range(4):
        buf = bytearray(batch(3, f"b{i}", ts=1_000 * (i + 1)))
        buf[0:8] = (3 * i).to_bytes(8, "big")
        segment.append(buf, list(iter_batches(buf)))
        assert index_fds(tmp_path) == []
    assert (len(segment.index), len(segment.time_index)) == (3, 4)  # interval 0: all batches but the first
    assert on_disk(segment.index.path, OFFSET_ENTRY) == [], "appends only add to memory"
    segment.flush()
    assert index_fds(tmp_path) == []
    assert len(on_disk(segment.index.path, OFFSET_ENTRY)) == 3
    assert len(on_disk(segment.time_index.path, TIME_ENTRY)) == 4
    segment.truncate_to(6)
    assert index_fds(tmp_path) == [] and len(on_disk(segment.index.path, OFFSET_ENTRY)) == 1
    assert fds_under(tmp_path) == [str(segment.log_path)], "only the .log, through its cache"
    segment.close()
    assert fds_under(tmp_path) == []

    loaded = LogSegment(tmp_path, 0, **kwargs)
    assert fds_under(tmp_path) == [], "reading the indexes at load opened and closed them"
    assert loaded.load() is None and loaded.next_offset == 6 and len(loaded.index) == 1
    assert index_fds(tmp_path) == []
    loaded.close()
    assert fds_under(tmp_path) == []


def test_a_log_holds_only_its_segment_files_through_its_cache(tmp_path: Path) -> None:
    """Rolls, reads of old segments, flushes and a truncation: no index descriptor, and never more
    ``.log`` descriptors than the cache's bound."""
    config = LogConfig(segment_bytes=400, index_interval_bytes=0)
    lg = Log.open(tmp_path / "t-0", config, Clock())
    lg.file_cache.max_open = 2  # the log's own cache (a log manager's in a broker)
    try:
        for i in range(20):
            lg.append_as_leader(batch(3, f"v{i}", ts=1_000 * (i + 1)), leader_epoch=0)
            assert index_fds(tmp_path) == [] and len(fds_under(tmp_path)) <= 2
        assert len(lg.segments) >= 5
        for offset in range(0, lg.log_end_offset, 3):  # every segment read again
            assert lg.read(offset, 1 << 20).records
            assert len(fds_under(tmp_path)) <= 2
        lg.flush()
        lg.truncate_to(10)
        assert index_fds(tmp_path) == [] and len(fds_under(tmp_path)) <= 2
    finally:
        lg.close()
    assert fds_under(tmp_path) == []


def test_a_log_manager_hosts_far_more_logs_than_its_segment_file_bound(tmp_path: Path) -> None:
    """300 logs, every one appended to and read back, under a bound of 16 descriptors: the active
    segments go through the cache as well, so a replica holds no descriptor at rest."""
    root = tmp_path / "logs"
    manager = LogManager([root], LogConfig(), Clock(), segment_files_max=16)
    try:
        before = len(os.listdir("/proc/self/fd"))
        logs = [manager.get_or_create_log("t", p) for p in range(300)]
        for p, lg in enumerate(logs):
            lg.append_as_leader(batch(2, f"p{p}-", ts=1_000), leader_epoch=0)
        for p, lg in enumerate(logs):
            records = lg.read(0, 1 << 20).records
            assert f"p{p}-1".encode() in records
        assert len(fds_under(root)) <= 16 and index_fds(root) == []
        assert len(os.listdir("/proc/self/fd")) - before <= 16
        stats = manager.segment_file_stats
        assert stats.open <= 16 and stats.evictions >= 300 - 16 and stats.pinned == 0
    finally:
        manager.shutdown()
    assert fds_under(root) == []
    reloaded = LogManager([root], LogConfig(), Clock(), segment_files_max=16)
    try:
        reloaded.load_logs()  # a clean start: 300 logs loaded within the bound
        assert len(reloaded.all_logs()) == 300 and len(fds_under(root)) <= 16
        assert all(lg.log_end_offset == 2 for lg in reloaded.all_logs().values())
    finally:
        reloaded.shutdown()


# -- durability: what the recovery point covers has its indexes on disk ------------------------


def test_index_entries_reach_the_disk_with_the_flush_that_moves_the_recovery_point(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=0)
    lg = Log.open(tmp_path / "t-0", config, Clock())
    try:
        for i in range(3):
            lg.append_as_leader(batch(2, f"a{i}", ts=1_000 * (i + 1)), leader_epoch=0)
        segment = lg.active_segment
        assert lg.recovery_point == 0 and segment.index.pending_entries == 2
        assert (
            on_disk(segment.index.path, OFFSET_ENTRY) == []
            and on_disk(segment.time_index.path, TIME_ENTRY) == []
        )
        lg.flush()
        assert lg.recovery_point == 6 and segment.index.pending_entries == 0
        assert [rel for rel, _ in on_disk(segment.index.path, OFFSET_ENTRY)] == [3, 5]
        assert [ts for ts, _ in on_disk(segment.time_index.path, TIME_ENTRY)] == [1_001, 2_001, 3_001]
        lg.roll()  # the roll's flush-log job (run at once: a log on its own) writes the rest
        lg.append_as_leader(batch(2, "b", ts=9_000), leader_epoch=0)
        assert lg.recovery_point == 6
    finally:
        lg.close()


def test_after_an_unclean_stop_recovery_rebuilds_the_indexes_past_the_recovery_point(tmp_path: Path) -> None:
    """A crash leaves the active segment's index entries only in the dead process's memory (and
    the rolled segments' when their flush had not run): the unclean load re-scans from the
    recovery point and rebuilds them; after its flush the files equal a clean run's."""
    config = LogConfig(segment_bytes=300, index_interval_bytes=0)
    appends = [batch(3, f"v{i}", ts=1_000 * (i + 1)) for i in range(12)]

    def run(root: Path, crash: bool) -> dict[str, bytes]:
        jobs: list = []
        lg = Log.open(root / "t-0", config, Clock())
        lg.schedule_once = lambda name, job: jobs.append(job)  # the flusher never gets to run
        for records in appends:
            lg.append_as_leader(records, leader_epoch=0)
        assert len(lg.segments) >= 3
        if crash:
            lg.close(write_indexes=False)  # the process dies: nothing more is written
            reopened = Log.open(root / "t-0", config, Clock(), recovery_point=0, clean_shutdown=False)
        else:
            lg.close()
            reopened = Log.open(root / "t-0", config, Clock(), clean_shutdown=True)
        assert reopened.log_end_offset == 36
        assert reopened.offset_for_timestamp(5_000) == (12, 5_000)
        reopened.flush()
        reopened.close()
        return {
            p.name: p.read_bytes()
            for p in sorted((root / "t-0").iterdir())
            if p.suffix in (".index", ".timeindex")
        }

    crashed = run(tmp_path / "crashed", crash=True)
    clean = run(tmp_path / "clean", crash=False)
    assert crashed == clean and any(crashed.values())


def test_a_clean_load_whose_time_index_is_behind_the_log_rebuilds_it(tmp_path: Path) -> None:
    """A sanity check added with the in-memory indexes: a time index missing the last batches'
    entries (not written before a stop) would give a stale max timestamp to time retention."""
    config = LogConfig(index_interval_bytes=1 << 20)
    lg = Log.open(tmp_path / "t-0", config, Clock())
    lg.append_as_leader(batch(2, "a", ts=1_000), leader_epoch=0)
    lg.flush()
    lg.append_as_leader(batch(2, "b", ts=5_000), leader_epoch=0)
    lg.close(write_indexes=False)
    reopened = Log.open(tmp_path / "t-0", config, Clock(), clean_shutdown=True)
    try:
        assert reopened.active_segment.max_timestamp == 5_001
        assert reopened.offset_for_timestamp(5_000) == (2, 5_000)
    finally:
        reopened.close()


# -- the budget's arithmetic ------------------------------------------------------------------


def test_the_budget_reserves_a_quarter_and_gives_the_rest_to_the_segment_file_cache() -> None:
    assert FILES_PER_REPLICA == 0
    budget = file_budget(20_000)
    assert (budget.reserve, budget.segment_files, budget.max_replicas_by_files) == (5_000, 15_000, None)
    assert budget.max_replicas >= 10_000, "10,000 replicas per broker fit where 20,000 files are allowed"
    assert file_budget(20_000, max_partitions=10_000).max_replicas == 10_000
    assert segment_files_max(20_000, 4_000) == 4_000
    assert segment_files_max(20_000, 50_000) == 15_000, "an explicit bound never eats the reserve"
    assert file_budget(100).reserve == 64 and file_budget(100).segment_files == 36
    assert file_budget(64).segment_files == 1
    budget = current_budget(FakeResource(512, 512), 100, 800)
    assert (budget.open_files_limit, budget.reserve, budget.segment_files, budget.max_replicas) == (
        512,
        128,
        100,
        800,
    )
