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

from chaos.faults import FaultBackend
from chaos.schedule import DISK_FAULT_KINDS, ZK_FAULT_KINDS, Fault

log = logging.getLogger(__name__)

Record = Callable[[str, dict], None]
LeaderOf = Callable[[int], Awaitable[int]]
ControllerId = Callable[[], Awaitable[int]]


class FaultInjector:
    def __init__(
        self,
        backend: FaultBackend,
        leader_of: LeaderOf,
        controller_id: ControllerId,
        record: Record,
        say: Callable[[str], None] = lambda _: None,
        follower_of: LeaderOf | None = None,
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
        self.zookeeper_paused = False
        self.follower_of = follower_of
        self.heal_failures: list[dict] = []  # one per failed heal: kind, broker or target, error

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
            target = await self._target(fault)
            if target < 0:
                self.say(f"skipped ({fault.describe()}): no live target")
                continue
            self.say(f"fault: {fault.describe()} -> broker {target}")
            try:
                await self._inject(fault.kind, target)
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
                },
            )
            await asyncio.sleep(fault.duration_s)
            if await self._heal(fault.kind, target):
                self.say(f"healed: broker {target} ({fault.kind})")

    async def _heal(self, kind: str, broker_id: int, record: bool = True) -> bool:
        """Undo what is in force on ``broker_id``; record the heal (``kind`` is the fault's, or
        "final"), or its failure, on the timeline. True when it healed."""
        try:
            await self._undo(kind, broker_id)
        except Exception as exc:
            self._heal_failed({"kind": kind, "broker": broker_id}, exc)
            return False
        if record:
            self.record("heal", {"kind": kind, "broker": broker_id})
        return True

    def _heal_failed(self, detail: dict, exc: BaseException) -> None:
        failure = {**detail, "error": _first_line(exc)}
        self.heal_failures.append(failure)
        self.record("heal_failed", failure)
        whom = f"broker {detail['broker']}" if "broker" in detail else "ZooKeeper"
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

    async def _inject(self, kind: str, broker_id: int) -> None:
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

    async def _undo(self, kind: str, broker_id: int) -> None:
        """Undo every fault in force on ``broker_id``; each step leaves the sets once it is done,
        so a step that raises is tried again by the next heal."""
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

    def unhealed(self) -> list[str]:
        """What is still faulted ("ZooKeeper", "broker 2"): empty after a complete heal."""
        brokers = sorted(self.paused | self.isolated | self.down | set(self.disks))
        return (["ZooKeeper"] if self.zookeeper_paused else []) + [f"broker {b}" for b in brokers]

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
        for broker_id in sorted(self.paused | self.isolated | self.down | set(self.disks)):
            self.say(f"healing broker {broker_id}")
            await self._heal("final", broker_id)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(":")
