"""A read-only view of the cluster's znodes for the benchmarks, bounded in time.

The failover benchmark (:mod:`bench.failover`) watches ZooKeeper while a partition leader is
down, to split the failover time into the session timeout (the broker's ephemeral
``/brokers/ids/<id>`` goes, Kafka's ``BrokerIdZNode``) and the controller's election (the
partition's ``/brokers/topics/<t>/partitions/<p>/state`` znode, Kafka's
``TopicPartitionStateZNode``, names a new leader). Every call runs kazoo in a thread under
``asyncio.wait_for``, so a stuck session fails the round instead of hanging it. The znode layout
is the one :mod:`zk.paths` spells (docs/design.md "The ZooKeeper client layer").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zk.data import decode_controller, decode_partition_state
from zk.paths import BROKER_IDS_PATH, CONTROLLER_PATH, partition_state_path

ZK_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PartitionState:
    """A partition's state znode as the benchmark prints it (decoded by :func:`zk.data.decode_partition_state`)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int

    def describe(self) -> str:
        isr = ",".join(str(i) for i in self.isr)
        return f"leader {self.leader}, leader_epoch {self.leader_epoch}, isr [{isr}], zkVersion {self.zk_version}"


class ZooKeeperView:
    """A kazoo session for reading the cluster's znodes from asyncio, every call bounded."""

    def __init__(self, connect: str) -> None:
        from kazoo.client import KazooClient

        self._client = KazooClient(hosts=connect, timeout=ZK_CALL_TIMEOUT_S)

    async def start(self) -> None:
        await asyncio.wait_for(
            asyncio.to_thread(self._client.start, ZK_CALL_TIMEOUT_S), ZK_CALL_TIMEOUT_S + 5
        )

    async def stop(self) -> None:
        def stop() -> None:
            self._client.stop()
            self._client.close()

        await asyncio.wait_for(asyncio.to_thread(stop), ZK_CALL_TIMEOUT_S)

    async def _call(self, func: Callable[[], Any]) -> Any:
        return await asyncio.wait_for(asyncio.to_thread(func), ZK_CALL_TIMEOUT_S)

    async def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        from kazoo.exceptions import NoNodeError

        def read() -> PartitionState | None:
            try:
                data, stat = self._client.get(partition_state_path(topic, partition))
            except NoNodeError:
                return None
            state = decode_partition_state(data, stat.version)
            lai = state.leader_and_isr
            return PartitionState(
                lai.leader, lai.leader_epoch, lai.isr, state.controller_epoch, lai.zk_version
            )

        return await self._call(read)

    async def registered(self) -> list[int]:
        from kazoo.exceptions import NoNodeError

        def read() -> list[int]:
            try:
                return sorted(int(c) for c in self._client.get_children(BROKER_IDS_PATH) if c.isdigit())
            except NoNodeError:
                return []

        return await self._call(read)

    async def controller(self) -> int | None:
        from kazoo.exceptions import NoNodeError

        def read() -> int | None:
            try:
                return decode_controller(self._client.get(CONTROLLER_PATH)[0])
            except (NoNodeError, ValueError, KeyError, TypeError):
                return None

        return await self._call(read)
