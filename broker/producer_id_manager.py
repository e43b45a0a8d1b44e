"""Producer ids for InitProducerId, unique cluster-wide (KIP-98; Kafka's
ZkProducerIdManager; docs/design.md "Idempotent producer").

Each broker claims blocks of :data:`~zk.data.PRODUCER_ID_BLOCK_SIZE` (1000) ids from
ZooKeeper's ``/latest_producer_id_block`` with a conditional write
(:func:`zk.client.allocate_producer_id_block`) and hands them out one by one; only every
thousandth InitProducerId touches ZooKeeper. Ids of a block a broker did not use before it
stopped are skipped, never reused. The idempotent producer starts every new id at epoch 0.
"""

from __future__ import annotations

import asyncio
import logging

from zk.bridge import ZkBridge
from zk.client import allocate_producer_id_block
from zk.data import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock

log = logging.getLogger(__name__)

INITIAL_PRODUCER_EPOCH = 0


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
