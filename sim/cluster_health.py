"""Whether a simulated cluster is whole again (docs/design.md "Simulation"): the liveness the
sweep (sim/sweep.py) waits for once every fault is healed. Every broker runs, a live broker is
controller, no reassignment is left, and every partition of every live topic is led by a broker
that has taken the leadership of the state znode's epoch, with a full ISR and an HW past every
offset acknowledged in it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from client.types import TopicPartition
from zk.data import decode_topic_assignment
from zk.paths import REASSIGN_PARTITIONS_PATH, partition_state_path, topic_path

if TYPE_CHECKING:
    from sim.workload import Workload
    from sim.world import World


def unhealthy(world: World, workload: Workload) -> str | None:
    """What keeps the cluster from being whole, or None."""
    down = [b for b in sorted(world.brokers) if not world.brokers[b].running]
    if down:
        return f"brokers {down} are not running"
    controller = world.controller_id()
    if controller is None or not world.brokers[controller].running:
        return "no live controller"
    moving = world.znode(REASSIGN_PARTITIONS_PATH)
    if moving is not None:
        return f"a reassignment is still in progress: {moving.decode(errors='replace')}"
    for topic in sorted(workload.topics):
        data = world.znode(topic_path(topic))
        if data is None:
            return f"topic {topic} is not in ZooKeeper"
        for partition, replicas in sorted(decode_topic_assignment(data).items()):
            state_data = world.znode(partition_state_path(topic, partition))
            if state_data is None:
                return f"{topic}-{partition} has no state"
            state = json.loads(state_data)
            if state["leader"] < 0:
                return f"{topic}-{partition} has no leader"
            if sorted(state["isr"]) != sorted(replicas):
                return f"{topic}-{partition} has ISR {state['isr']}, replicas {replicas}"
            server = world.brokers[state["leader"]].server
            rm = getattr(server, "replica_manager", None)
            partition_state = rm.partitions.get((topic, partition)) if rm is not None else None
            if (
                partition_state is None
                or not partition_state.is_leader
                or partition_state.leader_epoch != state["leader_epoch"]
            ):
                return f"{topic}-{partition}: leader {state['leader']} has not taken epoch {state['leader_epoch']}"
            # a new leader's HW passes what the old one acknowledged once every follower of the ISR
            # has fetched from it (Kafka's HW after a failover lags until then)
            last = workload.ledger.last_acked.get((topic, partition), -1)
            log_ = rm.get_log(TopicPartition(topic, partition))
            if log_ is not None and log_.high_watermark <= last:
                return f"{topic}-{partition}: leader {state['leader']}'s HW {log_.high_watermark} is not past acknowledged offset {last}"
    return None
