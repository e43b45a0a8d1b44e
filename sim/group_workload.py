"""A consumer group in the simulation (issue 23; seed 004; docs/design.md "Simulation" and
"Consumer groups"): real :class:`client.Consumer` members on the simulated network, one group,
subscribed to the workload's first topic, the coordinator on whichever broker leads the group's
``__consumer_offsets`` partition (so broker crashes, pauses and partitions move it: coordinator
failover).

Each member polls, commits what it consumed every ``COMMIT_EVERY_S`` virtual seconds, and now
and then crashes: its task is cancelled and its connections dropped without a commit or a
LeaveGroup, so the coordinator must expel it by ``session.timeout.ms``; a new incarnation
replaces it. Sessions are Kafka's floor made shorter (1 s, with the brokers'
``group.min.session.timeout.ms`` lowered to match), so that a schedule of a few virtual seconds
sees expulsions, rebalances and, with the aimed coordinator fault (sim/faults.py), coordinator
moves. Every choice comes from the ``"group"`` stream of the seed.

What the members observe feeds the group invariants (sim/group_invariants.py): the partitions
each member was given in each generation, the commits acknowledged to them, and the committed
offsets they read back when a generation gives them a partition; and the consumer-visibility
invariant (sim/consumer_visibility.py): every fetch answer a member accepted (its records and the
HW it was served) and every record it was given, per assignment. Each commit's metadata names the
member and the generation it was sent in (``<member id>@<generation>``), so the broker-side
check (sim/commit_fencing.py) can hold the coordinator to Kafka's fencing of what it stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from client.consumer.consumer import Consumer
from client.consumer.rebalance_listener import ConsumerRebalanceListener
from client.protocol.errors import KafkaError
from client.types import OffsetAndMetadata, TopicPartition
from sim.consumer_visibility import ConsumerVisibility
from sim.group_invariants import GroupChecker
from sim.rebalance_callbacks import RebalanceCallbacks

if TYPE_CHECKING:
    from sim.world import World

log = logging.getLogger(__name__)

GROUP_ID = "sim-group"
#: Settings of every member: a 1 s session (the schedule's brokers allow it), heartbeats three
#: times per session, a rebalance timeout (``max.poll.interval.ms``) of a few seconds so a member
#: that crashed while a rebalance waits for it holds the group up briefly.
MEMBER_SETTINGS: dict[str, Any] = {
    "group_id": GROUP_ID,
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "session_timeout_ms": 1000,
    "heartbeat_interval_ms": 300,
    "max_poll_interval_ms": 3000,
    "request_timeout_ms": 2000,
    "retry_backoff_ms": 100,
    "metadata_max_age_ms": 5000,
    "fetch_max_wait_ms": 200,
}
#: The brokers' side of MEMBER_SETTINGS (sim/sweep.py's schedule properties).
GROUP_BROKER_PROPS = {
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "100",
}
COMMIT_EVERY_S = 0.2


@dataclass(frozen=True)
class GroupWorkloadConfig:
    members: int = 3  # 0: no consumer group in the schedule
    crash_rate: float = 0.08  # per schedule step, one member crashes (and a new one starts)
    assignors: tuple[str, ...] = ("range", "roundrobin")


class _Listener(ConsumerRebalanceListener):
    """A member's listener: it reports each callback and commits in ``on_partitions_revoked``, the
    documented place to commit by hand (Kafka's ConsumerRebalanceListener)."""

    def __init__(
        self,
        consumer: Consumer,
        on_assigned: Callable[[set[TopicPartition]], None],
        on_giving_up: Callable[[str, set[TopicPartition]], None],
    ) -> None:
        self.consumer = consumer
        self.on_assigned = on_assigned
        self.on_giving_up = on_giving_up

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.on_assigned(assigned)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.on_giving_up("revoked", revoked)
        if revoked:
            with contextlib.suppress(KafkaError):
                await self.consumer.commit()

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_giving_up("lost", lost)


class GroupWorkload:
    def __init__(
        self,
        world: World,
        config: GroupWorkloadConfig,
        checker: GroupChecker,
        visibility: ConsumerVisibility,
        callbacks: RebalanceCallbacks,
        note: Callable[[str], None],
    ) -> None:
        self.world = world
        self.config = config
        self.checker = checker
        self.visibility = visibility
        self.callbacks = callbacks
        self.note = note
        self.rng = world.loop.seeds.stream("group")
        self.topic: str | None = None
        self.members: dict[int, tuple[Consumer, asyncio.Task]] = {}
        self.nodes: dict[int, str] = {}  # slot -> the network node of its member now
        self._incarnations = 0

    async def start(self, topic: str) -> None:
        self.topic = topic
        for slot in range(self.config.members):
            await self._start_member(slot)

    async def _start_member(self, slot: int) -> None:
        self._incarnations += 1
        name = f"m{slot}-{self._incarnations}"
        node, runtime = self.world.client_runtime()
        # every member offers both assignors, in a drawn order: the group votes (seed 004's leader
        # then runs the winner); a member offering only another one would be refused with
        # INCONSISTENT_GROUP_PROTOCOL, as Kafka refuses it
        strategy = tuple(self.rng.sample(self.config.assignors, len(self.config.assignors)))
        consumer = Consumer(
            self.world.bootstrap(), runtime=runtime, client_id=f"{node}-{name}",
            partition_assignment_strategy=strategy, **MEMBER_SETTINGS,
        )  # fmt: skip
        await consumer.start()
        coordinator = consumer._coordinator
        assert coordinator is not None and self.topic is not None
        self.checker.instrument(name, coordinator)
        self.visibility.instrument(name, consumer)
        # what the member consumed but has not committed: a revoked partition's is dropped (its
        # next owner starts from the group's commit; this member commits it again only once a
        # later generation gives it back and it reads on from that commit)
        consumed: dict[TopicPartition, int] = {}

        def assigned(tps: set[TopicPartition]) -> None:
            self.callbacks.assigned(name, tps)
            self.checker.assigned(name, coordinator, tps)
            self.visibility.assigned(name, coordinator.generation, tps)

        def giving_up(how: str, tps: set[TopicPartition]) -> None:
            self.callbacks.giving_up(name, how, tps, consumer.assignment())
            for tp in tps:
                consumed.pop(tp, None)

        consumer.subscribe([self.topic], listener=_Listener(consumer, assigned, giving_up))
        task = asyncio.get_running_loop().create_task(
            self._run(name, consumer, consumed), name=f"group-member-{name}"
        )
        self.members[slot] = (consumer, task)
        self.nodes[slot] = node
        self.note(f"group member {name} started ({', '.join(strategy)})")

    async def _run(self, name: str, consumer: Consumer, consumed: dict[TopicPartition, int]) -> None:
        loop = asyncio.get_running_loop()
        next_commit = loop.time() + COMMIT_EVERY_S
        while True:
            try:
                records = await consumer.poll(timeout_ms=200)
            except KafkaError as exc:
                log.debug("member %s: poll failed: %s", name, exc)
                await asyncio.sleep(0.1)
                continue
            self.visibility.received(name, records)
            for record in records:
                tp = TopicPartition(record.topic, record.partition)
                consumed[tp] = record.offset + 1
            if loop.time() >= next_commit:
                next_commit = loop.time() + COMMIT_EVERY_S
                meta = consumer.group_metadata()
                tag = f"{meta.member_id}@{meta.generation_id}"
                mine = {
                    tp: OffsetAndMetadata(o, tag) for tp, o in consumed.items() if tp in consumer.assignment()
                }
                consumed.clear()
                if mine:
                    with contextlib.suppress(KafkaError):
                        await consumer.commit(mine)

    def step(self) -> None:
        if self.members and self.rng.random() < self.config.crash_rate:
            slot = self.rng.choice(sorted(self.members))  # a slot whose restart is under way has none
            self._crash(slot)
            task = asyncio.get_running_loop().create_task(
                self._start_member(slot), name="group-member-restart"
            )
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    def _crash(self, slot: int) -> None:
        """Like a SIGKILL of the member's process: no commit, no LeaveGroup, sockets gone."""
        consumer, task = self.members.pop(slot)
        task.cancel()
        consumer.abandon()
        self.note(f"group member in slot {slot} crashed")

    def live(self) -> list[Consumer]:
        return [consumer for consumer, _task in self.members.values()]

    async def close(self) -> None:
        for slot in list(self.members):
            consumer, task = self.members.pop(slot)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            with contextlib.suppress(BaseException):
                await consumer.close()
