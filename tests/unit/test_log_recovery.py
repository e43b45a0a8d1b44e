"""Log recovery (SPEC 5.3): torn and corrupt tails are truncated after an unclean shutdown,
broken indexes are rebuilt, stray files removed, and a clean shutdown skips the scan."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker.log import EpochEntry, Log, LogConfig
from client.protocol.records import HEADER_SIZE, build_batch, decode_records, iter_batches


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def batch(tag: str, n: int = 3, ts: int = 1_000) -> bytes:
    return build_batch([(None, f"{tag}-{i}".encode(), ts + i, []) for i in range(n)])


def offsets(log: Log, start: int = 0) -> list[int]:
    out: list[int] = []
    offset = start
    while offset < log.log_end_offset:
        records = log.read(offset, 1 << 20).records
        got = [r.offset for _, r in decode_records(records)]
        out.extend(o for o in got if o >= offset)
        offset = got[-1] + 1
    return out


@pytest.fixture
def clock() -> Clock:
    return Clock()


def write_log(dir: Path, clock: Clock, appends: int, config: LogConfig | None = None) -> Log:
    log = Log.open(dir, config or LogConfig(), clock)
    for i in range(appends):
        log.append_as_leader(batch(f"b{i}"), leader_epoch=i // 2)
    return log


def reopen(log: Log, clock: Clock, clean: bool = False, recovery_point: int = 0) -> Log:
    log.close()
    return Log.open(log.dir, log.config, clock, recovery_point=recovery_point, clean_shutdown=clean)


def test_torn_write_is_truncated_to_the_last_whole_batch(tmp_path: Path, clock: Clock, caplog):
    log = write_log(tmp_path / "t-0", clock, appends=4)
    segment_path = log.active_segment.log_path
    whole = segment_path.stat().st_size
    torn = batch("torn")
    with open(segment_path, "ab") as f:
        f.write(torn[: len(torn) // 2])
    with caplog.at_level(logging.WARNING, logger="broker.log"):
        recovered = reopen(log, clock)
    assert recovered.log_end_offset == 12
    assert segment_path.stat().st_size == whole
    assert recovered.recovery_point == 12
    assert any(
        segment_path.name in r.getMessage() and str(len(torn) // 2) in r.getMessage() for r in caplog.records
    )
    assert recovered.append_as_leader(batch("next"), 5).first_offset == 12
    assert offsets(recovered) == list(range(15))


def test_torn_header_is_truncated(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=2)
    with open(log.active_segment.log_path, "ab") as f:
        f.write(batch("torn")[: HEADER_SIZE - 10])
    recovered = reopen(log, clock)
    assert recovered.log_end_offset == 6
    assert recovered.size_in_bytes == 2 * len(batch("b0"))


def test_flipped_byte_truncates_from_that_batch(tmp_path: Path, clock: Clock, caplog):
    log = write_log(tmp_path / "t-0", clock, appends=5)
    path = log.active_segment.log_path
    data = bytearray(path.read_bytes())
    positions = [pos for pos, _ in iter_batches(data)]
    data[positions[2] + HEADER_SIZE + 3] ^= 0x10  # inside the third batch's records
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="broker.log"):
        recovered = reopen(log, clock)
    assert recovered.log_end_offset == 6
    assert path.stat().st_size == positions[2]
    assert offsets(recovered) == list(range(6))
    assert recovered.leader_epoch_cache.entries == [EpochEntry(0, 0)]  # epoch 1 began at the dropped batch
    assert any(path.name in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_corruption_in_an_earlier_unflushed_segment_deletes_later_segments(tmp_path: Path, clock: Clock):
    one = batch("b0")
    log = write_log(tmp_path / "t-0", clock, appends=8, config=LogConfig(segment_bytes=2 * len(one)))
    assert [s.base_offset for s in log.segments] == [0, 6, 12, 18]
    log.flush(6)
    victim = log.segments[1].log_path
    data = bytearray(victim.read_bytes())
    data[len(one) + HEADER_SIZE + 1] ^= 0xFF  # second batch of segment 6
    victim.write_bytes(data)
    recovered = reopen(log, clock, recovery_point=6)
    assert [s.base_offset for s in recovered.segments] == [0, 6]
    assert recovered.log_end_offset == 9
    assert not (recovered.dir / "00000000000000000012.log").exists()
    assert not (recovered.dir / "00000000000000000018.index").exists()
    assert offsets(recovered) == list(range(9))
    assert recovered.leader_epoch_cache.latest_epoch == 1


def test_segments_below_the_recovery_point_are_not_rescanned(tmp_path: Path, clock: Clock):
    one = batch("b0")
    log = write_log(tmp_path / "t-0", clock, appends=4, config=LogConfig(segment_bytes=2 * len(one)))
    log.flush()
    first = log.segments[0].log_path
    data = bytearray(first.read_bytes())
    data[len(one) + HEADER_SIZE + 1] ^= 0xFF  # a CRC failure a scan would catch
    first.write_bytes(data)
    recovered = reopen(log, clock, recovery_point=12)
    assert recovered.log_end_offset == 12
    assert first.stat().st_size == 2 * len(one)


def test_clean_shutdown_skips_the_scan(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=3)
    log.flush()
    path = log.active_segment.log_path
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # last batch fails its CRC, but nobody checks after a clean shutdown
    path.write_bytes(data)
    clean = reopen(log, clock, clean=True, recovery_point=0)
    assert clean.log_end_offset == 9
    assert path.stat().st_size == len(data)
    unclean = reopen(clean, clock, clean=False, recovery_point=0)
    assert unclean.log_end_offset == 6


@pytest.mark.parametrize("damage", ["delete", "odd_size", "out_of_order", "past_the_end"])
def test_broken_offset_index_is_rebuilt(tmp_path: Path, clock: Clock, damage: str):
    config = LogConfig(index_interval_bytes=100)
    log = write_log(tmp_path / "t-0", clock, appends=12, config=config)
    log.flush()
    segment = log.active_segment
    index_path = segment.index.path
    original = index_path.read_bytes()
    assert len(original) >= 3 * 8
    expected_reads = {o: log.read(o, 1).records for o in range(36)}
    log.close()
    if damage == "delete":
        index_path.unlink()
    elif damage == "odd_size":
        index_path.write_bytes(original + b"\x01\x02\x03")
    elif damage == "out_of_order":
        index_path.write_bytes(original[8:16] + original[:8] + original[16:])
    else:
        index_path.write_bytes(original[:-8] + b"\x00\x00\x00\x30\x00\x10\x00\x00")
    recovered = Log.open(log.dir, config, clock, recovery_point=36, clean_shutdown=True)
    assert index_path.read_bytes() == original
    assert {o: recovered.read(o, 1).records for o in range(36)} == expected_reads


def test_broken_time_index_is_rebuilt(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=4)
    log.flush()
    time_path = log.active_segment.time_index.path
    original = time_path.read_bytes()
    log.close()
    time_path.write_bytes(original[:-5])
    recovered = Log.open(log.dir, LogConfig(), clock, recovery_point=12, clean_shutdown=True)
    assert time_path.read_bytes() == original
    assert recovered.offset_for_timestamp(1_001) == (1, 1_001)


def test_stray_and_orphaned_files_are_removed(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=2)
    log.close()
    strays = [
        "00000000000000000000.log.swap",
        "00000000000000000007.log.deleted",
        "leader-epoch-checkpoint.tmp",
    ]
    for name in strays:
        (log.dir / name).write_bytes(b"junk")
    (log.dir / "00000000000000000099.index").write_bytes(b"")
    recovered = Log.open(log.dir, LogConfig(), clock, clean_shutdown=True)
    names = {p.name for p in recovered.dir.iterdir()}
    assert not names & {*strays, "00000000000000000099.index"}
    assert recovered.log_end_offset == 6


def test_non_monotonic_offsets_are_treated_as_corruption(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=2)
    path = log.active_segment.log_path
    log.close()
    with open(path, "ab") as f:
        f.write(build_batch([(None, b"rewind", 1, [])], base_offset=1))  # offset 1 again
    recovered = Log.open(log.dir, LogConfig(), clock)
    assert recovered.log_end_offset == 6
    assert offsets(recovered) == list(range(6))


def test_epoch_cache_is_truncated_to_the_recovered_end(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=4)  # epochs 0, 0, 1, 1
    log.leader_epoch_cache.assign(7, 12)  # became leader, wrote nothing yet
    path = log.active_segment.log_path
    data = path.read_bytes()
    log.close()
    path.write_bytes(data[: 2 * len(batch("b0")) + 5])
    recovered = Log.open(log.dir, LogConfig(), clock)
    assert recovered.log_end_offset == 6
    assert recovered.leader_epoch_cache.entries == [EpochEntry(0, 0)]


def test_corrupt_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=6)  # epochs 0, 0, 1, 1, 2, 2
    log.flush()
    log.close()
    (log.dir / "leader-epoch-checkpoint").write_text("0\n5\ngarbage\n")
    recovered = Log.open(log.dir, LogConfig(), clock, recovery_point=18, clean_shutdown=True)
    assert recovered.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(1, 6), EpochEntry(2, 12)]
    assert recovered.log_end_offset == 18


def test_log_end_below_log_start_starts_over(tmp_path: Path, clock: Clock):
    log = write_log(tmp_path / "t-0", clock, appends=2)
    log.close()
    recovered = Log.open(log.dir, LogConfig(), clock, log_start_offset=50, clean_shutdown=True)
    assert (recovered.log_start_offset, recovered.log_end_offset) == (50, 50)
    assert [s.base_offset for s in recovered.segments] == [50]
