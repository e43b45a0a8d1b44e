"""Faults aimed at the consumer group (issue 35 item 2; docs/design.md "Simulation"; in the
spirit of FoundationDB's buggify): drawn faults almost never hit the one broker that coordinates
the group, and members that crash are replaced, so no stale member ever commits. Each schedule
step, from the ``"group-faults"`` stream of the seed:

* ``coordinator`` (rate ``coordinator_rate``): a crash, pause or partition (among the kinds the
  schedule enables) of the broker that leads the group's ``__consumer_offsets`` partition, so the
  coordinator moves: the new one loads the partition (compacted by then: the schedule's small
  offsets segments and eager cleaner) and must serve every acknowledged commit;
* ``member stall`` (rate ``stall_rate``): one member's connection to its coordinator holds what
  the member sends for 0.3 to 4 s (TCP's retransmission backoff on one flow). Longer than its
  1 s session, the coordinator expels it and rebalances while the heartbeat and commit it sent
  are held, and they arrive from a member that still believes in its generation: a zombie's
  commit, refused as UNKNOWN_MEMBER_ID. Shorter, another member's crash or join may start a
  rebalance meanwhile, which the held member joins late, and a commit it sent in the old
  generation can arrive once the new one has begun: refused as ILLEGAL_GENERATION (or
  REBALANCE_IN_PROGRESS). The coordinator must refuse both (sim/commit_fencing.py).

The faults go through :meth:`sim.faults.FaultInjector.start_on`, so the schedule's limit on
disturbed brokers holds and every one is healed with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.coordinator.group_metadata_manager import partition_for
from sim.fault_kinds import FaultKind
from sim.faults import FaultInjector
from sim.group_workload import GROUP_ID

if TYPE_CHECKING:
    from sim.group_workload import GroupWorkload
    from sim.world import World

OFFSETS_TOPIC = "__consumer_offsets"
COORDINATOR_KINDS = (FaultKind.CRASH, FaultKind.PAUSE, FaultKind.PARTITION)


@dataclass(frozen=True)
class GroupFaultPlan:
    coordinator_rate: float = 0.1
    coordinator_s: tuple[float, float] = (0.5, 4.0)
    stall_rate: float = 0.05
    stall_s: tuple[float, float] = (0.3, 4.0)


class GroupFaults:
    def __init__(
        self,
        world: World,
        group: GroupWorkload,
        faults: FaultInjector,
        plan: GroupFaultPlan,
        offsets_partitions: int,
    ) -> None:
        self.world = world
        self.group = group
        self.faults = faults
        self.plan = plan
        self.rng = world.loop.seeds.stream("group-faults")
        self.partition = partition_for(GROUP_ID, offsets_partitions)
        self.kinds = [k for k in COORDINATOR_KINDS if k in faults.plan.kinds]
        self.coordinator_faults = 0
        self.stalls = 0
        #: the coordinator as ZooKeeper names it (the offsets partition's leader), and its moves
        self.last_coordinator: int | None = None
        self.coordinator_moves = 0

    def coordinator(self) -> int | None:
        """The broker ZooKeeper names as the leader of the group's offsets partition."""
        return self.world.leader_of(OFFSETS_TOPIC, self.partition)

    def step(self) -> bool:
        """Note a coordinator move; maybe aim a fault at the coordinator, maybe stall a member;
        True when a fault started."""
        rng, plan = self.rng, self.plan
        now = self.coordinator()
        if now is not None and now != self.last_coordinator:
            if self.last_coordinator is not None:
                self.coordinator_moves += 1
                self.group.note(
                    f"group coordinator moved from broker {self.last_coordinator} to broker {now}"
                )
            self.last_coordinator = now
        started = False
        if self.kinds and rng.random() < plan.coordinator_rate:
            kind = rng.choice(self.kinds)
            until = self.world.loop.time() + rng.uniform(*plan.coordinator_s)
            broker = self.coordinator()
            if broker is not None and self.faults.start_on(kind, broker, until):
                self.coordinator_faults += 1
                started = True
        if (
            rng.random() < plan.stall_rate
            and self.group.members
            and FaultKind.STALL in self.faults.plan.kinds
        ):
            slot = rng.choice(sorted(self.group.members))
            seconds = rng.uniform(*plan.stall_s)
            started = self._stall(slot, seconds) or started
        return started

    def _stall(self, slot: int, seconds: float) -> bool:
        consumer, _task = self.group.members[slot]
        coordinator = consumer._coordinator.coordinator_id if consumer._coordinator is not None else None
        node = self.group.nodes.get(slot)
        if coordinator is None or node is None:
            return False
        network = self.world.network
        flows = [
            c
            for c in network.connections
            if c.client.node == node and c.server.node == f"broker-{coordinator}" and not c.client.closed
        ]
        if not flows:
            return False
        for connection in flows:
            network.stall(connection, seconds)
        self.stalls += 1
        self.group.note(
            f"stall group member {node}'s connections to coordinator {coordinator} for {seconds:.3f} s"
        )
        return True
