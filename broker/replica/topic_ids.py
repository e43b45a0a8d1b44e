"""Topic ids on the broker (KIP-516; docs/design.md "Topic ids (KIP-516)"): the
INCONSISTENT_TOPIC_ID check of each LeaderAndIsr partition (Kafka's ``hasConsistentTopicId`` in
``ReplicaManager.becomeLeaderOrFollower``), and stray replicas, logs on this broker that no longer
belong here, found on a FULL LeaderAndIsr and deleted (Kafka's ``LogManager.findStrayReplicas``
and ``ReplicaManager.updateStrayLogs``).

A broker that was down while a reassignment took a replica off it, or while a topic was deleted,
keeps that log: the StopReplica meant for it was never delivered. Kafka 3.7 finds such strays
only in KRaft mode (and in ZooKeeper-to-KRaft migration, on a FULL LeaderAndIsr from a KRaft
controller); a ZooKeeper-mode broker keeps them forever, and refuses a re-created topic's
partition with INCONSISTENT_TOPIC_ID. floodmark does the migration path's check in ZooKeeper
mode: the controller sends a FULL LeaderAndIsr to each broker at its start-up and at failover,
whose ``hosted_topics`` name every partition the controller assigns the broker, with the topic
ids. A log here is a stray when its partition is neither in ``hosted_topics`` nor in the
request's own partition states: no longer assigned here (a reassignment moved it, or its topic
was deleted).

A log of a partition still assigned here whose ``partition.metadata`` names another topic id is
*not* deleted: it answers INCONSISTENT_TOPIC_ID and is not served, as in Kafka. A decision (issue
33's review): the id can differ without the topic being re-created (an old tool rewrote the topic
znode without its id and a new controller drew a fresh one), and deleting then took every
replica of a live topic at once. Logs on offline dirs are not here and are never judged. A
request that is lost deletes nothing; the FULL request is one message, so there is never half a
list to judge by; and only the first LeaderAndIsr a broker incarnation applies of a controller
epoch may delete (:class:`~broker.replica.leader_and_isr.LeaderAndIsrHandler`), so a late copy of
a resent FULL request cannot judge by a list older than what the broker applied since.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from broker.log.log_dir_failure import KafkaStorageError
from broker.loop_stall import CooperativeYield
from broker.replica.partition import Partition
from broker.replica.replica_state import ReplicaState
from client.protocol.api import NO_LEADER
from client.protocol.errors import ErrorCode
from client.protocol.topic_id import is_set
from client.types import TopicPartition

log = logging.getLogger(__name__)


def check_topic_id(rm: ReplicaState, partition: Partition, requested: str | None) -> int:
    """A partition whose log records a topic id other than the request's answers
    INCONSISTENT_TOPIC_ID, and this broker stops serving it (no fetcher, no leadership; its log
    stays for the operator, or for the next FULL request, which deletes it as a stray). A request
    or a log without an id passes. KafkaStorageError if the file cannot be read."""
    if not is_set(requested):
        return ErrorCode.NONE
    recorded = rm.log_manager.topic_ids.get(partition.topic, partition.partition)
    if recorded is None or recorded == requested:
        return ErrorCode.NONE
    log.error(
        "topic id of the log of %s-%s is %s, not %s as LeaderAndIsr says: not served",
        partition.topic,
        partition.partition,
        recorded,
        requested,
    )
    rm.fetchers.remove_partition(partition.key)
    partition.leader_id = NO_LEADER  # neither leads nor follows: served by no one here
    rm.wake(partition.key)
    rm.state_change_log(
        {
            "event": "LeaderAndIsrInconsistentTopicId",
            "topic": partition.topic,
            "partition": partition.partition,
            "log_topic_id": recorded,
            "request_topic_id": requested,
        }
    )
    return ErrorCode.INCONSISTENT_TOPIC_ID


@dataclass(frozen=True)
class StrayReplica:
    tp: TopicPartition
    reason: str


def find_stray_replicas(
    hosted_topics: Iterable[dict],
    partition_states: Iterable[dict],
    logs: Iterable[TopicPartition],
) -> list[StrayReplica]:
    """The strays among ``logs``: those a FULL LeaderAndIsr's ``hosted_topics`` and
    ``partition_states`` do not assign here (an id that differs is the per-partition check's,
    never a deletion, so no log's partition.metadata is read). Pure: the caller deletes."""
    assigned: set[TopicPartition] = set()
    for topic in hosted_topics:
        assigned.update((topic["topic"], p) for p in topic["partitions"])
    for state in partition_states:
        assigned.add((state["topic"], state["partition"]))
    return [StrayReplica(tp, "not assigned to this broker") for tp in sorted(logs) if tp not in assigned]


async def delete_stray_replicas(rm: ReplicaState, body: dict) -> list[StrayReplica]:
    """Find the strays a FULL LeaderAndIsr ``body`` shows and delete them (Kafka's
    ``updateStrayLogs``: stop the partition, forget it, delete its log), each logged and written
    to the state-change log. Runs under the handler's state-change lock, before the request's
    partitions are applied, so a re-created topic's partition is then created afresh."""
    strays = find_stray_replicas(body["hosted_topics"], body["partition_states"], rm.log_manager.all_logs())
    deleted_in: set[Path] = set()
    pause = CooperativeYield(rm.time_ms)  # thousands of strays: never one long step
    try:
        for stray in strays:
            await pause()
            tp = stray.tp
            log.warning("deleting stray replica %s-%s: %s", tp[0], tp[1], stray.reason)
            rm.fetchers.remove_partition(tp)
            rm.partitions.pop(tp, None)
            try:
                log_dir = rm.log_manager.delete_log(*tp, checkpoint=False)
            except KafkaStorageError as exc:
                log.error("cannot delete stray replica %s-%s: %s", *tp, exc)
                continue
            finally:
                rm.wake(tp)
            if log_dir is not None:
                deleted_in.add(log_dir)
            rm.state_change_log(
                {"event": "StrayReplicaDeleted", "topic": tp[0], "partition": tp[1], "reason": stray.reason}
            )
    finally:
        rm.log_manager.checkpoint_log_dirs(deleted_in)
    if not strays:
        log.info("full LeaderAndIsr from controller %s: no stray replica", body["controller_id"])
    return strays
