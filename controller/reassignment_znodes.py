"""The znodes of a partition reassignment as the controller reads and writes them (Kafka's
KafkaController.updateReplicaAssignmentForPartition and removePartitionsFromReassignedPartitions;
docs/design.md "Partition reassignment"): the request in /admin/reassign_partitions, a moving
partition's state znode (read with the ISR watch the move waits on), and its entry of
/brokers/topics/<t> with the adding and removing replicas (KIP-455). Every write is conditional
on the znode's version and fenced by the controller epoch; a write whose answer was lost is
recognised by reading again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from kazoo.exceptions import BadVersionError, NoNodeError

from client.types import TopicPartition
from controller.parts import ControllerParts
from zk.bridge import DeleteOp, SetDataOp
from zk.client import fenced_multi
from zk.data import (
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    decode_full_topic_assignment,
    decode_partition_state,
    decode_reassignment,
    decode_topic_id,
    encode_full_topic_assignment,
    encode_reassignment,
)
from zk.paths import REASSIGN_PARTITIONS_PATH, partition_state_path, topic_path

log = logging.getLogger(__name__)

#: Conditional writes retried this often before giving up (the znode kept changing).
MAX_WRITE_ATTEMPTS = 10


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


async def update_assigned_replicas(
    ctl: ControllerParts, tp: TopicPartition, assignment: ReplicaAssignment | Sequence[int]
) -> None:
    """Kafka's updateReplicaAssignmentForPartition: this partition's entry of /brokers/topics/<t>
    (its replicas, and its adding and removing replicas: KIP-455), written conditionally on the
    znode's version (a CreatePartitions may be growing the topic at the same time) and fenced by
    the controller epoch; then the context. No write when the znode holds it already; bare
    replicas are an assignment with nothing being added or removed."""
    if not isinstance(assignment, ReplicaAssignment):
        assignment = ReplicaAssignment(tuple(assignment))
    path = topic_path(tp.topic)
    for _ in range(MAX_WRITE_ATTEMPTS):
        got = await ctl.zk.get(path)
        if got is None:
            raise NoNodeError(path)
        full = decode_full_topic_assignment(got[0])
        if full.get(tp.partition) != assignment:
            full[tp.partition] = assignment
            data = encode_full_topic_assignment(full, decode_topic_id(got[0]))  # KIP-516: keep the id
            try:
                await fenced_multi(
                    ctl.zk, ctl.context.epoch_zk_version, [SetDataOp(path, data, got[1].version)]
                )
            except BadVersionError:
                continue  # changed since we read it (or our write landed with its answer lost): again
        break
    else:
        raise BadVersionError(f"{path} kept changing")
    ctl.context.set_full_replica_assignment(tp, assignment)
    ctl.record(
        "assigned_replicas_updated",
        topic=tp.topic,
        partition=tp.partition,
        replicas=list(assignment.replicas),
        adding_replicas=list(assignment.adding_replicas),
        removing_replicas=list(assignment.removing_replicas),
    )


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
