"""Checking a record set before it is appended, and stamping a leader's offsets into it: Kafka's
``LogValidator`` and ``UnifiedLog.analyzeAndValidateRecords``, for RecordBatch v2 without
compression changes.

Only batch headers are read (:func:`client.protocol.records.iter_batches` checks each CRC): no
record is decoded on the produce path. A leader's record set must hold whole, valid batches, each
within ``max.message.bytes`` and ``segment.bytes`` and with a record count that matches its
``lastOffsetDelta`` (Kafka's MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, CORRUPT_MESSAGE: bad input
gets an error answer, docs/guarantees.md "Bad input loses nothing"). The leader
then assigns offsets from its log end offset and stamps its leader epoch (KIP-101) into each
header, both outside the CRC'd region (Kafka's ``assignOffsetsNonCompressed``). A follower keeps
the leader's offsets, which must rise. The result of an append is a :class:`LogAppendInfo`; a retried duplicate of an
idempotent producer's batch gets the original offsets without being written (docs/design.md
"Idempotent producer").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from broker.log.log_config import LogConfig
from broker.log.producer_state import BatchMetadata
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import BatchHeader, iter_batches, set_base_offset, set_partition_leader_epoch

Batches = list[tuple[int, BatchHeader]]  # (byte position in the record set, header)


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: (
        int  # the last offset of the batch holding the max timestamp (Kafka's shallow offset)
    )
    num_records: int
    valid_bytes: int
    batches: list[BatchHeader]  # as written: offsets assigned, leader epoch stamped
    #: True when the record set was a retried duplicate of a batch already in the log (KIP-98):
    #: nothing was written and first/last offset are the original batch's.
    duplicate: bool = False

    @classmethod
    def of_written(cls, batches: Batches, valid_bytes: int) -> LogAppendInfo:
        """The answer to an append of ``batches`` (as written: offsets assigned)."""
        first, last = batches[0][1], batches[-1][1]
        max_timestamp, offset_of_max = -1, first.base_offset
        for _, header in batches:
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        return cls(
            first_offset=first.base_offset,
            last_offset=last.last_offset,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            num_records=sum(h.record_count for _, h in batches),
            valid_bytes=valid_bytes,
            batches=[h for _, h in batches],
        )

    @classmethod
    def for_duplicate(cls, original: BatchMetadata) -> LogAppendInfo:
        """The answer to a retried duplicate: the original batch's offsets, nothing written."""
        return cls(
            first_offset=original.first_offset,
            last_offset=original.last_offset,
            max_timestamp=-1,
            offset_of_max_timestamp=original.last_offset,
            num_records=original.last_offset - original.first_offset + 1,
            valid_bytes=0,
            batches=[],
            duplicate=True,
        )


def validate_records(
    records: bytes | bytearray | memoryview, config: LogConfig, name: str, as_leader: bool
) -> Batches:
    """The batches of ``records``; KafkaError when it is empty or corrupt, or (for a leader) when a
    batch is too large or its record count does not match its last offset delta."""
    if not records:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"empty record set for {name}")
    batches = list(iter_batches(records))  # CorruptRecordError is KafkaError(CORRUPT_MESSAGE)
    if not as_leader:
        return batches
    for pos, header in batches:
        if header.size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch at byte {pos} is {header.size} bytes, max.message.bytes is {config.max_message_bytes}",
            )
        if header.size > config.segment_bytes:
            raise KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"batch at byte {pos} is {header.size} bytes, segment.bytes is {config.segment_bytes}",
            )
        if header.record_count <= 0 or header.record_count != header.last_offset_delta + 1:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE,
                f"batch at byte {pos} has {header.record_count} records but lastOffsetDelta {header.last_offset_delta}",
            )
    return batches


def check_follower_offsets(batches: Batches, log_end_offset: int, name: str) -> None:
    """A follower's batches must start at or above the log end offset and rise."""
    expected = log_end_offset
    for pos, header in batches:
        if header.base_offset < expected:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"non-monotonic offsets appending to {name}: batch at byte {pos} "
                f"starts at {header.base_offset}, expected at least {expected}",
            )
        expected = header.next_offset


def assign_offsets(
    records: bytes | bytearray | memoryview, batches: Batches, offset: int, leader_epoch: int
) -> tuple[bytearray, Batches]:
    """A copy of ``records`` with offsets assigned from ``offset`` and ``leader_epoch`` stamped
    into every batch header, and the headers as stamped."""
    buf = bytearray(records)
    stamped: Batches = []
    for pos, header in batches:
        set_base_offset(buf, pos, offset)
        set_partition_leader_epoch(buf, pos, leader_epoch)
        header = dataclasses.replace(header, base_offset=offset, partition_leader_epoch=leader_epoch)
        stamped.append((pos, header))
        offset = header.next_offset
    return buf, stamped
