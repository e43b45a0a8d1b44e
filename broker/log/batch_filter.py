"""Rewriting one RecordBatch v2 with only the records the cleaner retains (Kafka's
``MemoryRecords.filterTo`` with its ``RecordFilter`` and ``BatchRetention``; docs/design.md "Log
compaction").

Every batch keeps its place and its identity:

* all records retained: the original bytes, untouched (Kafka's ``writeOriginalBatch``);
* some retained: a new batch of those records, re-encoded with aiokafka's compiled
  ``DefaultRecordBatchBuilder`` (the same compression codec), whose header keeps the original
  base offset, partition leader epoch, producer id, epoch and base sequence, timestamp type and
  transactional flag, and the original ``lastOffsetDelta``, so the batch's last offset (and its
  producer's last sequence) is unchanged; the CRC is recomputed;
* none retained: the batch is dropped (``DELETE_EMPTY``), unless the caller asks to keep it
  (``RETAIN_EMPTY``: the last batch of an active producer, so its state and duplicate detection
  survive a reload that replays the headers, KIP-98; and the last batch of a cleaned segment, see
  :mod:`broker.log.cleaner_pass`): then an empty batch, the same header with no records.

Control batches (transaction markers) are kept as they are: this broker has no transactions.
"""

from __future__ import annotations

from collections.abc import Callable

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from client.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Record,
    compute_crc,
    decode_batch,
    parse_header,
)

MAX_BATCH_SIZE = 2**31 - 1
_CRC_POS = CRC_START - 4


def write_header(buf: bytearray, header: BatchHeader) -> bytearray:
    """Pack ``header`` (its crc ignored) over the first bytes of ``buf`` and set the CRC."""
    HEADER.pack_into(
        buf,
        0,
        header.base_offset,
        len(buf) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        MAGIC,
        0,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )
    buf[_CRC_POS:CRC_START] = compute_crc(buf).to_bytes(4, "big")
    return buf


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader``: the batch's header with no records,
    uncompressed, both timestamps its max timestamp."""
    empty = BatchHeader(
        base_offset=header.base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD,
        partition_leader_epoch=header.partition_leader_epoch,
        magic=MAGIC,
        crc=0,
        attributes=header.attributes & ~COMPRESSION_MASK,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=0,
    )
    return bytes(write_header(bytearray(HEADER_SIZE), empty))


def rebuild_batch(header: BatchHeader, records: list[Record]) -> bytes:
    """A batch of ``records`` (a non-empty subset of the batch of ``header``) that keeps the
    original batch's identity and last offset (Kafka's ``buildRetainedRecordsInto``)."""
    builder = DefaultRecordBatchBuilder(
        magic=MAGIC,
        compression_type=header.compression,
        is_transactional=int(bool(header.attributes & TRANSACTIONAL_MASK)),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        batch_size=MAX_BATCH_SIZE,
    )
    for record in records:
        builder.append(
            record.offset - header.base_offset,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
        )
    buf = builder.build()
    built = parse_header(buf)
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    kept = BatchHeader(
        base_offset=header.base_offset,
        batch_length=0,
        partition_leader_epoch=header.partition_leader_epoch,
        magic=MAGIC,
        crc=0,
        attributes=(built.attributes & COMPRESSION_MASK) | (header.attributes & ~COMPRESSION_MASK),
        last_offset_delta=header.last_offset_delta,
        base_timestamp=built.base_timestamp,
        max_timestamp=header.max_timestamp if log_append_time else built.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=built.record_count,
    )
    return bytes(write_header(buf, kept))


def filter_batch(
    batch: bytes | memoryview,
    header: BatchHeader,
    should_retain: Callable[[Record], bool],
    retain_empty: bool,
) -> tuple[bytes | None, int]:
    """The batch as cleaned, or None when it goes, and how many of its records were retained."""
    if header.attributes & CONTROL_MASK:
        return bytes(batch), header.record_count
    records = decode_batch(batch)
    kept = [record for record in records if should_retain(record)]
    if len(kept) == len(records):
        return bytes(batch), len(kept)
    if kept:
        return rebuild_batch(header, kept), len(kept)
    return (empty_batch(header) if retain_empty else None), 0
