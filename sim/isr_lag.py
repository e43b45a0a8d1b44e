"""The ISR lag invariant of a simulated run (``isr-lag``; docs/guarantees.md; Kafka's
``Partition.getOutOfSyncReplicas`` and ``Replica.updateFetchStateOrThrow``):

* ``isr-lag``: a leader never proposes an ISR shrink that drops a follower which, within
  ``replica.lag.time.max.ms`` before the decision and in the leader's current epoch, sent a FETCH
  covering the partition at the leader's log end offset. Kafka's follower is caught up at every
  such fetch (``lastCaughtUpTimeMs``), and an incremental fetch session (KIP-227) covers every
  partition it holds, named in the request or not.

:class:`IsrLagChecker` watches each replica manager from its creation: every FETCH as the leader
receives it (which partitions it covers: those named, and for an incremental fetch of a session
the leader knows at the right epoch, every other partition the session holds, forgotten ones
left out; at which offsets, against which log end offsets) and every shrink decision, before its
ZooKeeper write. Only the caught-up evidence is its own: which partitions a session holds is read
from the leader's session cache (KIP-227's membership, not the clean/dirty bookkeeping that
decides what is read, nor the ``RemoteReplica`` lag state that this checks). Evidence is taken
only from fetches the leader accepts for the partition (it leads it in the fetch's leader epoch,
the follower is assigned, the log is online), at the fetch offset equal to the leader's LEO:
Kafka's first rule alone, so the check never asks more than Kafka would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.replica.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID
from broker.replica.partition import IsrChangeKind

if TYPE_CHECKING:
    from broker.replica.partition import IsrChange, Partition
    from broker.replica.replica_manager import ReplicaManager

ISR_LAG = "isr-lag"


class IsrLagChecker:
    """Caught-up evidence per (partition, leader epoch, follower) of one replica manager (one
    broker incarnation), and the check of its shrink decisions against it."""

    def __init__(self, broker_id: int, rm: ReplicaManager, fail: Callable[[str, str], None]) -> None:
        self.broker_id = broker_id
        self.rm = rm
        self.fail = fail
        #: (topic, partition, leader epoch, follower) -> the last fetch time at the leader's LEO
        self.caught_up: dict[tuple[str, int, int, int], int] = {}
        self.fetches = 0
        self.shrinks = 0

    def install(self) -> None:
        rm = self.rm
        fetch_messages = rm.fetch_messages

        def observed_fetch(body: dict, respond: Any) -> None:
            self._on_fetch(body)
            fetch_messages(body, respond)

        rm.fetch_messages = observed_fetch  # type: ignore[method-assign]
        isr_manager = rm.isr_manager
        if isr_manager is None:
            return
        submit = isr_manager._submit

        def observed_submit(partition: Partition, change: IsrChange, log_: Any) -> None:
            if change.kind is IsrChangeKind.SHRINK:
                self._on_shrink(partition, change, isr_manager.time_ms(), isr_manager.replica_lag_time_max_ms)
            submit(partition, change, log_)

        isr_manager._submit = observed_submit  # type: ignore[method-assign]

    # -- observations ----------------------------------------------------------------------------
    def _covered(self, body: dict) -> dict[tuple[str, int], dict]:
        """The partitions this FETCH covers and their entries (empty when the leader refuses it)."""
        replica_id = body["replica_id"]
        named = {(t["topic"], p["partition"]): p for t in body["topics"] for p in t["partitions"]}
        session_id = body.get("session_id", INVALID_SESSION_ID)
        epoch = body.get("session_epoch", FINAL_EPOCH)
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            return named
        session = self.rm.fetch_sessions.get(session_id, replica_id)
        if session is None or epoch != session.epoch:
            return {}  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
        forgotten = {(t["topic"], p) for t in body.get("forgotten_topics", ()) for p in t["partitions"]}
        covered = {tp: cached.fetch for tp, cached in session.partitions.items() if tp not in forgotten}
        covered.update(named)
        return covered

    def _on_fetch(self, body: dict) -> None:
        replica_id = body["replica_id"]
        if replica_id < 0:
            return  # a consumer
        self.fetches += 1
        rm = self.rm
        now = rm.time_ms()
        for tp, entry in self._covered(body).items():
            partition = rm.partitions.get(tp)
            log_ = rm.get_log(tp)
            if (
                partition is None
                or log_ is None
                or tp in rm.offline_partitions
                or not partition.is_leader
                or replica_id not in partition.assigned_replicas
                or entry.get("current_leader_epoch", -1) not in (-1, partition.leader_epoch)
                or entry["fetch_offset"] != log_.log_end_offset
            ):
                continue
            self.caught_up[(tp[0], tp[1], partition.leader_epoch, replica_id)] = now

    def _on_shrink(self, partition: Partition, change: IsrChange, now: int, lag_ms: int) -> None:
        self.shrinks += 1
        for replica in change.replicas:
            at = self.caught_up.get((partition.topic, partition.partition, change.leader_epoch, replica))
            if at is not None and now - at <= lag_ms:
                remote = partition.remote_replicas.get(replica)
                self.fail(
                    ISR_LAG,
                    f"leader {self.broker_id} (epoch {change.leader_epoch}) shrinks the ISR of "
                    f"{partition.topic}-{partition.partition} from {list(change.old_isr)} to "
                    f"{list(change.new_isr)}, dropping replica {replica}, which fetched at the leader's "
                    f"log end offset {now - at} ms ago (replica.lag.time.max.ms={lag_ms}); the leader's "
                    f"view: {remote}",
                )
