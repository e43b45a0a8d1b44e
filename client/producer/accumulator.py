"""The producer's record accumulator: per-partition batches, sans-IO.

Kafka's RecordAccumulator reduced to its rules, with every time passed in as an argument so a
fake clock drives the unit tests:

* :meth:`RecordAccumulator.append` adds a record to the open batch of its partition, or opens a
  new one when there is none or the record does not fit in ``batch_size`` (a record bigger than
  ``batch_size`` gets a batch of its own).
* :meth:`RecordAccumulator.ready` lists the batches the sender may send now: the head batch of
  each partition that is not *muted*, not backing off, and either full (another batch queues
  behind it, or it reached ``batch_size``), lingered ``linger_ms``, or flushed / closing. It also
  says when the next batch will become ready, so the sender can sleep until then.
* **One in-flight batch per partition**: :meth:`mark_in_flight` mutes the partition until
  :meth:`complete` or :meth:`reenqueue`. A retried batch stays at the head of its partition's
  queue, so per-partition order survives retries without idempotence (at the price of one
  round trip per partition at a time; many partitions still share a connection).
* :meth:`expire` removes batches (not in flight) older than ``delivery_timeout_ms``.
* ``buffered_bytes`` counts the estimated size of every batch not yet completed, for the
  producer's ``buffer_memory`` backpressure.
* **Sequence numbers** (the idempotent producer, KIP-98; Kafka's TransactionManager
  bookkeeping): :meth:`assign_sequence` stamps a batch with the producer id, epoch and its
  partition's next sequence the first time it is drained, and closes it; a retry resends the
  same bytes with the same sequence. Because only one batch per partition is in flight, the
  sequences a partition's broker sees are exactly consecutive, whatever is retried.
  :meth:`rewind_sequence` hands a batch's sequences to the next batch when the broker surely
  did not write it; :meth:`set_producer_id` (a new producer id or epoch, KIP-360) restarts
  every partition at 0.

The accumulator never touches futures: each record carries an opaque ``handle`` the producer
resolves when the batch completes. See docs/guarantees.md.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from client.types import TopicPartition

#: Bytes a record costs beyond key, value and headers (varint lengths, deltas, attributes):
#: Kafka's DefaultRecord worst case is 21; this is an estimate for batching, not a limit.
RECORD_OVERHEAD = 16
#: RecordBatch v2 header.
BATCH_OVERHEAD = 61
#: Sequence numbers are int32 and wrap to 0 after 2^31 - 1, as in Kafka.
SEQUENCE_MODULUS = 2**31
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


def estimate_record_size(key: bytes | None, value: bytes | None, headers: list | tuple | None) -> int:
    size = RECORD_OVERHEAD
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        for name, hvalue in headers:
            size += len(name) + (len(hvalue) if hvalue is not None else 0) + 2
    return size


@dataclass(eq=False, slots=True)
class ProducerBatch:
    """Records bound for one partition, sent and acknowledged together."""

    tp: TopicPartition
    created_ms: float
    records: list[tuple[bytes | None, bytes | None, int, list]] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    size: int = BATCH_OVERHEAD
    attempts: int = 0
    retry_at_ms: float = 0.0
    closed: bool = False  # no more appends (it has been drained once)
    in_flight: bool = False
    done: bool = False
    payload: bytes | None = None  # the encoded RecordBatch, built once and reused on retries
    last_error: Any = None
    waiter: Any = None  # opaque to the accumulator: the producer's "batch finished" future, if any
    hold_until_metadata: int | None = None  # the producer's: resend only with metadata newer than this
    producer_id: int = NO_PRODUCER_ID  # idempotence: fixed at the first drain, kept on retries
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    maybe_written: bool = False  # the producer's: some attempt ended without a clear "not written"

    @property
    def record_count(self) -> int:
        return len(self.records)


@dataclass(slots=True)
class ReadyResult:
    batches: list[ProducerBatch]
    #: The earliest time (ms, same clock as ``now_ms``) a waiting batch becomes ready; None if none.
    next_ready_ms: float | None


class RecordAccumulator:
    def __init__(
        self, batch_size: int, linger_ms: float, retry_backoff_ms: float, delivery_timeout_ms: float
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.buffered_bytes = 0
        self._flushes = 0
        self.closing = False
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}

    # -- appending ------------------------------------------------------------------------------
    def would_open_batch(self, tp: TopicPartition, size: int) -> bool:
        """True if appending a record of ``size`` bytes to ``tp`` now would open a new batch
        (the sticky partitioner moves on when this happens, KIP-480)."""
        queue = self._queues.get(tp)
        if not queue:
            return True
        last = queue[-1]
        return last.closed or last.size + size > self.batch_size

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: list,
        now_ms: float,
        handle: Any = None,
        size: int | None = None,
    ) -> tuple[ProducerBatch, bool]:
        """Add one record. Returns its batch and whether the sender should be woken (a batch was
        opened - it needs a linger timer - or became full)."""
        if size is None:
            size = estimate_record_size(key, value, headers)
        self.buffered_bytes += size
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        elif queue:
            last = queue[-1]
            if not last.closed and last.size + size <= self.batch_size:
                last.records.append((key, value, timestamp_ms, headers))
                last.handles.append(handle)
                last.size += size
                return last, last.size >= self.batch_size
        batch = ProducerBatch(tp, now_ms)
        batch.records.append((key, value, timestamp_ms, headers))
        batch.handles.append(handle)
        batch.size += size
        self.buffered_bytes += BATCH_OVERHEAD
        queue.append(batch)
        return batch, True

    # -- draining -------------------------------------------------------------------------------
    def ready(self, now_ms: float) -> ReadyResult:
        ready: list[ProducerBatch] = []
        next_ready: float | None = None
        expedite = self._flushes > 0 or self.closing
        for queue in self._queues.values():
            if not queue:
                continue
            head = queue[0]
            if head.in_flight:
                continue  # muted: one in-flight batch per partition
            if head.attempts and head.retry_at_ms > now_ms:
                at = head.retry_at_ms
            elif expedite or head.closed or len(queue) > 1 or head.size >= self.batch_size:
                ready.append(head)
                continue
            else:
                at = head.created_ms + self.linger_ms
                if at <= now_ms:
                    ready.append(head)
                    continue
            if next_ready is None or at < next_ready:
                next_ready = at
        return ReadyResult(ready, next_ready)

    def mark_in_flight(self, batch: ProducerBatch) -> None:
        """The batch is being sent: close it to appends and mute its partition."""
        batch.closed = True
        batch.in_flight = True
        batch.attempts += 1

    def complete(self, batch: ProducerBatch) -> None:
        """The batch is finished (acknowledged or failed for good): remove it, unmute its partition."""
        if batch.done:
            return
        batch.done = True
        batch.in_flight = False
        queue = self._queues.get(batch.tp)
        if queue:
            if queue[0] is batch:
                queue.popleft()
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(batch)
            if not queue:
                del self._queues[batch.tp]
        self.buffered_bytes -= batch.size

    def reenqueue(self, batch: ProducerBatch, now_ms: float, error: Any = None) -> None:
        """A retriable failure: the batch stays at the head of its partition and is sent again
        after ``retry_backoff_ms``."""
        batch.in_flight = False
        batch.retry_at_ms = now_ms + self.retry_backoff_ms
        batch.last_error = error

    def is_expired(self, batch: ProducerBatch, now_ms: float) -> bool:
        return now_ms - batch.created_ms >= self.delivery_timeout_ms

    def expire(self, now_ms: float) -> list[ProducerBatch]:
        """Remove and return every batch not in flight that outlived ``delivery_timeout_ms``."""
        expired: list[ProducerBatch] = []
        limit = now_ms - self.delivery_timeout_ms
        for queue in list(self._queues.values()):
            for batch in queue:
                if not batch.in_flight and batch.created_ms <= limit:
                    expired.append(batch)
        for batch in expired:
            self.complete(batch)
        return expired

    def next_expiry_ms(self) -> float | None:
        oldest = None
        for queue in self._queues.values():
            for batch in queue:
                if not batch.in_flight and (oldest is None or batch.created_ms < oldest):
                    oldest = batch.created_ms
        return None if oldest is None else oldest + self.delivery_timeout_ms

    # -- sequence numbers (idempotence) ---------------------------------------------------------
    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch (or NO_PRODUCER_ID while one is being fetched): every
        partition's sequence starts again at 0. Batches already stamped keep their old id, epoch
        and sequence."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next_sequence.clear()

    def next_sequence(self, tp: TopicPartition) -> int:
        return self._next_sequence.get(tp, 0)

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Stamp ``batch`` with the producer id and its partition's next sequence, once."""
        if batch.base_sequence != NO_SEQUENCE:
            return
        if self.producer_id == NO_PRODUCER_ID:
            raise RuntimeError("no producer id to stamp the batch with")
        sequence = self._next_sequence.get(batch.tp, 0)
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        batch.base_sequence = sequence
        batch.closed = True  # its sequence range is fixed: no more records
        self._next_sequence[batch.tp] = (sequence + batch.record_count) % SEQUENCE_MODULUS

    def rewind_sequence(self, batch: ProducerBatch) -> bool:
        """The broker surely did not write ``batch``: its partition's next batch takes over its
        sequence numbers. False when that is not possible (another producer id by now, or later
        sequences were handed out), in which case the producer needs a new producer id."""
        if (batch.producer_id, batch.producer_epoch) != (self.producer_id, self.producer_epoch):
            return False
        end = (batch.base_sequence + batch.record_count) % SEQUENCE_MODULUS
        if self._next_sequence.get(batch.tp) != end:
            return False
        self._next_sequence[batch.tp] = batch.base_sequence
        return True

    # -- flush / close --------------------------------------------------------------------------
    def begin_flush(self) -> None:
        """Until :meth:`end_flush`, every batch is ready at once, lingering or not."""
        self._flushes += 1

    def end_flush(self) -> None:
        self._flushes = max(0, self._flushes - 1)

    def batches(self) -> list[ProducerBatch]:
        return [batch for queue in self._queues.values() for batch in queue]

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every batch (for a forced close)."""
        everything = self.batches()
        for batch in everything:
            self.complete(batch)
        return everything

    @property
    def has_unsent(self) -> bool:
        return any(self._queues.values())

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())
