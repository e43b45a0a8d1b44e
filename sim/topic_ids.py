"""The topic-id invariant of a simulated run (``topic-ids``; KIP-516, docs/design.md "Topic ids
(KIP-516)"): a replica that serves a partition, as its leader or as a follower of a leader, holds
a log of the topic's current incarnation. Its ``partition.metadata``, once the broker has read or
written it, names the id of /brokers/topics/<topic>: a partition's records below its HW all belong
to the topic that is there now, never to a deleted one of the same name, and no rewrite of the
topic znode (a reassignment, added partitions) ever changed the topic's id under its replicas.

Cheap: it reads the log manager's recorded ids (no file I/O, so no disk fault is met here) and
one znode per topic, whose id :class:`TopicIds` decodes once per version of its data (the same
bytes object: a write to the znode replaces it). Topics whose deletion was asked for are not judged (their logs may be
deleted or created again until they are gone), nor logs a broker has not served since it
started (a stray of a deleted incarnation waits for the broker's next FULL LeaderAndIsr).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from client.protocol.api import NO_LEADER
from zk.data import decode_topic_id
from zk.paths import topic_path

if TYPE_CHECKING:
    from broker.replica.replica_manager import ReplicaManager

TOPIC_IDS = "topic-ids"


class Checked(Protocol):
    """What the check reads of :class:`sim.invariants.Invariants`."""

    world: Any

    def _deleting(self, topic: str) -> bool: ...

    def _live_replica_managers(self) -> list[tuple[int, ReplicaManager]]: ...


def topic_id_problem(invariants: Checked) -> str | None:
    """The first served replica whose log is of another topic id than the znode's, or None."""
    return TopicIds().problem(invariants)


class TopicIds:
    """The check, with each topic znode's decoded id kept until its data changes."""

    def __init__(self) -> None:
        self._decoded: dict[str, tuple[bytes, str | None]] = {}  # path -> (data, its topic id)

    def _topic_id(self, nodes: dict[str, Any], topic: str) -> tuple[bool, str | None]:
        """(the znode exists, its topic id): ``world.znode`` and ``decode_topic_id``."""
        path = topic_path(topic)
        node = nodes.get(path)
        if node is None:
            return False, None
        data = node.data
        cached = self._decoded.get(path)
        if cached is not None and cached[0] is data:
            return True, cached[1]
        topic_id = decode_topic_id(data)
        self._decoded[path] = (data, topic_id)
        return True, topic_id

    def problem(self, invariants: Checked) -> str | None:
        """The first served replica whose log is of another topic id than the znode's, or None."""
        nodes, deleting = invariants.world.zookeeper.tree.nodes, invariants._deleting
        ids: dict[str, str | None] = {}
        for broker_id, rm in invariants._live_replica_managers():
            partitions = rm.partitions
            for tp, recorded in sorted(rm.log_manager.topic_ids.recorded().items()):
                if recorded is None:
                    continue
                partition = partitions.get(tp)
                if partition is None or partition.leader_id == NO_LEADER:
                    continue
                topic = tp[0]
                if deleting(topic):
                    continue
                current = ids.get(topic, _UNSEEN)
                if current is _UNSEEN:
                    current = ids[topic] = self._topic_id(nodes, topic)[1]
                if current is not None and current != recorded:
                    role = "leads" if partition.is_leader else f"follows {partition.leader_id} in"
                    return (
                        f"broker {broker_id} {role} {topic}-{tp[1]} from a log of topic id {recorded}; "
                        f"/brokers/topics/{topic} has {current}"
                    )
        return None


_UNSEEN: Any = object()
