"""Partition leader election: the rules of Kafka's PartitionLeaderElectionAlgorithms, as pure functions.

| case                            | new leader                                               | new ISR            |
|---------------------------------|----------------------------------------------------------|--------------------|
| offline partition               | first live replica, in assignment order, that is in ISR  | live ISR members   |
| offline, unclean allowed        | first live replica                                       | [leader]           |
| no live ISR member, unclean off | none: leader -1, partition offline                        | unchanged          |
| reassignment                    | first target replica that is live and in the ISR         | unchanged          |
| preferred replica               | the head of the assignment, if live and in the ISR       | unchanged          |
| controlled shutdown             | first live ISR member that is not shutting down          | ISR minus shutdown |

Every change of leader bumps the leader epoch by one (:meth:`LeaderAndIsr.new_leader_and_isr`);
the caller writes the result conditionally on the state znode's zkVersion. The algorithms
(Kafka's ``PartitionLeaderElectionAlgorithms``) return a broker id or None; the ``elect_*``
functions wrap them into an :class:`ElectionOutcome` for one partition.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from zk.data import NO_LEADER, LeaderAndIsr

# ---------------------------------------------------------------------------------------------
# The algorithms
# ---------------------------------------------------------------------------------------------


def offline_partition_leader(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int], unclean_enabled: bool
) -> int | None:
    for replica in assignment:
        if replica in live_replicas and replica in isr:
            return replica
    if unclean_enabled:
        for replica in assignment:
            if replica in live_replicas:
                return replica
    return None


def reassign_partition_leader(
    reassignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    for replica in reassignment:
        if replica in live_replicas and replica in isr:
            return replica
    return None


def preferred_replica_partition_leader(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live_replicas: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    for replica in assignment:
        if replica in live_replicas and replica in isr and replica not in shutting_down:
            return replica
    return None


# ---------------------------------------------------------------------------------------------
# One partition's election
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElectionOutcome:
    """What to write for one partition. ``leader_and_isr`` None means leave the znode alone
    (nothing to change, or no eligible leader); a leader of -1 means the partition goes (or
    stays) offline with its ISR kept, so that only an ISR member may lead it again."""

    leader_and_isr: LeaderAndIsr | None
    unclean: bool = False
    reason: str = ""

    @property
    def elected(self) -> bool:
        return self.leader_and_isr is not None and self.leader_and_isr.leader != NO_LEADER


def elect_offline(
    current: LeaderAndIsr, assignment: Sequence[int], live_replicas: Collection[int], unclean_enabled: bool
) -> ElectionOutcome:
    """Offline (or new-leader-needed) partition: rows 1 to 3 of the table."""
    leader = offline_partition_leader(assignment, current.isr, live_replicas, unclean_enabled)
    if leader is None:
        if current.leader == NO_LEADER:
            return ElectionOutcome(None, reason="no live replica in the ISR; partition stays offline")
        return ElectionOutcome(
            current.new_leader_and_isr(NO_LEADER, current.isr),
            reason=f"no live replica in ISR {list(current.isr)}; unclean election disabled; partition offline",
        )
    if leader in current.isr:
        new_isr = [r for r in current.isr if r in live_replicas]
        return ElectionOutcome(
            current.new_leader_and_isr(leader, new_isr), reason="offline partition: live ISR member"
        )
    return ElectionOutcome(
        current.new_leader_and_isr(leader, [leader]),
        unclean=True,
        reason=f"UNCLEAN election: no live replica in ISR {list(current.isr)}; committed data may be lost",
    )


def elect_for_reassignment(
    current: LeaderAndIsr, target_replicas: Sequence[int], live_replicas: Collection[int]
) -> ElectionOutcome:
    leader = reassign_partition_leader(target_replicas, current.isr, live_replicas)
    if leader is None:
        return ElectionOutcome(
            None, reason=f"no target replica of {list(target_replicas)} is live and in the ISR"
        )
    return ElectionOutcome(current.new_leader(leader), reason="reassignment")


def elect_preferred(
    current: LeaderAndIsr, assignment: Sequence[int], live_replicas: Collection[int]
) -> ElectionOutcome:
    leader = preferred_replica_partition_leader(assignment, current.isr, live_replicas)
    if leader is None:
        return ElectionOutcome(None, reason="preferred replica is not live or not in the ISR")
    if leader == current.leader:
        return ElectionOutcome(None, reason="preferred replica is already the leader")
    return ElectionOutcome(current.new_leader(leader), reason="preferred replica election")


def elect_for_controlled_shutdown(
    current: LeaderAndIsr,
    assignment: Sequence[int],
    live_or_shutting_down_replicas: Collection[int],
    shutting_down: Collection[int],
) -> ElectionOutcome:
    leader = controlled_shutdown_partition_leader(
        assignment, current.isr, live_or_shutting_down_replicas, shutting_down
    )
    if leader is None:
        return ElectionOutcome(None, reason="no live ISR member that is not shutting down")
    new_isr = [r for r in current.isr if r not in shutting_down]
    return ElectionOutcome(current.new_leader_and_isr(leader, new_isr), reason="controlled shutdown")


def remove_replica_from_isr(current: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """A follower went offline: drop it from the ISR (None when there is nothing to change).

    The leader epoch goes up too, as Kafka's controller does (``removeReplicasFromIsr``): the
    brokers accept a LeaderAndIsr only with a newer leader epoch (docs/guarantees.md "Fencing: stale
    controllers and stale leaders"), and the leader must learn its smaller ISR. The ISR of a
    leaderless partition is never shrunk (table row 3: unchanged), and the last ISR member is
    never removed.
    """
    if replica not in current.isr or current.leader == NO_LEADER or len(current.isr) <= 1:
        return None
    if current.leader == replica:
        return None  # a leader change, which is the elections' business
    return current.new_leader_and_isr(current.leader, [r for r in current.isr if r != replica])
