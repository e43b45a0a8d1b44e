"""The idempotent producer's producer id, epoch and sequences in doubt (KIP-98, KIP-360).

The part of Kafka's ``TransactionManager`` an idempotent, non-transactional producer needs
(aiokafka keeps it in ``producer/transaction_manager.py``): :class:`IdempotenceManager` asks a
broker for a producer id (InitProducerId) at start, and when a batch with sequence numbers fails
for good it decides whether the partition's sequences can simply be handed to the next batch
(the broker surely did not write it) or are in doubt, in which case later batches go out under a
new producer id from sequence 0 - the job KIP-360's epoch bump does in Kafka. The per-partition
sequence bookkeeping itself is the accumulator's (:mod:`client.producer.accumulator`). See
docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from client.metadata import Cluster
from client.producer.accumulator import NO_PRODUCER_ID, ProducerBatch, RecordAccumulator
from client.producer.config import ProducerConfig
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

#: What an idempotent producer sends as InitProducerId.transaction_timeout_ms (Kafka's default
#: transaction.timeout.ms; the broker ignores it without a transactional id).
TRANSACTION_TIMEOUT_MS = 60000
#: Errors that mean the broker's sequence state for this producer and ours disagree.
SEQUENCE_ERRORS = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    }
)


class IdempotenceManager:
    """Producer ids for one producer: the first at start, a new one when sequences are in doubt.
    ``wake`` tells the sender a new id is there; ``closed`` stops the retries."""

    def __init__(
        self,
        config: ProducerConfig,
        cluster: Cluster,
        accumulator: RecordAccumulator,
        metrics: dict[str, int],
        wake: Callable[[], None],
    ) -> None:
        self._config = config
        self._cluster = cluster
        self._acc = accumulator
        self._metrics = metrics
        self._wake = wake
        self._task: asyncio.Task | None = None
        self.closed = False

    @property
    def task(self) -> asyncio.Task | None:
        """The running fetch of a new producer id, if any."""
        return self._task

    async def init_producer_id(self) -> tuple[int, int]:
        """InitProducerId from any broker, retrying retriable errors for up to ``max_block_ms``."""
        c = self._config
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
            if not error.retriable or self.closed:
                raise error
            if remaining <= 0:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"no producer id within max_block_ms={c.max_block_ms} (last error {error})",
                )
            await asyncio.sleep(min(c.retry_backoff_ms / 1000, remaining))

    def after_failed_sequence(self, batch: ProducerBatch, error: KafkaError) -> None:
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
        self._metrics["producer_id_resets"] += 1
        self._acc.set_producer_id(NO_PRODUCER_ID, -1)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._refetch_producer_id())

    async def _refetch_producer_id(self) -> None:
        while not self.closed:
            try:
                self._acc.set_producer_id(*await self.init_producer_id())
            except KafkaError as exc:
                log.warning("cannot get a new producer id: %s", exc)
                await asyncio.sleep(max(self._config.retry_backoff_ms, 1000) / 1000)
                continue
            self._wake()
            return
