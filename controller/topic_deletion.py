"""Topic deletion (Kafka's TopicDeletionManager): a topic
marked in /admin/delete_topics has its partitions taken Offline then NonExistent, every live
replica sent StopReplica(delete) (ReplicaDeletionStarted), and its znodes deleted once every
replica is ReplicaDeletionSuccessful. A replica on a dead broker, or one whose StopReplica failed,
makes the topic ineligible (ReplicaDeletionIneligible) until that broker comes back.

A topic queued for deletion moves no more: its reassignments are cancelled
(:func:`cancel_reassignments`; docs/design.md "Topic deletion cancels its moves").

A StopReplica(delete) answer settles only the partitions its request asked for
(:class:`StopReplicaDeletionCallback`; docs/design.md "Applying StopReplica answers per
partition"). Every TopicDeletion event resumes the deletions in progress (Kafka's
enqueueTopicsForDeletion calls resumeDeletions), so a deletion whose last step failed is
finished by the event's retry.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import NoNodeError, NotEmptyError

from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller.event_manager import (
    TopicDeletion,
    TopicDeletionStopReplicaResponse,
)
from controller.partition_state_machine import PartitionState
from controller.parts import ControllerParts
from controller.reassignment_znodes import remove_partitions_from_reassignment
from controller.replica_state_machine import ReplicaState
from zk.batch import MULTI_MAX_OPS, fenced_multi_batched, windowed
from zk.bridge import DeleteOp
from zk.client import fenced_multi
from zk.data import PartitionReplica
from zk.paths import (
    DELETE_TOPICS_PATH,
    config_topic_path,
    delete_topic_path,
    partition_path,
    topic_partitions_path,
    topic_path,
)

log = logging.getLogger(__name__)


async def handle_topic_deletion(ctl: ControllerParts, event: TopicDeletion) -> None:
    if not ctl.is_active:
        return
    marked = await ctl.zk.get_children(DELETE_TOPICS_PATH, watch=ctl.on_delete_topics_watch) or []
    if not marked:
        return
    if not ctl.config.delete_topic_enable:
        log.info("delete.topic.enable is false: dropping deletion requests for %s", marked)
        await ctl.delete_quietly([delete_topic_path(t) for t in marked])
        return
    unknown = [t for t in marked if t not in ctl.context.assignments]
    if unknown:
        await ctl.delete_quietly([delete_topic_path(t) for t in unknown])
    new = sorted(set(marked) - set(unknown) - ctl.context.topics_to_be_deleted)
    if new:
        ctl.context.topics_to_be_deleted.update(new)
        ctl.record("topic_deletion_queued", topics=new)
    # also with nothing new: this may be the retry of a deletion whose last step failed
    await resume_deletions(ctl)


async def resume_deletions(ctl: ControllerParts) -> None:
    ctx, rsm = ctl.context, ctl.replica_state_machine
    if not ctl.config.delete_topic_enable:
        return
    for topic in sorted(ctx.topics_to_be_deleted):
        replicas = ctx.replicas_for_partitions(ctx.partitions_for_topic(topic))
        states = [rsm.state(r) for r in replicas]
        # (no replicas left: complete_topic_deletion made them NonExistent, then failed)
        if all(s is ReplicaState.DELETION_SUCCESSFUL for s in states):
            await complete_topic_deletion(ctl, topic)
        elif any(s is ReplicaState.DELETION_STARTED for s in states):
            continue  # waiting for StopReplica answers
        elif topic in ctx.topics_ineligible_for_deletion:
            continue  # waiting for a dead replica's broker
        else:
            await cancel_reassignments(ctl, topic)
            await on_topic_deletion(ctl, topic)


async def cancel_reassignments(ctl: ControllerParts, topic: str) -> None:
    """A topic queued for deletion moves no more (KRaft's rule; docs/design.md "Topic deletion
    cancels its moves"): its partitions leave /admin/reassign_partitions and the controller's
    moves, their AR stays the wide OAR + RAR, so that every replica that may hold the topic's data
    is stopped and deleted. ZooKeeper-mode Kafka instead waits for the move to complete, which it
    never does when the partition lost its leader: the move waits for a leader, the election
    skips a topic queued for deletion, and the deletion waits for the move (the simulator's seed
    254 of issue 35)."""
    ctx = ctl.context
    moving = sorted(tp for tp in ctx.partitions_being_reassigned if tp.topic == topic)
    if not moving:
        return
    await remove_partitions_from_reassignment(ctl, moving)
    for tp in moving:
        ctx.partitions_being_reassigned.pop(tp, None)
    ctl.record("reassignment_cancelled_by_deletion", topic=topic, partitions=[tp.partition for tp in moving])
    log.info("deletion of topic %s cancels the reassignment of %s", topic, ", ".join(map(str, moving)))


async def on_topic_deletion(ctl: ControllerParts, topic: str) -> None:
    ctx, psm, rsm = ctl.context, ctl.partition_state_machine, ctl.replica_state_machine
    partitions = ctx.partitions_for_topic(topic)
    # everyone stops serving it: UpdateMetadata announces leader -2 for its partitions
    ctl.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, partitions)
    await psm.handle_state_changes(
        [tp for tp in partitions if psm.state(tp) in (PartitionState.NEW, PartitionState.ONLINE)],
        PartitionState.OFFLINE,
    )
    await psm.handle_state_changes(
        [tp for tp in partitions if psm.state(tp) is PartitionState.OFFLINE], PartitionState.NON_EXISTENT
    )
    replicas = ctx.replicas_for_partitions(partitions)
    live = [
        r
        for r in replicas
        if ctx.is_replica_online(r.replica, True)
        and rsm.state(r)
        # NEW: a replica a move (or a creation) started, which may hold data already (Kafka's
        # onPartitionDeletion takes every alive replica, whatever its state)
        in (ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE, ReplicaState.DELETION_INELIGIBLE)
    ]
    dead = [
        r
        for r in replicas
        if not ctx.is_replica_online(r.replica, True) and rsm.state(r) is ReplicaState.OFFLINE
    ]
    await rsm.handle_state_changes(
        [r for r in live if rsm.state(r) is not ReplicaState.OFFLINE], ReplicaState.OFFLINE
    )
    callback = StopReplicaDeletionCallback.of_batch(ctl)
    callback.ask([r for r in live if rsm.state(r) is ReplicaState.OFFLINE])
    await rsm.handle_state_changes(live, ReplicaState.DELETION_STARTED, callback=callback)
    if dead:
        ctx.topics_ineligible_for_deletion.add(topic)
        await rsm.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
    ctl.record("topic_deletion_started", topic=topic, waiting_for=sorted({r.replica for r in dead}))
    if all(rsm.state(r) is ReplicaState.DELETION_SUCCESSFUL for r in replicas):
        await complete_topic_deletion(ctl, topic)


class StopReplicaDeletionCallback:
    """The callback of one batch's StopReplica(delete=true) requests, in the channel's sender
    task: it knows which partitions each broker's request asked for, and makes each answer a
    :class:`TopicDeletionStopReplicaResponse` about those partitions alone. Kafka acts on the
    partitions the answer names; a request-level error names them all there (a broker's error
    response lists every partition of the request), here the channel's error body names none,
    so the request's own list stands in. A partition asked for that the answer leaves out
    counts as failed (Kafka would leave its replica ReplicaDeletionStarted for good)."""

    def __init__(self, ctl: ControllerParts) -> None:
        self.ctl = ctl
        self.asked: dict[int, set[TopicPartition]] = {}

    @classmethod
    def of_batch(cls, ctl: ControllerParts) -> StopReplicaDeletionCallback:
        """The callback of the batch being filled: one request per broker carries every
        deletion the batch holds, and the batch keeps one callback per request."""
        for callback in ctl.batch.stop_replica_callbacks.values():
            if isinstance(callback, cls):
                return callback
        return cls(ctl)

    def ask(self, replicas: list[PartitionReplica]) -> None:
        for r in replicas:
            self.asked.setdefault(r.replica, set()).add(r.tp)

    def __call__(self, broker_id: int, response: dict) -> None:
        asked = self.asked.get(broker_id, set())
        named = {
            TopicPartition(p["topic"], p["partition"]): p["error_code"]
            for p in response.get("partitions", [])
        }
        whole = response.get("error_code", ErrorCode.NONE)
        errors = {tp: whole or named.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in sorted(asked)}
        for tp in sorted(named.keys() - asked):
            log.warning(
                "broker %s answered StopReplica(delete) for %s, which it was not asked", broker_id, tp
            )
        self.ctl.events.put(TopicDeletionStopReplicaResponse(broker_id=broker_id, partition_errors=errors))


async def handle_stop_replica_deletion_response(
    ctl: ControllerParts, event: TopicDeletionStopReplicaResponse
) -> None:
    """Kafka's processTopicDeletionStopReplicaResponseReceived: the replicas the answer is about
    move on, the others wait for their own answers."""
    if not ctl.is_active:
        return
    rsm = ctl.replica_state_machine
    started = [
        PartitionReplica(tp, event.broker_id)
        for tp in sorted(event.partition_errors)
        if rsm.state(PartitionReplica(tp, event.broker_id)) is ReplicaState.DELETION_STARTED
    ]
    ok = [r for r in started if event.partition_errors[r.tp] == ErrorCode.NONE]
    failed = [r for r in started if event.partition_errors[r.tp] != ErrorCode.NONE]
    await rsm.handle_state_changes(ok, ReplicaState.DELETION_SUCCESSFUL)
    if failed:
        ctl.context.topics_ineligible_for_deletion.update(r.tp.topic for r in failed)
        await rsm.handle_state_changes(failed, ReplicaState.DELETION_INELIGIBLE)
    await resume_deletions(ctl)


async def complete_topic_deletion(ctl: ControllerParts, topic: str) -> None:
    ctx, rsm = ctl.context, ctl.replica_state_machine
    replicas = ctx.replicas_for_partitions(ctx.partitions_for_topic(topic))
    await rsm.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)
    partitions, rest = await _topic_znodes(ctl, topic)
    paths = [path for group in partitions for path in group] + rest
    try:
        if len(paths) > MULTI_MAX_OPS:
            # more than one multi may carry (ZooKeeper refuses a request past 1 MiB): each
            # partition's znodes first, children before parents, then the topic's in one multi
            await _delete_partitions(ctl, partitions)
            paths = rest
        await fenced_multi(ctl.zk, ctx.epoch_zk_version, [DeleteOp(p) for p in paths])
    except (NoNodeError, NotEmptyError) as exc:
        log.warning(
            "deleting the znodes of topic %s raced (%s); deleting one by one", topic, type(exc).__name__
        )
        await ctl.delete_quietly(paths)
    forget_topic(ctl, topic)
    log.info("topic %s deleted", topic)
    ctl.record("topic_deleted", topic=topic)


async def _topic_znodes(ctl: ControllerParts, topic: str) -> tuple[list[list[str]], list[str]]:
    """The topic's znodes, children before parents: per partition its children (``state``) and
    itself, read in parallel windows (:func:`zk.batch.windowed`); then ``.../partitions``, the
    topic, its config and its deletion marker."""
    numbers = await ctl.zk.get_children(topic_partitions_path(topic)) or []
    children = await windowed(numbers, lambda p: ctl.zk.get_children(partition_path(topic, int(p))))
    partitions = [
        [*(f"{partition_path(topic, int(p))}/{child}" for child in kids or []), partition_path(topic, int(p))]
        for p, kids in zip(numbers, children, strict=True)
    ]
    rest = []
    if await ctl.zk.exists(topic_partitions_path(topic)) is not None:
        rest.append(topic_partitions_path(topic))
    rest.append(topic_path(topic))
    if await ctl.zk.exists(config_topic_path(topic)) is not None:
        rest.append(config_topic_path(topic))
    rest.append(delete_topic_path(topic))
    return partitions, rest


async def _delete_partitions(ctl: ControllerParts, partitions: list[list[str]]) -> None:
    """Each partition's znodes in batched fenced multis (:func:`zk.batch.fenced_multi_batched`);
    a partition whose group was refused (already gone, or a child appeared) is deleted path by
    path, quietly. Raises ControllerMovedError."""
    groups = [[DeleteOp(p) for p in group] for group in partitions]
    results = await fenced_multi_batched(ctl.zk, ctl.context.epoch_zk_version, groups)
    refused = [
        p for group, r in zip(partitions, results, strict=True) if not isinstance(r, list) for p in group
    ]
    if refused:
        await ctl.delete_quietly(refused)


def forget_topic(ctl: ControllerParts, topic: str) -> None:
    for tp in ctl.context.partitions_for_topic(topic):
        ctl.partition_state_machine.states.pop(tp, None)
        for replica in ctl.context.replicas(tp):
            ctl.replica_state_machine.states.pop(PartitionReplica(tp, replica), None)
    ctl.context.remove_topic(topic)
    ctl.topic_watchers.pop(topic, None)
