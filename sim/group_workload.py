"""A consumer group in the simulation (issue 23; seed 004; docs/design.md "Simulation" and
"Consumer groups"): real :class:`client.Consumer` members on the simulated network, one group,
subscribed to the workload's first topic, the coordinator on whichever broker leads the group's
``__consumer_offsets`` partition (so broker crashes, pauses and partitions move it: coordinator
failover).

Each member polls, commits what it consumed about once a virtual second, and now and then
crashes: its task is cancelled and its connections dropped without a commit or a LeaveGroup, so
the coordinator must expel it by ``session.timeout.ms``; a new incarnation replaces it. Every
choice comes from the ``"group"`` stream of the seed.

What the members observe feeds the group invariants (sim/group_invariants.py): the partitions
each member was given in each generation, the commits acknowledged to them, and the committed
offsets they read back when a generation gives them a partition.
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
from sim.group_invariants import GroupChecker

if TYPE_CHECKING:
    from sim.world import World

log = logging.getLogger(__name__)

GROUP_ID = "sim-group"
#: Settings of every member: Kafka's minimum session timeout, heartbeats three times per session.
MEMBER_SETTINGS: dict[str, Any] = {
    "group_id": GROUP_ID,
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
    "max_poll_interval_ms": 30000,
    "request_timeout_ms": 5000,
    "retry_backoff_ms": 100,
    "metadata_max_age_ms": 5000,
    "fetch_max_wait_ms": 200,
}
COMMIT_EVERY_S = 1.0


@dataclass(frozen=True)
class GroupWorkloadConfig:
    members: int = 0  # 0: no consumer group in the schedule
    crash_rate: float = 0.01  # per schedule step, one member crashes (and a new one starts)
    assignors: tuple[str, ...] = ("range", "roundrobin")


class _Listener(ConsumerRebalanceListener):
    def __init__(self, on_assigned: Callable[[set[TopicPartition]], None]) -> None:
        self.on_assigned = on_assigned

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.on_assigned(assigned)


class GroupWorkload:
    def __init__(
        self, world: World, config: GroupWorkloadConfig, checker: GroupChecker, note: Callable[[str], None]
    ) -> None:
        self.world = world
        self.config = config
        self.checker = checker
        self.note = note
        self.rng = world.loop.seeds.stream("group")
        self.topic: str | None = None
        self.members: dict[int, tuple[Consumer, asyncio.Task]] = {}
        self._incarnations = 0
        #: the coordinator the members last found, and how often it moved (coordinator failover)
        self.coordinator: int | None = None
        self.coordinator_moves = 0

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
        consumer.subscribe(
            [self.topic], listener=_Listener(lambda tps: self.checker.assigned(name, coordinator, tps))
        )
        task = asyncio.get_running_loop().create_task(self._run(name, consumer), name=f"group-member-{name}")
        self.members[slot] = (consumer, task)
        self.note(f"group member {name} started ({', '.join(strategy)})")

    async def _run(self, name: str, consumer: Consumer) -> None:
        loop = asyncio.get_running_loop()
        consumed: dict[TopicPartition, int] = {}
        next_commit = loop.time() + COMMIT_EVERY_S
        while True:
            try:
                records = await consumer.poll(timeout_ms=200)
            except KafkaError as exc:
                log.debug("member %s: poll failed: %s", name, exc)
                await asyncio.sleep(0.1)
                continue
            for record in records:
                tp = TopicPartition(record.topic, record.partition)
                consumed[tp] = record.offset + 1
            self._observe_coordinator(consumer)
            if loop.time() >= next_commit:
                next_commit = loop.time() + COMMIT_EVERY_S
                mine = {tp: OffsetAndMetadata(o) for tp, o in consumed.items() if tp in consumer.assignment()}
                consumed.clear()
                if mine:
                    with contextlib.suppress(KafkaError):
                        await consumer.commit(mine)

    def _observe_coordinator(self, consumer: Consumer) -> None:
        found = consumer._coordinator.coordinator_id if consumer._coordinator is not None else None
        if found is None or found == self.coordinator:
            return
        if self.coordinator is not None:
            self.coordinator_moves += 1
            self.note(f"group coordinator moved from broker {self.coordinator} to broker {found}")
        self.coordinator = found

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
