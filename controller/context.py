"""The controller's in-memory view of the cluster (Kafka's ControllerContext): the topics and their
replica assignments, the live brokers, and every partition's leader and ISR.

Filled from ZooKeeper when this broker becomes controller (KafkaController.onControllerFailover),
then kept current by the event handlers, which are its only writers (one event at a time, through
the ControllerEventManager). It holds no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from client.types import TopicPartition
from zk.data import (
    INITIAL_CONTROLLER_EPOCH,
    BrokerInfo,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    ReplicaAssignment,
)


@dataclass
class ControllerContext:
    epoch: int = INITIAL_CONTROLLER_EPOCH
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    #: topic -> partition -> assigned replicas (AR); the first is the preferred replica
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    partition_leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    #: KIP-112: broker -> its replicas on offline log dirs (it answered LeaderAndIsr with
    #: KAFKA_STORAGE_ERROR for them); forgotten when the broker registers again.
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    #: partitions being reassigned -> their target replicas (RAR), in the request's order (from
    #: /admin/reassign_partitions, or from the topic znode for a move no longer in it), Kafka's
    #: partitionsBeingReassigned (controller/reassignment.py)
    partitions_being_reassigned: dict[TopicPartition, list[int]] = field(default_factory=dict)
    #: KIP-455: the adding and removing replicas of the partitions whose topic znode names some
    #: (the rest of Kafka's ReplicaAssignment; a partition in neither is not being reassigned)
    adding_replicas: dict[TopicPartition, list[int]] = field(default_factory=dict)
    removing_replicas: dict[TopicPartition, list[int]] = field(default_factory=dict)
    #: KIP-516: topic -> its id from /brokers/topics/<t> (Kafka's ControllerContext.topicIds);
    #: a topic without one has none here until the controller has written it
    topic_ids: dict[str, str] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget everything (on resignation); the epoch stays for the logs."""
        self.live_brokers.clear()
        self.shutting_down_broker_ids.clear()
        self.assignments.clear()
        self.partition_leadership.clear()
        self.topics_to_be_deleted.clear()
        self.topics_ineligible_for_deletion.clear()
        self.replicas_on_offline_dirs.clear()
        self.partitions_being_reassigned.clear()
        self.adding_replicas.clear()
        self.removing_replicas.clear()
        self.topic_ids.clear()

    # -- brokers ----------------------------------------------------------------------------------
    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live_broker_ids(self) -> set[int]:
        """Live brokers that are not shutting down: the ones eligible to lead."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    def is_replica_online(
        self, broker_id: int, include_shutting_down: bool = False, tp: TopicPartition | None = None
    ) -> bool:
        """Kafka's isReplicaOnline: the broker is live (and, unless ``include_shutting_down``, not
        shutting down) and, when ``tp`` is given, that replica is not on an offline log dir."""
        if broker_id not in self.live_brokers:
            return False
        if not include_shutting_down and broker_id in self.shutting_down_broker_ids:
            return False
        return tp is None or tp not in self.replicas_on_offline_dirs.get(broker_id, ())

    # -- topics and partitions ----------------------------------------------------------------------
    @property
    def all_topics(self) -> set[str]:
        return set(self.assignments)

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, parts in sorted(self.assignments.items()) for p in sorted(parts)]

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def replicas(self, tp: TopicPartition) -> list[int]:
        return list(self.assignments.get(tp.topic, {}).get(tp.partition, []))

    def set_replicas(self, tp: TopicPartition, replicas: Iterable[int]) -> None:
        self.assignments.setdefault(tp.topic, {})[tp.partition] = list(replicas)

    def full_replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """Kafka's partitionFullReplicaAssignment: AR with the adding and removing replicas."""
        return ReplicaAssignment(
            tuple(self.replicas(tp)),
            tuple(self.adding_replicas.get(tp, ())),
            tuple(self.removing_replicas.get(tp, ())),
        )

    def set_full_replica_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Kafka's updatePartitionFullReplicaAssignment."""
        self.set_replicas(tp, assignment.replicas)
        for held, replicas in (
            (self.adding_replicas, assignment.adding_replicas),
            (self.removing_replicas, assignment.removing_replicas),
        ):
            if replicas:
                held[tp] = list(replicas)
            else:
                held.pop(tp, None)

    def live_replicas(self, tp: TopicPartition, include_shutting_down: bool = False) -> list[int]:
        return [r for r in self.replicas(tp) if self.is_replica_online(r, include_shutting_down, tp)]

    def offline_replicas(self, tp: TopicPartition) -> list[int]:
        return [r for r in self.replicas(tp) if not self.is_replica_online(r, True, tp)]

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> list[PartitionReplica]:
        ids = set(broker_ids)
        return [
            PartitionReplica(tp, r) for tp in self.all_partitions() for r in self.replicas(tp) if r in ids
        ]

    def replicas_for_partitions(self, partitions: Iterable[TopicPartition]) -> list[PartitionReplica]:
        return [PartitionReplica(tp, r) for tp in partitions for r in self.replicas(tp)]

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return sorted(
            tp for tp, s in self.partition_leadership.items() if s.leader_and_isr.leader == broker_id
        )

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_for_topic(topic):
            self.partition_leadership.pop(tp, None)
            self.partitions_being_reassigned.pop(tp, None)
            self.adding_replicas.pop(tp, None)
            self.removing_replicas.pop(tp, None)
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.topics_to_be_deleted.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def is_topic_being_reassigned(self, topic: str) -> bool:
        return any(tp.topic == topic for tp in self.partitions_being_reassigned)

    def is_being_reassigned(self, tp: TopicPartition) -> bool:
        """Kafka's ReplicaAssignment.isBeingReassigned: the topic znode names adding or removing
        replicas for it."""
        return tp in self.adding_replicas or tp in self.removing_replicas

    # -- metrics (docs/operations.md "Metrics (`/metrics`)") --------------------------------------
    def offline_partition_count(self) -> int:
        return sum(
            1
            for tp in self.all_partitions()
            if not self.is_topic_queued_for_deletion(tp.topic)
            and (
                tp not in self.partition_leadership
                or not self.is_replica_online(self.partition_leadership[tp].leader_and_isr.leader, True, tp)
            )
        )


@dataclass
class StateChangeRecorder:
    """Writes one record per controller decision to the state-change log (docs/operations.md "Logs"):
    a dict with the time, this controller's id and epoch, the decision, and its details (topic,
    partition, ...)."""

    controller_id: int
    context: ControllerContext
    time_ms: Callable[[], int]
    sink: Callable[[dict], None]

    def __call__(self, decision: str, **fields: object) -> None:
        record = {
            "time_ms": self.time_ms(),
            "controller_id": self.controller_id,
            "controller_epoch": self.context.epoch,
            "decision": decision,
            **fields,
        }
        try:
            self.sink(record)
        except Exception:
            logging.getLogger(__name__).exception("state-change log sink failed")
