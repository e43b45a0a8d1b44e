"""The chaos run's consumer group (``chaos run --consumers N``; docs/operations.md "Chaos runs and
verification", docs/guarantees.md; issue 23 item 6): N members of one group (Kafka's classic
group protocol, seed 004: JoinGroup/SyncGroup, the eager rebalance, committed offsets) reading
the workload's topic while the faults happen, every fact they see in the consumer ledger
(:mod:`ledger.consumed`, ``R/consumed/``) for the verification's consumer checks.

Each member is one :class:`client.consumer.Consumer` run as an asyncio task in the workload
process: group ``chaos-<run id>``, ``auto_offset_reset="earliest"``, auto commit off. A member
records every record its ``poll`` returns (``consumed``), commits by hand every
``commit_interval_s`` and when partitions are revoked (its ConsumerRebalanceListener's
``on_partitions_revoked``, before the rejoin), the offset after the last record it consumed of
each partition it owns, and records each commit the coordinator acknowledged (``committed``) and
each generation's assignment (``assigned``, from ``on_partitions_assigned``). It commits only
under a generation (never the generation -1 commit of a consumer outside the group) and only
partitions it owns, from what it consumed in the current generation.

The ``consumer`` fault (:meth:`ConsumerGroup.crash`, the injector's hook) kills a member as a
SIGKILL kills a process: :meth:`client.consumer.Consumer.abandon` drops its connections and
background tasks at once, then its task is cancelled, with no commit and no LeaveGroup, so the
coordinator must expel it when ``session_timeout_ms`` passes without a heartbeat (Kafka's
DelayedHeartbeat). :meth:`ConsumerGroup.restart` starts a fresh incarnation in its place
(``c<i>-<incarnation>``: a new member, a new member id).

After the producers stop and the cluster is healed, :meth:`ConsumerGroup.drain` lets the members
read on until the group as a whole has consumed up to the end offset (the high watermark, read
with ListOffsets) of every partition, read twice alike so a high watermark still moving is not
missed, bounded by a timeout; :meth:`ConsumerGroup.close` stops the members, commits once more,
closes them (LeaveGroup) and closes the ledger with the drain's outcome in ``_CLOSED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from client.consumer import Consumer
from client.consumer.rebalance_listener import ConsumerRebalanceListener
from client.protocol.errors import KafkaError
from client.types import ConsumerRecord, TopicPartition
from ledger.consumed import NO_GENERATION, ConsumerLedgerWriter

log = logging.getLogger(__name__)

#: The broker's smallest allowed session (``group.min.session.timeout.ms``): a crash is noticed soon.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
COMMIT_INTERVAL_S = 1.0
POLL_TIMEOUT_MS = 500
DRAIN_TIMEOUT_S = 60.0
#: How long stopping waits for a member's loop, and closing for its LeaveGroup.
STOP_TIMEOUT_S = 15.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class GroupSettings:
    topic: str
    group_id: str
    members: int
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    commit_interval_s: float = COMMIT_INTERVAL_S
    assignment_strategy: tuple[str, ...] = ("range",)
    request_timeout_ms: int = 10_000
    drain_timeout_s: float = DRAIN_TIMEOUT_S


@dataclass
class GroupStats:
    """What the group did, for the run's output and ``run.json``."""

    consumed: int = 0
    commits: int = 0  # acknowledged OffsetCommits (each of one or more partitions)
    commit_failures: dict[str, int] = field(default_factory=dict)
    assignments: int = 0  # generations joined, summed over the members
    crashes: int = 0
    restarts: int = 0
    outside_assignment: int = 0  # records poll returned from a partition not assigned then
    poll_errors: dict[str, int] = field(default_factory=dict)
    highest_generation: int = NO_GENERATION
    drained: bool | None = None  # None: no drain was tried (the cluster could not serve)
    drain_s: float | None = None
    behind: dict[str, int] = field(default_factory=dict)  # after a drain that timed out: "t-p" -> records

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        failed = sum(self.commit_failures.values())
        return (
            f"{self.consumed:,} consumed, {self.commits:,} commits ({failed} failed), "
            f"{self.crashes} crashed, {self.restarts} restarted, highest generation {self.highest_generation}"
        )


def _count(counts: dict[str, int], exc: BaseException) -> None:
    name = exc.name if isinstance(exc, KafkaError) else type(exc).__name__
    counts[name] = counts.get(name, 0) + 1


class _Listener(ConsumerRebalanceListener):
    def __init__(self, member: Member) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.member.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.member.on_assigned(assigned)


class Member:
    """One incarnation of member ``index``: its consumer, its task and what it consumed."""

    def __init__(self, group: ConsumerGroup, index: int, incarnation: int) -> None:
        s = group.settings
        self.group, self.index = group, index
        self.name = f"c{index}-{incarnation}"
        self.consumer = Consumer(
            group.bootstrap,
            group_id=s.group_id,
            client_id=f"chaos-consumer-{self.name}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            partition_assignment_strategy=s.assignment_strategy,
            request_timeout_ms=s.request_timeout_ms,
        )
        self.positions: dict[TopicPartition, int] = {}  # the offset after the last record consumed
        self.committed: dict[TopicPartition, int] = {}  # the last offset committed, this generation
        self.stopping = False
        self.crashed = False  # set by crash(): nothing more is recorded, the loop ends
        self.task: asyncio.Task | None = None
        self._commit_lock = asyncio.Lock()

    # The member's generation and id (Kafka's KafkaConsumer.groupMetadata, KIP-447).
    @property
    def generation(self) -> int:
        return self.consumer.group_metadata().generation_id

    @property
    def member_id(self) -> str:
        return self.consumer.group_metadata().member_id

    async def run(self) -> None:
        """Poll, record, commit every ``commit_interval_s``, until :attr:`stopping`."""
        while True:
            try:
                await self.consumer.start()
                break
            except KafkaError as exc:  # no broker answers yet: as a restarted process would, retry
                log.warning("consumer %s: cannot start: %s", self.name, exc)
                await asyncio.sleep(1.0)
        self.consumer.subscribe([self.group.settings.topic], listener=_Listener(self))
        interval = self.group.settings.commit_interval_s
        next_commit = time.monotonic() + interval
        while not (self.stopping or self.crashed):
            try:
                records = await self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            except (KafkaError, RuntimeError) as exc:  # a client bug must not end the member silently
                log.warning("consumer %s: poll failed: %s", self.name, exc)
                _count(self.group.stats.poll_errors, exc)
                await asyncio.sleep(0.2)
                continue
            self._record(records)
            self.group.ledger.tick()
            if time.monotonic() >= next_commit:
                await self.commit()
                next_commit = time.monotonic() + interval

    def _record(self, records: list[ConsumerRecord]) -> None:
        if not records or self.crashed:
            return
        generation, member_id = self.generation, self.member_id
        owned = self.consumer.assignment()
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            if tp not in owned:
                self.group.stats.outside_assignment += 1
            self.group.ledger.consumed(
                self.name, member_id, generation, r.topic, r.partition, r.offset, r.value
            )
            self.positions[tp] = r.offset + 1
            self.group.reached(tp, r.offset + 1)
        self.group.stats.consumed += len(records)

    async def commit(self, partitions: set[TopicPartition] | None = None) -> bool:
        """Commit the position of each owned partition (or of ``partitions``) that moved since
        the last commit, under the current generation; record it once acknowledged."""
        async with self._commit_lock:
            generation, member_id = self.generation, self.member_id
            if generation == NO_GENERATION or self.crashed:
                return False
            owned = self.consumer.assignment() if partitions is None else partitions
            offsets = {
                tp: at for tp, at in self.positions.items() if tp in owned and self.committed.get(tp) != at
            }
            if not offsets:
                return True
            try:
                await self.consumer.commit(offsets)
            except (KafkaError, RuntimeError) as exc:
                log.info("consumer %s: commit failed: %s", self.name, exc)
                _count(self.group.stats.commit_failures, exc)
                return False
            if self.crashed:  # a killed process records nothing more, whatever reached the broker
                return False
            rows = [(tp.topic, tp.partition, at) for tp, at in sorted(offsets.items())]
            self.group.ledger.committed(self.name, member_id, generation, rows)
            self.committed.update(offsets)
            self.group.stats.commits += 1
            return True

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """The eager rebalance takes every partition: commit what was consumed of them first."""
        await self.commit(revoked)
        for tp in revoked:
            self.positions.pop(tp, None)
            self.committed.pop(tp, None)

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        """A new generation: its positions start from the group's committed offsets, so nothing
        consumed before it is committed again (a fenced member's revoke never ran)."""
        if self.crashed:
            return
        self.positions.clear()
        self.committed.clear()
        generation = self.generation
        stats = self.group.stats
        stats.assignments += 1
        stats.highest_generation = max(stats.highest_generation, generation)
        parts = [(tp.topic, tp.partition) for tp in assigned]
        self.group.ledger.assigned(self.name, self.member_id, generation, parts, self.group.settings.topic)
        log.info("consumer %s generation %d: assigned %s", self.name, generation, sorted(parts))

    def crash(self) -> None:
        """As SIGKILL would: connections and background tasks dropped, no commit, no LeaveGroup.
        The flag, not only the cancellation, ends the loop: Python 3.11's ``asyncio.wait_for``
        (which the client's poll and requests use) can swallow a cancellation that arrives as
        the awaited future completes, and the task would then poll a closed consumer on."""
        self.crashed = True
        self.consumer.abandon()
        if self.task is not None:
            self.task.cancel()

    async def wait(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.task is None:
            return
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self.task), timeout_s)
        if not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


class ConsumerGroup:
    """The run's group: its members, the injector's crash and restart hooks, the drain."""

    #: How long :meth:`abort` waits for each crashed member (a subclass's members may be processes).
    ABORT_WAIT_S = 1.0

    def __init__(
        self, bootstrap: str, settings: GroupSettings, ledger: ConsumerLedgerWriter, say: Say
    ) -> None:
        self.bootstrap, self.settings, self.ledger, self.say = bootstrap, settings, ledger, say
        self.stats = GroupStats()
        self.members: dict[int, Member] = {}  # live ones, by index
        self._incarnations = [0] * settings.members
        self._down: dict[str, int] = {}  # crashed member -> its index
        self._reached: dict[TopicPartition, int] = {}  # the offset after the group's highest consumed
        self._closed = False

    @classmethod
    def open(
        cls, report_dir: Path, bootstrap: str, topic: str, members: int, run_id: str, say: Say
    ) -> ConsumerGroup:
        """The group of a run (``chaos-<run id>``) with its ledger in ``report_dir/consumed``."""
        settings = GroupSettings(topic, f"chaos-{run_id}", members)
        return cls(bootstrap, settings, ConsumerLedgerWriter(report_dir), say)

    def start(self) -> None:
        self.say(
            f"consumer group {self.settings.group_id}: {self.settings.members} member(s) reading {self.settings.topic}"
        )
        for index in range(self.settings.members):
            self._start_member(index)

    def _start_member(self, index: int) -> Member:
        member = Member(self, index, self._incarnations[index])
        self._incarnations[index] += 1
        self.members[index] = member
        member.task = asyncio.get_running_loop().create_task(
            member.run(), name=f"chaos-consumer-{member.name}"
        )
        member.task.add_done_callback(self._ended)
        return member

    def _ended(self, task: asyncio.Task) -> None:
        """A member's task that ends by an error (not a crash, not a stop) is said and counted:
        the drain would otherwise only time out."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("consumer task %s died", task.get_name(), exc_info=exc)
        self.say(f"consumer group: {task.get_name()} died: {type(exc).__name__}: {exc}")
        _count(self.stats.poll_errors, exc)

    def reached(self, tp: TopicPartition, next_offset: int) -> None:
        if next_offset > self._reached.get(tp, 0):
            self._reached[tp] = next_offset

    # -- the injector's hooks (chaos/injector.py) -----------------------------------------------

    async def crash(self, pick: int) -> str | None:
        """Kill member ``pick`` modulo the group's size (the next live one if it is down); its
        name, or None when every member is down."""
        if not self.members:
            return None
        n = self.settings.members
        index = next(i for i in ((pick + k) % n for k in range(n)) if i in self.members)
        member = self.members.pop(index)
        member.crash()
        await member.wait()
        self._down[member.name] = index
        self.stats.crashes += 1
        return member.name

    async def restart(self, name: str) -> str:
        """A fresh incarnation in place of the crashed ``name``; the new member's name."""
        index = self._down.pop(name)
        self.stats.restarts += 1
        return self._start_member(index).name

    # -- the end of the run ---------------------------------------------------------------------

    async def drain(self) -> bool:
        """Let the members read until the group has consumed up to every partition's end offset
        (two reads alike), at most ``drain_timeout_s``; whether it got there."""
        timeout = self.settings.drain_timeout_s
        self.say(f"consumer group: reading to the end of every partition (at most {timeout:.0f}s)")
        started = time.monotonic()
        reader = Consumer(self.bootstrap, client_id="chaos-consumer-drain", request_timeout_ms=5000)
        behind: dict[TopicPartition, int] = {}
        previous: dict[TopicPartition, int] | None = None
        drained = False
        try:
            await reader.start()
            while time.monotonic() - started < timeout:
                try:
                    parts = await reader.partitions_for_topic(self.settings.topic)
                    ends = await reader.end_offsets([TopicPartition(self.settings.topic, p) for p in parts])
                except KafkaError as exc:
                    log.info("consumer group: cannot read the end offsets: %s", exc)
                    ends = None
                if ends is not None:
                    behind = {tp: end - self._reached.get(tp, 0) for tp, end in ends.items()}
                    behind = {tp: n for tp, n in behind.items() if n > 0}
                    if not behind and ends == previous:
                        drained = True
                        break
                    previous = ends if not behind else None
                await asyncio.sleep(0.5)
        finally:
            await reader.close()
        self.stats.drain_s = round(time.monotonic() - started, 1)
        self.stats.drained = drained
        self.stats.behind = {str(tp): n for tp, n in sorted(behind.items())}
        if self.stats.drained:
            self.say(f"consumer group: consumed to the end of every partition in {self.stats.drain_s:.1f}s")
        else:
            self.say(
                f"consumer group: NOT at the end after {timeout:.0f}s; behind: {self.stats.behind or '?'}"
            )
        return self.stats.drained

    async def close(self) -> None:
        """Stop every member, commit once more, close them (LeaveGroup), close the ledger."""
        if self._closed:
            return
        self._closed = True
        members = list(self.members.values())
        for member in members:
            member.stopping = True
        await asyncio.gather(*(m.wait() for m in members))
        await asyncio.gather(*(m.commit() for m in members if m.task is not None and not m.task.cancelled()))
        for member in members:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(member.consumer.close(), STOP_TIMEOUT_S)
        self.ledger.close({"group_id": self.settings.group_id, **self.stats.as_dict()})
        self.say(f"consumer group: {self.stats.describe()}")

    async def abort(self) -> None:
        """On an error or a cancellation: drop every member as a crash would; close the ledger."""
        if self._closed:
            return
        self._closed = True
        for member in self.members.values():
            member.crash()
        await asyncio.gather(*(m.wait(self.ABORT_WAIT_S) for m in self.members.values()))
        self.ledger.close({"group_id": self.settings.group_id, "aborted": True, **self.stats.as_dict()})


async def finish(group: ConsumerGroup | None, served: bool) -> dict:
    """The end of a run's consumers: drain (when the cluster serves every partition), close;
    the group's stats ({} without consumers)."""
    if group is None:
        return {}
    try:
        if served:
            await group.drain()
        else:
            group.say("consumer group: the cluster cannot serve every partition: no drain")
        await group.close()
    finally:
        await group.abort()  # a no-op once closed
    return group.stats.as_dict()
