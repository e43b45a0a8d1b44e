"""What the controller's LeaderAndIsr and UpdateMetadata requests say (the bodies of Kafka's
``ControllerBrokerRequestBatch.sendRequestsToBrokers``, as client/protocol/api.py defines them):
each partition's state (leader, ISR, replicas, KIP-455's adding and removing replicas, KIP-516's
topic id) and a FULL LeaderAndIsr's ``hosted_topics`` (docs/design.md "Topic ids (KIP-516)").
Pure functions of the controller's context; :mod:`controller.channel` batches and sends them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from client.protocol.topic_id import ZERO_UUID
from client.types import TopicPartition
from controller.context import ControllerContext
from zk.data import LEADER_DURING_DELETE, LeaderIsrAndControllerEpoch


@dataclass
class LeaderAndIsrEntry:
    state: LeaderIsrAndControllerEpoch
    replicas: list[int]
    is_new: bool


class BodySource(Protocol):
    """What the bodies are built from: the sending controller and its context (the batch)."""

    controller_id: int
    context: ControllerContext
    #: the controller's inter-broker listener: the host/port of each broker entry (KIP-103)
    listener_name: str


def topic_id(context: ControllerContext, topic: str) -> str:
    """KIP-516: the topic's id as the context knows it; ZERO_UUID when it has none."""
    return context.topic_ids.get(topic) or ZERO_UUID


def partition_state(
    context: ControllerContext,
    tp: TopicPartition,
    state: LeaderIsrAndControllerEpoch,
    replicas: Sequence[int],
) -> dict:
    lai = state.leader_and_isr
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "controller_epoch": state.controller_epoch,
        "leader": lai.leader,
        "leader_epoch": lai.leader_epoch,
        "isr": list(lai.isr),
        "zk_version": lai.zk_version,
        "replicas": list(replicas),
        "offline_replicas": [r for r in replicas if not context.is_replica_online(r, True, tp)],
        "topic_id": topic_id(context, tp.topic),
    }


def reassignment_fields(
    context: ControllerContext,
    tp: TopicPartition,
    replicas: Sequence[int],
) -> dict:
    """KIP-455's adding and removing replicas of a partition being reassigned, as the topic
    znode holds them (Kafka's ReplicaAssignment.addingReplicas / removingReplicas: RAR - OAR and
    OAR - RAR for the whole move), of the replicas this request names."""
    return {
        "adding_replicas": [r for r in context.adding_replicas.get(tp, ()) if r in replicas],
        "removing_replicas": [r for r in context.removing_replicas.get(tp, ()) if r in replicas],
    }


def leader_and_isr_body(
    source: BodySource, controller_epoch: int, entries: dict[TopicPartition, LeaderAndIsrEntry]
) -> dict:
    context = source.context
    leader_ids = {e.state.leader_and_isr.leader for e in entries.values()}
    return {
        "controller_id": source.controller_id,
        "controller_epoch": controller_epoch,
        "partition_states": [
            {
                **partition_state(context, tp, e.state, e.replicas),
                "is_new": e.is_new,
                **reassignment_fields(context, tp, e.replicas),
            }
            for tp, e in sorted(entries.items())
        ],
        "live_leaders": [
            b.wire(source.listener_name)
            for b_id, b in sorted(context.live_brokers.items())
            if b_id in leader_ids
        ],
    }


def update_metadata_body(
    source: BodySource, controller_epoch: int, partitions: Iterable[TopicPartition]
) -> dict:
    context = source.context
    states = []
    for tp in sorted(partitions):
        state = context.partition_leadership.get(tp)
        if state is None:
            continue
        entry = partition_state(context, tp, state, context.replicas(tp))
        if context.is_topic_queued_for_deletion(tp.topic):
            entry["leader"] = LEADER_DURING_DELETE
        states.append(entry)
    return {
        "controller_id": source.controller_id,
        "controller_epoch": controller_epoch,
        "partition_states": states,
        "live_brokers": [b.wire(source.listener_name) for _, b in sorted(context.live_brokers.items())],
    }


def hosted_topics(context: ControllerContext, broker_ids: Iterable[int]) -> dict[int, list[dict]]:
    """KIP-516: for each broker, the ``hosted_topics`` of a FULL LeaderAndIsr: every partition the
    context assigns it, per topic with the topic's id. Taken at a broker's start-up and at
    failover, before the state machines run: the context is then between events, never in the
    middle of a reassignment's steps. A partition the batch adds for the broker later is in its
    requests' own partition states, which the broker never takes for strays; one it removes later
    stays until its StopReplica."""
    hosted: dict[int, dict[str, list[int]]] = {b: {} for b in broker_ids if b >= 0}
    for tp in context.all_partitions():
        for replica in context.replicas(tp):
            if replica in hosted:
                hosted[replica].setdefault(tp.topic, []).append(tp.partition)
    return {
        broker_id: [
            {"topic": topic, "topic_id": topic_id(context, topic), "partitions": sorted(partitions)}
            for topic, partitions in sorted(topics.items())
        ]
        for broker_id, topics in hosted.items()
    }
