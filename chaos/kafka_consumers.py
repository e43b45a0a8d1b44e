"""The chaos run's consumer group with Kafka's own consumer (``chaos run --client kafka
--consumers N``; docs/operations.md "Chaos runs and verification", docs/guarantees.md): N
librdkafka members (:mod:`chaos.kafka_member`, one process each) in group ``chaos-<run id>`` on
the brokers' KAFKA listener, their facts turned into the same consumer ledger
(:mod:`ledger.consumed`, ``R/consumed/``) that :mod:`chaos.consumers` writes, so the
verification's consumer checks run unchanged.

:class:`KafkaConsumerGroup` is :class:`chaos.consumers.ConsumerGroup` with other members: the
injector's ``crash`` and ``restart`` hooks, the drain to every partition's end (what the group
consumed, against the end offsets read through floodmark's own listener) and the stats are the
same; a member (:class:`KafkaMemberProcess`) is a child process whose stdout this process reads
line by line (:func:`apply_line`) into the ledger and the stats. Its stderr (librdkafka's log)
goes to ``R/kafka-consumers/<member>.log``.

The ``consumer`` fault SIGKILLs a member's process: no commit, no LeaveGroup; what it wrote to
its pipe before dying is still read and recorded, nothing after. Closing sends each member a
``stop`` line (it commits once more and leaves the group) and waits at most
:data:`chaos.consumers.STOP_TIMEOUT_S`, then SIGKILLs it; aborting SIGKILLs them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any, BinaryIO

from chaos import kafka_member as wire
from chaos.consumers import STOP_TIMEOUT_S, ConsumerGroup, GroupSettings, GroupStats, Say
from client.types import TopicPartition
from ledger.consumed import ConsumerLedgerWriter

log = logging.getLogger(__name__)

LOG_DIR = "kafka-consumers"
#: A member process ends by itself this long after it started (its parent is gone or stuck).
LIFETIME_MARGIN_S = 900.0
LINE_LIMIT = 1 << 24  # a consumed line holds at most a batch of 500 records


def apply_line(
    line: bytes, member: str, ledger: ConsumerLedgerWriter, stats: GroupStats, reached: Any
) -> str | None:
    """Record one line of a member's stdout: ledger rows, stats, and ``reached(tp, next offset)``
    for each consumed record; the line's kind, or None for a torn or foreign line (skipped)."""
    try:
        fact = json.loads(line)
        kind, at = fact["k"], int(fact["t"])
    except (ValueError, KeyError, TypeError):
        log.info("consumer %s: skipped a line that is no fact: %r", member, line[:200])
        return None
    if kind == wire.CONSUMED:
        topic, generation, member_id = fact["topic"], fact["g"], fact["m"]
        for partition, offset, value in fact["r"]:
            data = None if value is None else bytes.fromhex(value)
            ledger.consumed(member, member_id, generation, topic, partition, offset, data, time_ms=at)
            reached(TopicPartition(topic, partition), offset + 1)
        stats.consumed += len(fact["r"])
        stats.outside_assignment += int(fact.get("x", 0))
    elif kind == wire.COMMITTED:
        rows = [(fact["topic"], p, o) for p, o in fact["o"]]
        ledger.committed(member, fact["m"], fact["g"], rows, time_ms=at)
        stats.commits += 1
    elif kind == wire.ASSIGNED:
        parts = [(fact["topic"], p) for p in fact["p"]]
        ledger.assigned(member, fact["m"], fact["g"], parts, fact["topic"], time_ms=at)
        stats.assignments += 1
        stats.highest_generation = max(stats.highest_generation, int(fact["g"]))
    elif kind in (wire.COMMIT_FAILED, wire.POLL_ERROR):
        counts = stats.commit_failures if kind == wire.COMMIT_FAILED else stats.poll_errors
        counts[fact["e"]] = counts.get(fact["e"], 0) + 1
    return kind


class KafkaMemberProcess:
    """One incarnation of member ``index``: its process and the task that reads its facts."""

    def __init__(self, group: KafkaConsumerGroup, index: int, incarnation: int) -> None:
        self.group, self.index = group, index
        self.name = f"c{index}-{incarnation}"
        self.process: asyncio.subprocess.Process | None = None
        self.crashed = False
        self.closed = False  # it said it closed (committed, left the group)
        self.task: asyncio.Task | None = None

    def command(self) -> list[str]:
        g, s = self.group, self.group.settings
        settings = {
            "bootstrap": g.kafka_bootstrap,
            "topic": s.topic,
            "group_id": s.group_id,
            "name": self.name,
            "session_timeout_ms": s.session_timeout_ms,
            "heartbeat_interval_ms": s.heartbeat_interval_ms,
            "request_timeout_ms": s.request_timeout_ms,
            "commit_interval_s": s.commit_interval_s,
            "assignment_strategy": ",".join(s.assignment_strategy),
            "lifetime_s": g.lifetime_s,
        }
        return [sys.executable, "-m", "chaos.kafka_member", json.dumps(settings)]

    async def run(self) -> None:
        """Start the process, record its lines until its stdout ends, reap it."""
        with self.group.log_file(self.name) as stderr:
            self.process = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                limit=LINE_LIMIT,
            )
        if self.crashed:  # crashed while it was starting
            self.process.kill()
        assert self.process.stdout is not None
        g = self.group
        async for line in self.process.stdout:
            if apply_line(line, self.name, g.ledger, g.stats, g.reached) == wire.CLOSED:
                self.closed = True
            g.ledger.tick()
        await self.process.wait()

    def crash(self) -> None:
        """SIGKILL: no commit, no LeaveGroup. Its task reads what the pipe still holds and ends."""
        self.crashed = True
        if self.process is not None and self.process.returncode is None:
            self.process.kill()

    def ask_to_stop(self) -> None:
        if self.process is None or self.process.stdin is None:
            return
        with contextlib.suppress(OSError, RuntimeError):  # it died already
            self.process.stdin.write(wire.STOP_LINE)
            self.process.stdin.close()

    async def wait(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Wait (bounded) for its task; SIGKILL it if it is still running after that."""
        if self.task is None:
            return
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self.task), timeout_s)
        if not self.task.done():
            log.warning("consumer %s did not end within %.0fs: SIGKILL", self.name, timeout_s)
            self.crash()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self.task), 5.0)
        if not self.task.done():
            self.task.cancel()


class KafkaConsumerGroup(ConsumerGroup):
    """The run's group of librdkafka member processes (see the module docstring)."""

    members: dict[int, KafkaMemberProcess]  # type: ignore[assignment]
    #: abort() SIGKILLs member processes: give each a few seconds to be reaped
    ABORT_WAIT_S = 5.0

    def __init__(
        self,
        bootstrap: str,
        kafka_bootstrap: str,
        settings: GroupSettings,
        ledger: ConsumerLedgerWriter,
        say: Say,
        report_dir: Path,
        lifetime_s: float,
    ) -> None:
        """``bootstrap`` is floodmark's listener (the drain's end offsets), ``kafka_bootstrap``
        the KAFKA listener the members use."""
        super().__init__(bootstrap, settings, ledger, say)
        self.kafka_bootstrap, self.lifetime_s = kafka_bootstrap, lifetime_s
        self.log_dir = Path(report_dir) / LOG_DIR

    @classmethod
    def open_kafka(
        cls,
        report_dir: Path,
        bootstrap: str,
        kafka_bootstrap: str,
        topic: str,
        members: int,
        run_id: str,
        say: Say,
        duration_s: float,
    ) -> KafkaConsumerGroup:
        """The group of a run (``chaos-<run id>``) with its ledger in ``report_dir/consumed``."""
        settings = GroupSettings(topic, f"chaos-{run_id}", members)
        ledger = ConsumerLedgerWriter(report_dir)
        return cls(
            bootstrap, kafka_bootstrap, settings, ledger, say, report_dir, duration_s + LIFETIME_MARGIN_S
        )

    def log_file(self, name: str) -> BinaryIO:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the caller closes it

    def _start_member(self, index: int) -> KafkaMemberProcess:  # type: ignore[override]
        member = KafkaMemberProcess(self, index, self._incarnations[index])
        self._incarnations[index] += 1
        self.members[index] = member
        member.task = asyncio.get_running_loop().create_task(
            member.run(), name=f"chaos-consumer-{member.name}"
        )
        member.task.add_done_callback(self._ended)
        return member

    async def close(self) -> None:
        """Ask every member to stop (a last commit, LeaveGroup), wait (bounded), close the ledger."""
        if self._closed:
            return
        self._closed = True
        members = list(self.members.values())
        for member in members:
            member.ask_to_stop()
        await asyncio.gather(*(m.wait() for m in members))
        unclosed = [m.name for m in members if not m.closed]
        if unclosed:
            self.say(f"consumer group: {', '.join(unclosed)} did not close cleanly (see {self.log_dir})")
        self.ledger.close({"group_id": self.settings.group_id, **self.stats.as_dict()})
        self.say(f"consumer group: {self.stats.describe()}")
