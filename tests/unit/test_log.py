"""The partition log (SPEC 5.3): offsets, reads, validation, truncation, rolls, retention,
timestamp lookup, flushing and follower appends, all with a fake clock."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker.log import EpochEntry, Log, LogConfig
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch, decode_records, iter_batches, parse_header


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(values: list[bytes], ts: int | list[int] = 1_000, compression: str = "none") -> bytes:
    stamps = ts if isinstance(ts, list) else [ts] * len(values)
    return build_batch(
        [(None, v, t, []) for v, t in zip(values, stamps, strict=True)], compression=compression
    )


def vals(n: int, tag: str = "v") -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


def contents(records: bytes) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for _, r in decode_records(records)]


def base_offsets(records: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(records)]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def open_log(tmp_path: Path, clock: Clock, name: str = "topic-0", **config) -> Log:
    return Log.open(tmp_path / name, LogConfig(**config), clock)


def test_directory_name_gives_topic_and_partition(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, name="my.dotted-topic-name-12")
    assert (log.topic, log.partition) == ("my.dotted-topic-name", 12)
    with pytest.raises(ValueError):
        open_log(tmp_path, clock, name="no_partition")


def test_append_assigns_offsets_across_appends(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    infos = [log.append_as_leader(batch(vals(n)), leader_epoch=3) for n in (3, 1, 5)]
    assert [(i.first_offset, i.last_offset, i.num_records) for i in infos] == [
        (0, 2, 3),
        (3, 3, 1),
        (4, 8, 5),
    ]
    assert log.log_end_offset == 9
    assert [h.base_offset for h in infos[2].batches] == [4]
    assert infos[2].batches[0].partition_leader_epoch == 3
    assert infos[0].valid_bytes == len(batch(vals(3)))
    data = log.read(0, 1 << 20).records
    assert base_offsets(data) == [0, 3, 4]
    assert all(h.partition_leader_epoch == 3 for _, h in iter_batches(data))  # CRC still valid too
    assert [o for o, _ in contents(data)] == list(range(9))
    assert log.leader_epoch_cache.entries == [EpochEntry(3, 0)]


def test_several_batches_in_one_append(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    info = log.append_as_leader(batch(vals(2), ts=5) + batch(vals(3), ts=9) + batch(vals(1), ts=7), 0)
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 5, 6)
    assert [h.base_offset for h in info.batches] == [0, 2, 5]
    assert (info.max_timestamp, info.offset_of_max_timestamp) == (9, 4)


def test_append_info_timestamps(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    info = log.append_as_leader(batch(vals(3), ts=[10, 30, 20]), 0)
    assert info.max_timestamp == 30
    assert info.offset_of_max_timestamp == 2  # the batch's last offset: records are not decoded


def test_read_from_a_middle_offset_returns_the_containing_batch(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    for _ in range(4):
        log.append_as_leader(batch(vals(5)), 0)
    fetched = log.read(12, 1 << 20)
    assert fetched.fetch_offset == 12
    assert base_offsets(fetched.records) == [10, 15]
    assert contents(fetched.records)[0] == (10, b"v0")


def test_read_respects_max_bytes_with_whole_batches(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    one = batch(vals(5))
    for _ in range(6):
        log.append_as_leader(one, 0)
    assert base_offsets(log.read(0, int(2.5 * len(one))).records) == [0, 5]
    assert base_offsets(log.read(0, 2 * len(one)).records) == [0, 5]
    assert base_offsets(log.read(7, 3 * len(one) - 1).records) == [5, 10]


def test_min_one_message(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(5)), 0)
    log.append_as_leader(batch(vals(5)), 0)
    assert base_offsets(log.read(0, 10, min_one_message=True).records) == [0]
    assert log.read(0, 10, min_one_message=False).records == b""
    assert log.read(0, 0, min_one_message=False).records == b""


def test_max_offset_is_an_exclusive_bound(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    for n in (3, 2, 3):  # batches [0-2] [3-4] [5-7]
        log.append_as_leader(batch(vals(n)), 0)
    assert base_offsets(log.read(0, 1 << 20, max_offset=5).records) == [0, 3]
    assert base_offsets(log.read(3, 1 << 20, max_offset=5).records) == [3]
    assert log.read(5, 1 << 20, max_offset=5).records == b""
    assert log.read(0, 1 << 20, max_offset=0).records == b""
    assert base_offsets(log.read(0, 1 << 20, max_offset=8).records) == [0, 3, 5]


def test_offset_out_of_range(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(3)), 0)
    assert log.read(3, 1 << 20).records == b""  # at the LEO: nothing yet, not an error
    for bad in (4, 100, -1):
        with pytest.raises(KafkaError) as info:
            log.read(bad, 1 << 20)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_message_too_large_writes_nothing(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, max_message_bytes=300)
    small = batch([b"x"])
    big = batch([b"y" * 400])
    for records in (big, small + big):
        with pytest.raises(KafkaError) as info:
            log.append_as_leader(records, 0)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0
    assert log.size_in_bytes == 0
    assert log.leader_epoch_cache.entries == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "empty", "second_batch"])
def test_corrupt_input_is_rejected_and_nothing_written(tmp_path: Path, clock: Clock, damage: str):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(2)), 0)
    size_before = log.size_in_bytes
    good = batch(vals(4))
    records = bytearray(good)
    if damage == "flip":
        records[-3] ^= 0x40
    elif damage == "truncate":
        records = records[:-5]
    elif damage == "magic":
        records[16] = 1
    elif damage == "empty":
        records = bytearray()
    else:
        tail = bytearray(good)
        tail[-1] ^= 0x01
        records = bytearray(good) + tail
    with pytest.raises(KafkaError) as info:
        log.append_as_leader(bytes(records), 0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 2
    assert log.size_in_bytes == size_before


def test_truncate_within_a_segment(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(3)), 1)
    log.append_as_leader(batch(vals(3)), 2)
    log.append_as_leader(batch(vals(3)), 3)
    log.update_high_watermark(9)
    log.truncate_to(6)
    assert log.log_end_offset == 6
    assert log.high_watermark == 6
    assert log.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 3)]
    assert base_offsets(log.read(0, 1 << 20).records) == [0, 3]
    info = log.append_as_leader(batch([b"new"]), 4)
    assert info.first_offset == 6
    assert contents(log.read(6, 1 << 20).records) == [(6, b"new")]
    assert log.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 3), EpochEntry(4, 6)]


def test_truncate_to_the_middle_of_a_batch_removes_the_whole_batch(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(3)), 0)
    log.append_as_leader(batch(vals(3)), 0)
    log.truncate_to(4)
    assert log.log_end_offset == 3
    log.truncate_to(10)  # at or beyond the LEO: no-op
    assert log.log_end_offset == 3


def test_truncate_across_segments(tmp_path: Path, clock: Clock):
    one = batch(vals(2))
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one))
    for epoch in range(1, 9):
        log.append_as_leader(one, epoch)  # 8 batches, 4 segments of 2 batches
    assert [s.base_offset for s in log.segments] == [0, 4, 8, 12]
    files_before = {p.name for p in log.dir.iterdir()}
    log.truncate_to(6)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert log.log_end_offset == 6
    assert {p.name for p in log.dir.iterdir()} == files_before - {
        f"{b:020d}.{ext}" for b in (8, 12) for ext in ("log", "index", "timeindex", "snapshot")
    }  # the producer snapshots written at the rolls to 8 and 12 go with those segments (SPEC 5.4)
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [1, 2, 3]
    assert log.append_as_leader(one, 9).first_offset == 6
    assert [o for o, _ in contents(log.read(4, 1 << 20).records)] == [4, 5, 6, 7]
    log.truncate_to(0)
    assert log.log_end_offset == 0
    assert log.leader_epoch_cache.entries == []
    assert log.read(0, 100).records == b""


def test_truncate_fully_and_start_at(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(5)), 2)
    log.update_high_watermark(5)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (
        100,
        100,
        100,
        100,
    )
    assert [s.base_offset for s in log.segments] == [100]
    assert log.leader_epoch_cache.entries == []
    with pytest.raises(KafkaError):
        log.read(0, 100)
    assert log.append_as_leader(batch([b"a"]), 3).first_offset == 100


def test_roll_on_size(tmp_path: Path, clock: Clock):
    one = batch(vals(4))
    log = open_log(tmp_path, clock, segment_bytes=3 * len(one))
    for _ in range(7):
        log.append_as_leader(one, 0)
    assert [s.base_offset for s in log.segments] == [0, 12, 24]
    assert all(s.size <= 3 * len(one) for s in log.segments)
    assert (log.dir / "00000000000000000012.log").exists()
    assert [o for o, _ in contents(log.read(10, 1 << 20).records)] == [8, 9, 10, 11]


def test_roll_on_age(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, segment_ms=1_000)
    clock.advance(5_000)  # an empty segment never rolls on age
    log.append_as_leader(batch([b"a"]), 0)
    assert len(log.segments) == 1
    clock.advance(1_000)
    log.append_as_leader(batch([b"b"]), 0)
    assert len(log.segments) == 1  # exactly segment.ms old: not yet
    clock.advance(1)
    log.append_as_leader(batch([b"c"]), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(500)
    log.append_as_leader(batch([b"d"]), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_the_index_is_full(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, segment_index_bytes=24, index_interval_bytes=0)
    for i in range(6):
        log.append_as_leader(batch([b"x"], ts=1_000 + i), 0)
    assert len(log.segments) > 1
    assert all(len(s.time_index) <= 2 for s in log.segments)
    assert [contents(log.read(o, 1 << 20).records)[0][0] for o in range(6)] == list(range(6))


def test_explicit_roll(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.roll()  # empty active segment: nothing to do
    assert len(log.segments) == 1
    log.append_as_leader(batch(vals(2)), 0)
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.append_as_leader(batch([b"z"]), 0).first_offset == 2


def fill_segments(log: Log, clock: Clock, count: int, per_segment: int = 2) -> None:
    """``count`` segments of ``per_segment`` single-batch appends, timestamps from the clock."""
    for _ in range(count):
        for _ in range(per_segment):
            log.append_as_leader(batch(vals(2), ts=clock()), 0)
            clock.advance(1_000)
        log.roll()


def test_retention_by_time(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, retention_ms=10_000)
    fill_segments(log, clock, count=5)  # segments at 0, 4, 8, 12, 16; each spans 2 s of timestamps
    log.append_as_leader(batch(vals(2), ts=clock()), 0)
    clock.advance(5_000)
    assert log.delete_old_segments() == 0  # high watermark 0: nothing can go
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_old_segments()
    # now = start + 15 s; segments whose largest timestamp is more than 10 s old: 0 and 4
    assert deleted == 2
    assert [s.base_offset for s in log.segments] == [8, 12, 16, 20]
    assert log.log_start_offset == 8
    with pytest.raises(KafkaError) as info:
        log.read(7, 1 << 20)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert base_offsets(log.read(8, 1 << 20).records)[0] == 8
    assert not (log.dir / "00000000000000000000.log").exists()


def test_retention_never_deletes_at_or_above_the_high_watermark(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, retention_ms=1)
    fill_segments(log, clock, count=4)  # segments 0, 4, 8, 12 and an empty active one at 16
    clock.advance(100_000)
    log.update_high_watermark(9)  # inside segment 8
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [8, 12, 16]
    assert log.log_start_offset == 8


def test_retention_of_a_fully_expired_log_keeps_an_empty_active_segment(tmp_path: Path, clock: Clock):
    """Kafka's rule: every segment wholly below the HW may expire, the active one too (a new
    empty one is rolled first); an empty active segment is never deleted."""
    log = open_log(tmp_path, clock, retention_ms=1_000)
    log.append_as_leader(batch(vals(3), ts=clock()), 0)
    log.update_high_watermark(3)
    clock.advance(10_000)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [3]
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert log.delete_old_segments() == 0
    assert log.append_as_leader(batch([b"x"], ts=clock()), 0).first_offset == 3


def test_retention_by_size(tmp_path: Path, clock: Clock):
    one = batch(vals(2))
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one), retention_bytes=5 * len(one), retention_ms=-1)
    for _ in range(9):
        log.append_as_leader(one, 0)  # segments of 2 batches: 0, 4, 8, 12 and 16 (1 batch)
    log.update_high_watermark(log.log_end_offset)
    assert log.size_in_bytes == 9 * len(one)
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [8, 12, 16]
    assert log.size_in_bytes == 5 * len(one)
    assert log.log_start_offset == 8
    assert log.delete_old_segments() == 0


def test_log_start_offset_moves_within_the_high_watermark(tmp_path: Path, clock: Clock):
    one = batch(vals(2))
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one), retention_ms=-1)
    for epoch in (1, 1, 2, 2, 3):
        log.append_as_leader(one, epoch)
    with pytest.raises(KafkaError) as info:
        log.maybe_increment_log_start_offset(5)  # above the HW
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.update_high_watermark(10)
    log.maybe_increment_log_start_offset(5)
    log.maybe_increment_log_start_offset(2)  # backwards: ignored
    assert log.log_start_offset == 5
    assert log.leader_epoch_cache.entries == [EpochEntry(2, 5), EpochEntry(3, 8)]
    assert log.delete_old_segments() == 1  # segment 0..3 lies wholly below the start offset
    assert [s.base_offset for s in log.segments] == [4, 8]
    assert log.log_start_offset == 5
    with pytest.raises(KafkaError):
        log.read(4, 1 << 20)


def test_update_high_watermark_clamps(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    assert log.high_watermark == 0
    log.append_as_leader(batch(vals(4)), 0)
    assert log.update_high_watermark(100) == 4
    assert log.update_high_watermark(2) == 2
    assert log.update_high_watermark(-5) == 0
    assert log.high_watermark == 0


def test_offset_for_timestamp(tmp_path: Path, clock: Clock):
    one = batch(vals(3), ts=[0, 0, 0])
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one) + 10, retention_ms=-1)
    log.append_as_leader(batch(vals(3), ts=[100, 110, 120]), 0)  # 0-2
    log.append_as_leader(batch(vals(3), ts=[130, 125, 140]), 0)  # 3-5
    log.append_as_leader(batch(vals(3), ts=[150, 160, 170]), 0)  # 6-8, second segment
    log.append_as_leader(batch(vals(3), ts=[90, 95, 180], compression="gzip"), 0)  # 9-11
    assert [s.base_offset for s in log.segments][:2] == [0, 6]  # the lookup crosses segments
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(105) == (1, 110)
    assert log.offset_for_timestamp(121) == (3, 130)
    assert log.offset_for_timestamp(126) == (3, 130)
    assert log.offset_for_timestamp(135) == (5, 140)
    assert log.offset_for_timestamp(141) == (6, 150)
    assert log.offset_for_timestamp(175) == (11, 180)
    assert log.offset_for_timestamp(181) is None
    log.update_high_watermark(12)
    log.maybe_increment_log_start_offset(7)
    assert log.offset_for_timestamp(100) == (7, 160)


def test_flush_advances_the_recovery_point(tmp_path: Path, clock: Clock):
    one = batch(vals(2))
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one))
    log.schedule_once = lambda name, job: None  # the rolls' "flush-log" jobs never run: flush() alone
    for _ in range(5):
        log.append_as_leader(one, 0)
    assert log.recovery_point == 0
    log.flush(4)
    assert log.recovery_point == 4
    log.flush(2)  # never backwards
    assert log.recovery_point == 4
    clock.advance(7)
    log.flush()
    assert log.recovery_point == 10
    assert log.last_flush_ms == clock()
    log.truncate_to(6)
    assert log.recovery_point == 6


def test_flush_interval_messages(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock, flush_interval_messages=5)
    log.append_as_leader(batch(vals(3)), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(vals(3)), 0)
    assert log.recovery_point == 6


def test_append_as_follower_keeps_offsets_and_fills_the_epoch_cache(tmp_path: Path, clock: Clock):
    leader = open_log(tmp_path, clock, name="t-0")
    leader.append_as_leader(batch(vals(2)), 1)
    leader.append_as_leader(batch(vals(3)), 1)
    leader.append_as_leader(batch(vals(1)), 4)
    leader.append_as_leader(batch(vals(2)), 6)
    follower = open_log(tmp_path, clock, name="follower-0")
    data = leader.read(0, 1 << 20).records
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 7, 8)
    assert follower.log_end_offset == 8
    assert follower.read(0, 1 << 20).records == data
    assert follower.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(4, 5), EpochEntry(6, 6)]
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    with pytest.raises(KafkaError) as info_error:
        follower.append_as_follower(leader.read(5, 1 << 20).records)
    assert info_error.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "non-monotonic" in str(info_error.value)
    assert follower.log_end_offset == 8


def test_follower_rejects_corrupt_batches(tmp_path: Path, clock: Clock):
    follower = open_log(tmp_path, clock)
    records = bytearray(build_batch([(None, b"x", 1, [])], base_offset=0))
    records[-1] ^= 1
    with pytest.raises(KafkaError) as info:
        follower.append_as_follower(bytes(records))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert follower.log_end_offset == 0


def test_reads_at_every_offset_match_the_appends(tmp_path: Path, clock: Clock):
    """Random batch sizes, a small index interval and small segments: every offset reads back
    from the batch that holds it, which exercises the sparse index lookup and header scan."""
    rng = random.Random(7)
    log = open_log(tmp_path, clock, segment_bytes=4_000, index_interval_bytes=300)
    expected: dict[int, bytes] = {}
    for i in range(60):
        values = [rng.randbytes(rng.randint(1, 120)) for _ in range(rng.randint(1, 6))]
        info = log.append_as_leader(batch(values), i // 10)
        expected.update({info.first_offset + j: v for j, v in enumerate(values)})
    assert len(log.segments) > 3
    assert any(len(s.index) > 0 for s in log.segments)
    for offset, value in expected.items():
        records = log.read(offset, 1)
        got = dict(contents(records.records))
        assert got[offset] == value
        first = parse_header(records.records)
        assert first.base_offset <= offset <= first.last_offset


def test_a_batch_larger_than_the_scan_chunk(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    big = [b"b" * 50_000, b"c" * 50_000]
    log.append_as_leader(batch([b"small"]), 0)
    log.append_as_leader(batch(big), 0)
    log.append_as_leader(batch([b"tail"]), 0)
    assert contents(log.read(2, 10).records) == [(1, big[0]), (2, big[1])]
    assert contents(log.read(3, 1 << 20).records) == [(3, b"tail")]


def test_clean_reopen_keeps_everything(tmp_path: Path, clock: Clock):
    one = batch(vals(3))
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one))
    for epoch in range(5):
        log.append_as_leader(one, epoch)
    log.flush()
    before = log.read(0, 1 << 20).records, [s.base_offset for s in log.segments]
    log.close()
    with pytest.raises(KafkaError):
        log.read(0, 10)
    reopened = Log.open(
        log.dir, LogConfig(segment_bytes=2 * len(one)), clock, recovery_point=15, clean_shutdown=True
    )
    assert reopened.log_end_offset == 15
    assert (reopened.read(0, 1 << 20).records, [s.base_offset for s in reopened.segments]) == before
    assert reopened.leader_epoch_cache.latest_epoch == 4
    assert reopened.append_as_leader(one, 5).first_offset == 15


def test_delete_removes_the_directory(tmp_path: Path, clock: Clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(vals(1)), 0)
    log.delete()
    assert not log.dir.exists()


def test_config_values_are_checked():
    with pytest.raises(ValueError, match="segment_bytes"):
        LogConfig(segment_bytes=0)
    assert LogConfig().segment_bytes == 1073741824
    assert LogConfig().retention_ms == 604800000
