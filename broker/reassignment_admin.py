"""AlterPartitionReassignments and ListPartitionReassignments at any broker (the names of Kafka's
KIP-455 APIs; the work of Kafka 2.x's ReassignPartitionsCommand, which wrote
/admin/reassign_partitions itself; docs/design.md "Partition reassignment").

Alter checks every partition before anything is written: the topic exists and is not being
deleted, the partition exists, the replica list is non-empty, names no broker twice and only
live brokers (Kafka's "non-existent brokerIDs"), the partition is not already being moved, and
the new replicas fit the brokers' file budgets. When all pass, the request is merged into
/admin/reassign_partitions in one write, conditional on the znode's version; when any fails,
nothing is written and the other partitions answer INVALID_REQUEST. The controller's watch
(controller/reassignment.py) carries the moves out.

List answers the partitions in /admin/reassign_partitions that add or remove a replica, with
Kafka's fields from the topic znode (KIP-455): replicas (AR, which is OAR + RAR while the move
runs), adding (RAR - OAR) and removing (OAR - RAR), for the whole move.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, OperationTimeoutError

from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller.topic_admin import check_file_budget
from zk.bridge import ZkBridge
from zk.client import get_full_topic_assignment, get_live_broker_ids, get_topic_assignment
from zk.data import decode_reassignment, encode_reassignment
from zk.paths import REASSIGN_PARTITIONS_PATH, delete_topic_path

MAX_WRITE_ATTEMPTS = 5
Outcome = tuple[int, str | None]


async def alter_partition_reassignments(zk: ZkBridge, body: dict) -> dict:
    wanted = {
        TopicPartition(t["name"], p["partition_index"]): list(p["replicas"])
        for t in body["topics"]
        for p in t["partitions"]
    }
    duplicates = _listed_twice(body)
    if duplicates:
        outcomes: dict[TopicPartition, Outcome] = {
            tp: (
                (ErrorCode.INVALID_REQUEST, f"Partition {tp} is listed more than once in the request.")
                if tp in duplicates
                else (ErrorCode.INVALID_REQUEST, "not written: another partition of the request was refused")
            )
            for tp in wanted
        }
    else:
        outcomes = await request_reassignment(zk, wanted)
    by_topic: dict[str, list[dict]] = defaultdict(list)
    for tp, (code, message) in sorted(outcomes.items()):
        by_topic[tp.topic].append(
            {"partition_index": tp.partition, "error_code": code, "error_message": message}
        )
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }


def _listed_twice(body: dict) -> set[TopicPartition]:
    seen: set[TopicPartition] = set()
    twice: set[TopicPartition] = set()
    for t in body["topics"]:
        for p in t["partitions"]:
            tp = TopicPartition(t["name"], p["partition_index"])
            (twice if tp in seen else seen).add(tp)
    return twice


async def request_reassignment(
    zk: ZkBridge, wanted: Mapping[TopicPartition, Sequence[int]]
) -> dict[TopicPartition, Outcome]:
    """Check every partition, then merge them all into /admin/reassign_partitions, or nothing."""
    for attempt in range(MAX_WRITE_ATTEMPTS):
        got = await zk.get(REASSIGN_PARTITIONS_PATH)
        in_progress = decode_reassignment(got[0]) if got is not None else {}
        if attempt > 0 and all(in_progress.get(tp) == list(r) for tp, r in wanted.items()):
            # the last write landed and its answer was lost (the connection dropped, or the
            # bridge's resend met NODEEXISTS or BADVERSION): the znode holds this very request
            return {tp: (ErrorCode.NONE, None) for tp in wanted}
        outcomes, current = await _check(zk, wanted, in_progress)
        if any(code != ErrorCode.NONE for code, _ in outcomes.values()):
            return {
                tp: outcome
                if outcome[0] != ErrorCode.NONE
                else (ErrorCode.INVALID_REQUEST, "not written: another partition of the request was refused")
                for tp, outcome in outcomes.items()
            }
        added = {i: [r for r in wanted[tp] if r not in current[tp]] for i, tp in enumerate(sorted(wanted))}
        try:
            await check_file_budget(zk, added)
        except KafkaError as exc:
            return {tp: (exc.code, exc.message) for tp in wanted}
        merged = {**in_progress, **{tp: list(r) for tp, r in wanted.items()}}
        try:
            if got is None:
                await zk.create(REASSIGN_PARTITIONS_PATH, encode_reassignment(merged))
            else:
                await zk.set(REASSIGN_PARTITIONS_PATH, encode_reassignment(merged), got[1].version)
        except (BadVersionError, NodeExistsError):
            continue  # another request (or the controller finishing one) wrote it meanwhile: again
        except (ConnectionLoss, OperationTimeoutError):
            continue  # the outcome is unknown: the next read tells whether it landed
        return {tp: (ErrorCode.NONE, None) for tp in wanted}
    return {
        tp: (ErrorCode.REQUEST_TIMED_OUT, f"{REASSIGN_PARTITIONS_PATH} kept changing; try again")
        for tp in wanted
    }


async def _check(
    zk: ZkBridge,
    wanted: Mapping[TopicPartition, Sequence[int]],
    in_progress: Mapping[TopicPartition, list[int]],
) -> tuple[dict[TopicPartition, Outcome], dict[TopicPartition, list[int]]]:
    topics = sorted({tp.topic for tp in wanted})
    assignments = dict(
        zip(topics, await asyncio.gather(*(get_topic_assignment(zk, t) for t in topics)), strict=True)
    )
    deleting = dict(
        zip(topics, await asyncio.gather(*(zk.exists(delete_topic_path(t)) for t in topics)), strict=True)
    )
    live = set(await get_live_broker_ids(zk))
    outcomes: dict[TopicPartition, Outcome] = {}
    current: dict[TopicPartition, list[int]] = {}
    for tp, replicas in sorted(wanted.items()):
        assignment = assignments[tp.topic]
        unknown = sorted({r for r in replicas if r not in live})
        if assignment is None:
            outcomes[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{tp.topic}' does not exist.")
        elif deleting[tp.topic] is not None:
            outcomes[tp] = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"Topic '{tp.topic}' is marked for deletion.",
            )
        elif tp.partition not in assignment:
            outcomes[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Partition {tp} does not exist.")
        elif tp in in_progress:
            outcomes[tp] = (
                ErrorCode.REASSIGNMENT_IN_PROGRESS,
                f"Partition {tp} is already being reassigned to {in_progress[tp]}.",
            )
        elif not replicas:
            outcomes[tp] = (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Replica list for partition {tp} is empty.",
            )
        elif len(set(replicas)) != len(replicas):
            shown = ",".join(map(str, replicas))
            outcomes[tp] = (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica assignment found: {tp} -> {shown}",
            )
        elif unknown:
            outcomes[tp] = (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The proposed assignment contains non-existent brokerIDs: {','.join(map(str, unknown))}",
            )
        else:
            outcomes[tp] = (ErrorCode.NONE, None)
            current[tp] = assignment[tp.partition]
    return outcomes, current


async def list_partition_reassignments(zk: ZkBridge, body: dict) -> dict:
    """Kafka's listPartitionReassignments: the partitions being reassigned with their replicas
    (AR: OAR + RAR while the move runs), adding replicas (RAR - OAR) and removing replicas
    (OAR - RAR), for the whole move, as the topic znode holds them (KIP-455). A request the
    controller has not started yet is listed with the same fields as the move it will start;
    a reordering, which adds and removes nothing, is never listed (Kafka's isBeingReassigned)."""
    got = await zk.get(REASSIGN_PARTITIONS_PATH)
    in_progress = decode_reassignment(got[0]) if got is not None else {}
    if body["topics"] is not None:
        asked = {TopicPartition(t["name"], p) for t in body["topics"] for p in t["partition_indexes"]}
        in_progress = {tp: r for tp, r in in_progress.items() if tp in asked}
    topics = sorted({tp.topic for tp in in_progress})
    assignments = dict(
        zip(topics, await asyncio.gather(*(get_full_topic_assignment(zk, t) for t in topics)), strict=True)
    )
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, target in sorted(in_progress.items()):
        current = (assignments[tp.topic] or {}).get(tp.partition)
        if current is None:
            continue  # the topic or partition is gone: the controller drops the request
        # after the controller's step 1 the topic znode holds the move; before it, the move the
        # request asks for (the same fields: Kafka's ReplicaAssignment.reassignTo)
        move = current if current.is_being_reassigned else current.reassign_to(target)
        if not move.is_being_reassigned:
            continue
        by_topic[tp.topic].append(
            {
                "partition_index": tp.partition,
                "replicas": list(move.replicas),
                "adding_replicas": list(move.adding_replicas),
                "removing_replicas": list(move.removing_replicas),
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }
