"""The ``floodmark_segments`` data source (SPEC 8) against an independent decoder.

kafka-python's RecordBatch v2 reader (MACHINE-NOTES: the oracle for our segment bytes) decodes
every replica's segment files; the source's rows must say the same thing record by record:
offsets, value digests, keys, producer id and epoch, sequence = base sequence + index, leader
epoch, batch CRC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka.record.memory_records import MemoryRecords

from ledger.format import key_text, value_digest
from tests.verify import scenario as sc
from verify.sources import SEGMENTS_SOURCE


def oracle_rows(partition_dir: Path, broker: int, topic: str, partition: int) -> list[tuple]:
    rows = []
    for segment in sorted(partition_dir.glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            for index, r in enumerate(batch):
                rows.append(
                    (
                        broker,
                        topic,
                        partition,
                        r.offset,
                        batch.base_offset,
                        batch.last_offset,
                        batch.crc,
                        True,
                        batch.leader_epoch,
                        value_digest(r.value),
                        key_text(r.key),
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_sequence + index,
                        r.timestamp,
                    )
                )
    return rows


def test_segments_source_agrees_with_kafka_python(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    df = spark.read.format(SEGMENTS_SOURCE).option("log_dirs", s.log_dirs).load()
    assert df.rdd.getNumPartitions() == 6  # one per (broker, topic partition)
    got = sorted(tuple(row) for row in df.collect())
    expected = sorted(
        row
        for b in s.disk.brokers
        for p in sc.PARTITIONS
        for row in oracle_rows(s.disk.partition_dir(b, sc.TOPIC, p), b, sc.TOPIC, p)
    )
    assert got == expected and len(got) == 3 * s.total
    # And what was written: every replica holds every value at its offset, in sequence.
    written = {
        (w.partition, w.offset): (value_digest(w.value), w.producer_id, w.sequence) for w in s.disk.written
    }
    for row in got:
        assert written[(row[2], row[3])] == (row[9], row[11], row[13])
    assert {(row[3], row[8]) for row in got if row[2] == 0 and row[3] in (14, 15)} == {(14, 0), (15, 1)}


def test_segments_source_reports_a_corrupt_batch_and_reads_past_it(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    path, pos, size, base = s.disk.batch_positions(1, sc.TOPIC, 1)[0]
    data = bytearray(path.read_bytes())
    data[pos + 40] ^= 0xFF  # inside the CRC-covered header (the max timestamp)
    path.write_bytes(bytes(data))
    rows = (
        spark.read.format(SEGMENTS_SOURCE)
        .option("log_dirs", str(s.disk.log_dir(1)))
        .option("topics", sc.TOPIC)
        .load()
        .where("partition = 1")
        .collect()
    )
    assert len(rows) == s.total // 2
    assert {r.offset for r in rows if not r.crc_valid} == set(range(base, base + sc.RECORDS_PER_BATCH))
