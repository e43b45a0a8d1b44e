"""A member's rebalance callbacks, as Kafka's ConsumerRebalanceListener promises them (issue 35
item 3; docs/guarantees.md "Consumer groups"; Kafka's ``ConsumerCoordinator.onJoinPrepare``,
eager protocol, and KIP-429's ``onPartitionsLost``).

``group-callbacks``, fed by the simulated members' listeners (sim/group_workload.py):

* ``on_partitions_revoked`` and ``on_partitions_lost`` run while the partitions they name are
  still assigned, so a commit there (the documented place to commit by hand) commits their
  positions (issue 33's fourth window: the assignment was cleared first, and the commit in the
  callback committed nothing);
* a member gives a partition up only through one of them: when a new assignment arrives, every
  partition of the previous one was revoked or lost (issue 33's sixth window: a fenced member's
  partitions were dropped without ``on_partitions_lost``).

Each member's listener also commits in ``on_partitions_revoked``, as applications do.
"""

from __future__ import annotations

from collections.abc import Callable

from client.types import TopicPartition

GROUP_CALLBACKS = "group-callbacks"


class RebalanceCallbacks:
    def __init__(self, fail: Callable[[str, str], None], enabled: frozenset[str]) -> None:
        self.fail = fail
        self.enabled = GROUP_CALLBACKS in enabled
        self._owned: dict[str, set[TopicPartition]] = {}
        self.revoked = 0
        self.lost = 0

    def assigned(self, member: str, partitions: set[TopicPartition]) -> None:
        left = self._owned.get(member, set())
        if self.enabled and left:
            self.fail(
                GROUP_CALLBACKS,
                f"member {member} was given a new assignment while {_names(left)} of its previous one "
                f"went without on_partitions_revoked or on_partitions_lost",
            )
        self._owned[member] = set(partitions)

    def giving_up(
        self, member: str, how: str, partitions: set[TopicPartition], assigned: set[TopicPartition]
    ) -> None:
        """``how``: "revoked" or "lost"; ``assigned``: the member's assignment as the callback runs."""
        if how == "revoked":
            self.revoked += 1
        else:
            self.lost += 1
        missing = partitions - assigned
        if self.enabled and missing:
            self.fail(
                GROUP_CALLBACKS,
                f"on_partitions_{how} of member {member} ran after {_names(missing)} left its "
                f"assignment: a commit there cannot commit their positions",
            )
        self._owned[member] = self._owned.get(member, set()) - partitions


def _names(tps: set[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))
