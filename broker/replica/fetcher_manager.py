"""The replica fetcher manager (Kafka's AbstractFetcherManager / ReplicaFetcherManager): LeaderAndIsr
adds and removes the partitions this broker follows, and each goes to the
:class:`~broker.replica.fetcher.ReplicaFetcher` of its leader at the leader's current endpoint
(docs/guarantees.md "No acknowledged write lost, no divergence").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from broker.replica.fetcher import ConnectionFactory, ReplicaFetcher, open_connection
from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class ReplicaFetcherManager:
    """Adds and removes partitions from per-leader fetchers as LeaderAndIsr says."""

    def __init__(self, replica_manager: ReplicaManager, connect: ConnectionFactory = open_connection) -> None:
        self.rm = replica_manager
        self._open = connect
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._owner: dict[TopicPartition, int] = {}
        self._stopping: dict[asyncio.Task, None] = {}  # insertion-ordered: awaited in start order

    def add_partition(self, tp: TopicPartition, leader: dict, leader_epoch: int) -> None:
        self.remove_partition(tp)
        self._fetcher_for(leader).add(tp, leader_epoch)
        self._owner[tp] = leader["id"]

    def _fetcher_for(self, leader: dict) -> ReplicaFetcher:
        """The fetcher for ``leader`` at its current endpoint. When its host or port changed (it
        restarted with another listener), a new fetcher takes over every partition of the old
        one, fetch state and all, and the old one stops. (Kafka's addFetcherForPartitions shuts
        the old thread down and drops its other partitions until a LeaderAndIsr re-adds them.)"""
        current = self.fetchers.get(leader["id"])
        endpoint = (leader["host"], leader["port"])
        if current is not None and (current.leader_host, current.leader_port) == endpoint:
            return current
        fetcher = self.fetchers[leader["id"]] = ReplicaFetcher(self.rm, leader, self._open)
        if current is not None:
            moved = current.detach()
            log.info("%s: leader now at %s:%s; moving %d partitions", current.name, *endpoint, len(moved))
            for tp, state in moved.items():
                fetcher.adopt(tp, replace(state))  # a new object: the old task's answers no longer apply
            task = asyncio.get_running_loop().create_task(current.stop())
            self._stopping[task] = None
            task.add_done_callback(lambda done: self._stopping.pop(done, None))
        return fetcher

    def remove_partition(self, tp: TopicPartition) -> None:
        owner = self._owner.pop(tp, None)
        if owner is not None and owner in self.fetchers:
            self.fetchers[owner].remove(tp)

    def fetching(self) -> dict[TopicPartition, int]:
        return dict(self._owner)

    async def shutdown(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        for task in list(self._stopping):
            await task
        self.fetchers.clear()
        self._owner.clear()
