"""The idempotent producer's broker half (SPEC 5.4 "Idempotent producer"): the sans-IO
ProducerStateManager rules, then the same rules through a real Log on disk - duplicates answered
with their original offsets, gaps, epoch fencing, follower appends, rebuild from the log on open
(with and without snapshots), and the state after truncation and retention."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from broker.log import Log, LogConfig
from broker.log.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptSnapshot,
    ProducerStateManager,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch, iter_batches, parse_header, set_base_offset

PID = 4000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def value(pid: int, epoch: int, seq: int, tag: str = "v") -> bytes:
    """Fixed width, so every batch of ``n`` records has the same size."""
    return f"{tag}{pid:05d}-{epoch}-{seq:05d}".encode()


def idem(seq: int, n: int = 2, pid: int = PID, epoch: int = 0, tag: str = "v") -> bytes:
    """One idempotent batch of ``n`` records with base sequence ``seq``."""
    return build_batch(
        [(None, value(pid, epoch, seq + i, tag), 1_000, []) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def header(seq: int, n: int = 2, pid: int = PID, epoch: int = 0, base_offset: int = 0):
    buf = bytearray(idem(seq, n, pid, epoch))
    set_base_offset(buf, 0, base_offset)
    return parse_header(buf)


def code_of(call) -> int:
    with pytest.raises(KafkaError) as err:
        call()
    return err.value.code


def values(log: Log) -> list[bytes]:
    """Every record value in the log, decoded by kafka-python (the independent oracle)."""
    out = []
    for segment in log.segments:
        records = MemoryRecords(segment.log_path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            out.extend(r.value for r in batch)
    return out


# -- the sans-IO rules --------------------------------------------------------------------------


def append(state: ProducerStateManager, seq: int, n: int = 2, pid: int = PID, epoch: int = 0):
    """What a leader does: check, then (if new) fold in with the next offsets."""
    h = header(seq, n, pid, epoch, base_offset=state.map_end_offset)
    duplicate = state.check_append([h])
    if duplicate is None:
        state.update(h)
    return duplicate


def test_first_batches_are_accepted_and_remembered():
    state = ProducerStateManager()
    assert append(state, 0) is None and append(state, 2, n=3) is None
    entry = state.last_entry(PID)
    assert entry.producer_epoch == 0 and entry.last_seq == 4 and entry.last_offset == 4
    assert list(entry.batches) == [BatchMetadata(0, 1, 0, 1), BatchMetadata(2, 4, 2, 4)]
    assert state.map_end_offset == 5


def test_the_last_five_batches_are_duplicates_the_sixth_oldest_is_out_of_order():
    state = ProducerStateManager()
    for i in range(6):
        assert append(state, 2 * i) is None  # offsets 2i, 2i+1
    assert len(state.last_entry(PID).batches) == NUM_BATCHES_TO_RETAIN
    for i in range(1, 6):
        assert append(state, 2 * i) == BatchMetadata(2 * i, 2 * i + 1, 2 * i, 2 * i + 1)
    assert state.map_end_offset == 12  # nothing was folded in by the duplicates
    # the very first batch fell out of the window: no longer recognisable, and not next in line
    assert code_of(lambda: append(state, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_duplicate_must_match_both_ends_of_the_sequence_range():
    state = ProducerStateManager()
    append(state, 0, n=3)
    assert code_of(lambda: append(state, 0, n=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gaps_are_out_of_order():
    state = ProducerStateManager()
    append(state, 0)
    assert code_of(lambda: append(state, 3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(lambda: append(state, 1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlap
    assert append(state, 2) is None


def test_unknown_producer_accepts_any_first_sequence_as_kafka_since_kip_360():
    state = ProducerStateManager()
    assert append(state, 17) is None
    assert state.last_entry(PID).last_seq == 18
    assert append(state, 19) is None


def test_producers_are_independent():
    state = ProducerStateManager()
    append(state, 0, pid=1)
    append(state, 0, pid=2)
    assert append(state, 2, pid=1) is None
    assert append(state, 0, pid=2) is not None  # a duplicate of producer 2's batch
    assert state.last_entry(1).last_seq == 3 and state.last_entry(2).last_seq == 1


def test_epoch_fencing_and_a_new_epoch_restarting_at_zero():
    state = ProducerStateManager()
    append(state, 0, epoch=1)
    append(state, 2, epoch=1)
    assert code_of(lambda: append(state, 4, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(lambda: append(state, 4, epoch=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(state, 0, epoch=2) is None
    entry = state.last_entry(PID)
    assert entry.producer_epoch == 2 and len(entry.batches) == 1  # the new epoch starts a new window
    assert code_of(lambda: append(state, 0, epoch=1)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_after_int32_max():
    state = ProducerStateManager()
    top = 2**31 - 2
    assert append(state, top) is None  # sequences top, top + 1 = 2^31 - 1
    assert state.last_entry(PID).last_seq == 2**31 - 1
    assert append(state, 0) is None
    # a batch that itself wraps: its last sequence is computed modulo 2^31, as Kafka does
    h = header(2**31 - 1, n=3)
    assert h.last_sequence == 1


def test_several_batches_of_one_producer_in_one_record_set_are_checked_in_a_chain():
    state = ProducerStateManager()
    assert state.check_append([header(0), header(2)]) is None
    assert (
        code_of(lambda: state.check_append([header(0), header(3)])) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert state.producers == {}  # checking changes nothing


def test_a_producer_id_without_a_sequence_is_an_invalid_record():
    state = ProducerStateManager()
    bad = parse_header(build_batch([(None, b"x", 0, [])], producer_id=PID, producer_epoch=0))
    assert code_of(lambda: state.check_append([bad])) == ErrorCode.INVALID_RECORD


def test_batches_without_producer_id_are_ignored():
    state = ProducerStateManager()
    plain = parse_header(build_batch([(None, b"x", 0, [])]))
    assert state.check_append([plain]) is None
    state.update(plain)
    assert state.producers == {} and state.map_end_offset == 1


def test_snapshot_round_trip_and_corruption():
    state = ProducerStateManager()
    for i in range(7):
        append(state, 2 * i, pid=1)
    append(state, 0, pid=2, epoch=3)
    data = state.to_bytes()
    again = ProducerStateManager.from_bytes(data)
    assert again.producers == state.producers and again.map_end_offset == state.map_end_offset
    flipped = bytearray(data)
    flipped[-1] ^= 1
    for bad in (bytes(flipped), data[:3], data[:-2], b""):
        with pytest.raises(CorruptSnapshot):
            ProducerStateManager.from_bytes(bad)


# -- through the Log --------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


def open_log(path: Path, clock: Clock, **config) -> Log:
    return Log.open(path, LogConfig(**config), clock)


def test_leader_answers_a_duplicate_with_the_original_offsets_and_writes_nothing(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(build_batch([(None, b"plain", 0, [])]), 0)  # offset 0, no producer id
    first = log.append_as_leader(idem(0, n=3), 0)
    assert (first.first_offset, first.last_offset, first.duplicate) == (1, 3, False)
    log.append_as_leader(idem(3), 0)
    size = log.size_in_bytes
    again = log.append_as_leader(idem(0, n=3), 5)  # the retry, maybe at a new leader epoch
    assert (again.first_offset, again.last_offset, again.duplicate, again.num_records) == (1, 3, True, 3)
    assert again.valid_bytes == 0 and again.batches == []
    assert log.log_end_offset == 6 and log.size_in_bytes == size
    assert values(log) == [b"plain", *(value(PID, 0, i) for i in range(5))]


def test_leader_refuses_gaps_and_fenced_epochs_without_writing(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(idem(0, epoch=2), 0)
    assert (
        code_of(lambda: log.append_as_leader(idem(5, epoch=2), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert code_of(lambda: log.append_as_leader(idem(2, epoch=1), 0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 2
    assert log.append_as_leader(idem(2, epoch=2), 0).first_offset == 2


def test_a_multi_batch_record_set_with_a_gap_writes_none_of_it(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    assert (
        code_of(lambda: log.append_as_leader(idem(0) + idem(5), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert log.log_end_offset == 0 and log.producer_state.producers == {}
    info = log.append_as_leader(idem(0) + idem(2), 0)
    assert (info.first_offset, info.last_offset) == (0, 3)


def test_follower_appends_build_the_state_a_new_leader_dedups_with(tmp_path, clock):
    leader = open_log(tmp_path / "leader" / "t-0", clock)
    follower = open_log(tmp_path / "follower" / "t-0", clock)
    for seq in range(0, 14, 2):
        leader.append_as_leader(idem(seq), 0)
    follower.append_as_follower(leader.read(0, 1 << 20).records)  # replication copies the batches
    assert follower.producer_state.producers == leader.producer_state.producers
    # the follower becomes leader; the producer retries its last batch there
    retry = follower.append_as_leader(idem(12), 1)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (12, 13)
    assert follower.append_as_leader(idem(14), 1).first_offset == 14


def test_follower_takes_the_leaders_word_without_checks(tmp_path, clock):
    follower = open_log(tmp_path / "t-0", clock)
    a = bytearray(idem(0, epoch=3))
    b = bytearray(idem(7, epoch=2))  # an odd sequence and an older epoch: not the follower's call
    set_base_offset(b, 0, 2)
    follower.append_as_follower(bytes(a) + bytes(b))
    assert follower.log_end_offset == 4
    entry = follower.producer_state.last_entry(PID)
    assert entry.producer_epoch == 2 and entry.last_seq == 8


def rolled_log(tmp_path: Path, clock: Clock) -> tuple[Log, int]:
    """Seven batches of producer PID, two per segment, plus one of producer 7."""
    one = idem(0)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=2 * len(one))
    for seq in range(0, 14, 2):
        log.append_as_leader(idem(seq), 0)
    log.append_as_leader(idem(0, pid=7), 0)
    return log, len(one)


def test_state_is_rebuilt_from_batch_headers_on_open_without_any_snapshot(tmp_path, clock, monkeypatch):
    log, _ = rolled_log(tmp_path, clock)
    expected = {pid: entry.copy() for pid, entry in log.producer_state.producers.items()}
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()

    def no_record_decoding(*args, **kwargs):
        raise AssertionError("producer state must come from batch headers only")

    monkeypatch.setattr("broker.log.segment_reads.decode_batch", no_record_decoding)
    monkeypatch.setattr("client.protocol.records.decode_batch", no_record_decoding)
    reopened = Log.open(
        log.dir, LogConfig(segment_bytes=log.config.segment_bytes), clock, clean_shutdown=False
    )
    assert reopened.producer_state.producers == expected
    assert reopened.producer_state.map_end_offset == reopened.log_end_offset == 16
    assert reopened.append_as_leader(idem(12), 0).duplicate
    assert code_of(lambda: reopened.append_as_leader(idem(13), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_snapshots_at_rolls_and_shutdown_make_the_reopen_replay_little(tmp_path, clock):
    log, _ = rolled_log(tmp_path, clock)
    rolls = [s.base_offset for s in log.segments[1:]]
    assert sorted(int(p.stem) for p in log.dir.glob("*.snapshot")) == rolls
    expected = {pid: entry.copy() for pid, entry in log.producer_state.producers.items()}
    log.take_producer_snapshot()
    log.close()
    assert (log.dir / f"{16:020d}.snapshot").exists()
    reopened = Log.open(
        log.dir, LogConfig(segment_bytes=log.config.segment_bytes), clock, clean_shutdown=True
    )
    assert reopened.producer_state.producers == expected
    # a torn (here: garbage) newest snapshot is ignored and an older one plus a replay used instead
    reopened.close()
    (log.dir / f"{16:020d}.snapshot").write_bytes(b"torn")
    again = Log.open(log.dir, LogConfig(segment_bytes=log.config.segment_bytes), clock)
    assert again.producer_state.producers == expected
    assert not (log.dir / f"{16:020d}.snapshot").exists()


def test_snapshot_above_the_log_end_is_discarded_on_open(tmp_path, clock):
    log, _ = rolled_log(tmp_path, clock)
    expected = {pid: entry.copy() for pid, entry in log.producer_state.producers.items()}
    stale = ProducerStateManager()
    stale.update(header(0, n=50, pid=99, base_offset=0))
    (log.dir / f"{1000:020d}.snapshot").write_bytes(stale.to_bytes())
    log.close()
    reopened = Log.open(log.dir, LogConfig(segment_bytes=log.config.segment_bytes), clock)
    assert reopened.producer_state.producers == expected
    assert not (log.dir / f"{1000:020d}.snapshot").exists()


def test_state_after_truncation_forgets_the_truncated_batches(tmp_path, clock):
    log, _ = rolled_log(tmp_path, clock)  # PID: offsets 0..13 (seq = offset); producer 7: 14, 15
    log.truncate_to(9)  # the batch 8..9 straddles: it goes whole; LEO 8
    assert log.log_end_offset == 8
    entry = log.producer_state.last_entry(PID)
    assert entry.last_seq == 7 and entry.last_offset == 7
    assert [b.first_offset for b in entry.batches] == [0, 2, 4, 6]
    assert log.producer_state.last_entry(7) is None
    assert sorted(int(p.stem) for p in log.dir.glob("*.snapshot")) == [4, 8]
    # the truncated batch is no longer a duplicate: the producer's retry is written again
    info = log.append_as_leader(idem(8), 1)
    assert not info.duplicate and info.first_offset == 8
    assert log.append_as_leader(idem(6), 1).duplicate
    # and the rebuilt state equals one rebuilt from scratch
    log.close()
    for path in log.dir.glob("*.snapshot"):
        path.unlink()
    fresh = Log.open(log.dir, LogConfig(segment_bytes=log.config.segment_bytes), clock)
    assert fresh.producer_state.producers == log.producer_state.producers


def test_truncate_fully_clears_the_state(tmp_path, clock):
    log, _ = rolled_log(tmp_path, clock)
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.producers == {} and not list(log.dir.glob("*.snapshot"))
    assert log.append_as_leader(idem(40), 0).first_offset == 100  # an unknown producer again


def test_producer_state_outlives_retention_of_its_segments(tmp_path, clock):
    log, one = rolled_log(tmp_path, clock)
    log.append_as_leader(idem(0, pid=8), 0)  # a later producer keeps the active segment busy
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(16)
    assert log.delete_old_segments() == 4
    assert log.segments[0].base_offset == 16  # every batch of PID (and of producer 7) is gone
    assert log.producer_state.last_entry(PID).last_seq == 13
    snapshots = sorted(int(p.stem) for p in log.dir.glob("*.snapshot"))
    assert snapshots[0] == log.segments[0].base_offset
    log.close()
    reopened = Log.open(
        log.dir, LogConfig(segment_bytes=2 * one), clock, log_start_offset=log.log_start_offset
    )
    assert reopened.producer_state.last_entry(PID).last_seq == 13
    assert code_of(lambda: reopened.append_as_leader(idem(20), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_log_manager_snapshots_every_log_at_shutdown(tmp_path, clock):
    from broker.log import LogManager

    manager = LogManager([tmp_path / "d"], LogConfig(), clock)
    lg = manager.get_or_create_log("t", 0)
    lg.append_as_leader(idem(0), 0)
    manager.shutdown()
    assert (tmp_path / "d" / "t-0" / f"{2:020d}.snapshot").exists()
    manager = LogManager([tmp_path / "d"], LogConfig(), clock)
    manager.load_logs()
    assert manager.get_log("t", 0).append_as_leader(idem(0), 0).duplicate
    assert [h.producer_id for _, h in iter_batches(manager.get_log("t", 0).read(0, 1 << 20).records)] == [PID]
