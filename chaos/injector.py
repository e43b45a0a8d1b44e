"""Carry out a fault schedule against a live cluster (docs/operations.md "Chaos runs
and verification"; issue 4 items 1 and 3).

For each :class:`chaos.schedule.Fault`, at its time: resolve its target role to a broker id
(the leader of a partition, from the cluster's metadata; the controller, from ZooKeeper's
``/controller`` through the metadata answer), inject it through a backend, wait its duration,
undo it (restart, SIGCONT, reconnect), and record both moments on the timeline. Backend calls
block (they wait for processes and registrations), so they run in a worker thread and the
workload keeps producing meanwhile. ``heal_all`` undoes whatever is still in force, so a run
that is interrupted still ends with every broker up.

Disk faults (``disk-full``, ``disk-error``; devcluster/disk.py) target the leader of a partition or,
through ``follower_of``, one of its in-sync followers. Their heal frees or fixes the disk and
then restarts the broker, which halted if its only log dir went offline (KIP-112); restarting
a broker that still runs does nothing.

``zk-pause`` targets no broker: it SIGSTOPs the ZooKeeper server for less than the session
timeout and SIGCONTs it (its timeline events name ``"target": "zookeeper"``). ``heal_all``
resumes ZooKeeper first, since restarting a broker needs it.

``fd-pressure`` (chaos/fd_pressure.py) targets the leader of a partition: the backend lowers its
soft open-file limit to what it holds plus a margin; the fault event carries the pid, the
descriptors held and the limits (``fds_held``, ``nofile_soft``, ``nofile_hard``,
``nofile_limit``), the heal the pid and what it held just before the soft limit was restored. A
broker that died under it (it must not: issue 25) is restarted by the heal, whose event then
says ``"exited": true``.

``reassign`` targets no broker either: through a :class:`chaos.reassign.PartitionMover` it asks
for a partition's move (KIP-455's AlterPartitionReassignments) and watches it for the fault's
length; its events name ``"target": "partition <topic>-<p>"`` and carry an ``id`` pairing the
fault with its heal, which is the move observed complete (``"completed": true``). A refused move
(INVALID_REPLICA_ASSIGNMENT, REASSIGNMENT_IN_PROGRESS) changed nothing: its fault event carries
``"refused"`` and its heal follows at once; it is kept in :attr:`FaultInjector.refused_moves`,
not counted as a failure. ``heal_all`` heals the brokers first (a move waits for a target broker
that is down), then waits (bounded) until no reassignment is in progress; a move that never
completed is a failed heal naming its partition.

``consumer`` acts on the workload's consumer group, not on a broker: through the
:class:`ConsumerFaults` hook (chaos/consumers.py's group) it crashes a member (no commit, no
LeaveGroup: the coordinator must expel it by session timeout) and, after the fault's length,
starts a fresh member in its place. Its events name ``"target": "consumer c<i>-<n>"`` with an
``id`` pairing the fault with its heal, whose ``replacement`` names the new member; ``heal_all``
restarts a member still down. Without a hook (a run without consumers) the fault is skipped.

A heal that fails (a broker that exits before it registers, a disk that cannot be freed) does
not end the run (issue 19 item 7): it is recorded on the timeline as a ``heal_failed`` event
(the fault's span then stays open to the end of the run), kept in :attr:`FaultInjector.heal_failures`,
and the broker stays in the injector's sets, so the schedule goes on and ``heal_all`` tries
again; :meth:`FaultInjector.unhealed` names what is still faulted after it. A fault that cannot
be injected (its target died meanwhile) is reported and skipped the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from chaos.faults import FaultBackend
from chaos.fd_pressure import ProcessGone
from chaos.reassign import POLL_S, Move, PartitionMover, move_state
from chaos.schedule import (
    CONSUMER_FAULT_KINDS,
    DISK_FAULT_KINDS,
    FD_FAULT_KINDS,
    REASSIGN_FAULT_KINDS,
    ZK_FAULT_KINDS,
    Fault,
)
from client.types import PartitionReassignment, TopicPartition

log = logging.getLogger(__name__)

Record = Callable[[str, dict], None]
LeaderOf = Callable[[int], Awaitable[int]]
ControllerId = Callable[[], Awaitable[int]]


class ConsumerFaults(Protocol):
    """The workload's consumers, as the ``consumer`` fault acts on them (chaos/consumers.py)."""

    async def crash(self, pick: int) -> str | None:
        """Kill the member ``pick`` draws; its name, or None when none is alive."""

    async def restart(self, name: str) -> str:
        """Start a fresh member in place of the crashed ``name``; the new one's name."""


class FaultInjector:
    def __init__(
        self,
        backend: FaultBackend,
        leader_of: LeaderOf,
        controller_id: ControllerId,
        record: Record,
        say: Callable[[str], None] = lambda _: None,
        follower_of: LeaderOf | None = None,
        mover: PartitionMover | None = None,
        moves_timeout_s: float = 120.0,
        consumers: ConsumerFaults | None = None,
    ) -> None:
        self.backend = backend
        self.leader_of = leader_of
        self.controller_id = controller_id
        self.record = record
        self.say = say
        self.down: set[int] = set()  # crashed or terminated, to restart
        self.paused: set[int] = set()
        self.isolated: set[int] = set()
        self.disks: dict[int, set[str]] = {}  # broker -> the disk fault kinds in force on it
        self.fd_limited: set[int] = set()  # brokers under an fd-pressure limit
        self.zookeeper_paused = False
        self.follower_of = follower_of
        self.heal_failures: list[dict] = []  # one per failed heal: kind, broker or target, error
        self.mover = mover
        self.moves_timeout_s = moves_timeout_s  # the final heal's wait for every move to complete
        self.moves: list[Move] = []  # started, not yet seen complete
        self.completed_moves: list[Move] = []
        self.unfinished_moves: list[Move] = []  # not complete at the end: failed heals
        self.refused_moves: list[dict] = []  # the move's detail with "refused" and "error"
        self._move_attempts = 0
        self.consumers = consumers
        self.consumers_down: dict[str, str] = {}  # crashed member -> the fault's id
        self._consumer_crashes = 0

    async def run(self, schedule: list[Fault], started: float) -> None:
        """Inject every fault at its time (seconds after ``started``, a ``time.monotonic()``)."""
        for fault in schedule:
            delay = started + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if fault.kind == "partition" and not self.backend.can_partition():
                self.say(f"skipped ({fault.describe()}): this backend cannot partition the network")
                continue
            if fault.kind in DISK_FAULT_KINDS and not self.backend.can_fault_disks():
                self.say(f"skipped ({fault.describe()}): the brokers are not on faultable disks")
                continue
            if fault.kind in ZK_FAULT_KINDS:
                await self._pause_zookeeper(fault)
                continue
            if fault.kind in REASSIGN_FAULT_KINDS:
                await self._reassign(fault)
                continue
            if fault.kind in CONSUMER_FAULT_KINDS:
                await self._crash_consumer(fault)
                continue
            target = await self._target(fault)
            if target < 0:
                self.say(f"skipped ({fault.describe()}): no live target")
                continue
            self.say(f"fault: {fault.describe()} -> broker {target}")
            try:
                facts = await self._inject(fault.kind, target)
            except Exception as exc:  # its target died meanwhile: report, undo what was done, go on
                self.say(f"could not inject ({fault.describe()}) on broker {target}: {_first_line(exc)}")
                await self._heal(fault.kind, target, record=False)  # what the failed call did
                continue
            self.record(
                "fault",
                {
                    "kind": fault.kind,
                    "broker": target,
                    "partition": fault.partition,
                    "planned_at_s": fault.at_s,
                    "duration_s": fault.duration_s,
                    **({"role": fault.role} if fault.kind in DISK_FAULT_KINDS else {}),
                    **facts,
                },
            )
            await asyncio.sleep(fault.duration_s)
            if await self._heal(fault.kind, target):
                self.say(f"healed: broker {target} ({fault.kind})")

    async def _heal(self, kind: str, broker_id: int, record: bool = True) -> bool:
        """Undo what is in force on ``broker_id``; record the heal (``kind`` is the fault's, or
        "final"), or its failure, on the timeline. True when it healed."""
        try:
            facts = await self._undo(kind, broker_id)
        except Exception as exc:
            self._heal_failed({"kind": kind, "broker": broker_id}, exc)
            return False
        if record:
            self.record("heal", {"kind": kind, "broker": broker_id, **facts})
        return True

    def _heal_failed(self, detail: dict, exc: BaseException) -> None:
        failure = {**detail, "error": _first_line(exc)}
        self.heal_failures.append(failure)
        self.record("heal_failed", failure)
        whom = f"broker {detail['broker']}" if "broker" in detail else str(detail.get("target", "?"))
        whom = "ZooKeeper" if whom == "zookeeper" else whom
        self.say(f"HEAL FAILED: {whom} ({detail['kind']}): {failure['error']}; the run goes on")

    async def _pause_zookeeper(self, fault: Fault) -> None:
        self.say(f"fault: {fault.describe()}")
        self.zookeeper_paused = True  # first: a pause that fails half-way is still undone
        detail = {"kind": fault.kind, "target": "zookeeper"}
        try:
            await asyncio.to_thread(self.backend.pause_zookeeper)
        except Exception as exc:
            self.say(f"could not inject ({fault.describe()}): {_first_line(exc)}")
        else:
            self.record("fault", {**detail, "planned_at_s": fault.at_s, "duration_s": fault.duration_s})
            await asyncio.sleep(fault.duration_s)
        try:
            await self._resume_zookeeper()
        except Exception as exc:
            self._heal_failed(detail, exc)
            return
        self.record("heal", detail)
        self.say(f"healed: ZooKeeper ({fault.kind})")

    async def _resume_zookeeper(self) -> None:
        await asyncio.to_thread(self.backend.resume_zookeeper)
        self.zookeeper_paused = False

    async def _crash_consumer(self, fault: Fault) -> None:
        """Kill a consumer of the group, wait the fault's length, start a fresh one."""
        if self.consumers is None:
            self.say(f"skipped ({fault.describe()}): this run has no consumers")
            return
        name = await self.consumers.crash(fault.pick)
        if name is None:
            self.say(f"skipped ({fault.describe()}): no live consumer")
            return
        self._consumer_crashes += 1
        fault_id = self.consumers_down[name] = f"consumer-{self._consumer_crashes}"
        detail = {"kind": fault.kind, "id": fault_id, "target": f"consumer {name}", "member": name}
        self.record("fault", {**detail, "planned_at_s": fault.at_s, "duration_s": fault.duration_s})
        self.say(f"fault: {fault.describe()} -> consumer {name}")
        await asyncio.sleep(fault.duration_s)
        await self._restart_consumer(name, fault.kind)

    async def _restart_consumer(self, name: str, kind: str) -> None:
        fault_id = self.consumers_down[name]
        detail = {"kind": kind, "id": fault_id, "target": f"consumer {name}", "member": name}
        try:
            assert self.consumers is not None
            replacement = await self.consumers.restart(name)
        except Exception as exc:
            self._heal_failed(detail, exc)
            return
        del self.consumers_down[name]
        self.record("heal", {**detail, "replacement": replacement})
        self.say(f"healed: consumer {name} replaced by {replacement} ({kind})")

    async def _reassign(self, fault: Fault) -> None:
        """Ask for the move; record it, or its refusal; watch it for the fault's length."""
        if self.mover is None:
            self.say(f"skipped ({fault.describe()}): this runner moves no partitions")
            return
        await self._settle_moves()  # an earlier move seen complete is not refused as in progress
        self._move_attempts += 1
        try:
            attempt = await self.mover.start(fault.partition, fault.pick, f"reassign-{self._move_attempts}")
        except Exception as exc:  # no answer: the final heal waits for a move that landed anyway
            self.say(f"could not inject ({fault.describe()}): {_first_line(exc)}")
            return
        if attempt is None:
            self.say(f"skipped ({fault.describe()}): fewer live brokers than the partition has replicas")
            return
        move = attempt.move
        detail = {**move.detail(), "planned_at_s": fault.at_s, "duration_s": fault.duration_s}
        where = f"partition {move.tp} {list(move.before)} -> {list(move.target)}"
        if attempt.refusal is not None:  # nothing moved: the fault's span closes at once
            refusal = {"refused": attempt.refusal.name, "error": attempt.refusal.message}
            self.refused_moves.append({**move.detail(), **refusal})
            self.record("fault", {**detail, **refusal})
            self.record("heal", {**move.detail(), **refusal})
            self.say(f"refused ({fault.describe()}): {where}: {attempt.refusal}")
            return
        self.record("fault", detail)
        self.moves.append(move)
        self.say(f"fault: {fault.describe()} -> {where}")
        deadline = time.monotonic() + fault.duration_s
        while move in self.moves and time.monotonic() < deadline:
            await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
            await self._settle_moves()
        if move in self.moves:
            self.say(f"still moving after {fault.duration_s:.1f}s: {where} (the final heal waits for it)")

    async def _settle_moves(self) -> None:
        """Record the heal of every move now complete (a failed read leaves them for later)."""
        if not self.moves or self.mover is None:
            return
        try:
            moving, replicas = await self.mover.state()
        except Exception as exc:  # noqa: BLE001 - mid-failover: the next read will do
            log.warning("cannot read the moves in progress: %s", exc)
            return
        self._complete_moves(moving, replicas)

    def _complete_moves(
        self, moving: dict[TopicPartition, PartitionReassignment], replicas: dict[TopicPartition, list[int]]
    ) -> None:
        for move in [m for m in self.moves if move_state(m, moving, replicas) == "completed"]:
            self.moves.remove(move)
            self.completed_moves.append(move)
            self.record("heal", {**move.detail(), "completed": True, "replicas": replicas[move.tp]})
            self.say(f"healed: partition {move.tp} moved to {list(move.target)} (reassign)")

    async def _heal_moves(self) -> None:
        """The final heal of the moves: wait (bounded) until no reassignment is in progress and
        every move started has its target replicas; each one that does not is a failed heal, as
        is a move in progress that this run did not see start (its answer was lost)."""
        if self.mover is None or not self._move_attempts:
            return
        self.say(f"waiting for the partitions' moves to complete (at most {self.moves_timeout_s:.0f}s)")
        deadline = time.monotonic() + self.moves_timeout_s
        moving: dict[TopicPartition, PartitionReassignment] = {}
        replicas: dict[TopicPartition, list[int]] = {}
        error = None
        try:
            moving, replicas = await self.mover.wait_idle(self.moves_timeout_s)
            self._complete_moves(moving, replicas)
            while self.moves and time.monotonic() < deadline:  # metadata a moment behind ZooKeeper
                await asyncio.sleep(POLL_S)
                moving, replicas = await self.mover.state()
                self._complete_moves(moving, replicas)
        except Exception as exc:  # noqa: BLE001 - reported as the failed heal of what is left
            error = _first_line(exc)
        for move in list(self.moves):
            self.moves.remove(move)
            self.unfinished_moves.append(move)
            state = move_state(move, moving, replicas)
            why = error or (
                "still in progress" if state == "moving" else f"its replicas are {replicas.get(move.tp)}"
            )
            self._heal_failed(
                move.detail(),
                RuntimeError(
                    f"the move to {list(move.target)} did not complete in {self.moves_timeout_s:.0f}s: {why}"
                ),
            )
        ours = {m.tp for m in self.completed_moves + self.unfinished_moves}
        for tp in sorted(set(moving) - ours):
            self._heal_failed(
                {"kind": "reassign", "target": f"partition {tp}"},
                RuntimeError(f"a move to {moving[tp].replicas} still in progress"),
            )

    async def _target(self, fault: Fault) -> int:
        try:
            if fault.kind == "controller":
                return await self.controller_id()
            if fault.role == "follower" and self.follower_of is not None:
                return await self.follower_of(fault.partition)
            return await self.leader_of(fault.partition)
        except Exception as exc:  # metadata can be briefly unavailable mid-failover
            log.warning("cannot resolve the target of %s: %s", fault.describe(), exc)
            return -1

    async def _inject(self, kind: str, broker_id: int) -> dict:
        """Inject the fault; what the fault event records besides its schedule (or {})."""
        if kind in FD_FAULT_KINDS:
            self.fd_limited.add(broker_id)  # first: a limit set before a failure is still restored
            return await asyncio.to_thread(self.backend.limit_open_files, broker_id) or {}
        if kind in ("kill", "controller", "term"):
            self.down.add(broker_id)  # first: a broker that died before the signal is restarted too
            crash = kind != "term"
            await asyncio.to_thread(self.backend.crash if crash else self.backend.terminate, broker_id)
        elif kind == "pause":
            await asyncio.to_thread(self.backend.pause, broker_id)
            self.paused.add(broker_id)
        elif kind == "partition":
            await asyncio.to_thread(self.backend.isolate, broker_id)
            self.isolated.add(broker_id)
        elif kind in DISK_FAULT_KINDS:
            self.disks.setdefault(broker_id, set()).add(kind)  # first: a fill that fails half-way is undone
            fill = kind == "disk-full"
            await asyncio.to_thread(self.backend.fill_disk if fill else self.backend.break_disk, broker_id)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return {}

    async def _undo(self, kind: str, broker_id: int) -> dict:
        """Undo every fault in force on ``broker_id``; each step leaves the sets once it is done,
        so a step that raises is tried again by the next heal. What the heal event records
        besides the kind and the broker (an fd-pressure heal's facts), or {}."""
        facts: dict = {}
        if broker_id in self.fd_limited:
            try:
                facts = await asyncio.to_thread(self.backend.restore_open_files, broker_id) or {}
            except ProcessGone as exc:  # it died under the fault: restart it, and say so
                self.say(f"broker {broker_id} exited under fd-pressure: {exc}")
                facts = {"exited": True, "error": str(exc)}
                self.down.add(broker_id)
            self.fd_limited.discard(broker_id)
        if broker_id in self.paused:
            await asyncio.to_thread(self.backend.resume, broker_id)
            self.paused.discard(broker_id)
        if broker_id in self.isolated:
            await asyncio.to_thread(self.backend.heal, broker_id)
            self.isolated.discard(broker_id)
        for disk_kind in sorted(self.disks.get(broker_id, ())):
            fill = disk_kind == "disk-full"
            await asyncio.to_thread(self.backend.unfill_disk if fill else self.backend.fix_disk, broker_id)
            self.down.add(broker_id)  # it halted if its log dir went offline: restart it (no-op if it runs)
            self.disks[broker_id].discard(disk_kind)
        if not self.disks.get(broker_id, True):
            del self.disks[broker_id]
        if broker_id in self.down:
            await asyncio.to_thread(self.backend.restart, broker_id)
            self.down.discard(broker_id)
        return facts

    def unhealed(self) -> list[str]:
        """What is still faulted ("ZooKeeper", "broker 2", "partition chaos-3 (moving)"): empty
        after a complete heal."""
        brokers = sorted(self.faulted())
        moves = [f"partition {m.tp} (moving)" for m in self.moves + self.unfinished_moves]
        consumers = [f"consumer {name}" for name in sorted(self.consumers_down)]
        zookeeper = ["ZooKeeper"] if self.zookeeper_paused else []
        return zookeeper + [f"broker {b}" for b in brokers] + moves + consumers

    def faulted(self) -> set[int]:
        """The brokers with a fault in force."""
        return self.paused | self.isolated | self.down | set(self.disks) | self.fd_limited

    async def heal_all(self) -> None:
        """Undo every fault still in force (an interrupted run must still leave brokers up); a heal
        that fails is recorded (``heal_failed``) and the others are still tried."""
        if self.zookeeper_paused:
            self.say("resuming ZooKeeper")
            try:
                await self._resume_zookeeper()
                self.record("heal", {"kind": "final", "target": "zookeeper"})
            except Exception as exc:
                self._heal_failed({"kind": "final", "target": "zookeeper"}, exc)
        for broker_id in sorted(self.faulted()):
            self.say(f"healing broker {broker_id}")
            await self._heal("final", broker_id)
        await self._heal_moves()
        for name in sorted(self.consumers_down):
            await self._restart_consumer(name, "final")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(":")
