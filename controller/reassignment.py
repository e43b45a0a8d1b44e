"""Partition reassignment (Kafka 2.x's KafkaController.onPartitionReassignment, which seed 000
walks step by step; the request comes from ``floodmark reassign --execute``,
kafka-reassign-partitions.sh, through /admin/reassign_partitions). docs/design.md "Partition
reassignment" explains the choices, docs/guarantees.md "Reassignment" what it guarantees.

Which phase runs is decided from the ISR in the partition's state znode, read each time (Kafka's
isReassignmentComplete), never from the controller's cached ISR: a leader writes its ISR changes
to that znode itself and tells the controller only through /isr_change_notification, seconds
later, so the cache may still list a replica the leader has already taken out.

For a partition with assigned replicas OAR moving to RAR:

* phase 1, while some replica of RAR is not in the ISR: (1) AR = OAR + RAR in ZooKeeper,
  (2) the leader epoch bumped and LeaderAndIsr with that AR to every replica, (3) the replicas of
  RAR not started yet go NewReplica (they start following). Then it waits: each write of the
  partition's state znode fires a watch (Kafka's PartitionReassignmentIsrChangeHandler), and the
  event :class:`~controller.event_manager.PartitionReassignmentIsrChange` checks the ISR again.
* phase 2, once RAR is in the ISR: (5) RAR OnlineReplica, (6) AR = RAR in memory, (7) a leader
  from RAR when the current one is not in it or not alive (else the leader epoch is bumped so the
  leader learns the new AR), (8) OAR - RAR leave the ISR (one write, conditional on the version
  of a state whose ISR holds all of RAR: if the leader took a target replica out meanwhile, the
  move goes back to phase 1's wait), and go OfflineReplica (StopReplica), (9) then
  NonExistentReplica (StopReplica with delete: the broker removes the log), (10) AR = RAR in
  ZooKeeper, (11) the partition leaves /admin/reassign_partitions (the znode is deleted when
  empty), (12) UpdateMetadata to every broker.

ZooKeeper holds AR = OAR + RAR until step 10, and the request stays in /admin/reassign_partitions
until step 11, so a controller that dies on the way leaves a state its successor finishes
(failover step 12 re-runs every partition in the znode). A partition in the znode is being
reassigned whatever its AR (Kafka 2.4+ keeps adding_replicas in the topic znode for this, its
ReplicaAssignment.isBeingReassigned): after step 1 of a move that only adds replicas, AR already
equals RAR, and the move is still waiting for them. A broker that comes back re-runs the
partitions moving onto it (onBrokerStartup), so a move to a broker that died waits for it.
Every step is safe to run twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from kazoo.exceptions import BadVersionError, NoNodeError

from client.types import TopicPartition
from controller import topic_deletion
from controller.event_manager import PartitionReassignment, PartitionReassignmentIsrChange
from controller.partition_leader_election import ElectionOutcome
from controller.partition_state_machine import ElectionStrategy, PartitionState
from controller.parts import ControllerParts
from controller.replica_state_machine import ReplicaState
from zk.bridge import DeleteOp, SetDataOp
from zk.client import fenced_multi
from zk.data import (
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    decode_partition_state,
    decode_reassignment,
    decode_topic_assignment,
    decode_topic_id,
    encode_reassignment,
    encode_topic_assignment,
)
from zk.paths import REASSIGN_PARTITIONS_PATH, partition_state_path, topic_path

log = logging.getLogger(__name__)

MAX_WRITE_ATTEMPTS = 10


# -- the events ---------------------------------------------------------------------------------


async def handle_partition_reassignment(ctl: ControllerParts, event: PartitionReassignment) -> None:
    """/admin/reassign_partitions appeared or changed: start the partitions it names that are not
    being moved yet (a partition already moving keeps its first target; the tool refuses a second
    request for it)."""
    if not ctl.is_active:
        return
    if await ctl.zk.exists(REASSIGN_PARTITIONS_PATH, watch=ctl.on_reassign_watch) is None:
        return
    requested = await read_reassignment_request(ctl)
    moving = ctl.context.partitions_being_reassigned
    for tp in sorted(requested.keys() & moving.keys()):
        if requested[tp] != moving[tp]:
            log.warning(
                "partition %s is already being reassigned to %s; the new target %s is ignored",
                tp,
                moving[tp],
                requested[tp],
            )
    new = {tp: rar for tp, rar in requested.items() if tp not in moving}
    if new:
        await maybe_trigger_partition_reassignment(ctl, new)


async def handle_isr_change(ctl: ControllerParts, event: PartitionReassignmentIsrChange) -> None:
    """The state znode of a partition being reassigned changed: when every target replica is in
    its ISR, the reassignment goes on to phase 2."""
    tp = event.partition
    if not ctl.is_active or tp not in ctl.context.partitions_being_reassigned:
        return
    state = await read_state_and_watch(ctl, tp)
    if state is None:
        log.error("partition %s being reassigned has no state znode", tp)
        return
    ctl.context.partition_leadership[tp] = state
    target = ctl.context.partitions_being_reassigned[tp]
    caught_up = [r for r in target if r in state.leader_and_isr.isr]
    if is_reassignment_complete(state, target):
        log.info("%s/%s replicas of %s caught up; resuming its reassignment", len(caught_up), len(target), tp)
        await on_partition_reassignment(ctl, tp, state)
    else:
        log.info(
            "%s/%s replicas of %s caught up; %s still catching up",
            len(caught_up),
            len(target),
            tp,
            [r for r in target if r not in caught_up],
        )


async def maybe_trigger_partition_reassignment(
    ctl: ControllerParts, requested: dict[TopicPartition, list[int]]
) -> None:
    """Start (or, after a failover or a broker's return, resume) each requested partition's
    move; requests that cannot be carried out leave the znode with an error logged."""
    ctx = ctl.context
    dropped: list[TopicPartition] = []
    for tp, target in sorted(requested.items()):
        problem = _refusal(ctl, tp, target)
        if problem is not None:
            log.error("reassignment of %s to %s dropped: %s", tp, target, problem)
            ctl.record(
                "reassignment_dropped", topic=tp.topic, partition=tp.partition, target=target, reason=problem
            )
            dropped.append(tp)
            ctx.partitions_being_reassigned.pop(tp, None)
            continue
        ctx.partitions_being_reassigned[tp] = list(target)
        try:
            await on_partition_reassignment(ctl, tp)
        except BaseException:
            # not started: the event's retry sees it as new and runs the (repeatable) steps again
            ctx.partitions_being_reassigned.pop(tp, None)
            raise
    if dropped:
        await remove_partitions_from_reassignment(ctl, dropped)


def _refusal(ctl: ControllerParts, tp: TopicPartition, target: Sequence[int]) -> str | None:
    ctx = ctl.context
    if ctx.is_topic_queued_for_deletion(tp.topic):
        return f"topic {tp.topic} is being deleted"
    if not ctx.replicas(tp) or tp not in ctx.partition_leadership:
        return f"partition {tp} does not exist"
    if not target or len(set(target)) != len(target):
        return f"invalid target replicas {list(target)}"
    # AR equal to the target is no reason to drop it: after step 1 of a move that only adds
    # replicas, AR is the target, and the move waits for them (Kafka resumes it, from the
    # topic znode's adding_replicas); a request for the assignment as it is completes at once
    # when its replicas are in the ISR, as in Kafka
    return None


async def resume_reassignments_for_brokers(ctl: ControllerParts, broker_ids: Iterable[int]) -> None:
    """onBrokerStartup: partitions moving onto a broker that just (re)started run their steps
    again, so the new replica hears its leadership and the move goes on."""
    ids = set(broker_ids)
    for tp, target in sorted(ctl.context.partitions_being_reassigned.items()):
        if ids & set(target):
            await on_partition_reassignment(ctl, tp)


# -- the procedure --------------------------------------------------------------------------------


def is_reassignment_complete(state: LeaderIsrAndControllerEpoch | None, target: Sequence[int]) -> bool:
    """Kafka's isReassignmentComplete: every target replica is in the ISR of the state znode
    (``state``, as just read from ZooKeeper; None when the znode is missing)."""
    return state is not None and not missing_from_isr(state.leader_and_isr, target)


def missing_from_isr(lai: LeaderAndIsr, target: Sequence[int]) -> list[int]:
    """The target replicas that are not in ``lai``'s ISR."""
    return [r for r in target if r not in lai.isr]


async def on_partition_reassignment(
    ctl: ControllerParts, tp: TopicPartition, state: LeaderIsrAndControllerEpoch | None = None
) -> None:
    """Phase 1 or phase 2, decided from the state znode: ``state`` when the caller has just read
    it (and set the watch), else read here, which also (re)sets the ISR change watch."""
    ctx = ctl.context
    target = ctx.partitions_being_reassigned[tp]
    if state is None:
        state = await read_state_and_watch(ctl, tp)
        if state is not None:
            ctx.partition_leadership[tp] = state
    if not is_reassignment_complete(state, target):
        await _start_new_replicas(ctl, tp, target)
    else:
        await _complete_reassignment(ctl, tp, target)


async def _start_new_replicas(ctl: ControllerParts, tp: TopicPartition, target: list[int]) -> None:
    """Steps 1-3; then the wait for the ISR. Step 3 starts the target replicas this controller
    has not started yet (NonExistentReplica): when step 1 ran before (a retry, a failover),
    AR already holds them and tells nothing of which are new."""
    ctx, rsm = ctl.context, ctl.replica_state_machine
    current = ctx.replicas(tp)
    new_and_old = current + [r for r in target if r not in current]
    new_replicas = [r for r in target if rsm.state(PartitionReplica(tp, r)) is ReplicaState.NON_EXISTENT]
    await update_assigned_replicas(ctl, tp, new_and_old)  # 1
    await update_leader_epoch_and_send(ctl, tp, new_and_old, new_and_old, step=2)  # 2
    await ctl.replica_state_machine.handle_state_changes(  # 3
        [PartitionReplica(tp, r) for r in new_replicas], ReplicaState.NEW
    )
    log.info("reassignment of %s to %s: waiting for %s to join the ISR", tp, target, target)


async def _complete_reassignment(ctl: ControllerParts, tp: TopicPartition, target: list[int]) -> None:
    """Steps 5-12, once every target replica is in the ISR."""
    ctx, rsm = ctl.context, ctl.replica_state_machine
    old_and_new = ctx.replicas(tp)
    old = [r for r in old_and_new if r not in target]
    await rsm.handle_state_changes(  # 5
        [
            PartitionReplica(tp, r)
            for r in target
            if rsm.state(PartitionReplica(tp, r)) is not ReplicaState.ONLINE
        ],
        ReplicaState.ONLINE,
    )
    ctx.set_replicas(tp, target)  # 6
    try:
        if not await _move_leader_if_required(ctl, tp, target, old_and_new):  # 7
            ctx.set_replicas(tp, old_and_new)
            return  # no target replica can lead yet: a later ISR change or broker start-up retries
        decided_on = await _remove_old_replicas_from_isr(ctl, tp, target)  # 8 (the ISR)
        if decided_on is None:
            # the leader took a target replica out of the ISR since the decision: back to the
            # wait of phase 1, every replica of OAR + RAR told the wide AR again (the watch,
            # set by the decision's read, brings the move back here once the ISR holds RAR)
            ctx.set_replicas(tp, old_and_new)
            await update_leader_epoch_and_send(ctl, tp, old_and_new, old_and_new, step=2)
            log.info("reassignment of %s to %s: a target replica left the ISR; waiting again", tp, target)
            return
        olds = [
            PartitionReplica(tp, r)
            for r in old
            if rsm.state(PartitionReplica(tp, r)) is not ReplicaState.NON_EXISTENT
        ]
        await rsm.handle_state_changes(olds, ReplicaState.OFFLINE)  # 8 (StopReplica)
        await rsm.handle_state_changes(olds, ReplicaState.DELETION_STARTED)  # 9
        await rsm.handle_state_changes(olds, ReplicaState.DELETION_SUCCESSFUL)
        await rsm.handle_state_changes(olds, ReplicaState.NON_EXISTENT)
        await update_assigned_replicas(ctl, tp, target)  # 10
    except BaseException:
        # ZooKeeper still says OAR + RAR: so must the context, so that the retry takes the old
        # replicas out again (each step above is safe to repeat)
        if ctx.replicas(tp) == target:
            ctx.set_replicas(tp, old_and_new)
        raise
    # 11, and only then forgotten: if the znode write fails, the event's retry (which acts only on
    # partitions still being reassigned) runs these steps again, each a no-op now but this one
    await remove_partitions_from_reassignment(ctl, [tp])
    ctx.partitions_being_reassigned.pop(tp, None)
    ctl.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [tp])  # 12
    lai = decided_on.leader_and_isr
    ctl.record(
        "reassignment_completed",
        topic=tp.topic,
        partition=tp.partition,
        replicas=target,
        removed=old,
        leader=lai.leader,
        # the state znode's ISR when the old replicas left it (written, or read and left as it
        # was), with its zkVersion: it holds every target replica (sim/reassignment_isr.py)
        isr=list(lai.isr),
        zk_version=lai.zk_version,
    )
    log.info("reassignment of %s to %s completed", tp, target)
    if ctx.is_topic_queued_for_deletion(tp.topic):
        await topic_deletion.resume_deletions(ctl)


async def _move_leader_if_required(
    ctl: ControllerParts, tp: TopicPartition, target: list[int], old_and_new: list[int]
) -> bool:
    """Step 7 (moveReassignedPartitionLeaderIfRequired). False when a new leader was needed and
    none of the target replicas could take it."""
    ctx = ctl.context
    leader = ctx.partition_leadership[tp].leader_and_isr.leader
    if leader in target and ctx.is_replica_online(leader, tp=tp):
        # the leader stays: a new leader epoch tells it (and everyone) the new AR
        await update_leader_epoch_and_send(ctl, tp, old_and_new, target, step=7)
        return True
    failed = await ctl.partition_state_machine.handle_state_changes(
        [tp], PartitionState.ONLINE, ElectionStrategy.REASSIGNMENT, {tp: target}
    )
    if tp in failed:
        log.warning("reassignment of %s: no leader from %s yet (%s)", tp, target, failed[tp])
        return False
    _record_step(ctl, tp, step=7)
    return True


async def _remove_old_replicas_from_isr(
    ctl: ControllerParts, tp: TopicPartition, target: list[int]
) -> LeaderIsrAndControllerEpoch | None:
    """Step 8's ZooKeeper half in one write: the ISR keeps only target replicas, written
    conditionally on the version of a state whose ISR holds every target replica. Returns that
    state (as written, or as read when there was nothing to remove), or None when the ISR lacks
    a target replica: the leader shrank it after the completion was decided."""
    short: list[int] = []

    def compute(_: TopicPartition, current: LeaderIsrAndControllerEpoch) -> ElectionOutcome:
        lai = current.leader_and_isr
        short[:] = missing_from_isr(lai, target)
        if short:
            return ElectionOutcome(None, reason=f"target replicas {short} are not in the ISR")
        kept = [r for r in lai.isr if r in target]
        if len(kept) == len(lai.isr) or lai.leader not in kept:
            return ElectionOutcome(None, reason="nothing to remove")
        return ElectionOutcome(
            lai.new_leader_and_isr(lai.leader, kept), reason="reassignment: old replicas removed"
        )

    written, _, failed = await ctl.partition_state_machine.update_leader_and_isr([tp], compute)
    if tp in failed and not short:
        raise RuntimeError(f"cannot remove the old replicas of {tp} from its ISR: {failed[tp]}")
    if short:
        return None
    if tp not in written:
        return ctl.context.partition_leadership[tp]  # as read: the ISR holds only target replicas
    state = written[tp][0]
    live = ctl.context.live_replicas(tp, include_shutting_down=True)
    ctl.batch.add_leader_and_isr(live, tp, state, target)
    _record_step(ctl, tp, step=8)
    return state


async def update_leader_epoch_and_send(
    ctl: ControllerParts, tp: TopicPartition, recipients: Sequence[int], assigned: Sequence[int], step: int
) -> None:
    """Kafka's updateLeaderEpochAndSendRequest: the same leader and ISR under a new leader epoch
    (so the brokers accept it), sent with ``assigned`` as the AR to the live ``recipients``."""

    def compute(_: TopicPartition, current: LeaderIsrAndControllerEpoch) -> ElectionOutcome:
        lai = current.leader_and_isr
        return ElectionOutcome(
            lai.new_leader_and_isr(lai.leader, lai.isr), reason=f"reassignment step {step}"
        )

    written, _, failed = await ctl.partition_state_machine.update_leader_and_isr([tp], compute)
    if tp in failed:
        raise RuntimeError(f"cannot bump the leader epoch of {tp}: {failed[tp]}")
    state = written[tp][0]
    live = [r for r in recipients if ctl.context.is_replica_online(r, include_shutting_down=True)]
    ctl.batch.add_leader_and_isr(live, tp, state, assigned)
    _record_step(ctl, tp, step=step, replicas=list(assigned))


def _record_step(
    ctl: ControllerParts, tp: TopicPartition, step: int, replicas: list[int] | None = None
) -> None:
    lai = ctl.context.partition_leadership[tp].leader_and_isr
    ctl.record(
        "reassignment_step",
        topic=tp.topic,
        partition=tp.partition,
        step=step,
        replicas=replicas if replicas is not None else ctl.context.replicas(tp),
        leader=lai.leader,
        leader_epoch=lai.leader_epoch,
        isr=list(lai.isr),
        zk_version=lai.zk_version,
    )


# -- ZooKeeper ----------------------------------------------------------------------------------


async def read_reassignment_request(ctl: ControllerParts) -> dict[TopicPartition, list[int]]:
    """/admin/reassign_partitions; an unreadable one is deleted (it would block every later request)."""
    got = await ctl.zk.get(REASSIGN_PARTITIONS_PATH)
    if got is None:
        return {}
    try:
        return decode_reassignment(got[0])
    except (ValueError, KeyError, TypeError, AttributeError):
        log.error("unreadable %s deleted: %r", REASSIGN_PARTITIONS_PATH, got[0][:200])
        await ctl.delete_quietly([REASSIGN_PARTITIONS_PATH])
        return {}


async def read_state_and_watch(
    ctl: ControllerParts, tp: TopicPartition
) -> LeaderIsrAndControllerEpoch | None:
    got = await ctl.zk.get(
        partition_state_path(tp.topic, tp.partition), watch=ctl.reassignment_isr_watcher(tp)
    )
    return None if got is None else decode_partition_state(got[0], got[1].version)


async def update_assigned_replicas(ctl: ControllerParts, tp: TopicPartition, replicas: Sequence[int]) -> None:
    """Kafka's updateAssignedReplicasForPartition: this partition's entry of /brokers/topics/<t>,
    written conditionally on the znode's version (a CreatePartitions may be growing the topic at
    the same time) and fenced by the controller epoch; then the context."""
    path = topic_path(tp.topic)
    for _ in range(MAX_WRITE_ATTEMPTS):
        got = await ctl.zk.get(path)
        if got is None:
            raise NoNodeError(path)
        assignment = decode_topic_assignment(got[0])
        if assignment.get(tp.partition) != list(replicas):
            assignment[tp.partition] = list(replicas)
            data = encode_topic_assignment(assignment, decode_topic_id(got[0]))  # KIP-516: keep the id
            try:
                await fenced_multi(
                    ctl.zk, ctl.context.epoch_zk_version, [SetDataOp(path, data, got[1].version)]
                )
            except BadVersionError:
                continue  # changed since we read it (or our write landed with its answer lost): again
        break
    else:
        raise BadVersionError(f"{path} kept changing")
    ctl.context.set_replicas(tp, replicas)
    ctl.record("assigned_replicas_updated", topic=tp.topic, partition=tp.partition, replicas=list(replicas))


async def remove_partitions_from_reassignment(
    ctl: ControllerParts, partitions: Iterable[TopicPartition]
) -> None:
    """Kafka's removePartitionsFromReassignedPartitions: rewrite /admin/reassign_partitions without
    them (conditionally on its version: the tool may be adding partitions), or delete it when
    nothing is left."""
    done = set(partitions)
    for _ in range(MAX_WRITE_ATTEMPTS):
        got = await ctl.zk.get(REASSIGN_PARTITIONS_PATH)
        if got is None:
            return
        try:
            remaining = {tp: r for tp, r in decode_reassignment(got[0]).items() if tp not in done}
        except (ValueError, KeyError, TypeError, AttributeError):
            remaining = {}
        op = (
            SetDataOp(REASSIGN_PARTITIONS_PATH, encode_reassignment(remaining), got[1].version)
            if remaining
            else DeleteOp(REASSIGN_PARTITIONS_PATH, got[1].version)
        )
        try:
            await fenced_multi(ctl.zk, ctl.context.epoch_zk_version, [op])
            return
        except (BadVersionError, NoNodeError):
            continue
    raise BadVersionError(f"{REASSIGN_PARTITIONS_PATH} kept changing")
