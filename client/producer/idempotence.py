"""The idempotent producer's producer id, epoch and sequences in doubt (KIP-98, KIP-360).

The part of Kafka's ``TransactionManager`` an idempotent, non-transactional producer needs
(aiokafka keeps it in ``producer/transaction_manager.py``): :class:`IdempotenceManager` asks a
broker for a producer id (InitProducerId) at start, and when a batch with sequence numbers fails
for good it decides whether the partition's sequences can simply be handed to the next batch
(the broker surely did not write it) or are in doubt. In doubt, KIP-360's **epoch bump**: the
producer keeps its id, takes the next epoch and starts every partition's sequences at 0. The
bump is what fences a batch given up on but still on its way: arriving after a batch of the new
epoch, it carries an older epoch and the leader refuses it with INVALID_PRODUCER_EPOCH (a new
producer id would be no fence: the old id is still in sequence). Kafka's Java client bumps the
epoch locally (``bumpIdempotentProducerEpoch``); floodmark asks the broker with InitProducerId
carrying the current id and epoch (v3's fields), which answers the next epoch, or a new id at
epoch 0 once the epoch is exhausted (docs/design.md "Idempotent producer"). While the producer
closes there is no bump: a refused batch still hands its sequences on. The per-partition
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
from client.protocol.errors import ErrorCode, KafkaError, ProtocolError

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
    """The producer id and epoch of one producer: the first at start, the next epoch when
    sequences are in doubt. ``wake`` tells the sender the bumped epoch is there; ``closed``
    stops the retries."""

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
        """The running epoch bump, if any."""
        return self._task

    async def init_producer_id(
        self, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """InitProducerId from any broker, retrying retriable errors for up to ``max_block_ms``.
        With ``producer_id`` and ``producer_epoch`` (KIP-360) the broker bumps that epoch;
        without, it hands out a new id. A malformed answer is retried like a lost one."""
        c = self._config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.max_block_ms / 1000
        body = {
            "transactional_id": None,
            "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
        }
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
            except ProtocolError as exc:  # a body that breaks the schema: as if it were lost
                error = KafkaError(ErrorCode.NETWORK_EXCEPTION, f"malformed InitProducerId response: {exc}")
                if conn is not None:
                    conn.close()
            remaining = deadline - loop.time()
            if not error.retriable or self.closed:
                raise error
            if remaining <= 0:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"no producer id within max_block_ms={c.max_block_ms} (last error {error})",
                )
            await asyncio.sleep(min(c.retry_backoff_ms / 1000, remaining))

    def after_failed_sequence(self, batch: ProducerBatch, error: KafkaError, bump: bool = True) -> None:
        """A batch with sequence numbers failed for good. If the broker surely did not write it,
        the next batch of its partition takes its sequences; otherwise what the broker holds for
        this producer is unknown (or, after a sequence error, known to disagree), so later
        batches go out at the next epoch, from sequence 0. ``bump=False`` (the producer is
        closing) keeps the current epoch: later batches continue the sequence."""
        acc = self._acc
        if (batch.producer_id, batch.producer_epoch) != (acc.producer_id, acc.producer_epoch):
            return  # that epoch has been given up already (or its bump is under way)
        if error.code not in SEQUENCE_ERRORS and not batch.maybe_written and acc.rewind_sequence(batch):
            return
        if not bump:
            log.warning(
                "producer id %d: the sequence of %s is in doubt after %s; closing, so no epoch bump",
                batch.producer_id,
                batch.tp,
                error.name,
            )
            return
        log.warning(
            "producer id %d: the sequence of %s is in doubt after %s; bumping epoch %d",
            batch.producer_id,
            batch.tp,
            error.name,
            batch.producer_epoch,
        )
        self._metrics["producer_id_resets"] += 1
        acc.set_producer_id(NO_PRODUCER_ID, -1)
        if self._task is None or self._task.done():
            bump_task = self._bump_epoch(batch.producer_id, batch.producer_epoch)
            self._task = asyncio.get_running_loop().create_task(bump_task)

    async def _bump_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """Until it succeeds or the producer closes: the next epoch of ``producer_id`` (or a new
        id from a broker that does not bump). Nothing ends this task early but cancellation."""
        while not self.closed:
            try:
                self._acc.set_producer_id(*await self.init_producer_id(producer_id, producer_epoch))
            except Exception as exc:  # noqa: BLE001 - never die with the producer id left at -1
                log.warning("cannot bump the epoch of producer id %d: %r", producer_id, exc)
                await asyncio.sleep(max(self._config.retry_backoff_ms, 1000) / 1000)
                continue
            self._wake()
            return
