"""The replication rules of one partition, sans-IO (Kafka's ``Partition``; docs/guarantees.md
"No acknowledged write lost, no divergence").

This module holds no log, no socket and no clock: callers pass the leader's log end
offset (LEO), the follower's fetch offset and the current time, and get decisions back.
That keeps the high watermark rules testable offset by offset:

* The leader keeps each follower's LEO (the "remote LEO"), taken from the fetch offset of
  that follower's FETCH: a follower asking for offset N has everything below N.
* A follower is caught up when its fetch offset reaches the leader's LEO; the time of that
  (``last_caught_up_time_ms``) drives Kafka's time-based ISR rule (``replica.lag.time.max.ms``).
* The partition HW is the minimum LEO over the leader and every replica that is in the ISR
  or caught up within the lag time, and it only moves forward. It does not move at all while the
  ISR is below min.insync.replicas bounded by the replication factor (KAFKA-15583, Kafka 3.7's
  ``isUnderMinIsr`` and ``effectiveMinIsr``): a record held by fewer replicas than that is
  visible to no consumer, whatever its acks (docs/guarantees.md "acks=all and
  min.insync.replicas").
* A follower's HW is min(its own LEO, the HW in the leader's fetch response).
* ISR changes (docs/design.md "ISR management"): the leader drops followers that have not caught up
  within the lag time and re-adds a follower whose LEO reached the HW and the current epoch's start
  offset. The decision is an :class:`IsrChange`; the caller writes it to ZooKeeper conditionally on
  the state znode's zkVersion and applies it here only when that write succeeded
  (:meth:`Partition.complete_isr_update`), so a deposed leader never shrinks the ISR to itself.
* While a change is pending (written, or its outcome unknown) ZooKeeper may already hold it, so
  the HW is computed over the *maximal ISR* (Kafka's KIP-497 ``IsrState.maximalIsr``): the ISR
  plus a follower being added; a follower being removed still counts, since the ISR keeps it
  until the write returns. The HW thus never passes a replica ZooKeeper may list in the ISR.
  A pending change ends when the write's outcome is known or a LeaderAndIsr supersedes it; a
  write whose outcome stays unknown (:meth:`Partition.defer_isr_update`) keeps it pending and
  blocks other ISR changes until it is settled (docs/guarantees.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from client.protocol.api import NO_LEADER

UNKNOWN_OFFSET = -1


class SessionClock(Protocol):
    """What a follower's partition knows of its fetch session (:class:`~broker.replica.fetch_session.FetchSession`)."""

    last_fetch_ms: int


@dataclass
class RemoteReplica:
    """The leader's view of one follower (Kafka's ``Replica``)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0

    #: KIP-227 (broker/replica/fetch_session.py): the follower's fetch session while this
    #: partition is clean in it, i.e. the follower was caught up when the session last read it and
    #: nothing changed here since: each fetch of the session finds it caught up without reading
    #: it. The session settles it whenever it stops covering the partition clean (a touch, which
    #: comes before the leader's LEO moves; a changed entry; the follower forgetting it; the
    #: session evicted, replaced or closed), before its fetch time moves on, so the lag rules see
    #: the follower as caught up at the last fetch that covered the partition, and no later one.
    clean_in: SessionClock | None = field(default=None, repr=False, compare=False)

    def settle_session(self) -> None:
        """The partition is no longer clean in its session (a change here, or a read): the session's
        last fetch found the follower caught up, at the offsets last read; record it as read."""
        if self.clean_in is not None:
            at = self.clean_in.last_fetch_ms
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, at)
            self.last_fetch_time_ms = max(self.last_fetch_time_ms, at)
            self.clean_in = None

    def update_fetch_state(self, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> None:
        """Kafka's Replica.updateFetchState: a fetch at the leader's LEO is caught up now; a fetch
        that reached what the leader's LEO was at the previous fetch was caught up back then."""
        self.settle_session()
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def reset(self, now_ms: int, in_sync: bool) -> None:
        """On becoming leader, nothing is known of followers yet; ISR members count as caught up now."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        self.clean_in = None


@dataclass(frozen=True)
class PartitionState:
    """What the controller said about the partition (one LeaderAndIsr entry)."""

    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    #: KIP-455: a reassignment's replicas still to join and replicas to leave (else empty)
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @classmethod
    def from_request(cls, entry: dict) -> PartitionState:
        return cls(
            controller_epoch=entry["controller_epoch"],
            leader=entry["leader"],
            leader_epoch=entry["leader_epoch"],
            isr=tuple(entry["isr"]),
            zk_version=entry["zk_version"],
            replicas=tuple(entry["replicas"]),
            adding_replicas=tuple(entry.get("adding_replicas", ())),
            removing_replicas=tuple(entry.get("removing_replicas", ())),
        )


class IsrChangeKind(Enum):
    SHRINK = "shrink"
    EXPAND = "expand"


@dataclass(frozen=True)
class IsrChange:
    """A leader's proposed ISR change, based on the state it knew (leader epoch and zkVersion):
    the conditional write's compare-and-set token and the guard when applying its result."""

    kind: IsrChangeKind
    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    replicas: tuple[int, ...]  # the followers dropped (shrink) or added (expand)
    leader: int
    leader_epoch: int
    zk_version: int
    controller_epoch: int = -1  # written with the change, as in the state znode

    @property
    def maximal_isr(self) -> frozenset[int]:
        """Every replica ZooKeeper may list in the ISR once this change is written or not."""
        return frozenset(self.old_isr) | frozenset(self.new_isr)


@dataclass
class Partition:
    topic: str
    partition: int
    local_broker_id: int
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    controller_epoch: int = -1
    zk_version: int = 0
    assigned_replicas: tuple[int, ...] = ()
    #: KIP-455 / KIP-352: set by LeaderAndIsr while a reassignment moves this partition
    reassigning: bool = False
    isr: frozenset[int] = frozenset()
    leader_epoch_start_offset: int = UNKNOWN_OFFSET
    remote_replicas: dict[int, RemoteReplica] = field(default_factory=dict)
    isr_update_in_flight: bool = False  # one conditional ISR write (or settling of one) at a time
    #: The ISR change proposed and not yet known to be applied or rejected (Kafka's
    #: PendingExpandIsr / PendingShrinkIsr): while set, the HW counts its replicas too.
    pending_isr_change: IsrChange | None = None
    #: The pending change's write was refused (BADVERSION): ZooKeeper may still list its replicas
    #: (a resend after a lost answer can see its own landed write refused, and the znode may have
    #: moved on from it since), so it stays pending until a LeaderAndIsr (Kafka 2.7+ on
    #: INVALID_UPDATE_VERSION); it is not resent, and no other ISR change is proposed meanwhile.
    pending_isr_rejected: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR plus the replicas of a pending change (KIP-497): the HW is computed over these."""
        if self.pending_isr_change is None:
            return self.isr
        return self.isr | self.pending_isr_change.maximal_isr

    @property
    def isr_update_unsettled(self) -> bool:
        """A change's write ended with its outcome unknown and must be settled again."""
        return (
            self.pending_isr_change is not None
            and not self.isr_update_in_flight
            and not self.pending_isr_rejected
        )

    # -- role changes (Kafka's ReplicaManager.becomeLeaderOrFollower: makeLeaders / makeFollowers) ---

    def is_newer(self, state: PartitionState) -> bool:
        """LeaderAndIsr is applied only when its leader epoch is newer than ours, as in Kafka's
        becomeLeaderOrFollower: an older or equal epoch comes from a stale controller or a resend."""
        return state.leader_epoch > self.leader_epoch

    def make_leader(self, state: PartitionState, local_log_end_offset: int, now_ms: int) -> bool:
        """Become leader. Returns True if this broker was not already leader for this epoch."""
        was_leader = self.is_leader and self.leader_epoch == state.leader_epoch
        self._apply(state)
        self.leader_epoch_start_offset = local_log_end_offset
        self.remote_replicas = {
            replica: RemoteReplica(replica) for replica in state.replicas if replica != self.local_broker_id
        }
        for replica in self.remote_replicas.values():
            replica.reset(now_ms, in_sync=replica.broker_id in self.isr)
        return not was_leader

    def make_follower(self, state: PartitionState) -> bool:
        """Become follower. Returns True if the leader changed (the fetcher must be re-pointed)."""
        leader_changed = self.leader_id != state.leader
        self._apply(state)
        self.remote_replicas = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return leader_changed

    def _apply(self, state: PartitionState) -> None:
        self.controller_epoch = state.controller_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = frozenset(state.isr)
        self.zk_version = state.zk_version
        self.assigned_replicas = state.replicas
        self.reassigning = bool(state.adding_replicas or state.removing_replicas)
        self.pending_isr_change = None  # the controller's word is newer than any write of ours
        self.pending_isr_rejected = False

    # -- leader side: follower fetches and the high watermark (Kafka's updateFollowerFetchState) -----

    def update_follower_fetch(
        self, replica_id: int, fetch_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> bool:
        """Record a follower's FETCH. Returns False if the replica is not assigned here."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        replica.update_fetch_state(fetch_offset, leader_log_end_offset, now_ms)
        return True

    def effective_min_isr(self, min_insync_replicas: int) -> int:
        """Kafka 3.7's effectiveMinIsr (KAFKA-15583): the topic's min.insync.replicas, at most the
        replication factor (the leader and its remote replicas), so a setting above the RF refuses
        nothing a full ISR could satisfy and never holds the HW for ever."""
        return min(min_insync_replicas, len(self.remote_replicas) + 1)

    def is_under_min_isr(self, min_insync_replicas: int) -> bool:
        """Kafka 3.7's isUnderMinIsr: this broker leads and its ISR (the ISR itself, not the maximal
        ISR: a pending expand does not count until its write lands) is smaller than the effective
        min.insync.replicas. While it is, the HW does not move (maybeIncrementLeaderHW)."""
        return self.is_leader and len(self.isr) < self.effective_min_isr(min_insync_replicas)

    def high_watermark_candidate(
        self,
        leader_log_end_offset: int,
        current_high_watermark: int,
        now_ms: int,
        replica_lag_time_max_ms: int,
    ) -> int:
        """The new leader HW: min LEO over the leader and replicas in the maximal ISR or caught up
        within the lag time; never below the current HW (the HW only moves forward)."""
        candidate = leader_log_end_offset
        maximal_isr = self.maximal_isr
        for replica in self.remote_replicas.values():
            counts = replica.broker_id in maximal_isr or (
                now_ms - replica.last_caught_up_time_ms <= replica_lag_time_max_ms
            )
            if counts:
                leo = (
                    replica.log_end_offset
                    if replica.log_end_offset != UNKNOWN_OFFSET
                    else current_high_watermark
                )
                candidate = min(candidate, leo)
        return max(candidate, current_high_watermark)

    def out_of_sync_replicas(
        self, now_ms: int, replica_lag_time_max_ms: int, leader_log_end_offset: int
    ) -> set[int]:
        """ISR members that have not caught up within the lag time (Kafka's getOutOfSyncReplicas)."""
        stale = set()
        for replica_id in self.isr:
            replica = self.remote_replicas.get(replica_id)
            if replica is None:
                continue
            if replica.log_end_offset != leader_log_end_offset and (
                now_ms - replica.last_caught_up_time_ms > replica_lag_time_max_ms
            ):
                stale.add(replica_id)
        return stale

    def can_join_isr(self, replica_id: int, high_watermark: int) -> bool:
        """A follower rejoins when its LEO reaches the HW and the current epoch's start offset."""
        replica = self.remote_replicas.get(replica_id)
        return (
            replica is not None
            and replica_id not in self.isr
            and replica.log_end_offset >= high_watermark
            and replica.log_end_offset >= self.leader_epoch_start_offset
        )

    # -- leader side: ISR shrink and expand (Kafka's maybeShrinkIsr / maybeExpandIsr) ------

    def ordered_isr(self, members: Iterable[int]) -> tuple[int, ...]:
        """ISR members in assignment order (strays last, sorted), as the state znode lists them."""
        members = set(members)
        ordered = [r for r in self.assigned_replicas if r in members]
        return (*ordered, *sorted(members.difference(ordered)))

    def shrink_isr_decision(
        self, now_ms: int, replica_lag_time_max_ms: int, leader_log_end_offset: int
    ) -> IsrChange | None:
        """The ISR without its out-of-sync followers, or None when nothing changes, this broker
        is not the leader, or an ISR change is pending. The leader is never dropped."""
        if not self.is_leader or self.isr_update_in_flight or self.pending_isr_change is not None:
            return None
        stale = self.out_of_sync_replicas(now_ms, replica_lag_time_max_ms, leader_log_end_offset)
        stale.discard(self.local_broker_id)
        if not stale:
            return None
        return self._isr_change(IsrChangeKind.SHRINK, self.isr - stale, stale)

    def expand_isr_decision(self, replica_id: int, high_watermark: int) -> IsrChange | None:
        """The ISR plus ``replica_id`` when that follower may rejoin (:meth:`can_join_isr`), else None."""
        if (
            not self.is_leader
            or self.isr_update_in_flight
            or self.pending_isr_change is not None
            or not self.can_join_isr(replica_id, high_watermark)
        ):
            return None
        return self._isr_change(IsrChangeKind.EXPAND, self.isr | {replica_id}, {replica_id})

    def _isr_change(self, kind: IsrChangeKind, new_isr: Iterable[int], replicas: Iterable[int]) -> IsrChange:
        return IsrChange(
            kind=kind,
            old_isr=self.ordered_isr(self.isr),
            new_isr=self.ordered_isr(new_isr),
            replicas=tuple(sorted(replicas)),
            leader=self.local_broker_id,
            leader_epoch=self.leader_epoch,
            zk_version=self.zk_version,
            controller_epoch=self.controller_epoch,
        )

    def begin_isr_update(self, change: IsrChange) -> None:
        """Mark the conditional write of ``change`` as in flight (no second one meanwhile) and
        pending: from now on ZooKeeper may hold it, so the HW counts its replicas."""
        self.isr_update_in_flight = True
        self.pending_isr_change = change
        self.pending_isr_rejected = False

    def resume_isr_update(self, change: IsrChange) -> bool:
        """Start settling again the pending ``change`` whose outcome is unknown; False when it is
        no longer pending (settled, or superseded by a LeaderAndIsr)."""
        if not self.isr_update_unsettled or self.pending_isr_change != change or self._moved_on(change):
            return False
        self.isr_update_in_flight = True
        return True

    def complete_isr_update(self, change: IsrChange, written_zk_version: int | None) -> bool:
        """Apply a finished ISR write. ``written_zk_version`` is the state znode's new version, or
        None when the conditional write was refused (BADVERSION, no znode): then the in-memory ISR
        stays as it was, and the change stays pending (its replicas keep counting in the HW) until
        a LeaderAndIsr supersedes it, because a refusal does not prove ZooKeeper never held it: a
        resend after a lost answer is refused when the first send landed and the controller
        rewrote the znode since (Kafka 2.7+ keeps PendingExpandIsr / PendingShrinkIsr after
        INVALID_UPDATE_VERSION and waits for LeaderAndIsr). A result is dropped when a LeaderAndIsr
        moved the partition on meanwhile (another epoch or zkVersion, or no longer leader): the
        controller's word is newer. Returns True when the ISR changed."""
        self.isr_update_in_flight = False
        if written_zk_version is None:
            if self.pending_isr_change == change:
                self.pending_isr_rejected = True
            return False
        if self.pending_isr_change == change:
            self.pending_isr_change = None
        if self._moved_on(change):
            return False
        self.isr = frozenset(change.new_isr)
        self.zk_version = written_zk_version
        return True

    def defer_isr_update(self, change: IsrChange) -> None:
        """The write of ``change`` ended with its outcome unknown (ZooKeeper unreachable after it
        may have landed): it stays pending, so its replicas keep counting in the HW and no other
        ISR change is proposed, until it is settled (:meth:`resume_isr_update`) or a LeaderAndIsr
        supersedes it."""
        self.isr_update_in_flight = False

    def _moved_on(self, change: IsrChange) -> bool:
        return (
            not self.is_leader
            or self.leader_epoch != change.leader_epoch
            or self.zk_version != change.zk_version
        )


def follower_high_watermark(local_log_end_offset: int, leader_high_watermark: int) -> int:
    """Seed 001: a follower's HW is min(its LEO, the leader's HW sent in the fetch response)."""
    return min(local_log_end_offset, leader_high_watermark)
