"""The producer's sender: drains ready batches to partition leaders and completes them.

aiokafka's ``producer/sender.py`` (Kafka's ``Sender``): a background task wakes when a batch
becomes ready (or when woken), groups ready batches by partition leader into one Produce
request per broker (at most ``max_in_flight_requests_per_connection`` outstanding per broker),
and resolves each record's future with its :class:`~client.types.RecordMetadata`
(offset = base offset + index in batch).

Retriable errors (``errors.RETRIABLE``, connection loss = NETWORK_EXCEPTION) send the batch back
to the head of its partition's queue after ``retry_backoff_ms``, holding it until newer metadata
when the error is in ``errors.INVALIDATES_METADATA``, until ``retries`` or
``delivery_timeout_ms`` runs out: then its futures fail with REQUEST_TIMED_OUT "...expired...".
Each retried error is warned as Kafka's Sender warns it, rate-limited per partition and error
(:mod:`client.producer.retry_warnings`), so a long run of retries never looks like a hang.
Other errors fail the batch with the broker's code and message, logged once per batch. A failed
batch with sequence numbers goes to the :class:`~client.producer.idempotence.IdempotenceManager`.
An answer the sender cannot use (a body that breaks the schema, ``api.InvalidBody``, or any other
surprise) counts as a lost answer, NETWORK_EXCEPTION: the batch is retried, never left in flight.
``acks=0`` writes the request without expecting a response and resolves offsets to -1.
See docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from client.metadata import Cluster
from client.producer.accumulator import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SEQUENCE_MODULUS,
    ProducerBatch,
    RecordAccumulator,
)
from client.producer.config import ProducerConfig
from client.producer.idempotence import IdempotenceManager
from client.producer.retry_warnings import RetryWarnings
from client.protocol.api import ApiKey
from client.protocol.errors import INVALIDATES_METADATA, RETRIABLE, ErrorCode, KafkaError
from client.protocol.records import build_batch
from client.types import RecordMetadata

log = logging.getLogger(__name__)

#: Produce errors after which the broker surely did not write the batch (checks made before the
#: append). After any other error the batch may be in the log.
NOT_APPENDED = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.INVALID_RECORD,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_PRODUCER_ID,
    }
)


class Sender:
    """The sender task of one producer. ``topics`` is the producer's set of topics in use (for
    metadata refreshes); ``on_done`` is called with every batch that completed or failed.
    ``closing`` (close began: no epoch bump after a failure, though sequences are still
    rewound) and ``closed`` (no more retries) are set by the producer."""

    def __init__(
        self,
        config: ProducerConfig,
        cluster: Cluster,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager,
        metrics: dict[str, int],
        topics: set[str],
        on_done: Callable[[ProducerBatch], None],
    ) -> None:
        self.config = config
        self._cluster = cluster
        self._acc = accumulator
        self._idempotence = idempotence
        self.metrics = metrics
        self._topics = topics
        self._on_done = on_done
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wakeup: asyncio.Future | None = None
        self._requests: dict[asyncio.Task, None] = {}  # insertion-ordered: cancelled in send order
        self._in_flight: dict[int, int] = {}
        self._metadata_task: asyncio.Task | None = None
        self._retry_warnings = RetryWarnings()
        self.closing = False
        self.closed = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task = loop.create_task(self._run(), name="floodmark-producer-sender")

    def tasks(self) -> list[asyncio.Task]:
        """Every task the sender runs, for the producer to cancel at close."""
        return [t for t in (self._task, self._metadata_task, *self._requests) if t is not None]

    def wake(self) -> None:
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _run(self) -> None:
        loop = self._loop
        while not self.closed:
            self._wakeup = loop.create_future()
            try:
                deadline = self.step(loop.time() * 1000.0)
            except Exception:
                log.exception("producer sender step failed; continuing")
                deadline = loop.time() * 1000.0 + self.config.retry_backoff_ms
            waiter = self._wakeup
            if waiter.done():
                continue
            timer = None
            if deadline is not None:
                delay = (deadline - loop.time() * 1000.0) / 1000
                if delay <= 0:
                    continue
                timer = loop.call_later(delay, self.wake)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()

    def step(self, now: float) -> float | None:
        """One pass: expire, drain ready batches to their leaders. Returns when to run again
        (None: only when woken)."""
        for batch in self._acc.expire(now):
            self.fail_batch(batch, self._expired_error(batch, now))
        ready = self._acc.ready(now)
        deadline = ready.next_ready_ms
        expiry = self._acc.next_expiry_ms()
        if expiry is not None and (deadline is None or expiry < deadline):
            deadline = expiry
        cluster = self._cluster
        version = cluster.metadata.version
        need_metadata = cluster.needs_refresh()
        by_node: dict[int, list[ProducerBatch]] = {}
        # Idempotence: while a new producer id is being fetched, only batches that already have
        # their sequence numbers (retries) may go; the id task wakes the sender when it is back.
        awaiting_id = self.config.idempotent and self._acc.producer_id == NO_PRODUCER_ID
        for batch in ready.batches:
            if awaiting_id and batch.base_sequence == NO_SEQUENCE:
                continue
            # A batch that failed because metadata was stale waits for a newer version of it;
            # a batch whose partition has no leader waits too. Others go ahead.
            held = batch.hold_until_metadata is not None and version <= batch.hold_until_metadata
            leader = None if held else cluster.leader_for(batch.tp)
            if leader is None:
                need_metadata = True
                continue
            by_node.setdefault(leader, []).append(batch)
        for node, batches in by_node.items():
            self._dispatch(node, batches)
        if need_metadata and self._topics:
            cluster.invalidate()
            self._refresh_metadata_soon()
        return deadline

    def _dispatch(self, node: int, batches: list[ProducerBatch]) -> None:
        c = self.config
        idempotent = c.idempotent
        in_flight = self._in_flight.get(node, 0)
        i = 0
        while i < len(batches) and in_flight < c.max_in_flight_requests_per_connection:
            request: list[ProducerBatch] = []
            size = 0
            while i < len(batches):
                batch = batches[i]
                if batch.payload is None:
                    # Built once, so closed to appends now (even if it waits for the next
                    # request): a retry resends these bytes, sequence numbers included.
                    batch.closed = True
                    if idempotent:
                        self._acc.assign_sequence(batch)
                    batch.payload = build_batch(
                        batch.records,
                        c.compression_type,
                        producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence,
                    )
                if request and size + len(batch.payload) > c.max_request_size:
                    break
                request.append(batch)
                size += len(batch.payload)
                i += 1
            for batch in request:
                self._acc.mark_in_flight(batch)
            in_flight += 1
            task = self._loop.create_task(self._produce(node, request))
            self._requests[task] = None
            task.add_done_callback(lambda done: self._requests.pop(done, None))
        self._in_flight[node] = in_flight

    def _refresh_metadata_soon(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = self._loop.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            await self._cluster.maybe_refresh(sorted(self._topics))
        except KafkaError as exc:
            log.warning("producer metadata refresh failed: %s", exc)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self.wake()

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        c = self.config
        topics: dict[str, list[dict]] = {}
        for batch in batches:
            topics.setdefault(batch.tp[0], []).append({"partition": batch.tp[1], "records": batch.payload})
        body = {
            "acks": c.acks,
            "timeout_ms": c.request_timeout_ms,
            "transactional_id": None,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
        }
        self.metrics["requests_sent"] += 1
        try:
            conn = await self._cluster.connection(node)
            if c.acks == 0:
                conn.send(ApiKey.PRODUCE, body, expect_response=False)
                for batch in batches:
                    self._complete_batch(batch, -1, -1)
                return
            # The broker answers by timeout_ms; give the answer a little longer to arrive.
            wait_ms = c.request_timeout_ms + min(5000, max(500, c.request_timeout_ms // 10))
            response = await conn.request(ApiKey.PRODUCE, body, timeout=wait_ms / 1000)
        except Exception as exc:  # noqa: BLE001 - whatever happened, no batch stays in flight
            error = _as_kafka_error(exc, node)
            if error.code == ErrorCode.REQUEST_TIMED_OUT or error is not exc:
                self._cluster.drop_connection(node)  # stuck, or speaking something else
            if error.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                self._cluster.invalidate()
            for batch in batches:
                self._handle_error(batch, node, error.code, error.message)
            return
        finally:
            self._in_flight[node] = self._in_flight.get(node, 1) - 1
            self.wake()
        try:
            self._complete_request(node, batches, response)
        except Exception as exc:  # noqa: BLE001 - an answer we cannot use: as if it were lost
            error = _as_kafka_error(exc, node)
            for batch in batches:
                self._handle_error(batch, node, error.code, error.message)

    def _complete_request(self, node: int, batches: list[ProducerBatch], response: dict) -> None:
        results = {(t["topic"], p["partition"]): p for t in response["topics"] for p in t["partitions"]}
        for batch in batches:
            result = results.get(batch.tp)
            if result is None:
                self._handle_error(
                    batch, node, ErrorCode.UNKNOWN_SERVER_ERROR, "the produce response omitted it"
                )
            elif result["error_code"] == ErrorCode.NONE:
                self._complete_batch(batch, result["base_offset"], result["log_append_time"])
            else:
                self._handle_error(batch, node, result["error_code"], result.get("error_message"))

    # -- completing batches ---------------------------------------------------------------------
    def _handle_error(self, batch: ProducerBatch, node: int, code: int, message: str | None) -> None:
        if batch.done:
            return
        self.metrics["errors"] += 1
        if code not in NOT_APPENDED:
            batch.maybe_written = True  # a timeout, a lost connection, leadership lost while parked...
        error = KafkaError(
            code,
            f"produce of {batch.record_count} record(s) to {batch.tp} on broker {node} failed: {message or ''}",
        )
        if code in INVALIDATES_METADATA:
            self._cluster.invalidate()
        if code in INVALIDATES_METADATA or code == ErrorCode.NETWORK_EXCEPTION:
            batch.hold_until_metadata = self._cluster.metadata.version
        now = self._loop.time() * 1000.0
        if code in RETRIABLE and not self.closed:
            if self._acc.is_expired(batch, now + self.config.retry_backoff_ms):
                self.fail_batch(batch, self._expired_error(batch, now, error))
            elif batch.attempts > self.config.retries:
                self.fail_batch(batch, error)
            else:
                log.debug("retrying after %s", error)
                topic, partition = batch.tp
                left_ms = self.config.delivery_timeout_ms - (now - batch.created_ms)
                warning = self._retry_warnings.on_retry(
                    now, topic, partition, code, self.config.retries - batch.attempts, left_ms
                )
                if warning is not None:
                    log.warning("%s", warning)
                self.metrics["batches_retried"] += 1
                self._acc.reenqueue(batch, now, error)
        else:
            self.fail_batch(batch, error)

    def _expired_error(self, batch: ProducerBatch, now: float, last: KafkaError | None = None) -> KafkaError:
        last = last or batch.last_error
        return KafkaError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"expiring {batch.record_count} record(s) for {batch.tp}: {now - batch.created_ms:.0f} ms has passed "
            f"since batch creation (delivery_timeout_ms={self.config.delivery_timeout_ms}, "
            f"{batch.attempts} attempt(s)" + (f", last error {last}" if last else "") + ")",
        )

    def _complete_batch(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if batch.done:
            return
        self._acc.complete(batch)
        topic, partition = batch.tp
        self._retry_warnings.clear(topic, partition)
        records = batch.records
        producer_id, base_sequence = batch.producer_id, batch.base_sequence
        for i, future in enumerate(batch.handles):
            if not future.done():
                offset = base_offset + i if base_offset >= 0 else -1
                ts = log_append_time if log_append_time >= 0 else records[i][2]
                sequence = (base_sequence + i) % SEQUENCE_MODULUS if base_sequence != NO_SEQUENCE else -1
                future.set_result(RecordMetadata(topic, partition, offset, ts, producer_id, sequence))
        self.metrics["records_sent"] += len(records)
        self.metrics["batches_sent"] += 1
        self._on_done(batch)

    def fail_batch(self, batch: ProducerBatch, error: KafkaError, log_it: bool = True) -> None:
        self._acc.complete(batch)
        if batch.base_sequence != NO_SEQUENCE:
            # While closing the sequence is still rewound; only the epoch bump is skipped.
            self._idempotence.after_failed_sequence(batch, error, bump=not self.closing)
        for future in batch.handles:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: logged below once per batch, not once per record
        self.metrics["records_failed"] += batch.record_count
        self.metrics["batches_failed"] += 1
        if log_it:
            log.warning("%s", error)
        self._on_done(batch)


def _as_kafka_error(exc: Exception, node: int) -> KafkaError:
    """A produce attempt's failure as a KafkaError: a malformed answer (a ProtocolError such as
    api.InvalidBody) or any other surprise counts as a lost answer, NETWORK_EXCEPTION: retried,
    the batch maybe written."""
    if isinstance(exc, KafkaError):
        return exc
    log.warning("produce to broker %d: unusable answer: %r", node, exc)
    return KafkaError(ErrorCode.NETWORK_EXCEPTION, f"unusable produce response from broker {node}: {exc!r}")
