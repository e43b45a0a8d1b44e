"""The asyncio producer (SPEC 6): partitioning, batching, acks, retries, delivery timeout.

``send`` partitions the record (murmur2 of the key, as the Java client; sticky or round-robin
for null keys), appends it to the :class:`~client.accumulator.RecordAccumulator` and returns a
future at once; it only waits for metadata (an unknown topic, up to ``max_block_ms``) and for
buffer space (``buffer_memory`` backpressure). A sender task drains ready batches, grouped by
partition leader into one Produce request per broker (at most
``max_in_flight_requests_per_connection`` outstanding per broker), and resolves each record's
future with its :class:`~client.types.RecordMetadata` (offset = base offset + index in batch).

**Ordering.** Per-partition order across retries is kept by allowing at most ONE in-flight
batch per partition: a failed batch goes back to the head of its partition's queue and nothing
behind it is sent until it succeeds or fails for good. Many partitions still share each
connection's in-flight window.

**Idempotence** (SPEC 5.4 and 6; Kafka's enable.idempotence, KIP-98, on by default since 3.0):
with ``acks="all"`` the producer is idempotent unless ``enable_idempotence=False``;
``enable_idempotence=True`` with another ``acks`` is a ValueError. ``start`` asks a broker for
a producer id (InitProducerId); each batch gets the id, epoch and its partition's next sequence
number the first time it is drained, and a retry resends the very same bytes, so a batch the
broker wrote but whose answer was lost is recognised as a duplicate and answered with its
original offsets instead of being written twice. A batch that fails for good with its sequence
in doubt (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, or an attempt that may have
been written: a timeout, a lost connection, leadership lost while parked) fails with the
broker's Kafka error, and the producer then takes a new producer id so that later batches start
clean at sequence 0 (the job KIP-360's epoch bump does in Kafka). A batch the broker surely
refused hands its sequence numbers to the next batch. Without idempotence, retries can
duplicate a batch whose response was lost: at-least-once.

**Errors.** Retriable errors (``errors.RETRIABLE``, connection loss = NETWORK_EXCEPTION) are
retried after ``retry_backoff_ms``, refreshing metadata first when the error is in
``errors.INVALIDATES_METADATA``, until ``retries`` or ``delivery_timeout_ms`` (since the batch
was created) runs out: then the futures fail with REQUEST_TIMED_OUT "...expired...". Other
errors fail the batch's futures with the broker's code and message. Failures are logged once per
batch; the per-record futures are marked retrieved so unawaited ones do not spam the log.

``acks=0`` writes the request without expecting a response and resolves offsets to -1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass

from client.accumulator import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SEQUENCE_MODULUS,
    ProducerBatch,
    RecordAccumulator,
    estimate_record_size,
)
from client.metadata import Cluster
from client.partitioner import make_partitioner, partition_for_key
from client.protocol.api import ApiKey
from client.protocol.errors import INVALIDATES_METADATA, RETRIABLE, ErrorCode, KafkaError
from client.protocol.records import COMPRESSION_CODECS, build_batch
from client.types import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

_ACKS = {0: 0, 1: 1, -1: -1, "0": 0, "1": 1, "-1": -1, "all": -1}
#: What an idempotent producer sends as InitProducerId.transaction_timeout_ms (Kafka's default
#: transaction.timeout.ms; the broker ignores it without a transactional id).
TRANSACTION_TIMEOUT_MS = 60000
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
#: Errors that mean the broker's sequence state for this producer and ours disagree.
SEQUENCE_ERRORS = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    }
)


@dataclass
class ProducerConfig:
    acks: int | str = 1  # 0, 1, -1 or "all" (== -1); normalised to an int
    linger_ms: int = 5
    batch_size: int = 16384
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120000
    request_timeout_ms: int = 30000
    max_in_flight_requests_per_connection: int = 5
    compression_type: str = "none"
    partitioner: str = "sticky"  # "sticky" | "round_robin"
    client_id: str = "floodmark-producer"
    buffer_memory: int = 33554432
    max_request_size: int = 1048576
    #: Beyond the brief, with Kafka's meaning: how long send() waits for an unknown topic's
    #: metadata or for buffer space, and how old metadata may get before a refresh.
    max_block_ms: int = 60000
    metadata_max_age_ms: int = 300000
    #: Kafka's enable.idempotence. None (the default): on exactly when acks is all (-1) and
    #: retries > 0, as Kafka 3.x decides it. True with another acks is an error.
    enable_idempotence: bool | None = None

    @property
    def idempotent(self) -> bool:
        if self.enable_idempotence is None:
            return self.acks == -1 and self.retries > 0
        return self.enable_idempotence

    def __post_init__(self) -> None:
        if isinstance(self.acks, str):
            self.acks = self.acks.strip().lower()
        if self.acks not in _ACKS or isinstance(self.acks, bool):
            raise ValueError(f"acks must be 0, 1, -1 or 'all', got {self.acks!r}")
        self.acks = _ACKS[self.acks]
        for name in (
            "batch_size",
            "request_timeout_ms",
            "delivery_timeout_ms",
            "max_in_flight_requests_per_connection",
            "buffer_memory",
            "max_request_size",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("linger_ms", "retries", "retry_backoff_ms", "max_block_ms", "metadata_max_age_ms"):
            if not isinstance(getattr(self, name), int | float) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative number, got {getattr(self, name)!r}")
        if self.compression_type not in COMPRESSION_CODECS:
            raise ValueError(
                f"compression_type must be one of {sorted(COMPRESSION_CODECS)}, got {self.compression_type!r}"
            )
        if self.compression_type != "none":
            try:
                build_batch([(None, b"probe", 0, [])], self.compression_type)
            except Exception as exc:
                raise ValueError(
                    f"compression_type {self.compression_type!r} is not usable here: {exc}"
                ) from None
        if self.partitioner not in ("sticky", "round_robin"):
            raise ValueError(f"partitioner must be 'sticky' or 'round_robin', got {self.partitioner!r}")
        if self.enable_idempotence is not None and not isinstance(self.enable_idempotence, bool):
            raise ValueError(
                f"enable_idempotence must be True, False or None, got {self.enable_idempotence!r}"
            )
        if self.enable_idempotence and self.acks != -1:
            raise ValueError(
                f"enable_idempotence=True needs acks='all' (-1), got acks={self.acks}: "
                "set acks='all' or enable_idempotence=False"
            )
        if self.enable_idempotence and self.retries == 0:
            raise ValueError(
                "enable_idempotence=True needs retries > 0: set retries or enable_idempotence=False"
            )


def config_with_overrides(config, overrides: dict, what: str):
    """``dataclasses.replace`` that names unknown option(s) in its ValueError."""
    names = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(
            f"unknown {what} option(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})"
        )
    return dataclasses.replace(config, **overrides) if overrides else config


class Producer:
    """Use ``async with Producer("h:9092", acks="all") as p: await p.send_and_wait("t", b"v")``."""

    def __init__(self, bootstrap_servers, config: ProducerConfig | None = None, **overrides) -> None:
        self.config = config_with_overrides(config or ProducerConfig(), overrides, "producer")
        c = self.config
        self._cluster = Cluster(
            bootstrap_servers,
            c.client_id,
            request_timeout_ms=c.request_timeout_ms,
            metadata_max_age_ms=c.metadata_max_age_ms,
            retry_backoff_ms=c.retry_backoff_ms,
        )
        self._acc = RecordAccumulator(c.batch_size, c.linger_ms, c.retry_backoff_ms, c.delivery_timeout_ms)
        self._partitioner = make_partitioner(c.partitioner)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sender: asyncio.Task | None = None
        self._wakeup: asyncio.Future | None = None
        self._requests: set[asyncio.Task] = set()
        self._in_flight: dict[int, int] = {}
        self._metadata_task: asyncio.Task | None = None
        self._producer_id_task: asyncio.Task | None = None
        self._space_waiters: list[asyncio.Future] = []
        self._topics: set[str] = set()
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._started = False
        self._closing = False
        self._closed = False
        self.metrics: dict[str, int] = {
            "records_sent": 0,
            "records_failed": 0,
            "batches_sent": 0,
            "batches_retried": 0,
            "batches_failed": 0,
            "requests_sent": 0,
            "errors": 0,
            "producer_id_resets": 0,
        }

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def producer_id(self) -> int:
        """The current producer id (-1 without idempotence or while a new one is fetched)."""
        return self._acc.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._acc.producer_epoch

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        await self._cluster.start()
        if self.config.idempotent:
            try:
                self._acc.set_producer_id(*await self._init_producer_id())
            except BaseException:
                await self._cluster.close()
                raise
        self._started = True
        self._sender = self._loop.create_task(self._run_sender(), name="floodmark-producer-sender")

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Send everything buffered (waiting at most ``timeout`` seconds), then close. Records
        still undelivered at the timeout fail with REQUEST_TIMED_OUT."""
        if self._closed:
            return
        self._closing = True
        self._acc.closing = True
        self._wake()
        if self._started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drain(), timeout)
        aborted = self._acc.abort_all()
        if aborted:
            error = KafkaError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"producer closed before {sum(b.record_count for b in aborted)} record(s) were delivered (expired)",
            )
            for batch in aborted:
                self._fail_batch(batch, error, log_it=False)
            log.warning("%s", error)
        self._closed = True
        tasks = [
            t
            for t in (self._sender, self._metadata_task, self._producer_id_task, *self._requests)
            if t is not None
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._release_space()
        await self._cluster.close()

    async def _drain(self) -> None:
        while True:
            batches = self._acc.batches()
            if not batches:
                return
            self._wake()
            await asyncio.wait([self._waiter_for(b) for b in batches])

    # -- sending --------------------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future:
        """Append a record; return a future of its RecordMetadata as soon as it is in a batch.

        Raises at once (instead of returning a failed future) for what is wrong before any
        batching: closed producer, bad argument types, a topic absent from metadata after
        ``max_block_ms`` (UNKNOWN_TOPIC_OR_PARTITION), a partition that does not exist, or a
        record larger than ``max_request_size`` / ``buffer_memory`` (MESSAGE_TOO_LARGE)."""
        if self._closing:
            raise RuntimeError("producer is closed")
        if not self._started:
            raise RuntimeError("producer is not started: call await producer.start() first")
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
        if key is not None and not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        info = self._cluster.metadata.topics.get(topic)
        if info is None or not info.partition_ids:
            await self._wait_on_metadata(topic)
            info = self._cluster.metadata.topics[topic]
        if headers:
            headers = list(headers)
            for header in headers:
                if not (
                    isinstance(header, tuple | list)
                    and len(header) == 2
                    and isinstance(header[0], str)
                    and (header[1] is None or isinstance(header[1], bytes))
                ):
                    raise TypeError(f"headers must be (str, bytes) pairs, got {header!r}")
        else:
            headers = []
        size = estimate_record_size(key, value, headers)
        if size > self.config.max_request_size or size > self.config.buffer_memory:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record for topic {topic!r} is about {size} bytes, larger than max_request_size="
                f"{self.config.max_request_size} or buffer_memory={self.config.buffer_memory}",
            )
        if self._acc.buffered_bytes + size > self.config.buffer_memory:
            await self._wait_for_space(size)
            info = self._cluster.metadata.topics.get(topic) or info
        acc = self._acc
        now = self._loop.time() * 1000.0
        if partition is None:
            ids = info.partition_ids
            if key is not None:
                partition = partition_for_key(bytes(key), len(ids))
            else:
                partition = self._partitioner.partition(topic, ids, info.available)
                if acc.would_open_batch(self._tp(topic, partition), size):
                    partition = self._partitioner.on_new_batch(topic, ids, info.available, partition)
        elif partition not in info.partitions:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {partition} of topic {topic!r} does not exist (it has {len(info.partition_ids)})",
            )
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        future = self._loop.create_future()
        _, wake = acc.append(self._tp(topic, partition), key, value, timestamp_ms, headers, now, future, size)
        if wake:
            self._wake()
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> RecordMetadata:
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def flush(self) -> None:
        """Send every record appended so far at once (ignoring linger) and wait for all of them
        to be acknowledged or to fail."""
        batches = self._acc.batches()
        if not batches:
            return
        self._acc.begin_flush()
        self._wake()
        try:
            await asyncio.wait([self._waiter_for(b) for b in batches])
        finally:
            self._acc.end_flush()

    async def partitions_for(self, topic: str) -> list[int]:
        return list(await self._wait_on_metadata(topic))

    # -- send() helpers -------------------------------------------------------------------------
    def _tp(self, topic: str, partition: int) -> TopicPartition:
        key = (topic, partition)
        tp = self._tps.get(key)
        if tp is None:
            tp = self._tps[key] = TopicPartition(topic, partition)
        return tp

    async def _wait_on_metadata(self, topic: str) -> list[int]:
        self._topics.add(topic)
        return await self._cluster.wait_for_topic(topic, self.config.max_block_ms)

    async def _wait_for_space(self, size: int) -> None:
        deadline = self._loop.time() + self.config.max_block_ms / 1000
        while self._acc.buffered_bytes > 0 and self._acc.buffered_bytes + size > self.config.buffer_memory:
            if self._closing:
                raise RuntimeError("producer is closed")
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"buffer_memory ({self.config.buffer_memory} bytes) stayed full for max_block_ms="
                    f"{self.config.max_block_ms}: records are produced faster than the brokers take them",
                )
            waiter = self._loop.create_future()
            self._space_waiters.append(waiter)
            self._wake()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, remaining)

    def _release_space(self) -> None:
        waiters, self._space_waiters = self._space_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _waiter_for(self, batch: ProducerBatch) -> asyncio.Future:
        if batch.waiter is None:
            batch.waiter = self._loop.create_future()
            if batch.done:
                batch.waiter.set_result(None)
        return batch.waiter

    # -- the sender -----------------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _run_sender(self) -> None:
        loop = self._loop
        while not self._closed:
            self._wakeup = loop.create_future()
            try:
                deadline = self._sender_step(loop.time() * 1000.0)
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
                timer = loop.call_later(delay, self._wake)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()

    def _sender_step(self, now: float) -> float | None:
        """One pass: expire, drain ready batches to their leaders. Returns when to run again
        (None: only when woken)."""
        for batch in self._acc.expire(now):
            self._fail_batch(batch, self._expired_error(batch, now))
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
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
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
            self._wake()

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
        except KafkaError as exc:
            if exc.code == ErrorCode.REQUEST_TIMED_OUT:
                self._cluster.drop_connection(node)  # responses come in order: this one is stuck
            if exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                self._cluster.invalidate()
            for batch in batches:
                self._handle_error(batch, node, exc.code, exc.message)
            return
        finally:
            self._in_flight[node] = self._in_flight.get(node, 1) - 1
            self._wake()
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
        if code in RETRIABLE and not self._closed:
            if self._acc.is_expired(batch, now + self.config.retry_backoff_ms):
                self._fail_batch(batch, self._expired_error(batch, now, error))
            elif batch.attempts > self.config.retries:
                self._fail_batch(batch, error)
            else:
                log.debug("retrying after %s", error)
                self.metrics["batches_retried"] += 1
                self._acc.reenqueue(batch, now, error)
        else:
            self._fail_batch(batch, error)

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
        self._finish(batch)

    def _fail_batch(self, batch: ProducerBatch, error: KafkaError, log_it: bool = True) -> None:
        self._acc.complete(batch)
        if batch.base_sequence != NO_SEQUENCE and not self._closing:
            self._after_failed_sequence(batch, error)
        for future in batch.handles:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: logged below once per batch, not once per record
        self.metrics["records_failed"] += batch.record_count
        self.metrics["batches_failed"] += 1
        if log_it:
            log.warning("%s", error)
        self._finish(batch)

    # -- idempotence: producer ids and sequences in doubt (SPEC 5.4) -------------------------------
    async def _init_producer_id(self) -> tuple[int, int]:
        """InitProducerId from any broker, retrying retriable errors for up to ``max_block_ms``."""
        c = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.max_block_ms / 1000
        body = {"transactional_id": None, "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS}
        while True:
            conn = None
            try:
                conn = await self._cluster.any_connection()
                response = await conn.request(
                    ApiKey.INIT_PRODUCER_ID, body, timeout=c.request_timeout_ms / 1000
                )
                if response["error_code"] == ErrorCode.NONE:
                    log.debug("producer id %d, epoch %d", response["producer_id"], response["producer_epoch"])
                    return response["producer_id"], response["producer_epoch"]
                error = KafkaError(response["error_code"], "InitProducerId failed")
            except KafkaError as exc:
                error = exc
                if exc.code == ErrorCode.REQUEST_TIMED_OUT and conn is not None:
                    conn.close()  # responses come in order: this connection is stuck
            remaining = deadline - loop.time()
            if not error.retriable or self._closed:
                raise error
            if remaining <= 0:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"no producer id within max_block_ms={c.max_block_ms} (last error {error})",
                )
            await asyncio.sleep(min(c.retry_backoff_ms / 1000, remaining))

    def _after_failed_sequence(self, batch: ProducerBatch, error: KafkaError) -> None:
        """A batch with sequence numbers failed for good. If the broker surely did not write it,
        the next batch of its partition takes its sequences; otherwise what the broker holds for
        this producer is unknown (or, after a sequence error, known to disagree), so later
        batches go out under a new producer id, from sequence 0."""
        if batch.producer_id != self._acc.producer_id:
            return  # that producer id has been given up already
        if error.code not in SEQUENCE_ERRORS and not batch.maybe_written and self._acc.rewind_sequence(batch):
            return
        log.warning(
            "producer id %d: the sequence of %s is in doubt after %s; fetching a new producer id",
            batch.producer_id,
            batch.tp,
            error.name,
        )
        self.metrics["producer_id_resets"] += 1
        self._acc.set_producer_id(NO_PRODUCER_ID, -1)
        if self._producer_id_task is None or self._producer_id_task.done():
            self._producer_id_task = self._loop.create_task(self._refetch_producer_id())

    async def _refetch_producer_id(self) -> None:
        while not self._closed:
            try:
                self._acc.set_producer_id(*await self._init_producer_id())
            except KafkaError as exc:
                log.warning("cannot get a new producer id: %s", exc)
                await asyncio.sleep(max(self.config.retry_backoff_ms, 1000) / 1000)
                continue
            self._wake()
            return

    def _finish(self, batch: ProducerBatch) -> None:
        if batch.waiter is not None and not batch.waiter.done():
            batch.waiter.set_result(None)
        if self._space_waiters:
            self._release_space()
