"""The coordinator's fencing of offset commits, checked where the offsets are stored (issue 35
item 3; docs/guarantees.md "Consumer groups"; Kafka's ``GroupCoordinator.doCommitOffsets``).

``group-commit-fenced``: the coordinator stores (writes to ``__consumer_offsets``) a member's
commit only when the member is in the group and the commit's generation is the group's current
one, and never while the group completes a rebalance (between the JoinGroup answers and the
leader's SyncGroup). A commit of generation -1 is a standalone consumer's and is allowed only on
an Empty group. The simulated members tag each commit's metadata with the member id and the
generation it was sent in (``<member id>@<generation>``, sim/group_workload.py), so the check
reads what the member sent, not what the coordinator decided; a commit held in the network
(the aimed member stall of sim/group_faults.py) reaches the coordinator after its member was
expelled and must be refused (UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION): a zombie's commit that is
stored rolls the next owner's offset back.

:class:`CommitFencing` wraps ``GroupMetadataManager.store_offsets`` of every broker incarnation
(re-attached whenever a broker's server object changes) and reports through the schedule's
``fail``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.coordinator.group_metadata import GroupState

if TYPE_CHECKING:
    from sim.world import World

GROUP_COMMIT_FENCED = "group-commit-fenced"


def parse_tag(metadata: str) -> tuple[str, int] | None:
    """(member id, generation) from a simulated member's commit metadata, or None."""
    member, sep, generation = metadata.rpartition("@")
    if not sep:
        return None
    try:
        return member, int(generation)
    except ValueError:
        return None


def fencing_problem(group: Any, member: str, generation: int) -> str | None:
    """Why Kafka would refuse to store this commit on ``group`` now, or None."""
    if generation < 0:
        if group.is_(GroupState.EMPTY):
            return None
        return f"a standalone commit (generation -1) on a group in state {group.state.name}"
    if not group.has(member):
        return f"member {member!r} is not in the group (generation {group.generation_id})"
    if generation != group.generation_id:
        return f"its generation {generation} is not the group's {group.generation_id}"
    if group.is_(GroupState.COMPLETING_REBALANCE):
        return f"the group is completing the rebalance of generation {group.generation_id}"
    return None


class CommitFencing:
    def __init__(self, world: World, fail: Callable[[str, str], None], enabled: frozenset[str]) -> None:
        self.world = world
        self.fail = fail
        self.enabled = GROUP_COMMIT_FENCED in enabled
        self.stored = 0  # commits of the simulated members the coordinators stored
        self._attached: dict[int, object] = {}

    def attach(self) -> None:
        """Wrap the coordinator of every broker incarnation not wrapped yet."""
        if not self.enabled:
            return
        for broker_id in sorted(self.world.brokers):
            server = self.world.brokers[broker_id].server
            apis = getattr(server, "group_apis", None)
            if apis is None or self._attached.get(broker_id) is apis:
                continue
            self._attached[broker_id] = apis
            self._wrap(broker_id, apis.coordinator.manager)

    def _wrap(self, broker_id: int, manager: Any) -> None:
        store = manager.store_offsets

        def store_offsets(group: Any, offsets: dict, done: Callable[[int, int], None]) -> None:
            for tp, committed in sorted(offsets.items()):
                tag = parse_tag(committed.metadata)
                if tag is None:
                    continue
                self.stored += 1
                problem = fencing_problem(group, *tag)
                if problem is not None:
                    self.fail(
                        GROUP_COMMIT_FENCED,
                        f"broker {broker_id}'s coordinator stored {group.group_id}'s commit of {tp} at "
                        f"offset {committed.offset} from {tag[0]}@{tag[1]}, but {problem}",
                    )
            store(group, offsets, done)

        manager.store_offsets = store_offsets
