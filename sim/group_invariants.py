"""The consumer-group invariants of a simulated run (issue 23; docs/guarantees.md "Consumer
groups"), fed by what the members of sim/group_workload.py observe:

* ``group-owned-once``: no two members are given one partition in the same generation (the
  coordinator's generation fencing, seed 004's one-consumer-per-partition rule);
* ``group-commits-kept``: an OffsetFetch never returns less than the commit the coordinator last
  acknowledged before the fetch was sent, through coordinator failovers: a commit that was
  acknowledged is never lost. A later commit of a smaller offset that was sent after it (another
  member of a later generation overwriting it, Kafka's last-writer-wins) is the one exception;
* ``group-liveness``: after every fault is healed, every live member joins the same generation
  and the group's assignment covers every partition of the topic (judged by the sweep);
* ``group-commit-fenced`` (sim/commit_fencing.py): the coordinator stores only commits of the
  group's current generation from its members;
* ``consumer-visibility`` (sim/consumer_visibility.py): members are given only records below the
  HW they were served, each once per assignment, each the committed log's;
* ``group-load-bound`` (sim/coordinator_load.py): a coordinator loads its offsets partition within
  a bound of its running time;
* ``group-callbacks`` (sim/rebalance_callbacks.py): revoke and lost callbacks run while their
  partitions are assigned, and no partition is given up without one.

:class:`GroupChecker` reports through the schedule's :class:`sim.invariants.Invariants` (``fail``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from client.types import OffsetAndMetadata, TopicPartition
from sim.commit_fencing import GROUP_COMMIT_FENCED
from sim.consumer_visibility import CONSUMER_VISIBILITY
from sim.coordinator_load import GROUP_LOAD_BOUND
from sim.rebalance_callbacks import GROUP_CALLBACKS

GROUP_OWNED_ONCE = "group-owned-once"
GROUP_COMMITS_KEPT = "group-commits-kept"
GROUP_LIVENESS = "group-liveness"
GROUP_INVARIANTS = (
    GROUP_OWNED_ONCE,
    GROUP_COMMITS_KEPT,
    GROUP_LIVENESS,
    GROUP_COMMIT_FENCED,
    CONSUMER_VISIBILITY,
    GROUP_LOAD_BOUND,
    GROUP_CALLBACKS,
)


@dataclass(frozen=True)
class _Commit:
    sent: int  # a sequence number in the order the commits were sent
    offset: int


class GroupChecker:
    def __init__(self, fail: Callable[[str, str], None], enabled: frozenset[str] | set[str]) -> None:
        self.fail = fail
        self.enabled = enabled
        #: (generation, partition) -> the member given it in that generation
        self.owners: dict[tuple[int, TopicPartition], str] = {}
        #: partition -> every commit sent, and those acknowledged (in acknowledgement order)
        self.sent: dict[TopicPartition, list[_Commit]] = {}
        self.acked: dict[TopicPartition, list[_Commit]] = {}
        self._sequence = 0
        self.assignments = 0
        self.commits = 0

    # -- observations ----------------------------------------------------------------------------

    def assigned(self, member: str, coordinator: Any, partitions: set[TopicPartition]) -> None:
        self.assignments += 1
        generation = coordinator.generation
        for tp in sorted(partitions):  # the first conflict reported is the same in every replay
            other = self.owners.setdefault((generation, tp), member)
            if other != member and GROUP_OWNED_ONCE in self.enabled:
                self.fail(
                    GROUP_OWNED_ONCE,
                    f"{tp} was given to member {member} and to member {other} in generation {generation}",
                )

    def instrument(self, member: str, coordinator: Any) -> None:
        """Wrap the member's commit and committed-offset fetch to observe both."""
        commit, fetch = coordinator.commit, coordinator.fetch_committed

        async def observed_commit(offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
            sending = dict(offsets if offsets is not None else coordinator._positions())
            records = {}
            for tp, om in sending.items():
                self._sequence += 1
                records[tp] = _Commit(self._sequence, om.offset)
                self.sent.setdefault(tp, []).append(records[tp])
            await commit(offsets)
            self.commits += 1
            for tp, record in records.items():
                self.acked.setdefault(tp, []).append(record)

        async def observed_fetch(tps: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
            floors = {tp: self._floor(tp) for tp in tps}
            result = await fetch(tps)
            for tp in tps:
                got = result.get(tp)
                self._check_fetch(member, tp, floors[tp], got.offset if got is not None else -1)
            return result

        coordinator.commit = observed_commit
        coordinator.fetch_committed = observed_fetch

    def crashed(self, coordinator: Any) -> None:
        """A crashed member's commits in flight may still land; nothing to forget."""

    def _floor(self, tp: TopicPartition) -> _Commit | None:
        acked = self.acked.get(tp)
        return max(acked, key=lambda c: c.sent) if acked else None

    def _check_fetch(self, member: str, tp: TopicPartition, floor: _Commit | None, got: int) -> None:
        if floor is None or got >= floor.offset or GROUP_COMMITS_KEPT not in self.enabled:
            return
        overwritten = any(c.sent > floor.sent and c.offset == got for c in self.sent.get(tp, []))
        if not overwritten:
            self.fail(
                GROUP_COMMITS_KEPT,
                f"member {member} read committed offset {got} for {tp}, but offset {floor.offset} "
                f"had been committed and acknowledged before it asked",
            )

    # -- liveness --------------------------------------------------------------------------------

    @staticmethod
    def unsettled(members: list[Any], partitions: int, topic: str) -> str | None:
        """Why the group is not whole yet, or None: every member joined one generation and the
        assignment covers every partition (``members``: live Consumers)."""
        if not members:
            return None
        generations = set()
        owned: set[TopicPartition] = set()
        for consumer in members:
            coordinator = consumer._coordinator
            if coordinator.need_rejoin or coordinator.generation < 0:
                return f"member {coordinator.member_id or '(no id)'} has not joined a generation"
            generations.add(coordinator.generation)
            owned |= consumer.assignment()
        if len(generations) > 1:
            return f"members are in generations {sorted(generations)}"
        missing = [p for p in range(partitions) if TopicPartition(topic, p) not in owned]
        if missing:
            return f"partitions {missing} of {topic} are assigned to no member"
        return None
