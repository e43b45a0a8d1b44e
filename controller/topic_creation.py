"""New topics and added partitions (Kafka's processTopicChange, processPartitionModifications,
onNewPartitionCreation, through the PartitionStateMachine and ReplicaStateMachine): partitions go
New, then Online with a leader from the live replicas, and their replicas Online (or Offline on
dead brokers).
"""

from __future__ import annotations

import logging

from client.types import TopicPartition
from controller import failover, topic_deletion
from controller.event_manager import (
    PartitionModifications,
    TopicChange,
)
from controller.partition_state_machine import ElectionStrategy, PartitionState
from controller.parts import ControllerParts
from controller.replica_state_machine import ReplicaState
from zk.batch import windowed
from zk.paths import BROKER_TOPICS_PATH

log = logging.getLogger(__name__)


async def handle_topic_change(ctl: ControllerParts, event: TopicChange) -> None:
    if not ctl.is_active:
        return
    topics = set(await ctl.zk.get_children(BROKER_TOPICS_PATH, watch=ctl.on_topics_watch) or [])
    new_topics = sorted(topics - ctl.context.all_topics)
    gone = sorted(ctl.context.all_topics - topics)
    for topic in gone:  # deleted behind our back (or by us): forget them
        topic_deletion.forget_topic(ctl, topic)
    if not new_topics:
        return
    assignments = await windowed(new_topics, lambda t: failover.read_assignment(ctl, t))
    new_partitions = []
    for topic, assignment in zip(new_topics, assignments, strict=True):
        if assignment is None:
            continue
        ctl.context.assignments[topic] = assignment
        new_partitions += ctl.context.partitions_for_topic(topic)
        ctl.record("topic_created", topic=topic, assignment={str(p): r for p, r in assignment.items()})
    if new_partitions:
        await on_new_partition_creation(ctl, new_partitions)


async def handle_partition_modifications(ctl: ControllerParts, event: PartitionModifications) -> None:
    if not ctl.is_active or event.topic not in ctl.context.assignments:
        return
    assignment = await failover.read_assignment(ctl, event.topic)
    if assignment is None or ctl.context.is_topic_queued_for_deletion(event.topic):
        return
    existing = ctl.context.assignments[event.topic]
    added = sorted(set(assignment) - set(existing))
    for p in sorted(set(existing) & set(assignment)):
        if (
            assignment[p] != existing[p]
            and TopicPartition(event.topic, p) not in ctl.context.partitions_being_reassigned
        ):
            log.warning(
                "replicas of %s-%s changed in ZooKeeper outside a reassignment; ignored", event.topic, p
            )
    if not added:
        return
    for p in added:
        existing[p] = assignment[p]
    ctl.record("partitions_added", topic=event.topic, partitions={str(p): assignment[p] for p in added})
    await on_new_partition_creation(ctl, [TopicPartition(event.topic, p) for p in added])


async def on_new_partition_creation(ctl: ControllerParts, partitions: list[TopicPartition]) -> None:
    ctx = ctl.context
    psm, rsm = ctl.partition_state_machine, ctl.replica_state_machine
    replicas = ctx.replicas_for_partitions(partitions)
    await psm.handle_state_changes(partitions, PartitionState.NEW)
    await rsm.handle_state_changes(replicas, ReplicaState.NEW)
    await psm.handle_state_changes(partitions, PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    live = [r for r in replicas if ctx.is_replica_online(r.replica, include_shutting_down=True, tp=r.tp)]
    dead = [r for r in replicas if not ctx.is_replica_online(r.replica, include_shutting_down=True, tp=r.tp)]
    await rsm.handle_state_changes(live, ReplicaState.ONLINE)
    await rsm.handle_state_changes(dead, ReplicaState.OFFLINE)
