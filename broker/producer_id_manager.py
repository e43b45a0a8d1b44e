"""Producer ids for InitProducerId, unique cluster-wide (KIP-98; Kafka's
ZkProducerIdManager; docs/design.md "Idempotent producer").

Each broker claims blocks of :data:`~zk.data.PRODUCER_ID_BLOCK_SIZE` (1000) ids from
ZooKeeper's ``/latest_producer_id_block`` with a conditional write
(:func:`zk.client.allocate_producer_id_block`) and hands them out one by one; only every
thousandth InitProducerId touches ZooKeeper. Ids of a block a broker did not use before it
stopped are skipped, never reused. The idempotent producer starts every new id at epoch 0.

KIP-360's epoch bump (:func:`bumped_epoch`): an InitProducerId that carries the caller's
producer id and epoch gets the same id at the next epoch, or a new id at epoch 0 once the epoch
would pass :data:`MAX_PRODUCER_EPOCH` (Short.MaxValue). Without a transactional id there is no
coordinator state to check the caller's epoch against, so the bump is stateless: the broker
bumps what the client sends (docs/design.md "Idempotent producer").
"""

from __future__ import annotations

import asyncio
import logging

from zk.bridge import ZkBridge
from zk.client import allocate_producer_id_block
from zk.data import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock

log = logging.getLogger(__name__)

INITIAL_PRODUCER_EPOCH = 0
#: Producer epochs are int16 in RecordBatch v2: Kafka's Short.MaxValue.
MAX_PRODUCER_EPOCH = 2**15 - 1
NO_PRODUCER_ID = -1


class InvalidProducerIdAndEpoch(ValueError):
    """An InitProducerId (producer id, epoch) pair no producer can hold."""


def bumped_epoch(producer_id: int, producer_epoch: int) -> int | None:
    """The epoch an InitProducerId carrying ``(producer_id, producer_epoch)`` returns with the
    same id, or None when a new id is due (none given, or the epoch is exhausted). Raises
    :class:`InvalidProducerIdAndEpoch` for a pair no producer holds (one of the two unset, an epoch out of range)."""
    if producer_id == NO_PRODUCER_ID and producer_epoch == -1:
        return None
    if producer_id < 0 or not 0 <= producer_epoch <= MAX_PRODUCER_EPOCH:
        raise InvalidProducerIdAndEpoch(
            f"producer_id {producer_id} with producer_epoch {producer_epoch}: give both (an id >= 0 "
            f"and an epoch in 0..{MAX_PRODUCER_EPOCH}) or neither (-1, -1)"
        )
    return None if producer_epoch == MAX_PRODUCER_EPOCH else producer_epoch + 1


class ProducerIdManager:
    def __init__(self, broker_id: int, zk: ZkBridge, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.block_size = block_size
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()  # one ZooKeeper claim at a time; ids come out in order

    async def generate_producer_id(self) -> int:
        """The next unused producer id; claims a new block when this one is spent. Raises what
        the ZooKeeper write raises (the caller answers with a retriable error)."""
        async with self._lock:
            if self._block is None or self._next > self._block.block_end:
                self._block = await allocate_producer_id_block(self.zk, self.broker_id, self.block_size)
                self._next = self._block.block_start
            producer_id = self._next
            self._next += 1
            return producer_id

    async def init_producer_id(
        self, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """InitProducerId without a transactional id: the caller's id at the next epoch (KIP-360)
        or a new id at epoch 0. Raises :class:`InvalidProducerIdAndEpoch` for an impossible
        (id, epoch) pair, else what :meth:`generate_producer_id` raises."""
        epoch = bumped_epoch(producer_id, producer_epoch)
        if epoch is not None:
            return producer_id, epoch
        return await self.generate_producer_id(), INITIAL_PRODUCER_EPOCH
