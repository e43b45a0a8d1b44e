"""The log cleaner's swap and what must survive it (broker/log/log_cleaning.py, cleaner.py,
log_loader.py's complete_swaps; docs/design.md "Log compaction"): a crash between ``.cleaned``
and ``.swap`` or between ``.swap`` and the replacement recovers to a consistent log on load; a
cleaned log survives an unclean restart's re-scan (no segment taken for a torn tail); the abort
window (the log truncated, its segments deleted by retention, or closed while the pass ran in the
executor) discards the pass and loses nothing; an idempotent producer's state survives cleaning
and a reload, and a retry of its last batch is still a duplicate after a reload that replays the
segments' headers."""

from __future__ import annotations

import errno
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker.log import Log, log_cleaning
from broker.log.cleaner import LogCleaner
from broker.log.cleaner_config import CleanerConfig
from broker.log.cleaner_manager import CLEANER_CHECKPOINT
from broker.log.cleaner_pass import (
    PassStats,
    SegmentReader,
    build_offset_map,
    clean_group,
    delete_horizon_ms,
    group_segments_by_size,
)
from broker.log.log_cleaning import CLEANED_SUFFIX, SWAP_SUFFIX, rename_segment_files, swap_in
from broker.log.offset_map import OffsetMap
from broker.log.producer_snapshots import snapshot_files
from broker.log.segment import LogSegment
from client.protocol.records import build_batch
from tests.unit.cleaner_harness import (
    LEADER_EPOCH,
    Clock,
    InlineExecutor,
    append,
    cleaner_for,
    compact_config,
    headers,
    latest_per_key,
    open_log,
    oracle,
    write_keyed,
)

PID = 9001


def no_check() -> None:
    return None


def cleaned_copy(lg: Log, clock: Clock) -> tuple[LogSegment, list[LogSegment]]:
    """Run the off-loop half of a pass by hand: the ``.cleaned`` segment of the first group and
    the segments it replaces, not swapped."""
    view = lg.cleaning_view()
    readers = [SegmentReader(s) for s in view.segments[:-1]]
    try:
        offset_map = OffsetMap(1000)
        end = view.active.base_offset
        assert not _drive(build_offset_map(readers, offset_map, 0, end, 4096, PassStats(), no_check))
        group = group_segments_by_size([r.view for r in readers], 10_000, 10_000)[0]
        assert len(group) > 1
        work = clean_group(
            view,
            readers[: len(group)],
            offset_map,
            delete_horizon_ms(view, 0),
            clock,
            4096,
            PassStats(),
            no_check,
        )
        return _drive(work), [s.segment for s in group]
    finally:
        for reader in readers:
            reader.close()


def _drive(work):
    while True:
        try:
            next(work)
        except StopIteration as stop:
            return stop.value


def dirty_log(dir: Path, clock: Clock) -> Log:
    lg = open_log(dir, clock)
    write_keyed(lg, clock, rounds=6, keys=5, per_batch=3)
    lg.roll()
    return lg


@pytest.mark.parametrize(
    "crash_at", ["cleaned", "swap", "swap-first-old-deleted", "swap-all-old-deleted", "log-renamed"]
)
def test_a_crash_during_the_swap_recovers_to_a_consistent_log(tmp_path: Path, crash_at: str) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    before, end = oracle(lg), lg.log_end_offset
    cleaned, old = cleaned_copy(lg, clock)
    expected_clean = sorted(
        (o, k, v) for k, (o, v) in latest_per_key([r for r in before if r[0] < cleaned.next_offset]).items()
    ) + [r for r in before if r[0] >= cleaned.next_offset]
    if crash_at != "cleaned":
        rename_segment_files(cleaned, CLEANED_SUFFIX, SWAP_SUFFIX)
    if crash_at in ("swap-first-old-deleted", "swap-all-old-deleted", "log-renamed"):
        for segment in old if crash_at != "swap-first-old-deleted" else old[:1]:
            segment.delete()
    if crash_at == "log-renamed":
        cleaned.log_path.rename(cleaned.log_path.with_name(cleaned.log_path.name.removesuffix(SWAP_SUFFIX)))
    cleaned.close()
    lg.close()

    for clean_shutdown in (True, False):
        copy = tmp_path / f"copy-{clean_shutdown}" / "t-0"
        shutil.copytree(lg.dir, copy)
        reopened = Log.open(copy, lg.config, clock, recovery_point=end, clean_shutdown=clean_shutdown)
        names = {p.name for p in copy.iterdir()}
        assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
        assert reopened.log_end_offset == end
        assert oracle(reopened) == (before if crash_at == "cleaned" else expected_clean)
        append(reopened, clock, [(b"after", b"1")])  # the log goes on
        assert reopened.read(0, 1 << 20).records
        reopened.close()


def test_a_cleaned_log_survives_an_unclean_restart_that_rescans_every_segment(tmp_path: Path) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    append(lg, clock, [(b"k0", b"last")])  # the last batch of a segment superseded...
    lg.roll()
    append(lg, clock, [(b"k0", b"later")])  # ...by a later one
    lg.roll()
    assert await_clean(lg, clock)
    after, end = oracle(lg), lg.log_end_offset
    lg.close()
    # recovery point 0 and no clean shutdown: every segment is re-scanned; a cleaned segment
    # ends where the next begins, so none looks like a torn tail
    reopened = Log.open(lg.dir, lg.config, clock, recovery_point=0, clean_shutdown=False)
    assert (reopened.log_end_offset, oracle(reopened)) == (end, after)


def await_clean(lg: Log, clock: Clock) -> bool:
    import asyncio

    return asyncio.run(cleaner_for(lg, clock).clean_filthiest_log())


@pytest.mark.parametrize("change", ["truncate", "retention", "close", "delete"])
async def test_the_abort_window_discards_the_pass_and_loses_nothing(tmp_path: Path, change: str) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    before = oracle(lg)
    truncate_at = lg.segments[-2].base_offset + 1  # inside the dirty section, above the first group
    changed = []

    def meanwhile(result) -> None:
        done, value = (result[0], result[1]) if result else (False, None)
        if not (done and isinstance(value, LogSegment)) or changed:
            return
        # the cleaned segment is written, not yet swapped: the broker acts now
        assert value.log_path.name.endswith(CLEANED_SUFFIX)
        changed.append(value.log_path)
        if change == "truncate":
            lg.truncate_to(truncate_at)
        elif change == "retention":
            lg.maybe_increment_log_start_offset(lg.segments[1].base_offset)
            assert lg.delete_old_segments() >= 1
        elif change == "close":
            lg.close()
        else:
            lg.delete()

    cleaner = cleaner_for(lg, clock, executor=InlineExecutor(meanwhile))
    assert not await cleaner.clean_filthiest_log()
    assert changed and cleaner.stats.aborted_passes == 1 and cleaner.stats.passes == 0
    assert not changed[0].exists() and not any(p.name.endswith(CLEANED_SUFFIX) for p in tmp_path.rglob("*"))
    assert not (tmp_path / CLEANER_CHECKPOINT).exists()
    assert not cleaner.manager.in_progress and not cleaner.manager.uncleanable
    if change == "truncate":
        assert oracle(lg) == [r for r in before if r[0] < lg.log_end_offset]
        assert lg.log_end_offset <= truncate_at
    elif change == "retention":
        assert oracle(lg) == [r for r in before if r[0] >= lg.log_start_offset]
    elif change == "close":
        assert oracle(Log.open(lg.dir, lg.config, clock)) == before
    else:
        assert not lg.dir.exists()
    if change in ("truncate", "retention"):  # the next pass cleans
        assert await cleaner_for(lg, clock).clean_filthiest_log()


async def test_idempotent_producer_state_survives_cleaning_and_reload(tmp_path: Path) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock)
    append(lg, clock, [(b"a", b"p0"), (b"b", b"p0")], producer=(PID, 0, 0))
    append(lg, clock, [(b"x", b"p1"), (b"y", b"p1")], producer=(PID, 0, 2))  # the producer's last batch
    append(lg, clock, [(b"a", b"2"), (b"b", b"2"), (b"x", b"2"), (b"y", b"2")])  # supersedes both
    lg.roll()
    last = headers(lg)[1]
    state_before = lg.producer_state.copy()
    assert await cleaner_for(lg, clock).clean_filthiest_log()

    kept = {(h.base_offset, h.last_offset): h for h in headers(lg)}
    assert (0, 1) not in kept  # an emptied batch of the producer goes
    empty = kept[(last.base_offset, last.last_offset)]  # its last batch stays, empty
    assert (empty.record_count, empty.producer_id, empty.producer_epoch, empty.base_sequence) == (
        0,
        PID,
        0,
        2,
    )
    assert empty.partition_leader_epoch == LEADER_EPOCH
    assert [(k, v) for _, k, v in oracle(lg)] == [(b"a", b"2"), (b"b", b"2"), (b"x", b"2"), (b"y", b"2")]
    assert lg.producer_state.producers == state_before.producers

    lg.close()
    reopened = open_log(lg.dir, clock)  # from the snapshots
    assert reopened.producer_state.producers == state_before.producers
    reopened.close()
    for _, path in snapshot_files(lg.dir):  # rebuilt from the segments' headers alone
        path.unlink()
    rebuilt = open_log(lg.dir, clock, recovery_point=0)
    entry = rebuilt.producer_state.last_entry(PID)
    assert entry is not None and entry.batches[-1] == state_before.last_entry(PID).batches[-1]
    retry = build_batch(
        [(b"x", b"p1", clock.now, []), (b"y", b"p1", clock.now, [])],
        producer_id=PID,
        producer_epoch=0,
        base_sequence=2,
    )
    info = rebuilt.append_as_leader(retry, leader_epoch=LEADER_EPOCH)
    assert info.duplicate and (info.first_offset, info.last_offset) == (last.base_offset, last.last_offset)
    next_batch = build_batch(
        [(b"z", b"p2", clock.now, [])], producer_id=PID, producer_epoch=0, base_sequence=4
    )
    assert not rebuilt.append_as_leader(next_batch, leader_epoch=LEADER_EPOCH).duplicate


async def test_a_truncation_below_the_checkpoint_lowers_it_and_a_deleted_log_loses_it(tmp_path: Path) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    cleaner = cleaner_for(lg, clock)
    assert await cleaner.clean_filthiest_log()
    checkpoints = cleaner.manager.checkpoints
    assert checkpoints.get(tmp_path, ("t", 0)) == lg.active_segment.base_offset
    lg.checkpoint_after_truncation = cleaner.after_truncation
    lg.truncate_to(lg.segments[-2].base_offset + 1)
    assert checkpoints.get(tmp_path, ("t", 0)) == lg.active_segment.base_offset
    assert (tmp_path / CLEANER_CHECKPOINT).read_text().endswith(f"t 0 {lg.active_segment.base_offset}\n")
    cleaner.forget(lg)
    assert (tmp_path / CLEANER_CHECKPOINT).read_text() == "0\n0\n"


def test_swap_in_replaces_the_files_and_keeps_descriptors(tmp_path: Path) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    cleaned, old = cleaned_copy(lg, clock)
    swap_in(lg.dir, cleaned, old)
    assert cleaned.log_path.name == f"{cleaned.base_offset:020d}.log"
    assert cleaned.index.path.name.endswith(".index") and cleaned.time_index.path.name.endswith(".timeindex")
    assert cleaned.read(cleaned.base_offset, 1 << 20, None, True)
    assert not [p for p in lg.dir.iterdir() if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
    cleaned.close()


def test_the_cleaned_segment_keeps_the_last_modified_time_of_its_group(tmp_path: Path) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    cleaned, old = cleaned_copy(lg, clock)
    assert cleaned.last_modified_ms == old[-1].last_modified_ms
    assert cleaned.log_path.stat().st_mtime_ns // 1_000_000 == old[-1].last_modified_ms
    cleaned.delete()


def test_writes_keep_going_while_a_pass_is_aborted_by_a_config_change(tmp_path: Path) -> None:
    """A log whose policy changed to delete is no longer chosen."""
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    lg.update_config(compact_config(cleanup_policy=("delete",)))
    assert cleaner_for(lg, clock).manager.grab_filthiest_compacted_log() is None


def test_a_compacted_followers_gapped_segments_survive_an_unclean_restart(tmp_path: Path) -> None:
    """A follower of a cleaned log rolls at the first offset of a fetched batch, past a gap: its
    segments end short of the next base, which for a compacted log is not a torn tail."""
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock, compact_config(segment_bytes=200))
    for base in (0, 10, 20, 30, 40):
        lg.append_as_follower(build_batch([(b"k%d" % base, b"x" * 60, clock.now, [])], base_offset=base))
    segments = lg.segments
    assert [s.base_offset for s in segments] == [0, 10, 20, 30, 40]
    assert all(s.next_offset < f.base_offset for s, f in zip(segments, segments[1:], strict=False))
    end, records = lg.log_end_offset, oracle(lg)
    lg.close()
    reopened = Log.open(lg.dir, lg.config, clock, recovery_point=0, clean_shutdown=False)
    assert (reopened.log_end_offset, oracle(reopened)) == (end, records)


async def test_a_swap_that_fails_part_way_takes_the_dir_offline_and_the_loader_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    before = oracle(lg)
    real = log_cleaning.rename_segment_files

    def fail_the_last_rename(segment: LogSegment, old: str, new: str) -> None:
        if new == "":  # the old segments are gone, the cleaned one is still .swap
            raise OSError(errno.EIO, "injected")
        real(segment, old, new)

    monkeypatch.setattr(log_cleaning, "rename_segment_files", fail_the_last_rename)
    cleaner = cleaner_for(lg, clock)
    assert not await cleaner.clean_filthiest_log()
    assert lg.is_offline and cleaner.stats.aborted_passes == 1
    assert [p.name for p in lg.dir.glob("*.log.swap")]
    lg.close()
    monkeypatch.undo()
    reopened = Log.open(lg.dir, lg.config, clock)
    records = oracle(reopened)
    assert set(records) < set(before) and latest_per_key(records) == latest_per_key(before)
    assert reopened.log_end_offset == lg.log_end_offset


async def test_a_pass_in_real_threads_and_a_shutdown_in_the_middle_of_one(tmp_path: Path) -> None:
    clock = Clock()
    lg = dirty_log(tmp_path / "t-0", clock)
    before = oracle(lg)
    with ThreadPoolExecutor(1) as executor:
        assert await cleaner_for(lg, clock, executor=executor).clean_filthiest_log()
        assert latest_per_key(oracle(lg)) == latest_per_key(before)

        other = dirty_log(tmp_path / "u-0", clock)
        other_before = oracle(other)
        naps: list[float] = []

        async def nap_then_stop(seconds: float) -> None:
            naps.append(seconds)
            cleaner.shutdown()  # between two steps: the next one refuses to start

        cleaner = LogCleaner(
            CleanerConfig(max_io_bytes_per_second=1000.0, io_buffer_size=1024),
            lambda: {("u", 0): other},
            clock,
            other.failure_channel,
            executor,
            nap_then_stop,
        )
        assert not await cleaner.clean_filthiest_log()
    assert naps and cleaner.stats.aborted_passes == 1
    assert not [p for p in other.dir.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
    assert latest_per_key(oracle(other)) == latest_per_key(other_before)
