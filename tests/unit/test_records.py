"""RecordBatch v2 (SPEC 5.3): our codec round-trips, and kafka-python, an independent decoder,
reads the segment files our Log writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from broker.log import Log, LogConfig
from client.protocol.errors import ErrorCode
from client.protocol.records import (
    HEADER_SIZE,
    CorruptRecordError,
    build_batch,
    decode_batch,
    iter_batches,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
    valid_prefix,
)

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
header = st.tuples(st.text(max_size=10), maybe_bytes)
record = st.tuples(
    maybe_bytes,
    maybe_bytes,
    st.integers(min_value=0, max_value=2**40),
    st.lists(header, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record, min_size=1, max_size=20),
    compression=st.sampled_from(["none", "gzip"]),
    base_offset=st.integers(min_value=0, max_value=2**40),
)
def test_build_decode_round_trip(records, compression, base_offset):
    batch = build_batch(records, compression=compression, base_offset=base_offset)
    [(pos, head)] = list(iter_batches(batch))
    assert pos == 0
    assert head.base_offset == base_offset
    assert head.record_count == len(records)
    assert head.last_offset_delta == len(records) - 1
    assert head.compression == (0 if compression == "none" else 1)
    assert head.max_timestamp == max(ts for _, _, ts, _ in records)
    decoded = decode_batch(batch)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    for got, (key, value, ts, headers) in zip(decoded, records, strict=True):
        assert (got.key, got.value, got.timestamp) == (key, value, ts)
        assert list(got.headers) == [tuple(h) for h in headers]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=10),
    offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_patching_offset_and_epoch_keeps_the_crc_valid(values, offset, epoch):
    buf = bytearray(build_batch([(None, v, 1, []) for v in values]))
    crc_before = parse_header(buf).crc
    set_base_offset(buf, 0, offset)
    set_partition_leader_epoch(buf, 0, epoch)
    [(_, head)] = list(iter_batches(buf))  # checks the CRC
    assert (head.base_offset, head.partition_leader_epoch, head.crc) == (offset, epoch, crc_before)
    oracle = MemoryRecords(bytes(buf)).next_batch()
    assert oracle.validate_crc()
    assert oracle.base_offset == offset and oracle.leader_epoch == epoch
    assert [r.value for r in oracle] == values


def two_batches() -> bytes:
    return build_batch([(b"k", b"one", 1, [])]) + build_batch([(b"k", b"two", 2, [])], base_offset=1)


def test_iter_batches_rejects_a_truncated_batch():
    buf = two_batches()
    for cut in (len(buf) - 1, len(buf) - 20, HEADER_SIZE // 2 + len(buf) // 2):
        with pytest.raises(CorruptRecordError) as info:
            list(iter_batches(buf[:cut]))
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_iter_batches_rejects_a_bad_crc():
    buf = bytearray(two_batches())
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_batches(buf))
    assert len(list(iter_batches(buf, check_crc=False))) == 2


def test_iter_batches_rejects_the_wrong_magic():
    buf = bytearray(two_batches())
    buf[16] = 1  # magic of the first batch
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batches(buf))


def test_valid_prefix_stops_at_the_first_bad_batch():
    good = two_batches()
    first_size = parse_header(good).size
    length, batches = valid_prefix(good + good[:30])
    assert length == len(good) and len(batches) == 2
    damaged = bytearray(good)
    damaged[first_size + HEADER_SIZE + 2] ^= 0x01
    length, batches = valid_prefix(damaged)
    assert length == first_size and len(batches) == 1


def test_kafka_python_reads_the_segment_files_our_log_writes(tmp_path: Path):
    """The oracle: offsets assigned and epochs stamped over several appends and a roll, and
    every batch in every .log file still passes kafka-python's CRC check."""
    clock = [1_000]
    log = Log.open(tmp_path / "oracle-0", LogConfig(segment_bytes=1_500), lambda: clock[0])
    expected: dict[int, tuple[bytes | None, bytes, int]] = {}
    epochs = [0, 0, 1, 1, 1, 4, 4, 4, 4, 7]
    for i, epoch in enumerate(epochs):
        records = [
            (f"k{i}".encode(), f"value-{i}-{j}".encode() * 3, 1_000 + i, [("h", b"x")]) for j in range(4)
        ]
        compression = "gzip" if i % 3 == 0 else "none"
        info = log.append_as_leader(build_batch(records, compression=compression, base_offset=999), epoch)
        for j, (key, value, _, _) in enumerate(records):
            expected[info.first_offset + j] = (key, value, epoch)
    log.roll()
    log.append_as_leader(build_batch([(None, b"after-roll", 2_000, [])]), 7)
    expected[log.log_end_offset - 1] = (None, b"after-roll", 7)
    log.flush()
    assert len(log.segments) >= 3

    seen: dict[int, tuple[bytes | None, bytes, int]] = {}
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        records = MemoryRecords(data)
        batches = 0
        while (batch := records.next_batch()) is not None:
            batches += 1
            assert batch.validate_crc()
            assert batch.magic == 2
            if batches == 1:
                assert batch.base_offset == segment.base_offset
            for rec in batch:
                seen[rec.offset] = (rec.key, rec.value, batch.leader_epoch)
        assert batches > 0
    assert seen == expected
    assert sorted(seen) == list(range(log.log_end_offset))
    log.close()
