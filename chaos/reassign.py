"""The ``reassign`` fault: move a partition of the workload's topic to a random set of live
brokers while the workload writes, as an operator runs Kafka's ``kafka-reassign-partitions.sh``
during load (KIP-455's AlterPartitionReassignments and ListPartitionReassignments through the
AdminClient; the controller's ``onPartitionReassignment`` carries the move out). See
docs/operations.md "Chaos runs and verification".

* :func:`choose_target` (pure): the target replicas, as many as the partition has, drawn with the
  fault's seeded ``pick`` among the brokers live when it fires; a set other than the current one
  whenever there are more live brokers than replicas, else a reordering (a new preferred leader).
* :class:`PartitionMover` (I/O): reads the partition's replicas and the live brokers, asks for the
  move, and reads back what is moving and where each partition's replicas are. A refusal (a broker
  that is not live: INVALID_REPLICA_ASSIGNMENT; a partition already moving:
  REASSIGNMENT_IN_PROGRESS) is an answer, returned with the attempt, not raised.
* :func:`move_state`: a move has ``completed`` when its partition no longer moves and has exactly
  the target replicas, is ``moving`` while ListPartitionReassignments lists it, and ``ended``
  otherwise (no longer moving, other replicas: cancelled, or moved again by someone else).

The injector (chaos/injector.py) records the attempt on the timeline, watches the move for the
fault's length and leaves a move still running to its final heal, which waits (bounded) until no
reassignment is in progress and reports a move that never completed as a failed heal.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from client.admin import AdminClient
from client.protocol.errors import KafkaError
from client.types import PartitionReassignment, TopicPartition

#: How often a wait for moves reads their state (seconds).
POLL_S = 0.5
#: Draws before :func:`choose_target` settles for the current replicas (only one broker, one replica).
MAX_DRAWS = 64


@dataclass(frozen=True)
class Move:
    """One reassignment the fault asked for: ``partition`` of ``topic`` from ``before`` to ``target``."""

    id: str  # the timeline's key pairing the fault with its heal ("reassign-1")
    topic: str
    partition: int
    before: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def detail(self) -> dict:
        """The timeline's fields for this move (``target`` names it in heal reports, as a failed
        heal of ZooKeeper names ``zookeeper``)."""
        return {
            "kind": "reassign",
            "id": self.id,
            "target": f"partition {self.tp}",
            "topic": self.topic,
            "partition": self.partition,
            "replicas_before": list(self.before),
            "replicas_target": list(self.target),
        }


@dataclass(frozen=True)
class Attempt:
    move: Move
    refusal: KafkaError | None  # the broker's answer for the partition when it refused the move


def choose_target(current: Sequence[int], live: Sequence[int], pick: int) -> tuple[int, ...] | None:
    """``len(current)`` distinct brokers of ``live``, the first the preferred leader, drawn with
    ``pick``: a set unlike ``current`` when ``live`` has more brokers than that, else an order
    unlike it (when there is one). None when fewer brokers are live than the partition has replicas."""
    rf, brokers = len(current), sorted(set(live))
    if rf == 0 or len(brokers) < rf:
        return None
    rng = random.Random(pick)
    draw = tuple(rng.sample(brokers, rf))
    for _ in range(MAX_DRAWS):
        moved = set(draw) != set(current) if len(brokers) > rf else draw != tuple(current)
        if moved:
            break
        draw = tuple(rng.sample(brokers, rf))
    return draw


def move_state(
    move: Move, moving: dict[TopicPartition, PartitionReassignment], replicas: dict[TopicPartition, list[int]]
) -> str:
    """``"moving"``, ``"completed"`` or ``"ended"`` (see the module docstring)."""
    if move.tp in moving:
        return "moving"
    return "completed" if tuple(replicas.get(move.tp, ())) == move.target else "ended"


class PartitionMover:
    """Moves partitions of ``topic`` through an AdminClient opened per call (the cluster changes
    under it: a broker it held a connection to may be the one just killed)."""

    def __init__(self, bootstrap: str, topic: str, request_timeout_ms: int = 10_000) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout_ms = request_timeout_ms

    def _admin(self) -> AdminClient:
        return AdminClient(self.bootstrap, request_timeout_ms=self.timeout_ms)

    async def start(self, partition: int, pick: int, move_id: str) -> Attempt | None:
        """Ask for the move of ``partition`` to brokers drawn with ``pick``; None when fewer
        brokers are live than it has replicas (the move would change its replication factor)."""
        async with self._admin() as admin:
            cluster = await admin.describe_cluster()
            (description,) = await admin.describe_topics([self.topic])
            current = next(p.replicas for p in description.partitions if p.partition == partition)
            target = choose_target(current, [b.node_id for b in cluster.brokers], pick)
            if target is None:
                return None
            move = Move(move_id, self.topic, partition, tuple(current), target)
            answer = await admin.alter_partition_reassignments(
                {move.tp: list(target)}, timeout_ms=self.timeout_ms
            )
        return Attempt(move, answer.get(move.tp))

    async def state(
        self,
    ) -> tuple[dict[TopicPartition, PartitionReassignment], dict[TopicPartition, list[int]]]:
        """What is moving (every topic's partitions) and the replicas of each of ``topic``'s."""
        async with self._admin() as admin:
            moving = await admin.list_partition_reassignments(timeout_ms=self.timeout_ms)
            (description,) = await admin.describe_topics([self.topic])
        replicas = {TopicPartition(self.topic, p.partition): list(p.replicas) for p in description.partitions}
        return moving, replicas

    async def wait_idle(
        self, timeout_s: float
    ) -> tuple[dict[TopicPartition, PartitionReassignment], dict[TopicPartition, list[int]]]:
        """Wait (bounded) until no reassignment is in progress; the last state read. A read that
        fails (a broker restarting) is tried again until the deadline, then raised."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                moving, replicas = await self.state()
            except Exception:  # noqa: BLE001 - a broker restarting: read again until the deadline
                if time.monotonic() >= deadline:
                    raise
            else:
                if not moving or time.monotonic() >= deadline:
                    return moving, replicas
            await asyncio.sleep(POLL_S)
