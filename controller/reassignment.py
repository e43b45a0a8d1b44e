"""Partition reassignment (Kafka's KafkaController.onPartitionReassignment, with KIP-455's
ReplicaAssignment: seed 000 walks its steps; the request comes from ``floodmark reassign
--execute``, kafka-reassign-partitions.sh or AlterPartitionReassignments, through
/admin/reassign_partitions, Kafka's ZooKeeper-mode request channel). docs/design.md "Partition
reassignment" explains the choices, docs/guarantees.md "Reassignment" what it guarantees.

The move lives in the topic znode, as in Kafka 2.4+: for a partition with assigned replicas OAR
moving to RAR, phase U (Kafka's updateCurrentReassignment) writes AR = OAR + RAR with
``adding_replicas`` = RAR - OAR and ``removing_replicas`` = OAR - RAR (Kafka's reassignTo; no
write when it holds them already), and the context holds the same (Kafka's
partitionFullReplicaAssignment). A partition with neither is not being reassigned
(isBeingReassigned): a reordering, or a request for the assignment as it is, is complete at
once, whatever the ISR (Kafka's isReassignmentComplete); any other is complete when every
target replica is in the ISR of the partition's state znode, read each time, never the
controller's cached ISR (a leader writes its ISR changes to that znode itself and tells the
controller only through /isr_change_notification, seconds later).

* phase A, while the move is not complete: (2, Kafka's A1) the leader epoch bumped and
  LeaderAndIsr with AR = OAR + RAR to every replica, with is_new to the adding replicas every
  time (updateLeaderEpochAndSendRequest: a broker with an offline log dir creates a new replica
  only then), (3, A2) the adding replicas not started yet go NewReplica. Then it waits: each
  write of the state znode fires a watch (Kafka's PartitionReassignmentIsrChangeHandler), and
  :class:`~controller.event_manager.PartitionReassignmentIsrChange` checks the ISR again.
* phase B, once complete: (5) RAR OnlineReplica, (6) AR = RAR in memory, (7) a leader from RAR
  when the current one is not in it or not alive (else the leader epoch is bumped so the leader
  learns the new AR), (8) OAR - RAR leave the ISR (one write, conditional on the version of a
  state whose ISR holds all of RAR: if the leader took a target replica out meanwhile, the move
  goes back to phase A's wait; a partition not being reassigned has nothing to take out), and go
  OfflineReplica (StopReplica), (9) then NonExistentReplica (StopReplica with delete: the broker
  removes the log), (10) AR = RAR in ZooKeeper with no adding and no removing replicas, (11) the
  partition leaves /admin/reassign_partitions (the znode is deleted when empty), (12)
  UpdateMetadata to every broker.

ZooKeeper holds the move in the topic znode until step 10, and the request stays in
/admin/reassign_partitions until step 11, so a controller that dies on the way leaves a state
its successor finishes: failover step 12 resumes every partition whose topic znode names adding
or removing replicas and every one in the request znode (:func:`moves_in_progress`); after step 1
of a move that only adds replicas, AR already equals RAR and adding_replicas says the move still
waits for them. A broker that comes back re-runs the partitions moving onto it
(onBrokerStartup -> maybeResumeReassignments), so a move to a broker that died waits for it and
its replica hears is_new. Every step is safe to run twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from client.types import TopicPartition
from controller import topic_deletion
from controller.context import ControllerContext
from controller.event_manager import PartitionReassignment, PartitionReassignmentIsrChange
from controller.partition_leader_election import ElectionOutcome
from controller.partition_state_machine import ElectionStrategy, PartitionState
from controller.parts import ControllerParts
from controller.reassignment_znodes import (
    read_reassignment_request,
    read_state_and_watch,
    remove_partitions_from_reassignment,
    update_assigned_replicas,
)
from controller.replica_state_machine import ReplicaState
from zk.data import (
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    ReplicaAssignment,
)
from zk.paths import REASSIGN_PARTITIONS_PATH

log = logging.getLogger(__name__)


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
    """The state znode of a partition being reassigned changed (Kafka's
    processPartitionReassignmentIsrChange -> maybeCompleteReassignment): when every target
    replica is in its ISR, the reassignment goes on to phase B."""
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
    if is_reassignment_complete(ctl.context.full_replica_assignment(tp), state):
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
    # replicas, AR is the target, and the topic znode's adding_replicas say the move waits for
    # them; a request for the assignment as it is (or a reordering) adds and removes nothing,
    # and completes at once, as in Kafka
    return None


def moves_in_progress(
    ctx: ControllerContext, requested: Mapping[TopicPartition, list[int]]
) -> dict[TopicPartition, list[int]]:
    """At failover (Kafka's initializeControllerContext, then initializePartitionReassignments):
    the partitions whose topic znode names adding or removing replicas (their move resumes,
    whether or not /admin/reassign_partitions still names them), and those the request znode
    names. A partition asked for a target other than the one its topic znode is moving to keeps
    the move it is in (floodmark runs one target per partition); the request's order of the
    target wins, as the topic znode holds OAR first."""
    moves = {
        tp: ctx.full_replica_assignment(tp).target_replicas
        for tp in sorted({*ctx.adding_replicas, *ctx.removing_replicas})
    }
    for tp, target in sorted(requested.items()):
        running = moves.get(tp)
        if running is not None and sorted(running) != sorted(target):
            log.warning(
                "partition %s is being reassigned to %s; the requested target %s is ignored",
                tp,
                running,
                target,
            )
            continue
        moves[tp] = list(target)
    return moves


async def resume_reassignments_for_brokers(ctl: ControllerParts, broker_ids: Iterable[int]) -> None:
    """onBrokerStartup: partitions moving onto a broker that just (re)started run their steps
    again, so the new replica hears its leadership and the move goes on."""
    ids = set(broker_ids)
    for tp, target in sorted(ctl.context.partitions_being_reassigned.items()):
        if ids & set(target):
            await on_partition_reassignment(ctl, tp)


# -- the procedure --------------------------------------------------------------------------------


def is_reassignment_complete(
    assignment: ReplicaAssignment, state: LeaderIsrAndControllerEpoch | None
) -> bool:
    """Kafka's isReassignmentComplete: a partition that adds and removes no replica (a
    reordering, or the assignment as it is) is complete at once, whatever its ISR; any other is
    complete when every target replica is in the ISR of the state znode (``state``, as just read
    from ZooKeeper; None when the znode is missing)."""
    if not assignment.is_being_reassigned:
        return True
    return state is not None and not missing_from_isr(state.leader_and_isr, assignment.target_replicas)


def missing_from_isr(lai: LeaderAndIsr, target: Sequence[int]) -> list[int]:
    """The target replicas that are not in ``lai``'s ISR."""
    return [r for r in target if r not in lai.isr]


async def on_partition_reassignment(
    ctl: ControllerParts, tp: TopicPartition, state: LeaderIsrAndControllerEpoch | None = None
) -> None:
    """Kafka's onPartitionReassignment: phase U (the topic znode says OAR + RAR with its adding
    and removing replicas), then phase A or B, decided from the state znode: ``state`` when the
    caller has just read it (and set the watch), else read here, which also (re)sets the ISR
    change watch."""
    ctx = ctl.context
    target = ctx.partitions_being_reassigned[tp]
    reassignment = ctx.full_replica_assignment(tp).reassign_to(target)
    await update_assigned_replicas(ctl, tp, reassignment)  # U1-U2 (no write when it holds it)
    if state is None:
        state = await read_state_and_watch(ctl, tp)
        if state is not None:
            ctx.partition_leadership[tp] = state
    if not is_reassignment_complete(reassignment, state):
        await _start_new_replicas(ctl, tp, reassignment)
    else:
        await _complete_reassignment(ctl, tp, target, reassignment)


async def _start_new_replicas(
    ctl: ControllerParts, tp: TopicPartition, reassignment: ReplicaAssignment
) -> None:
    """Phase A; then the wait for the ISR. A1 tells every replica of OAR + RAR the new AR, the
    adding replicas with is_new every time (a broker with an offline log dir creates a new
    replica only then, KIP-112; the move may be resumed by a broker's return or a failover,
    after the first LeaderAndIsr went nowhere). A2 starts the adding replicas this controller
    has not started yet (NonExistentReplica)."""
    rsm = ctl.replica_state_machine
    adding = list(reassignment.adding_replicas)
    await update_leader_epoch_and_send(ctl, tp, reassignment, step=2)  # A1
    await rsm.handle_state_changes(  # A2
        [
            PartitionReplica(tp, r)
            for r in adding
            if rsm.state(PartitionReplica(tp, r)) is ReplicaState.NON_EXISTENT
        ],
        ReplicaState.NEW,
    )
    log.info(
        "reassignment of %s to %s: waiting for %s to join the ISR",
        tp,
        ctl.context.partitions_being_reassigned[tp],
        reassignment.target_replicas,
    )


async def _complete_reassignment(
    ctl: ControllerParts, tp: TopicPartition, target: list[int], reassignment: ReplicaAssignment
) -> None:
    """Phase B (steps 5-12), once every target replica is in the ISR, or at once for a partition
    that adds and removes no replica."""
    ctx, rsm = ctl.context, ctl.replica_state_machine
    old_and_new = list(reassignment.replicas)
    old = [r for r in old_and_new if r not in target]
    await rsm.handle_state_changes(  # 5 (B1)
        [
            PartitionReplica(tp, r)
            for r in target
            if rsm.state(PartitionReplica(tp, r)) is not ReplicaState.ONLINE
        ],
        ReplicaState.ONLINE,
    )
    completed = ReplicaAssignment(tuple(target))
    ctx.set_full_replica_assignment(tp, completed)  # 6 (B2)
    try:
        if not await _move_leader_if_required(ctl, tp, target, old_and_new):  # 7
            ctx.set_full_replica_assignment(tp, reassignment)
            return  # no target replica can lead yet: a later ISR change or broker start-up retries
        if reassignment.is_being_reassigned:
            decided_on = await _remove_old_replicas_from_isr(ctl, tp, target)  # 8 (the ISR)
        else:
            decided_on = ctx.partition_leadership[tp]  # nothing to remove, nothing to wait for
        if decided_on is None:
            # the leader took a target replica out of the ISR since the decision: back to the
            # wait of phase A, every replica of OAR + RAR told the wide AR again (the watch,
            # set by the decision's read, brings the move back here once the ISR holds RAR)
            ctx.set_full_replica_assignment(tp, reassignment)
            await update_leader_epoch_and_send(ctl, tp, reassignment, step=2)
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
        await update_assigned_replicas(ctl, tp, completed)  # 10 (B6: no adding, no removing)
    except BaseException:
        # ZooKeeper still says OAR + RAR with the adding and removing replicas: so must the
        # context, so that the retry takes the old replicas out again (each step above is safe
        # to repeat)
        if ctx.full_replica_assignment(tp) == completed:
            ctx.set_full_replica_assignment(tp, reassignment)
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
        added=list(reassignment.adding_replicas),
        removed=old,
        leader=lai.leader,
        # the state znode's ISR when the old replicas left it (written, or read and left as it
        # was), with its zkVersion: it holds every target replica of a partition that added or
        # removed one (sim/reassignment_isr.py)
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
        removed = [r for r in old_and_new if r not in target]
        await update_leader_epoch_and_send(ctl, tp, ReplicaAssignment(tuple(target)), step=7, also=removed)
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
    ctl: ControllerParts,
    tp: TopicPartition,
    assignment: ReplicaAssignment,
    step: int,
    also: Sequence[int] = (),
) -> None:
    """Kafka's updateLeaderEpochAndSendRequest: the same leader and ISR under a new leader epoch
    (so the brokers accept it), sent with ``assignment``'s AR to its live replicas: the origin
    replicas with is_new = false (a replica on an offline log dir must not be created afresh
    elsewhere), the adding replicas with is_new = true (they may be created in any good log
    dir); ``also`` (step 7: the replicas being removed) hear it too, with is_new = false."""

    def compute(_: TopicPartition, current: LeaderIsrAndControllerEpoch) -> ElectionOutcome:
        lai = current.leader_and_isr
        return ElectionOutcome(
            lai.new_leader_and_isr(lai.leader, lai.isr), reason=f"reassignment step {step}"
        )

    written, _, failed = await ctl.partition_state_machine.update_leader_and_isr([tp], compute)
    if tp in failed:
        raise RuntimeError(f"cannot bump the leader epoch of {tp}: {failed[tp]}")
    state = written[tp][0]
    ctx = ctl.context
    replicas = list(assignment.replicas)
    origin = [*assignment.origin_replicas, *(r for r in also if r not in assignment.replicas)]
    for recipients, is_new in ((origin, False), (assignment.adding_replicas, True)):
        live = [r for r in recipients if ctx.is_replica_online(r, include_shutting_down=True)]
        ctl.batch.add_leader_and_isr(live, tp, state, replicas, is_new=is_new)
    _record_step(ctl, tp, step=step, replicas=replicas)


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
