"""The log cleaner's semantics (broker/log/cleaner.py, Kafka's LogCleaner 2.x; docs/design.md "Log
compaction") on hand-built segments in real files, with a fake clock and an inline executor:
the last value per key is kept, tombstones go only after delete.retention.ms, offsets and batch
boundaries are kept, every CRC is valid and kafka-python decodes exactly the expected records,
min.cleanable.dirty.ratio and the compaction lags are respected, compact,delete applies
retention too, the active segment and everything above the high watermark stay as they are,
and a full offset map cleans up to where it filled."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from broker.log.batch_filter import empty_batch, rebuild_batch
from broker.log.cleaner_config import CleanerConfig
from broker.log.cleaner_manager import CLEANER_CHECKPOINT
from broker.log.offset_map import OffsetMap
from broker.log.producer_snapshots import snapshot_files
from client.protocol.records import (
    TIMESTAMP_TYPE_MASK,
    build_batch,
    decode_batch,
    iter_batches,
    parse_header,
)
from tests.unit.cleaner_harness import (
    LEADER_EPOCH,
    Clock,
    append,
    cleaner_for,
    compact_config,
    headers,
    latest_per_key,
    open_log,
    oracle,
    write_keyed,
)


def expected_after_cleaning(before: list, keep_tombstones: bool = True) -> list:
    """The last (offset, key, value) of each key, in offset order."""
    last = latest_per_key(before)
    return sorted(
        (offset, key, value) for key, (offset, value) in last.items() if value is not None or keep_tombstones
    )


async def test_the_last_value_of_every_key_is_kept_with_its_offset(tmp_path: Path) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock)
    write_keyed(lg, clock, rounds=10, keys=7, per_batch=3)
    lg.roll()
    before = oracle(lg)
    old_batches = {(h.base_offset, h.last_offset): h for h in headers(lg)}
    size_before = lg.size_in_bytes
    assert len(lg.segments) > 4

    cleaner = cleaner_for(lg, clock)
    assert await cleaner.clean_filthiest_log()

    after = oracle(lg)
    assert after == expected_after_cleaning(before)
    assert lg.size_in_bytes < size_before
    # batch boundaries kept: each batch is an original batch (same base and last offsets, same
    # producer fields, the leader's epoch), its records a subset of the original's
    for h in headers(lg):
        original = old_batches[(h.base_offset, h.last_offset)]
        assert (h.partition_leader_epoch, h.producer_id, h.base_sequence) == (LEADER_EPOCH, -1, -1)
        assert h.record_count <= original.record_count
    # every segment still ends where the next begins (the last batch of each is kept)
    segments = lg.segments
    for segment, following in zip(segments, segments[1:], strict=False):
        assert segment.next_offset == following.base_offset
    # reads through the gaps see the same records
    offset, seen = 0, []
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        assert data
        for pos, h in iter_batches(data):
            seen += [(r.offset, r.key, r.value) for r in decode_batch(data[pos : pos + h.size])]
            offset = h.next_offset
    assert seen == after
    assert cleaner.stats.passes == 1 and cleaner.stats.bytes_written < cleaner.stats.bytes_read
    # the producer snapshots of the replaced segments went with them
    assert {offset for offset, _ in snapshot_files(lg.dir)} <= {s.base_offset for s in lg.segments}


async def test_the_checkpoint_is_kafkas_file_and_a_clean_log_is_not_cleaned_again(tmp_path: Path) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock)
    write_keyed(lg, clock, rounds=4, keys=5)
    lg.roll()
    cleaner = cleaner_for(lg, clock)
    assert await cleaner.clean_filthiest_log()
    end = lg.active_segment.base_offset
    assert (tmp_path / CLEANER_CHECKPOINT).read_text() == f"0\n1\nt 0 {end}\n"
    assert not await cleaner.clean_filthiest_log()  # nothing dirty: nothing done
    assert cleaner.stats.passes == 1


async def test_tombstones_stay_until_delete_retention_ms_past_the_cleaned_section(tmp_path: Path) -> None:
    clock = Clock()
    retention = 60_000
    config = compact_config(delete_retention_ms=retention, segment_bytes=500)
    lg = open_log(tmp_path / "t-0", clock, config)
    cleaner = cleaner_for(lg, clock)
    # a large first segment, so no group joins it to the later ones (a group takes the
    # last-modified time of its last segment: Kafka's cleaned.lastModified)
    append(lg, clock, [(b"pad", b"x" * 300), (b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    append(lg, clock, [(b"a", None), (b"c", b"2")])  # a deleted
    lg.roll()
    assert await cleaner.clean_filthiest_log()
    assert [k for _, k, _ in oracle(lg)] == [b"pad", b"b", b"a", b"c"]
    assert (b"a", None) in [(k, v) for _, k, v in oracle(lg)]

    # Kafka 2.x: the horizon is the last-modified time of the newest cleaned segment minus
    # delete.retention.ms; it passes the tombstone's segment only once data written more than
    # delete.retention.ms later has been cleaned too.
    clock.now += retention // 2
    append(lg, clock, [(b"d", b"1")])
    lg.roll()
    assert await cleaner.clean_filthiest_log()
    assert (b"a", None) in [(k, v) for _, k, v in oracle(lg)]

    clock.now += retention
    append(lg, clock, [(b"e", b"1")])
    lg.roll()
    assert await cleaner.clean_filthiest_log()
    assert (b"a", None) in [(k, v) for _, k, v in oracle(lg)]  # newest cleaned data still young
    append(lg, clock, [(b"f", b"1")])
    lg.roll()
    assert await cleaner.clean_filthiest_log()
    remaining = [(k, v) for _, k, v in oracle(lg)]
    assert (b"a", None) not in remaining
    assert [k for k, _ in remaining] == [b"pad", b"b", b"c", b"d", b"e", b"f"]


async def test_no_pass_below_min_cleanable_dirty_ratio(tmp_path: Path) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock, compact_config(min_cleanable_dirty_ratio=0.5))
    cleaner = cleaner_for(lg, clock)
    for k in range(40):  # 40 distinct keys: nothing to remove, the first pass only marks it clean
        append(lg, clock, [(b"k%d" % k, b"v")])
    lg.roll()
    assert await cleaner.clean_filthiest_log()
    clean_size = lg.size_in_bytes
    append(lg, clock, [(b"k0", b"w"), (b"k1", b"w")])
    lg.roll()
    files = {s.log_path.name: s.log_path.read_bytes() for s in lg.segments}
    assert not await cleaner.clean_filthiest_log()
    assert 0 < cleaner.manager.dirtiest_ratio <= 0.5
    assert {s.log_path.name: s.log_path.read_bytes() for s in lg.segments} == files

    while lg.size_in_bytes - clean_size <= clean_size:  # dirty bytes above half of the total
        append(lg, clock, [(b"k2", b"x"), (b"k3", b"x")])
    lg.roll()
    assert await cleaner.clean_filthiest_log()
    assert len([k for _, k, _ in oracle(lg) if k == b"k2"]) == 1


async def test_compact_delete_applies_retention_and_compact_alone_does_not(tmp_path: Path) -> None:
    for policy, survives in ((("compact",), True), (("delete", "compact"), False)):
        clock = Clock()
        lg = open_log(
            tmp_path / "-".join(policy) / "t-0",
            clock,
            compact_config(cleanup_policy=policy, retention_ms=1000),
        )
        write_keyed(lg, clock, rounds=3, keys=4)
        lg.roll()
        assert await cleaner_for(lg, clock).clean_filthiest_log()
        clock.now += 10_000
        deleted = lg.delete_old_segments()
        assert (deleted == 0) == survives
        assert bool(oracle(lg)) == survives


async def test_the_active_segment_and_the_section_above_the_high_watermark_are_never_cleaned(
    tmp_path: Path,
) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock, compact_config(segment_bytes=100_000))
    write_keyed(lg, clock, rounds=5, keys=2)  # all in the active segment
    cleaner = cleaner_for(lg, clock)
    active = lg.active_segment.log_path.read_bytes()
    assert not await cleaner.clean_filthiest_log()
    assert lg.active_segment.log_path.read_bytes() == active

    lg.roll()
    hw = lg.segments[0].base_offset + 4
    write_keyed(lg, clock, rounds=1, keys=2)
    lg.update_high_watermark(hw)  # a follower's lagging high watermark
    before = oracle(lg)
    assert await cleaner.clean_filthiest_log()
    after = oracle(lg)
    # only records below the HW were mapped: those at or above it all stay
    assert [r for r in after if r[0] >= hw] == [r for r in before if r[0] >= hw]
    assert (tmp_path / CLEANER_CHECKPOINT).read_text().endswith(f"t 0 {hw}\n")


async def test_a_full_offset_map_cleans_up_to_where_it_filled_and_the_next_pass_goes_on(
    tmp_path: Path,
) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock)
    write_keyed(lg, clock, rounds=3, keys=12, per_batch=3)
    lg.roll()
    before = oracle(lg)
    entries = 5
    dedupe = 24 * (entries + 1)  # 6 slots at Kafka's 0.9 load factor: 5 keys
    cleaner = cleaner_for(lg, clock, dedupe_buffer_size=dedupe)
    assert cleaner._offset_map.max_entries == entries
    assert await cleaner.clean_filthiest_log()
    first_end = cleaner.manager.checkpoints.get(tmp_path, ("t", 0))
    assert first_end is not None and 0 < first_end < lg.active_segment.base_offset
    passes = 1
    while await cleaner.clean_filthiest_log():
        passes += 1
    assert passes > 2
    assert cleaner.manager.checkpoints.get(tmp_path, ("t", 0)) == lg.active_segment.base_offset
    assert oracle(lg) == expected_after_cleaning(before)


async def test_min_and_max_compaction_lag(tmp_path: Path) -> None:
    clock = Clock()
    lag = 60_000
    lg = open_log(tmp_path / "t-0", clock, compact_config(min_compaction_lag_ms=lag))
    write_keyed(lg, clock, rounds=3, keys=3)
    lg.roll()
    cleaner = cleaner_for(lg, clock)
    assert not await cleaner.clean_filthiest_log()  # every record younger than the lag
    clock.now += lag + 1
    assert await cleaner.clean_filthiest_log()

    # KIP-354: a ratio never reached, but the oldest dirty segment is past max.compaction.lag.ms
    clock2 = Clock()
    lg2 = open_log(
        tmp_path / "u-0", clock2, compact_config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=lag)
    )
    assert lg2.config.max_segment_ms == lag
    write_keyed(lg2, clock2, rounds=3, keys=3)
    lg2.roll()
    cleaner2 = cleaner_for(lg2, clock2)
    assert not await cleaner2.clean_filthiest_log()
    clock2.now += lag + 1
    assert await cleaner2.clean_filthiest_log()
    assert cleaner2.manager.max_compaction_delay_ms > 0


async def test_keyless_records_long_keys_and_compressed_batches(tmp_path: Path) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock)
    long_key = b"L" * 40  # mapped by its digest
    append(lg, clock, [(None, b"keyless"), (b"a", b"1"), (long_key, b"1")], compression="gzip")
    append(lg, clock, [(b"a", b"2"), (long_key, b"2")], compression="gzip")
    lg.roll()
    assert await cleaner_for(lg, clock).clean_filthiest_log()
    assert oracle(lg) == [(0, None, b"keyless"), (3, b"a", b"2"), (4, long_key, b"2")]


def test_a_rebuilt_batch_keeps_its_identity_and_an_empty_one_decodes() -> None:
    buf = bytearray(
        build_batch(
            [(b"a", b"1", 100, []), (b"b", b"2", 300, [("h", b"x")]), (b"c", b"3", 200, [])],
            base_offset=40,
            producer_id=7,
            producer_epoch=2,
            base_sequence=11,
        )
    )
    header = parse_header(buf)
    records = decode_batch(buf)
    kept = parse_header(rebuilt := rebuild_batch(header, [records[0], records[1]]))
    assert (
        kept.base_offset,
        kept.last_offset,
        kept.producer_id,
        kept.producer_epoch,
        kept.base_sequence,
    ) == (
        40,
        42,
        7,
        2,
        11,
    )
    assert (kept.record_count, kept.max_timestamp, kept.last_sequence) == (2, 300, header.last_sequence)
    assert [(r.offset, r.key, r.headers) for r in decode_batch(rebuilt)] == [
        (40, b"a", ()),
        (41, b"b", (("h", b"x"),)),
    ]
    list(iter_batches(rebuilt, check_crc=True))
    # LogAppendTime keeps the batch's max timestamp
    appended = dataclasses.replace(header, attributes=header.attributes | TIMESTAMP_TYPE_MASK)
    log_append = parse_header(rebuild_batch(appended, records[:1]))
    assert log_append.max_timestamp == 300 and log_append.attributes & TIMESTAMP_TYPE_MASK
    assert parse_header(rebuild_batch(header, records[:1])).max_timestamp == 100  # CreateTime: the kept
    empty = empty_batch(header)
    eh = parse_header(empty)
    assert (eh.record_count, eh.last_offset, eh.base_sequence, eh.max_timestamp) == (0, 42, 11, 300)
    assert list(iter_batches(empty, check_crc=True))
    assert decode_batch(empty) == []


def test_cleaner_config_map_entries() -> None:
    assert CleanerConfig().max_map_entries == int(134217728 // 24 * 0.9)
    assert CleanerConfig(num_threads=2, dedupe_buffer_size=2400).max_map_entries == 45


def test_the_offset_map_bounds_its_keys_and_maps_long_keys_by_digest() -> None:
    offset_map = OffsetMap(2)
    long_a, long_b = b"a" * 100, b"a" * 99 + b"b"
    assert offset_map.put(long_a, 1) and offset_map.put(b"short", 2)
    assert offset_map.put(long_a, 3)  # a known key when full: updated
    assert not offset_map.put(long_b, 4)  # a new one: refused, nothing mapped
    assert (offset_map.get(long_a), offset_map.get(b"short"), offset_map.get(long_b)) == (3, 2, -1)
    assert offset_map.latest_offset == 3 and offset_map.is_full
