"""The simulated clients' work (docs/design.md "Simulation"): idempotent acks=all producers with
their real client retry logic (Kafka's KafkaProducer with enable.idempotence, KIP-98, through the
real :class:`client.producer.producer.Producer` on the simulated network), topic creation and
deletion, added partitions, preferred elections (ElectLeaders) and partition reassignments
(AlterPartitionReassignments) through the real AdminClient,
and a controlled shutdown (Kafka's ControlledShutdown request, KIP-143's broker side) followed by
a restart.

What the clients were told is kept in a :class:`Ledger`, the simulator's counterpart of the chaos
ledger: every acknowledged (topic, partition, offset, value) and every failure with its error.
The invariants (sim/invariants.py) hold the cluster to it: an acknowledged record must be on the
current leader, at its offset, for as long as its topic exists.

Every choice (which producer, which partition, how many records, which topic to delete) is drawn
from the ``"workload"`` stream of the run's seed. Values are unique (``p<producer>-<n>``), so an
acknowledged offset names exactly one record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from client.protocol.errors import KafkaError
from client.types import TopicPartition

if TYPE_CHECKING:
    from client.admin import AdminClient
    from client.producer.producer import Producer
    from sim.world import World

log = logging.getLogger(__name__)

#: Settings of every simulated producer: Kafka's idempotent acks=all client, with timeouts short
#: enough that a request lost in a partition is retried within a schedule.
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": 2,
    "request_timeout_ms": 3000,
    "delivery_timeout_ms": 20000,
    "retry_backoff_ms": 50,
    "max_block_ms": 10000,
    "metadata_max_age_ms": 5000,
}
#: An impatient producer: Kafka's smallest delivery timeout (linger + request timeout, rounded up),
#: so a batch whose request is held somewhere fails for good while the request may still land:
#: the producer's epoch bump (KIP-360) must then fence the late request.
IMPATIENT_SETTINGS: dict[str, Any] = {
    **PRODUCER_SETTINGS,
    "request_timeout_ms": 1000,
    "delivery_timeout_ms": 1500,
}


@dataclass(frozen=True)
class Ack:
    topic: str
    partition: int
    offset: int
    value: bytes


@dataclass
class Ledger:
    """What the simulated clients were told: acknowledgements, failures, what is still in flight."""

    #: (topic, partition) -> offset -> value, for every acknowledged record of a live topic
    acked: dict[tuple[str, int], dict[int, bytes]] = field(default_factory=dict)
    #: (topic, partition) -> the highest offset in ``acked``
    last_acked: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, partition or None, value, error) of every record that failed for good
    failures: list[tuple[str, int | None, bytes, str]] = field(default_factory=list)
    #: acknowledgements that named an offset already acknowledged with another value
    conflicts: list[tuple[Ack, bytes]] = field(default_factory=list)
    deleted_topics: set[str] = field(default_factory=set)
    #: value -> (producer index, the record's rank in that producer's appends): its send order
    ranks: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    appended: dict[int, int] = field(default_factory=dict)  # producer index -> records appended
    sent: int = 0
    acks: int = 0
    in_flight: int = 0

    def record_ack(self, ack: Ack) -> None:
        self.acks += 1
        if ack.topic in self.deleted_topics:
            return
        offsets = self.acked.setdefault((ack.topic, ack.partition), {})
        earlier = offsets.get(ack.offset)
        if earlier is not None and earlier != ack.value:
            self.conflicts.append((ack, earlier))
        offsets[ack.offset] = ack.value
        key = (ack.topic, ack.partition)
        self.last_acked[key] = max(ack.offset, self.last_acked.get(key, -1))

    def record_append(self, producer: int, value: bytes) -> None:
        """The producer took the record into a batch: its place in the producer's send order."""
        rank = self.appended.get(producer, 0)
        self.appended[producer] = rank + 1
        self.ranks[value] = (producer, rank)

    def forget_topic(self, topic: str) -> None:
        """A deletion was asked for: the topic's records may go at any moment from now on."""
        self.deleted_topics.add(topic)
        for key in [k for k in self.acked if k[0] == topic]:
            del self.acked[key]
            self.last_acked.pop(key, None)


@dataclass(frozen=True)
class WorkloadConfig:
    producers: int = 2
    impatient_producers: int = 1  # more producers, with IMPATIENT_SETTINGS
    topics: int = 1  # topics created at the start (each keeps its acknowledged records checked)
    partitions: tuple[int, int] = (1, 3)  # drawn per topic
    replication_factor: int = 3
    records_per_step: tuple[int, int] = (0, 4)
    #: probability per step of creating an extra topic, and of deleting one extra topic
    create_topic_rate: float = 0.02
    delete_topic_rate: float = 0.02
    #: operations (issue 22), drawn from their own ``"operations"`` stream: partitions added to a
    #: topic, a preferred election of every partition (ElectLeaders)
    add_partitions_rate: float = 0.01
    preferred_election_rate: float = 0.01
    #: a partition moved to a random set of brokers (AlterPartitionReassignments), its
    #: replication factor lowered, kept or raised by one
    reassign_rate: float = 0.01


class Workload:
    """The clients of one schedule: producers, an admin client, and their ledger."""

    def __init__(self, world: World, config: WorkloadConfig, note: Callable[[str], None]) -> None:
        self.world = world
        self.config = config
        self.rng: random.Random = world.loop.seeds.stream("workload")
        self.operations: random.Random = world.loop.seeds.stream("operations")
        self.ledger = Ledger()
        self.note = note  # the schedule's history
        self.topics: dict[str, int] = {}  # topic -> partitions, topics that may be produced to
        self.extra_topics: list[str] = []  # created by the workload, candidates for deletion
        self.producers: list[Producer] = []
        self.admin: AdminClient | None = None
        self._tasks: dict[asyncio.Task, None] = {}  # insertion-ordered: cancelled in a fixed order
        self._sequence = 0
        self._topic_sequence = 0

    async def start(self) -> None:
        """The admin client, the initial topics (waiting for their leaders) and the producers."""
        self.admin = await self.world.admin()
        for _ in range(self.config.topics):
            await self._create_topic()
        for _ in range(self.config.producers):
            self.producers.append(await self.world.producer(**PRODUCER_SETTINGS))
        for _ in range(self.config.impatient_producers):
            self.producers.append(await self.world.producer(**IMPATIENT_SETTINGS))

    async def _create_topic(self) -> str | None:
        assert self.admin is not None
        self._topic_sequence += 1
        name = f"t{self._topic_sequence}"
        low, high = self.config.partitions
        partitions = self.rng.randint(low, high)
        rf = min(self.config.replication_factor, len(self.world.brokers))
        try:
            await self.admin.create_topic(name, partitions, rf, timeout_ms=15000)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.note(f"create topic {name} failed: {exc}")
            return None
        self.topics[name] = partitions
        self.note(f"created topic {name} ({partitions} partitions, rf {rf})")
        return name

    # -- one step ----------------------------------------------------------------------------------
    def step(self) -> None:
        """Send a few records, maybe create or delete a topic: all started, none awaited here."""
        low, high = self.config.records_per_step
        if self.topics and self.producers:
            for _ in range(self.rng.randint(low, high)):
                self._send(self.rng.randrange(len(self.producers)))
        if self.rng.random() < self.config.create_topic_rate:
            self._spawn(self._create_extra_topic(), "create-topic")
        if self.extra_topics and self.rng.random() < self.config.delete_topic_rate:
            topic = self.extra_topics.pop(self.rng.randrange(len(self.extra_topics)))
            self._spawn(self._delete_topic(topic), f"delete-{topic}")
        if self.topics and self.operations.random() < self.config.add_partitions_rate:
            topic = self.operations.choice(sorted(self.topics))
            grow = self.operations.randint(1, 2)
            self._spawn(self._add_partitions(topic, grow), f"add-partitions-{topic}")
        if self.operations.random() < self.config.preferred_election_rate:
            self._spawn(self._preferred_election(), "preferred-election")
        if self.topics and self.operations.random() < self.config.reassign_rate:
            topic = self.operations.choice(sorted(self.topics))
            partition = self.operations.randrange(self.topics[topic])
            rf = min(self.config.replication_factor, len(self.world.brokers))
            # RF down, kept or up (KIP-455's moves add and remove replicas), at least 2 replicas
            size = max(2, min(len(self.world.brokers), rf + self.operations.choice((-1, 0, 1))))
            target = self.operations.sample(sorted(self.world.brokers), size)
            self._spawn(self._reassign(TopicPartition(topic, partition), target), f"reassign-{topic}")

    def _send(self, index: int) -> None:
        topic = self.rng.choice(sorted(self.topics))
        partition = self.rng.randrange(self.topics[topic])
        self._sequence += 1
        value = b"p%d-%d" % (index, self._sequence)
        self.ledger.sent += 1
        self.ledger.in_flight += 1
        self._spawn(self._produce(index, topic, partition, value), "produce")

    async def _produce(self, index: int, topic: str, partition: int, value: bytes) -> None:
        try:
            future = await self.producers[index].send(topic, value, partition=partition)
            self.ledger.record_append(index, value)  # no await since the append: its order
            metadata = await future
        except (KafkaError, OSError, TimeoutError, RuntimeError) as exc:
            self.ledger.failures.append((topic, partition, value, f"{type(exc).__name__}: {exc}"))
        else:
            self.ledger.record_ack(Ack(topic, metadata.partition, metadata.offset, value))
        finally:
            self.ledger.in_flight -= 1

    async def _create_extra_topic(self) -> None:
        name = await self._create_topic()
        if name is not None:
            self.extra_topics.append(name)

    async def _delete_topic(self, topic: str) -> None:
        assert self.admin is not None
        self.topics.pop(topic, None)
        self.ledger.forget_topic(topic)
        self.note(f"delete topic {topic}")
        try:
            await self.admin.delete_topic(topic, timeout_ms=15000)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.note(f"delete topic {topic} failed: {exc}")

    async def _add_partitions(self, topic: str, grow: int) -> None:
        assert self.admin is not None
        total = self.topics.get(topic, 0) + grow
        try:
            error = (await self.admin.create_partitions({topic: total}, timeout_ms=15000))[topic]
        except (KafkaError, OSError, TimeoutError) as exc:
            error = exc
        if error is not None:
            self.note(f"add partitions to {topic} failed: {error}")
        elif topic in self.topics:
            self.topics[topic] = max(self.topics[topic], total)
            self.note(f"topic {topic} grew to {total} partitions")

    async def _preferred_election(self) -> None:
        assert self.admin is not None
        try:
            results = await self.admin.elect_leaders("preferred", None, timeout_ms=15000)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.note(f"preferred election failed: {exc}")
            return
        elected = sorted(f"{tp.topic}-{tp.partition}" for tp, error in results.items() if error is None)
        self.note(f"preferred election: {', '.join(elected) or 'nothing to move'}")

    async def _reassign(self, tp: TopicPartition, target: list[int]) -> None:
        assert self.admin is not None
        try:
            error = (await self.admin.alter_partition_reassignments({tp: target}, timeout_ms=15000))[tp]
        except (KafkaError, OSError, TimeoutError) as exc:
            error = exc
        if error is not None:
            self.note(f"reassign {tp} to {target} refused: {error}")
        else:
            self.note(f"reassign {tp} to {target}")

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"workload-{name}")
        self._tasks[task] = None
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    # -- the end -----------------------------------------------------------------------------------
    async def settle(self, within_s: float) -> None:
        """Wait until every produce started has been acknowledged or has failed, within
        ``within_s`` virtual seconds (liveness: an AssertionError names what is left)."""
        await self.world.wait_for(
            lambda: self.ledger.in_flight == 0,
            f"every produce completes or fails ({self.ledger.in_flight} still in flight)",
            within_s=within_s,
        )

    async def finish_operations(self, within_s: float) -> None:
        """Wait until the admin operations started (topic creations and deletions, added
        partitions, elections, moves) have ended, within ``within_s`` virtual seconds, so that
        none changes a leadership after the run's last health check (a preferred election landing
        then leaves a new leader whose HW has not caught up yet: Kafka's legitimate transient,
        which the final check would take for a lost acknowledgement, as seed 193 did)."""
        await self.world.wait_for(
            lambda: not any(not t.done() and t.get_name() != "workload-produce" for t in self._tasks),
            "every admin operation completes",
            within_s=within_s,
        )

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


async def controlled_shutdown(world: World, broker_id: int) -> None:
    """A clean, controlled shutdown (Kafka's ControlledShutdown: the controller moves the broker's
    leaderships away first); the broker is then down until it is started again."""
    await world.stop(broker_id, controlled=True)
