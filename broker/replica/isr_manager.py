"""Leader-side ISR management: shrink, expand, and change propagation (SPEC 5.4; seed 001
"ISR副本" and "分区HW值" on ISR change; seed 003 "ISR"; Kafka's Partition.maybeShrinkIsr /
maybeExpandIsr and ReplicaManager.maybePropagateIsrChanges).

The decisions (who is out of sync, who may rejoin, what the new ISR is) come from the sans-IO
:class:`~broker.replica.partition.Partition`; this module does the ZooKeeper I/O around them:

* **Shrink** ("isr-expiration", every ``replica.lag.time.max.ms`` / 2): each partition this
  broker leads drops the followers that have not caught up within the lag time.
* **Expand** (on a follower FETCH): a follower whose LEO reached the HW and the start offset of
  the current leader epoch is added back. The fetch path is synchronous, so the write runs as
  a task; a partition has at most one ISR write in flight.
* Every change is written to the state znode with :func:`controller.zk.update_leader_and_isr`,
  conditional on the zkVersion the leader knows. Only a successful write changes the in-memory
  ISR and zkVersion (:meth:`Partition.complete_isr_update`); a failed one (BADVERSION: the
  controller moved the partition on; or ZooKeeper unreachable) leaves the ISR as it was, so a
  deposed leader, or one cut off from ZooKeeper, can never shrink the ISR to itself. There is
  no client-side timeout on the write: a write abandoned by us could still land, and the leader
  would then disagree with ZooKeeper; kazoo completes or fails every request itself.
* After a change the replica manager re-evaluates the HW and wakes the purgatories (parked
  acks=all requests may now succeed or fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND).
* **Propagation** ("isr-change-propagation", every 2.5 s): changed partitions are announced in
  one ``/isr_change_notification/isr_change_<seq>`` once no change came for 5 s, or 60 s after
  the previous announcement (Kafka's constants), so a flapping ISR does not flood the
  controller, which answers each notification with UpdateMetadata to every broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.replica.partition import IsrChange, IsrChangeKind, Partition
from controller import zk as zkpaths
from controller.zk import LeaderAndIsr, TopicPartition

if TYPE_CHECKING:
    from broker.log import Log
    from controller.zk import ZkBridge

log = logging.getLogger(__name__)

ISR_CHANGE_PROPAGATION_INTERVAL_MS = 2_500  # how often the propagation check runs
ISR_CHANGE_PROPAGATION_BLACKOUT_MS = 5_000  # announce once no change came for this long ...
ISR_CHANGE_PROPAGATION_MAX_DELAY_MS = 60_000  # ... or this long after the previous announcement


class IsrStore(Protocol):
    """Where ISR changes are written and announced: ZooKeeper in a broker."""

    async def update_leader_and_isr(
        self, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None: ...

    async def propagate_isr_change(self, partitions: list[TopicPartition]) -> None: ...


class ZkIsrStore:
    """The ZooKeeper-backed :class:`IsrStore` (SPEC 3: the state znode and /isr_change_notification)."""

    def __init__(self, zk: ZkBridge) -> None:
        self.zk = zk

    async def update_leader_and_isr(
        self, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        return await zkpaths.update_leader_and_isr(self.zk, tp, leader_and_isr, controller_epoch)

    async def propagate_isr_change(self, partitions: list[TopicPartition]) -> None:
        await zkpaths.propagate_isr_change(self.zk, partitions)


@dataclass
class IsrChangeTracker:
    """Kafka's isrChangeSet / lastIsrChangeMs / lastIsrPropagationMs, sans-IO."""

    last_propagation_ms: int
    blackout_ms: int = ISR_CHANGE_PROPAGATION_BLACKOUT_MS
    max_delay_ms: int = ISR_CHANGE_PROPAGATION_MAX_DELAY_MS
    pending: set[TopicPartition] = field(default_factory=set)
    last_change_ms: int = 0

    def record(self, tp: TopicPartition, now_ms: int) -> None:
        self.pending.add(tp)
        self.last_change_ms = now_ms

    def take_due(self, now_ms: int) -> list[TopicPartition]:
        """The partitions to announce now (and forget), or [] when it is not yet time."""
        if not self.pending:
            return []
        quiet = now_ms - self.last_change_ms > self.blackout_ms
        overdue = now_ms - self.last_propagation_ms > self.max_delay_ms
        if not (quiet or overdue):
            return []
        due = sorted(self.pending)
        self.pending.clear()
        self.last_propagation_ms = now_ms
        return due

    def restore(self, partitions: Iterable[TopicPartition]) -> None:
        """Put back partitions whose announcement failed; the next check retries them."""
        self.pending.update(partitions)


class IsrManager:
    def __init__(
        self,
        store: IsrStore,
        broker_id: int,
        replica_lag_time_max_ms: int,
        time_ms: Callable[[], int],
        state_change_log: Callable[[dict], None],
        on_isr_changed: Callable[[Partition], None],
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.time_ms = time_ms
        self.state_change_log = state_change_log
        self.on_isr_changed = on_isr_changed
        self.changes = IsrChangeTracker(last_propagation_ms=time_ms())
        self.isr_shrinks = 0  # SPEC 9's IsrShrinks / IsrExpands
        self.isr_expands = 0
        self.failed_isr_updates = 0
        self._tasks: set[asyncio.Task] = set()

    # -- decisions in, writes out -----------------------------------------------------------------
    def maybe_shrink_isr(self, leaders: Iterable[tuple[Partition, Log]]) -> int:
        """isr-expiration: start a conditional write for every led partition with out-of-sync
        followers. Returns how many writes were started."""
        started = 0
        now = self.time_ms()
        for partition, log_ in leaders:
            change = partition.shrink_isr_decision(now, self.replica_lag_time_max_ms, log_.log_end_offset)
            if change is not None:
                self._submit(partition, change, log_)
                started += 1
        return started

    def maybe_expand_isr(self, partition: Partition, replica_id: int, log_: Log) -> bool:
        """On a follower FETCH (after its fetch state and the HW were updated)."""
        change = partition.expand_isr_decision(replica_id, log_.high_watermark)
        if change is None:
            return False
        self._submit(partition, change, log_)
        return True

    def _submit(self, partition: Partition, change: IsrChange, log_: Log) -> None:
        prefix = f"[Partition {partition.topic}-{partition.partition} broker={self.broker_id}]"
        isr_from, isr_to = _ids(change.old_isr), _ids(change.new_isr)
        if change.kind is IsrChangeKind.SHRINK:
            lagging = ", ".join(
                f"(brokerId: {r}, endOffset: {partition.remote_replicas[r].log_end_offset})"
                for r in change.replicas
                if r in partition.remote_replicas
            )
            log.info(
                "%s Shrinking ISR from %s to %s. Leader: (highWatermark: %d, endOffset: %d). Out of sync replicas: %s.",
                prefix,
                isr_from,
                isr_to,
                log_.high_watermark,
                log_.log_end_offset,
                lagging,
            )
        else:
            log.info("%s Expanding ISR from %s to %s", prefix, isr_from, isr_to)
        partition.begin_isr_update(change)
        task = asyncio.get_running_loop().create_task(
            self._write(partition, change, partition.controller_epoch),
            name=f"isr-{change.kind.value}-{prefix}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, partition: Partition, change: IsrChange, controller_epoch: int) -> bool:
        tp = TopicPartition(partition.topic, partition.partition)
        proposed = LeaderAndIsr(change.leader, change.leader_epoch, change.new_isr, change.zk_version)
        outcome = "written"
        written: LeaderAndIsr | None = None
        try:
            written = await self.store.update_leader_and_isr(tp, proposed, controller_epoch)
        except asyncio.CancelledError:
            partition.complete_isr_update(change, None)
            raise
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable or session lost: keep the ISR
            outcome = f"failed: {type(exc).__name__} {exc}"
            log.warning(
                "[Partition %s broker=%d] ISR update failed, ISR unchanged: %s", tp, self.broker_id, exc
            )
        if written is None and outcome == "written":
            outcome = "rejected: zkVersion mismatch"
            log.info(
                "[Partition %s broker=%d] Cached zkVersion %d not equal to that in zookeeper, skip updating ISR",
                tp,
                self.broker_id,
                change.zk_version,
            )
        applied = partition.complete_isr_update(change, None if written is None else written.zk_version)
        if written is not None:
            self.changes.record(tp, self.time_ms())  # the znode changed: announce it either way
            if not applied:
                outcome = "superseded: a newer LeaderAndIsr arrived meanwhile"
        if applied:
            if change.kind is IsrChangeKind.SHRINK:
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1
        else:
            self.failed_isr_updates += 1
        self.state_change_log(
            {
                "event": "IsrShrink" if change.kind is IsrChangeKind.SHRINK else "IsrExpand",
                "topic": partition.topic,
                "partition": partition.partition,
                "leader_epoch": change.leader_epoch,
                "old_isr": list(change.old_isr),
                "new_isr": list(change.new_isr),
                "replicas": list(change.replicas),
                "zk_version": change.zk_version,
                "new_zk_version": None if written is None else written.zk_version,
                "outcome": outcome,
            }
        )
        if applied:
            self.on_isr_changed(partition)
        return applied

    # -- propagation --------------------------------------------------------------------------------
    async def maybe_propagate_isr_changes(self) -> list[TopicPartition]:
        """isr-change-propagation: write one notification for the pending changes when due."""
        due = self.changes.take_due(self.time_ms())
        if not due:
            return []
        try:
            await self.store.propagate_isr_change(due)
        except Exception:
            self.changes.restore(due)
            raise
        log.debug("announced ISR changes of %s", ", ".join(str(tp) for tp in due))
        return due

    # -- lifecycle --------------------------------------------------------------------------------
    async def wait_idle(self) -> None:
        """Wait until no ISR write is in flight (tests; shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def _ids(replicas: Iterable[int]) -> str:
    return ",".join(str(r) for r in replicas)
