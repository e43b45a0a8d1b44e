"""Per-producer sequence state of one partition: the idempotent producer's broker half
(Kafka's ProducerStateManager, KIP-98 and KIP-360; docs/design.md "Idempotent producer").

Sans-IO: it sees batch headers (:class:`~client.protocol.records.BatchHeader`), never records,
and costs O(1) per batch. The :class:`~broker.log.log.Log` owns one, feeds it every batch it
writes (leader or follower) and stores its snapshots.

For each producer id it remembers the producer epoch and the metadata of the last
:data:`NUM_BATCHES_TO_RETAIN` (5) batches: first and last sequence, first and last offset.

A leader checks every batch that carries a producer id before it assigns offsets
(:meth:`ProducerStateManager.check_append`), with Kafka 3.x's rules:

* same epoch, same first and last sequence as one of the last 5 batches: a **duplicate** (a
  retry whose first answer was lost). Nothing is appended; the caller answers NONE with the
  original offsets. As in Kafka, the first duplicate found in a record set decides for all of it.
* an epoch older than the one we know: INVALID_PRODUCER_EPOCH (47, KIP-588).
* same epoch, first sequence not last sequence + 1 (with wrap-around after 2^31 - 1):
  OUT_OF_ORDER_SEQUENCE_NUMBER (45). This includes a retry older than the 5-batch window.
* a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
* an **unknown producer id accepts any first sequence**. This is Kafka's behaviour since
  KIP-360 (2.5): the producer's state may have gone with retention, so the broker cannot tell
  a gap from a producer whose earlier batches were deleted. (Older Kafka answered
  UNKNOWN_PRODUCER_ID, 59; current brokers never do.)
* a batch with a producer id but no base sequence is INVALID_RECORD, as Kafka's LogValidator.

Followers and log recovery only :meth:`~ProducerStateManager.update` (no checks: the leader
already decided), which is how the duplicate window survives a leader change.

Snapshots (:meth:`~ProducerStateManager.to_bytes`) are Kafka's ``<offset>.snapshot`` idea:
the state of every batch below ``map_end_offset``, so a reload replays only the batches after
it. Unlike Kafka's, which keep only the last batch per producer, ours keep all 5. Every
snapshot version so far (1) stores each producer's last timestamp, so expiration needs no
format change.

Expiration (Kafka's ``removeExpiredProducers``, ``producer.id.expiration.ms``; docs/operations.md
"Broker configuration"): each producer keeps the max timestamp of its last batch
(``last_timestamp``, Kafka's ``lastTimestamp``: the batch's own CreateTime, not the broker's
clock). :meth:`~ProducerStateManager.remove_expired_producers` drops every producer whose last
timestamp is ``expiration_ms`` or more before now; the log runs it periodically and after a
load, so neither memory nor snapshots grow with every producer that ever wrote. The documented
trade, as in Kafka: a producer silent for longer than that is forgotten, so a late retry of one
of its batches is no longer recognised as a duplicate (an unknown producer accepts any sequence,
KIP-360) and is written again; a batch without a timestamp (-1) expires at the next check.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

import crc32c
import msgpack

from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
MAX_SEQUENCE = 2**31 - 1
SNAPSHOT_VERSION = 1
_CRC = struct.Struct(">I")


class CorruptSnapshot(Exception):
    """A producer snapshot that fails its CRC or does not parse."""


class BatchMetadata(NamedTuple):
    """One batch of a producer (a tuple: built for every idempotent batch on the produce path)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class ProducerStateEntry:
    """One producer id: its epoch and its last (up to) 5 batches, oldest first."""

    __slots__ = ("batches", "last_timestamp", "producer_epoch", "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int, last_timestamp: int = -1) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_timestamp = last_timestamp
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata, timestamp: int) -> None:
        if epoch != self.producer_epoch:  # a new epoch starts a new window
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(batch)  # the deque's maxlen drops the oldest beyond 5
        self.last_timestamp = timestamp

    def copy(self) -> ProducerStateEntry:
        entry = ProducerStateEntry(self.producer_id, self.producer_epoch, self.last_timestamp)
        entry.batches.extend(self.batches)
        return entry

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerStateEntry) and (
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            list(self.batches),
        ) == (other.producer_id, other.producer_epoch, other.last_timestamp, list(other.batches))

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(id={self.producer_id}, epoch={self.producer_epoch}, "
            f"last_timestamp={self.last_timestamp}, batches={list(self.batches)})"
        )


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


class ProducerStateManager:
    """The producer state of one partition replica. ``map_end_offset``: every batch below it
    has been folded in (Kafka's mapEndOffset)."""

    def __init__(self, map_end_offset: int = 0) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = map_end_offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def __len__(self) -> int:
        return len(self.producers)

    # -- the leader's checks --------------------------------------------------------------------

    def check_append(self, headers: Iterable[BatchHeader]) -> BatchMetadata | None:
        """Check the batches of one record set before it is written (offsets not yet assigned).

        Returns the original batch when one of them duplicates a batch already in the log (the
        caller must then write nothing and answer with its offsets); None when all may be
        written. Raises KafkaError with Kafka's code otherwise. Changes nothing: the caller
        calls :meth:`update` for each batch once it has been written."""
        pending: dict[int, tuple[int, int]] | None = None  # earlier batches of this record set
        for header in headers:
            producer_id = header.producer_id
            if producer_id == NO_PRODUCER_ID:
                continue
            epoch, first_seq = header.producer_epoch, header.base_sequence
            if first_seq < 0:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD,
                    f"invalid sequence number {first_seq} in a batch of producer {producer_id}",
                )
            batch_last_seq = header.last_sequence
            earlier = pending.get(producer_id) if pending is not None else None
            if earlier is None:
                entry = self.producers.get(producer_id)
                if entry is None:
                    current_epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE
                else:
                    duplicate = entry.find_duplicate(epoch, first_seq, batch_last_seq)
                    if duplicate is not None:
                        return duplicate
                    current_epoch, last_seq = entry.producer_epoch, entry.last_seq
            else:
                current_epoch, last_seq = earlier
            if epoch < current_epoch:
                raise KafkaError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {producer_id}'s epoch {epoch} is older than the current epoch {current_epoch}",
                )
            if epoch != current_epoch:
                if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"invalid sequence number for new epoch {epoch} of producer {producer_id}: "
                        f"{first_seq} (must be 0; current epoch {current_epoch})",
                    )
            elif not in_sequence(last_seq, first_seq):
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"out of order sequence number for producer {producer_id} (epoch {epoch}): "
                    f"{first_seq} (incoming seq. number), {last_seq} (current end sequence number)",
                )
            if pending is None:
                pending = {}
            pending[producer_id] = (epoch, batch_last_seq)
        return None

    # -- folding in written batches -------------------------------------------------------------

    def update(self, header: BatchHeader) -> None:
        """Fold in one batch as written (final offsets). The leader calls it after
        :meth:`check_append`; followers and log recovery call it alone."""
        producer_id = header.producer_id
        if producer_id != NO_PRODUCER_ID and header.base_sequence >= 0:
            entry = self.producers.get(producer_id)
            if entry is None:
                entry = self.producers[producer_id] = ProducerStateEntry(producer_id, header.producer_epoch)
            first = header.base_offset
            last = first + header.last_offset_delta
            entry.add_batch(
                header.producer_epoch,
                BatchMetadata(header.base_sequence, header.last_sequence, first, last),
                header.max_timestamp,
            )
        self.map_end_offset = header.base_offset + header.last_offset_delta + 1

    # -- expiration ----------------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget every producer whose last batch's max timestamp is ``expiration_ms`` or more
        before ``now_ms`` (Kafka's isProducerExpired; there are no transactions to keep one
        alive). Returns the ids removed, in no particular order."""
        expired = [
            pid for pid, entry in self.producers.items() if now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return expired

    def clear(self, map_end_offset: int) -> None:
        self.producers.clear()
        self.map_end_offset = map_end_offset

    def copy(self) -> ProducerStateManager:
        other = ProducerStateManager(self.map_end_offset)
        other.producers = {pid: entry.copy() for pid, entry in self.producers.items()}
        return other

    # -- snapshots ------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """A CRC-32C-guarded msgpack snapshot of the whole state."""
        payload = msgpack.packb(
            [
                SNAPSHOT_VERSION,
                self.map_end_offset,
                [
                    [
                        e.producer_id,
                        e.producer_epoch,
                        e.last_timestamp,
                        [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches],
                    ]
                    for e in self.producers.values()
                ],
            ]
        )
        return _CRC.pack(crc32c.crc32c(payload)) + payload

    @classmethod
    def from_bytes(cls, data: bytes) -> ProducerStateManager:
        if len(data) < _CRC.size:
            raise CorruptSnapshot(f"a producer snapshot needs at least {_CRC.size} bytes, got {len(data)}")
        (crc,) = _CRC.unpack_from(data)
        payload = memoryview(data)[_CRC.size :]
        if crc32c.crc32c(payload) != crc:
            raise CorruptSnapshot("the producer snapshot fails its CRC")
        try:
            version, map_end_offset, producers = msgpack.unpackb(payload)
            if version != SNAPSHOT_VERSION:
                raise CorruptSnapshot(f"unknown producer snapshot version {version}")
            state = cls(int(map_end_offset))
            for producer_id, epoch, timestamp, batches in producers:
                entry = ProducerStateEntry(int(producer_id), int(epoch), int(timestamp))
                entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
                state.producers[entry.producer_id] = entry
        except CorruptSnapshot:
            raise
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise CorruptSnapshot(f"the producer snapshot does not parse: {exc}") from None
        return state
