"""/brokers/topics/<topic> (Kafka's TopicZNode, versions 1 to 3; docs/architecture.md "ZooKeeper
layout"): each partition's replicas, with the adding and removing replicas of a reassignment in
progress (KIP-455, Kafka's ReplicaAssignment) and the topic's id (KIP-516). Old znodes read as
not being reassigned and without an id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client.protocol.topic_id import ZERO_UUID, parse_uuid
from zk.json_codec import dumps, loads


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's entry of its topic znode (Kafka's ``ReplicaAssignment``,
    ControllerContext.scala; KIP-455): the assigned replicas (AR) and, while a reassignment runs,
    the replicas it adds and removes. ``replicas`` holds both; a partition with neither is not
    being reassigned (``isBeingReassigned``)."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def origin_replicas(self) -> list[int]:
        """OAR: what the partition had before the move (Kafka's ``originReplicas``)."""
        return [r for r in self.replicas if r not in self.adding_replicas]

    @property
    def target_replicas(self) -> list[int]:
        """RAR as a set, in AR's order (Kafka's ``targetReplicas``)."""
        return [r for r in self.replicas if r not in self.removing_replicas]

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """Kafka's ``reassignTo``: AR = OAR + RAR, adding = RAR - OAR, removing = OAR - RAR. A
        reordering, or the assignment as it is, adds and removes nothing. floodmark keeps OAR
        first in AR (seed 000's order, Kafka 2.x's), where Kafka 3.7 puts the target first; the
        target's own order comes from the request (controller/reassignment.py)."""
        origin = self.origin_replicas
        full = origin + [r for r in target if r not in origin]
        return ReplicaAssignment(
            tuple(full),
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )


def encode_topic_assignment(
    assignment: Mapping[int, Sequence[int]],
    topic_id: str | None = None,
    adding_replicas: Mapping[int, Sequence[int]] | None = None,
    removing_replicas: Mapping[int, Sequence[int]] | None = None,
) -> bytes:
    """/brokers/topics/<topic> (Kafka's TopicZNode). With a ``topic_id`` (KIP-516) it is Kafka's
    version 3: ``partitions``, ``adding_replicas`` / ``removing_replicas`` (KIP-455: the
    partitions being reassigned, each with its non-empty list; written by the controller's
    reassignment, controller/reassignment.py) and ``topic_id``; without one, version 2 when a
    partition is being reassigned, else the version 1 that writers without an id wrote before.
    Every rewrite of the znode must pass the id and the adding / removing replicas it read
    (:func:`decode_topic_id`, :func:`decode_full_topic_assignment`): a write without them would
    drop the topic's identity or a move in progress."""
    partitions = {str(p): list(r) for p, r in sorted(assignment.items())}
    adding = {str(p): list(r) for p, r in sorted((adding_replicas or {}).items()) if r}
    removing = {str(p): list(r) for p, r in sorted((removing_replicas or {}).items()) if r}
    if not topic_id and not adding and not removing:
        return dumps({"version": 1, "partitions": partitions})
    obj: dict[str, Any] = {
        "version": 3 if topic_id else 2,
        "partitions": partitions,
        "adding_replicas": adding,
        "removing_replicas": removing,
    }
    if topic_id:
        obj["topic_id"] = topic_id
    return dumps(obj)


def encode_full_topic_assignment(assignment: Mapping[int, ReplicaAssignment], topic_id: str | None) -> bytes:
    """The topic znode from each partition's :class:`ReplicaAssignment` (Kafka's TopicZNode.encode)."""
    return encode_topic_assignment(
        {p: a.replicas for p, a in assignment.items()},
        topic_id,
        {p: a.adding_replicas for p, a in assignment.items()},
        {p: a.removing_replicas for p, a in assignment.items()},
    )


def decode_topic_assignment(data: bytes) -> dict[int, list[int]]:
    obj = loads(data)
    return {int(p): list(r) for p, r in sorted(obj.get("partitions", {}).items(), key=lambda kv: int(kv[0]))}


def decode_full_topic_assignment(data: bytes) -> dict[int, ReplicaAssignment]:
    """Each partition's replicas with its adding and removing replicas (Kafka's
    TopicZNode.decode); a znode before version 2 (or a partition it lists in neither) reads as
    not being reassigned."""
    obj = loads(data)
    adding = obj.get("adding_replicas") or {}
    removing = obj.get("removing_replicas") or {}
    return {
        int(p): ReplicaAssignment(tuple(r), tuple(adding.get(p) or ()), tuple(removing.get(p) or ()))
        for p, r in sorted(obj.get("partitions", {}).items(), key=lambda kv: int(kv[0]))
    }


def decode_topic_id(data: bytes) -> str | None:
    """The znode's ``topic_id`` (KIP-516), canonical; None for a znode written without one
    (before version 3, or by a writer that had none: the controller assigns it, Kafka's
    ``setTopicIds``) and for ZERO_UUID."""
    text = loads(data).get("topic_id")
    if not isinstance(text, str):
        return None
    topic_id = parse_uuid(text)
    return topic_id if topic_id != ZERO_UUID else None
