"""The user-facing asyncio producer (Kafka's KafkaProducer, aiokafka's AIOKafkaProducer).

``send`` partitions the record (murmur2 of the key, as the Java client; sticky or round-robin
for null keys, KIP-480), appends it to the
:class:`~client.producer.accumulator.RecordAccumulator` and returns a future at once; it only
waits for metadata (an unknown topic, up to ``max_block_ms``) and for buffer space
(``buffer_memory`` backpressure). The :class:`~client.producer.sender.Sender` drains the
batches and resolves the futures; the
:class:`~client.producer.idempotence.IdempotenceManager` holds the producer id (KIP-98).

**Ordering.** Per-partition order across retries is kept by allowing at most ONE in-flight
batch per partition: a failed batch goes back to the head of its partition's queue and nothing
behind it is sent until it succeeds or fails for good. Many partitions still share each
connection's in-flight window.

**Idempotence** (Kafka's enable.idempotence, KIP-98, on by default since 3.0): with
``acks="all"`` the producer is idempotent unless ``enable_idempotence=False``;
``enable_idempotence=True`` with another ``acks`` is a ValueError. ``start`` asks a broker for
a producer id (InitProducerId); each batch gets the id, epoch and its partition's next sequence
number the first time it is drained, and a retry resends the very same bytes, so a batch the
broker wrote but whose answer was lost is recognised as a duplicate and answered with its
original offsets instead of being written twice. A batch that fails for good with its sequence
in doubt makes the producer bump its epoch (KIP-360), which fences that batch should it still
reach the leader later. Without idempotence,
retries can duplicate a batch whose response was lost: at-least-once. See docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from client.config import config_with_overrides
from client.metadata import ClientRuntime, Cluster
from client.partitioner import make_partitioner, partition_for_key
from client.producer.accumulator import ProducerBatch, RecordAccumulator, estimate_record_size
from client.producer.config import ProducerConfig
from client.producer.idempotence import IdempotenceManager
from client.producer.sender import Sender
from client.protocol.errors import ErrorCode, KafkaError
from client.types import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)


class Producer:
    """Use ``async with Producer("h:9092", acks="all") as p: await p.send_and_wait("t", b"v")``."""

    def __init__(
        self,
        bootstrap_servers,
        config: ProducerConfig | None = None,
        *,
        runtime: ClientRuntime | None = None,
        **overrides,
    ) -> None:
        """``runtime``: connections, clocks and randomness (default: the real ones)."""
        self.config = config_with_overrides(config or ProducerConfig(), overrides, "producer")
        c = self.config
        runtime = runtime or ClientRuntime()
        self._wall_clock_ms = runtime.wall_clock_ms
        self._cluster = Cluster.for_client(bootstrap_servers, c, runtime)
        self._cluster.allow_auto_topic_creation = True  # Kafka's producer asks for it, always
        self._acc = RecordAccumulator(c.batch_size, c.linger_ms, c.retry_backoff_ms, c.delivery_timeout_ms)
        self._partitioner = make_partitioner(c.partitioner, runtime.rng)
        self._loop: asyncio.AbstractEventLoop | None = None
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
        self._idempotence = IdempotenceManager(c, self._cluster, self._acc, self.metrics, self._wake)
        self._sender = Sender(
            c, self._cluster, self._acc, self._idempotence, self.metrics, self._topics, self._finish
        )

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
                self._acc.set_producer_id(*await self._idempotence.init_producer_id())
            except BaseException:
                await self._cluster.close()
                raise
        self._started = True
        self._sender.start(self._loop)

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
        self._closing = self._sender.closing = True
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
                self._sender.fail_batch(batch, error, log_it=False)
            log.warning("%s", error)
        self._closed = self._sender.closed = self._idempotence.closed = True
        tasks = self._sender.tasks()
        if self._idempotence.task is not None:
            tasks.append(self._idempotence.task)
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
            timestamp_ms = self._wall_clock_ms()
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

    def _wake(self) -> None:
        self._sender.wake()

    def _waiter_for(self, batch: ProducerBatch) -> asyncio.Future:
        if batch.waiter is None:
            batch.waiter = self._loop.create_future()
            if batch.done:
                batch.waiter.set_result(None)
        return batch.waiter

    def _finish(self, batch: ProducerBatch) -> None:
        if batch.waiter is not None and not batch.waiter.done():
            batch.waiter.set_result(None)
        if self._space_waiters:
            self._release_space()
