"""Leader-side ISR management: shrink, expand, and change propagation (Kafka's
Partition.maybeShrinkIsr / maybeExpandIsr and ReplicaManager.maybePropagateIsrChanges;
docs/design.md "ISR management").

The decisions (who is out of sync, who may rejoin, what the new ISR is) come from the sans-IO
:class:`~broker.replica.partition.Partition`; this module does the ZooKeeper I/O around them:

* **Shrink** ("isr-expiration", every ``replica.lag.time.max.ms`` / 2): each partition this
  broker leads drops the followers that have not caught up within the lag time.
* **Expand** (on a follower FETCH): a follower whose LEO reached the HW and the start offset of
  the current leader epoch is added back. The fetch path is synchronous, so the write runs as
  a task; a partition has at most one ISR write in flight.
* Every change is written to the state znode with :func:`zk.client.update_leader_and_isr`,
  conditional on the zkVersion the leader knows. Only a successful write changes the in-memory
  ISR and zkVersion (:meth:`Partition.complete_isr_update`); a failed one (BADVERSION: the
  controller moved the partition on; or ZooKeeper unreachable) leaves the ISR as it was, so a
  deposed leader, or one cut off from ZooKeeper, can never shrink the ISR to itself. There is
  no client-side timeout on the write: a write abandoned by us could still land, and the leader
  would then disagree with ZooKeeper; kazoo completes or fails every request itself.
* **A write's outcome unknown** (KAFKA-2729; Kafka's KafkaZkClient.retryRequestUntilConnected
  and ReplicationUtils.checkLeaderAndIsrZkData): ConnectionLoss or another ZooKeeper error after
  the request was sent may hide a write that landed. The leader then re-sends the *same*
  conditional write (ZooKeeper orders it after the first, and at most one of the two can match
  the version, so once it is answered the first one's fate is known); BADVERSION then means
  "read the znode": if it holds exactly what we wrote (leader, leader epoch, ISR, controller
  epoch) the write is ours and is adopted with the znode's zkVersion, otherwise another writer
  moved the znode on and, as in Kafka, the ISR stays as it was until the controller's
  LeaderAndIsr.
* **A refused write stays pending** (Kafka 2.7+ on INVALID_UPDATE_VERSION): BADVERSION does not
  prove ZooKeeper never held the change (our first send may have landed, its answer lost, and
  the controller rewritten the znode from it since; the bridge's own transparent resend can
  turn a landed write into BADVERSION). So the change's replicas keep counting in the HW, it is
  not re-sent, and no other ISR change is proposed until a LeaderAndIsr supersedes it: the HW
  never passes a replica that any ISR ZooKeeper may hold lists.
* While ZooKeeper stays unreachable the change stays pending
  (:meth:`Partition.defer_isr_update`): the HW keeps counting its replicas (KIP-497's maximal
  ISR), no other ISR change is proposed, and each isr-expiration tick tries to settle it again.
* After a change the replica manager re-evaluates the HW and wakes the purgatories: parked
  acks=all requests may now succeed. A shrink below min.insync.replicas holds the HW where it is
  (Kafka 3.7, KAFKA-15583) and fails nothing: the requests wait for the expand that brings the
  ISR back to the minimum, or for their timeout.
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
from client.types import TopicPartition
from zk.client import get_partition_state, holds_leader_and_isr, propagate_isr_change, update_leader_and_isr
from zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch

if TYPE_CHECKING:
    from broker.log import Log
    from zk.bridge import ZkBridge

log = logging.getLogger(__name__)

ISR_CHANGE_PROPAGATION_INTERVAL_MS = 2_500  # how often the propagation check runs
ISR_CHANGE_PROPAGATION_BLACKOUT_MS = 5_000  # announce once no change came for this long ...
ISR_CHANGE_PROPAGATION_MAX_DELAY_MS = 60_000  # ... or this long after the previous announcement
ISR_WRITE_SETTLE_ATTEMPTS = 3  # re-sends of a write whose outcome is unknown, per settling
ISR_WRITE_SETTLE_BACKOFF_S = 0.05  # before the second re-send; doubled for each further one


class IsrStore(Protocol):
    """Where ISR changes are written and announced: ZooKeeper in a broker."""

    async def update_leader_and_isr(
        self, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None: ...

    async def get_partition_state(self, tp: TopicPartition) -> LeaderIsrAndControllerEpoch | None: ...

    async def propagate_isr_change(self, partitions: list[TopicPartition]) -> None: ...


class ZkIsrStore:
    """The ZooKeeper-backed :class:`IsrStore` (the state znode and /isr_change_notification of
    docs/operations.md "ZooKeeper paths")."""

    def __init__(self, zk: ZkBridge) -> None:
        self.zk = zk

    async def update_leader_and_isr(
        self, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        return await update_leader_and_isr(self.zk, tp, leader_and_isr, controller_epoch)

    async def get_partition_state(self, tp: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
        return await get_partition_state(self.zk, tp)

    async def propagate_isr_change(self, partitions: list[TopicPartition]) -> None:
        await propagate_isr_change(self.zk, partitions)


@dataclass(frozen=True)
class WriteOutcome:
    """How an ISR write ended: ``written`` is the znode's state when it holds our change;
    ``known`` is False when ZooKeeper could not tell (the change stays pending)."""

    written: LeaderAndIsr | None
    known: bool
    text: str


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
        settle_attempts: int = ISR_WRITE_SETTLE_ATTEMPTS,
        settle_backoff_s: float = ISR_WRITE_SETTLE_BACKOFF_S,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.time_ms = time_ms
        self.state_change_log = state_change_log
        self.on_isr_changed = on_isr_changed
        self.settle_attempts = settle_attempts
        self.settle_backoff_s = settle_backoff_s
        self.changes = IsrChangeTracker(last_propagation_ms=time_ms())
        self.isr_shrinks = 0  # Kafka's IsrShrinksPerSec / IsrExpandsPerSec (docs/operations.md "Metrics")
        self.isr_expands = 0
        self.failed_isr_updates = 0
        self._tasks: dict[asyncio.Task, None] = {}  # insertion-ordered: cancelled in start order

    # -- decisions in, writes out -----------------------------------------------------------------
    def maybe_shrink_isr(self, leaders: Iterable[tuple[Partition, Log]]) -> int:
        """isr-expiration: start a conditional write for every led partition with out-of-sync
        followers, or settle again a pending change whose outcome is unknown. Returns how many
        writes were started."""
        started = 0
        now = self.time_ms()
        for partition, log_ in leaders:
            pending = partition.pending_isr_change
            if pending is not None and partition.resume_isr_update(pending):
                self._start(partition, pending, settling=True)
                started += 1
                continue
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
        self._start(partition, change, settling=False)

    def _start(self, partition: Partition, change: IsrChange, settling: bool) -> None:
        task = asyncio.get_running_loop().create_task(
            self._write(partition, change, settling),
            name=f"isr-{change.kind.value}-{partition.topic}-{partition.partition}",
        )
        self._tasks[task] = None
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def _write(self, partition: Partition, change: IsrChange, settling: bool = False) -> bool:
        tp = TopicPartition(partition.topic, partition.partition)
        proposed = LeaderAndIsr(change.leader, change.leader_epoch, change.new_isr, change.zk_version)
        try:
            if settling:
                outcome = await self._settle(partition, tp, change, proposed, "an unknown outcome")
            else:
                outcome = await self._write_once(partition, tp, change, proposed)
        except asyncio.CancelledError:
            partition.complete_isr_update(change, None)
            raise
        written = outcome.written
        if not outcome.known:
            partition.defer_isr_update(change)
            applied = False
        else:
            applied = partition.complete_isr_update(change, None if written is None else written.zk_version)
        text = outcome.text
        if written is not None:
            self.changes.record(tp, self.time_ms())  # the znode changed: announce it either way
            if not applied:
                text = "superseded: a newer LeaderAndIsr arrived meanwhile"
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
                "outcome": text,
            }
        )
        # The ISR changed: the HW may move and parked requests may complete. (A refused or
        # unknown change stays pending, so the maximal ISR is unchanged; a superseded one was
        # cleared by the LeaderAndIsr, which re-evaluated the HW itself.)
        if applied:
            self.on_isr_changed(partition)
        return applied

    async def _write_once(
        self, partition: Partition, tp: TopicPartition, change: IsrChange, proposed: LeaderAndIsr
    ) -> WriteOutcome:
        try:
            written = await self.store.update_leader_and_isr(tp, proposed, change.controller_epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the write may or may not have landed: settle it
            log.warning(
                "[Partition %s broker=%d] ISR update to %s ended with %s %s: outcome unknown, settling it",
                tp,
                self.broker_id,
                _ids(change.new_isr),
                type(exc).__name__,
                exc,
            )
            return await self._settle(partition, tp, change, proposed, type(exc).__name__)
        if written is None:
            log.info(
                "[Partition %s broker=%d] Cached zkVersion %d not equal to that in zookeeper, skip updating ISR",
                tp,
                self.broker_id,
                change.zk_version,
            )
            return WriteOutcome(None, True, "rejected: zkVersion mismatch")
        return WriteOutcome(written, True, "written")

    async def _settle(
        self, partition: Partition, tp: TopicPartition, change: IsrChange, proposed: LeaderAndIsr, cause: str
    ) -> WriteOutcome:
        """Find out whether ``change`` landed: re-send the identical conditional write (it cannot
        land twice), and on BADVERSION compare the znode with what we wrote (Kafka's
        checkLeaderAndIsrZkData). Gives up, outcome unknown, after ``settle_attempts``."""
        error: str = cause
        for attempt in range(self.settle_attempts):
            if attempt:
                await asyncio.sleep(self.settle_backoff_s * 2 ** (attempt - 1))
            if partition.pending_isr_change != change:  # a LeaderAndIsr superseded it meanwhile
                return WriteOutcome(None, True, f"superseded while settling after {cause}")
            try:
                written = await self.store.update_leader_and_isr(tp, proposed, change.controller_epoch)
                current = None if written is not None else await self.store.get_partition_state(tp)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - still no answer from ZooKeeper
                error = f"{type(exc).__name__} {exc}".strip()
                continue
            if written is not None:
                return WriteOutcome(written, True, f"written: settled after {cause}")
            if current is not None and holds_leader_and_isr(current, proposed, change.controller_epoch):
                return WriteOutcome(current.leader_and_isr, True, f"written: landed before {cause}, adopted")
            log.info(
                "[Partition %s broker=%d] after %s the state znode holds %s, not our ISR %s: ISR unchanged",
                tp,
                self.broker_id,
                cause,
                None if current is None else current.leader_and_isr,
                _ids(change.new_isr),
            )
            return WriteOutcome(None, True, f"rejected: the znode moved on (settled after {cause})")
        log.warning(
            "[Partition %s broker=%d] ISR update to %s: outcome still unknown (%s); kept pending",
            tp,
            self.broker_id,
            _ids(change.new_isr),
            error,
        )
        return WriteOutcome(None, False, f"unknown: {error}; kept pending")

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
