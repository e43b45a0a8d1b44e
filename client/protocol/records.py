"""Kafka's RecordBatch v2 byte layout (Kafka's DefaultRecordBatch; docs/design.md "Wire protocol").

::

    baseOffset: int64            partitionLeaderEpoch: int32     attributes: int16
    batchLength: int32           magic: int8 (= 2)               lastOffsetDelta: int32
                                 crc: uint32 (CRC-32C of         baseTimestamp, maxTimestamp: int64
                                   attributes .. end)            producerId: int64, producerEpoch: int16
                                                                 baseSequence: int32, records: [Record]

The broker never decodes individual records: it walks batch headers, checks CRCs and
sizes, and patches ``baseOffset`` and ``partitionLeaderEpoch`` in place. Both lie before
the CRC'd region, so stamping them leaves the CRC valid. Building and reading the records
inside a batch is delegated to aiokafka's compiled codec: a pure-Python varint codec,
measured at about 36k records/s, would cap the whole system (docs/design.md "Wire protocol").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import crc32c
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from client.protocol.errors import ErrorCode, KafkaError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count
CRC_START = 21
MAGIC = 2
BASE_OFFSET = struct.Struct(">q")
LEADER_EPOCH = struct.Struct(">i")
LEADER_EPOCH_POS = 12
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20


class CorruptRecordError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header at byte {pos}")
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return crc32c.crc32c(memoryview(batch)[CRC_START:])


def iter_batches(
    buf: bytes | bytearray | memoryview, check_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (byte position, header) for every batch in ``buf``; raise CorruptRecordError on
    a short, oversized, wrong-magic or bad-CRC batch. A partial batch at the end is an error
    here; readers of segment tails that expect tears use :func:`valid_prefix` instead."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        header = parse_header(view, pos)
        if header.magic != MAGIC:
            raise CorruptRecordError(f"batch at byte {pos} has magic {header.magic}, only 2 is supported")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.last_offset_delta < 0:
            raise CorruptRecordError(f"batch at byte {pos} has impossible length {header.batch_length}")
        end = pos + header.size
        if end > len(view):
            raise CorruptRecordError(
                f"batch at byte {pos} claims {header.size} bytes, only {len(view) - pos} present"
            )
        if check_crc and compute_crc(view[pos:end]) != header.crc:
            raise CorruptRecordError(f"batch at byte {pos} (base offset {header.base_offset}) fails its CRC")
        yield pos, header
        pos = end


def valid_prefix(buf: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, BatchHeader]]]:
    """The length of the longest prefix of whole, CRC-valid batches, and their headers.
    Recovery uses it to find where a torn or corrupt tail starts."""
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    try:
        for pos_, header in iter_batches(buf):
            batches.append((pos_, header))
            pos = pos_ + header.size
    except CorruptRecordError:
        pass
    return pos, batches


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    LEADER_EPOCH.pack_into(buf, pos + LEADER_EPOCH_POS, epoch)


# ---------------------------------------------------------------------------------------------
# Records inside a batch: built and read with aiokafka's compiled codec.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
    compression: str = "none",
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """Encode (key, value, timestamp_ms, headers) tuples into one RecordBatch v2."""
    try:
        codec = COMPRESSION_CODECS[compression]
    except KeyError:
        raise ValueError(
            f"unknown compression type {compression!r}; use one of {sorted(COMPRESSION_CODECS)}"
        ) from None
    builder = DefaultRecordBatchBuilder(
        magic=MAGIC,
        compression_type=codec,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=2**31 - 1,
    )
    for delta, (key, value, timestamp, headers) in enumerate(records):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=list(headers))
    out = builder.build()
    if base_offset:
        set_base_offset(out, 0, base_offset)
    return bytes(out)


def decode_batch(batch: bytes | bytearray | memoryview) -> list[Record]:
    """All records of one batch, with absolute offsets."""
    reader = DefaultRecordBatch(bytes(batch))
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in reader]


def decode_batches(
    buf: bytes | bytearray | memoryview, check_crc: bool = True
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every batch in a buffer of batches with its records, the empty batch the log cleaner keeps
    included (its list is empty). A reader that moves through a log moves to the batch's
    :attr:`BatchHeader.next_offset` after each one, as Kafka's readers do (``batch.nextOffset``):
    compaction removes records but keeps every batch's last offset, so the last record + 1 may
    point back into the same batch, and an empty batch has no record to move by at all."""
    view = memoryview(buf)
    for pos, header in iter_batches(view, check_crc=check_crc):
        yield header, decode_batch(view[pos : pos + header.size])


def decode_records(
    buf: bytes | bytearray | memoryview, check_crc: bool = True
) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record in a buffer of batches (a fetch response or a segment), with its batch header.
    Not for advancing a read position: see :func:`decode_batches`."""
    for header, records in decode_batches(buf, check_crc=check_crc):
        for record in records:
            yield header, record
