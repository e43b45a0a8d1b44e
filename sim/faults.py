"""The seeded fault schedule of a simulated run (docs/design.md "Simulation"; the vocabulary of
chaos/schedule.py, applied to the simulated world instead of processes and namespaces).

Each step of a schedule may start one fault, drawn from the ``"faults"`` stream of the run's
seed: its kind (among those enabled), its target and how long it lasts. Faults that fall due are
healed at the start of a step, and :meth:`FaultInjector.heal_all` ends every fault before the
liveness check. The kinds:

* ``crash``: SIGKILL of a broker (sim/broker_process.py), restarted with log recovery at the heal;
* ``pause``: SIGSTOP, then SIGCONT (its ZooKeeper session may expire meanwhile);
* ``partition``: the broker cut off from the other brokers (and sometimes from the clients too),
  its ZooKeeper session untouched: the zombie leader of Kafka's ZooKeeper era;
* ``zk-disconnect``: the broker's ZooKeeper connection dropped (kazoo reconnects within the
  session), or cut off for a while (kazoo's read timeout, then the session may expire);
* ``zk-expire``: the broker's ZooKeeper session expired at the server now;
* ``zk-lost-answer``: ZooKeeper connections dropped before or after requests are applied: either
  one rule on one broker's session (the n-th request of a kind: ``create``, ``set``, ``multi``,
  ``delete``, ``get``) or random rates for a while, for every session;
* ``shutdown``: a controlled shutdown (sim/workload.py), started again at the heal;
* ``stall`` and ``lost-answers`` (sim/connection_faults.py): one client connection's requests
  held, or its answers lost: the request's outcome unknown to the client while it still reaches
  the broker, late, after its retry;
* ``isr-lost-answer`` (aimed, in the spirit of FoundationDB's buggify): the answer to the
  broker's next write of a partition state znode is lost (the leader's ISR change, or the
  controller's write); when the write adds a replica to the ISR, that joiner is paused for a
  while, so the other followers run ahead of it (issue 18's window 1 needs exactly that);
* ``zombie-controller`` (aimed, sim/zombie_controller.py): right after the controller's next
  state write, ``/controller`` is deleted, the old controller maybe paused briefly and its
  requests to the brokers maybe held, so a new controller takes over while the old one is still
  inside its event;
* ``power-loss``, ``disk-full``, ``disk-error``, ``disk-floor`` (sim/storage_faults.py): the
  broker's machine loses power, its disk fills up, a call on it fails with EIO, or it reports
  less usable space than the free-space floor.

At most ``max_disturbed`` brokers are crashed, paused, partitioned or shut down at once (the
ZooKeeper faults do not count), so a schedule is a cluster under stress, not a dead one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim import connection_faults, storage_faults, zombie_controller
from sim.fault_kinds import ALL_KINDS, DISTURBING, ZK_REQUEST_KINDS, ActiveFault, FaultKind
from sim.workload import controlled_shutdown
from sim.zookeeper import ZkFaultRates

if TYPE_CHECKING:
    from sim.world import World

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FaultPlan:
    kinds: frozenset[FaultKind] = ALL_KINDS
    rate: float = 0.08  # probability per step that a fault starts
    duration_s: tuple[float, float] = (0.2, 8.0)  # how long a fault lasts, drawn
    max_disturbed: int = 1


@dataclass
class FaultInjector:
    """Starts and heals the faults of one schedule, each drawn from the seed."""

    world: World
    plan: FaultPlan
    note: Callable[[str], None]
    rng: random.Random = field(init=False)
    active: list[ActiveFault] = field(default_factory=list)
    started: int = 0
    _restarts: list[asyncio.Task] = field(default_factory=list)
    _timers: list[asyncio.TimerHandle] = field(default_factory=list)  # an aimed fault's next moves

    def __post_init__(self) -> None:
        self.rng = self.world.loop.seeds.stream("faults")
        self._producer_rng = self.world.loop.seeds.stream("producer-faults")
        self._kinds = sorted(self.plan.kinds, key=lambda k: k.value)

    @property
    def kinds(self) -> frozenset[FaultKind]:
        return self.plan.kinds

    # -- one step ----------------------------------------------------------------------------------
    async def step(self) -> bool:
        """Heal the faults that fell due; maybe start one. True when a fault started or healed."""
        now = self.world.loop.time()
        # a fault whose own work is still going on (a controlled shutdown waiting for ZooKeeper
        # behind another fault) is healed at a later step: awaiting it here could wait for ever
        due = [f for f in self.active if f.until <= now and (f.task is None or f.task.done())]
        for fault in due:
            await self._heal(fault)
        aimed = self._aim_at_producers(now)
        if not self._kinds or self.rng.random() >= self.plan.rate:
            return bool(due) or aimed
        kind = self.rng.choice(self._kinds)
        low, high = self.plan.duration_s
        until = now + self.rng.uniform(low, high)
        return self._start(kind, until) or bool(due) or aimed

    def _aim_at_producers(self, now: float) -> bool:
        """``lost-answers`` also comes on its own stream (sim/connection_faults.py)."""
        fault = connection_faults.aim_at_producers(self, self._producer_rng, now)
        if fault is None:
            return False
        self.active.append(fault)
        self.started += 1
        return True

    def _start(self, kind: FaultKind, until: float) -> bool:
        candidates = self._candidates(kind)
        if not candidates:
            return False
        return self._start_on(kind, self.rng.choice(candidates), until)

    def _candidates(self, kind: FaultKind) -> list[int]:
        running = [b for b in sorted(self.world.brokers) if self.world.brokers[b].running]
        if kind not in DISTURBING:
            return running
        disturbed = {f.broker for f in self.active if f.kind in DISTURBING}
        if len(disturbed) >= self.plan.max_disturbed:
            return []
        return [b for b in running if b not in disturbed]

    def start_on(self, kind: FaultKind, broker: int, until: float) -> bool:
        """Start a fault of ``kind`` on this broker (an aimed fault: sim/group_faults.py), within
        the same limits as a drawn one; False when the limits or the broker's state refuse it."""
        if kind not in self.plan.kinds or broker not in self._candidates(kind):
            return False
        return self._start_on(kind, broker, until)

    def _start_on(self, kind: FaultKind, broker: int, until: float) -> bool:
        fault = getattr(self, f"_start_{kind.name.lower()}")(broker, until)
        if fault is None:
            return False
        self.active.append(fault)
        self.started += 1
        return True

    def _start_crash(self, broker: int, until: float) -> ActiveFault:
        self.world.crash(broker)
        self.note(f"crash broker {broker} (for {until - self.world.loop.time():.3f} s)")
        return ActiveFault(FaultKind.CRASH, broker, until, lambda: self._restart(broker))

    def _start_power_loss(self, broker: int, until: float) -> ActiveFault | None:
        return storage_faults.power_loss(self, broker, until)

    def _start_disk_full(self, broker: int, until: float) -> ActiveFault:
        return storage_faults.disk_full(self, broker, until)

    def _start_disk_error(self, broker: int, until: float) -> ActiveFault:
        return storage_faults.disk_error(self, broker, until)

    def _start_disk_floor(self, broker: int, until: float) -> ActiveFault:
        return storage_faults.disk_floor(self, broker, until)

    def _start_zombie_controller(self, _broker: int, until: float) -> ActiveFault | None:
        armed = zombie_controller.arm(self, until)
        if armed is None:
            return None
        controller, forget = armed
        return ActiveFault(FaultKind.ZOMBIE_CONTROLLER, controller, until, forget)

    def pause_for(self, broker: int, seconds: float) -> None:
        """Pause the broker now for ``seconds`` (an aimed fault's move), if the limits allow."""
        if broker in self._candidates(FaultKind.PAUSE):
            self.active.append(self._start_pause(broker, self.world.loop.time() + seconds))

    def _start_pause(self, broker: int, until: float) -> ActiveFault:
        self.world.pause(broker)
        self.note(f"pause broker {broker} (for {until - self.world.loop.time():.3f} s)")
        return ActiveFault(FaultKind.PAUSE, broker, until, lambda: self._resume(broker))

    def _start_partition(self, broker: int, until: float) -> ActiveFault:
        return self._cut_from_brokers(broker, until, with_clients=self.rng.random() < 0.5)

    def _start_zk_disconnect(self, broker: int, until: float) -> ActiveFault | None:
        client = self.world.brokers[broker].zk_client
        session = _session_of(client)
        if client is None or session is None:
            return None
        zookeeper = self.world.zookeeper
        if self.rng.random() < 0.5:
            zookeeper.disconnect(session)
            self.note(f"drop broker {broker}'s ZooKeeper connection")
            return ActiveFault(FaultKind.ZK_DISCONNECT, broker, self.world.loop.time(), lambda: None)
        return self._isolate_from_zookeeper(broker, until)

    def _start_zk_expire(self, broker: int, until: float) -> ActiveFault | None:
        session = _session_of(self.world.brokers[broker].zk_client)
        if session is None:
            return None
        self.world.zookeeper.expire(session)
        self.note(f"expire broker {broker}'s ZooKeeper session")
        return ActiveFault(FaultKind.ZK_EXPIRE, broker, self.world.loop.time(), lambda: None)

    def _start_zk_lost_answer(self, broker: int, until: float) -> ActiveFault | None:
        zookeeper = self.world.zookeeper
        if self.rng.random() < 0.5:
            session = _session_of(self.world.brokers[broker].zk_client)
            if session is None:
                return None
            when = self.rng.choice(("before", "after"))
            kind = self.rng.choice(ZK_REQUEST_KINDS)
            count = self.rng.randint(1, 6)
            rule = zookeeper.inject("drop", when, kind=kind, session=session, count=count)
            self.note(
                f"drop broker {broker}'s ZooKeeper connection {when} its request #{count} of kind {kind}"
            )

            def forget() -> None:
                if rule in zookeeper.rules:
                    zookeeper.rules.remove(rule)

            return ActiveFault(FaultKind.ZK_LOST_ANSWER, broker, until, forget)
        rates = ZkFaultRates(
            drop_before=self.rng.uniform(0.0, 0.05), drop_after=self.rng.uniform(0.0, 0.05), expire=0.0
        )
        previous = zookeeper.faults
        zookeeper.faults = rates
        self.note(
            f"ZooKeeper drops connections before {rates.drop_before:.3f} / after {rates.drop_after:.3f} "
            f"of requests (for {until - self.world.loop.time():.3f} s)"
        )

        def heal() -> None:
            zookeeper.faults = previous

        return ActiveFault(FaultKind.ZK_LOST_ANSWER, None, until, heal)

    def _start_stall(self, broker: int, until: float) -> ActiveFault | None:
        return connection_faults.stall(self.world, self.rng, self.note, broker, until)

    def _start_lost_answers(
        self, broker: int, until: float, rng: random.Random | None = None
    ) -> ActiveFault | None:
        return connection_faults.lose_answers(self.world, rng or self.rng, self.note, self._timers, broker)

    def _start_isr_lost_answer(self, broker: int, until: float) -> ActiveFault | None:
        zookeeper = self.world.zookeeper
        session = _session_of(self.world.brokers[broker].zk_client)
        if session is None:
            return None

        def expands(_: int, request: Any) -> bool:
            return bool(_isr_change(self.world, broker, request)[0])

        def fired(_: int, request: Any) -> None:
            joiners, others = _isr_change(self.world, broker, request)
            self.note(f"lost the answer to broker {broker}'s ISR expand {request.path} (joiners {joiners})")
            self._expand_race(broker, joiners[0], others)

        rule = zookeeper.inject(
            "drop",
            "after",
            kind="set",
            path_suffix="/state",
            session=session,
            condition=expands,
            on_fire=fired,
        )
        self.note(f"drop broker {broker}'s ZooKeeper connection after its next ISR expand")

        def forget() -> None:
            if rule in zookeeper.rules:
                zookeeper.rules.remove(rule)

        return ActiveFault(FaultKind.ISR_LOST_ANSWER, broker, until, forget)

    def _expand_race(self, leader: int, joiner: int, others: list[int]) -> None:
        """An ISR expand's answer was lost: maybe (each a coin) the joiner falls behind (paused),
        the leader stays away from ZooKeeper (so it re-sends late), another follower leaves (a
        controlled shutdown, or a crash its session does not outlive) so that the controller
        rewrites the ISR, and the leader is cut off from the other brokers meanwhile (so the
        controller's LeaderAndIsr comes after the re-send): issue 18's window 1, a landed expand
        refused on its re-send."""
        now = self.world.loop.time()
        rng = self.rng
        if rng.random() < 0.8 and joiner in self._undisturbed([joiner]):
            self.active.append(self._start_pause(joiner, now + rng.uniform(1.0, 4.0)))
        away = rng.uniform(0.5, 3.0)
        if rng.random() < 0.7:
            fault = self._isolate_from_zookeeper(leader, now + away)
            if fault is not None:
                self.active.append(fault)
        running = self._undisturbed(others)
        if not running or rng.random() >= 0.7:
            return
        follower = rng.choice(running)
        leave = rng.choice(("shutdown", "crash"))
        cut = rng.random() < 0.5
        delay = rng.uniform(0.05, 1.0)
        back = rng.uniform(2.0, 6.0)

        def remove() -> None:
            if not self._undisturbed([follower]):
                return
            at = self.world.loop.time()
            if leave == "shutdown":
                self.active.append(self._start_shutdown(follower, at + back))
            else:  # its session goes at once, as if the host's ZooKeeper connection closed
                session = _session_of(self.world.brokers[follower].zk_client)
                self.active.append(self._start_crash(follower, at + back))
                if session is not None:
                    self.world.zookeeper.expire(session)
                    self.note(f"expire broker {follower}'s ZooKeeper session")
            if cut and self.world.brokers[leader].running:
                self.active.append(self._cut_from_brokers(leader, at + away))

        self._timers.append(self.world.loop.call_later(delay, remove))

    def _undisturbed(self, brokers: Iterable[int]) -> list[int]:
        disturbed = {f.broker for f in self.active if f.kind in DISTURBING}
        return [b for b in brokers if self.world.brokers[b].running and b not in disturbed]

    def _isolate_from_zookeeper(self, broker: int, until: float) -> ActiveFault | None:
        client = self.world.brokers[broker].zk_client
        if client is None:
            return None
        zookeeper = self.world.zookeeper
        zookeeper.isolate(client)
        self.note(f"cut broker {broker} off ZooKeeper (for {until - self.world.loop.time():.3f} s)")

        def heal() -> None:
            zookeeper.heal(client)
            self.note(f"reconnect broker {broker} to ZooKeeper")

        return ActiveFault(FaultKind.ZK_DISCONNECT, broker, until, heal)

    def _cut_from_brokers(self, broker: int, until: float, with_clients: bool = False) -> ActiveFault:
        others = [f"broker-{b}" for b in sorted(self.world.brokers) if b != broker]
        if with_clients:
            others += [f"client-{n}" for n in range(1, self.world._clients + 1)]
        side = [f"broker-{broker}"]
        self.world.network.cut(side, others)
        clients = " and the clients" if with_clients else ""
        self.note(
            f"partition broker {broker} from the other brokers{clients} (for {until - self.world.loop.time():.3f} s)"
        )

        def heal() -> None:
            self.world.network.heal(side, others)
            self.note(f"heal the partition of broker {broker}")

        return ActiveFault(FaultKind.PARTITION, broker, until, heal)

    def _start_shutdown(self, broker: int, until: float) -> ActiveFault:
        self.note(f"controlled shutdown of broker {broker} (for {until - self.world.loop.time():.3f} s)")
        task = asyncio.get_running_loop().create_task(
            controlled_shutdown(self.world, broker), name=f"fault-shutdown-{broker}"
        )
        return ActiveFault(FaultKind.SHUTDOWN, broker, until, lambda: self._restart(broker), task)

    # -- heals -------------------------------------------------------------------------------------
    async def _heal(self, fault: ActiveFault) -> None:
        self.active.remove(fault)
        if fault.task is not None:
            try:
                await fault.task
            except asyncio.CancelledError:
                if not fault.task.cancelled():
                    raise  # this task's own cancellation
                self.note(f"{fault.kind.value} of broker {fault.broker} was cancelled")
            except Exception as exc:  # noqa: BLE001 - recorded: the broker is restarted anyway
                self.note(f"{fault.kind.value} of broker {fault.broker} failed: {exc!r}")
        outcome = fault.heal()
        if outcome is not None:
            await outcome

    def _restart(self, broker: int) -> None:
        """Start the broker again in the background (its start-up may take a while)."""
        self.note(f"restart broker {broker}")
        task = asyncio.get_running_loop().create_task(
            self._start_broker(broker), name=f"fault-restart-{broker}"
        )
        self._restarts.append(task)

    async def _start_broker(self, broker: int) -> None:
        try:
            await self.world.restart(broker)
        except Exception as exc:  # noqa: BLE001 - a start-up failure is history, liveness judges it
            self.note(f"restart of broker {broker} failed: {exc!r}")

    def _resume(self, broker: int) -> None:
        self.world.resume(broker)
        self.note(f"resume broker {broker}")

    async def heal_all(self, within_s: float) -> None:
        """End every fault now and wait for the restarts they started. A fault's own work (a
        controlled shutdown) that has not ended ``within_s`` virtual seconds after every other
        fault healed raises TimeoutError."""
        for timer in self._timers:
            timer.cancel()
        while self.active:
            ready = [f for f in self.active if f.task is None or f.task.done()]
            for fault in ready:
                await self._heal(fault)
            busy = [f.task for f in self.active if f.task is not None]
            if busy and not ready:
                _, pending = await asyncio.wait(busy, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
                if len(pending) == len(busy):
                    stuck = ", ".join(f"{f.kind.value} of broker {f.broker}" for f in self.active)
                    raise TimeoutError(f"{stuck} did not end within {within_s:g} virtual s of the heal")
        restarts, self._restarts = self._restarts, []
        await asyncio.gather(*restarts)
        for broker in _dead(self.world, self.world.brokers):
            await self._start_broker(broker)  # a broker that halted by itself (KIP-112) comes back too

    @property
    def disturbed(self) -> list[int]:
        return sorted({f.broker for f in self.active if f.broker is not None and f.kind in DISTURBING})


def _session_of(client: object) -> int | None:
    client_id = getattr(client, "client_id", None)
    return client_id[0] if client_id else None


def _isr_change(world: World, broker: int, request: Any) -> tuple[list[int], list[int]]:
    """The replicas a state znode write adds to the ISR the broker's partition holds now, and the
    other replicas of the new ISR (the leader aside)."""
    try:
        state = json.loads(request.ops[0].value)
        topic, partition = request.path.split("/")[3], int(request.path.split("/")[5])
    except (ValueError, IndexError, AttributeError):
        return [], []
    rm = getattr(world.brokers[broker].server, "replica_manager", None)
    held = rm.partitions.get((topic, partition)) if rm is not None else None
    if held is None:
        return [], []
    isr = set(state.get("isr", ())) - {broker}
    joiners = sorted(isr - set(held.isr))
    return joiners, sorted(isr - set(joiners))


def _dead(world: World, brokers: Iterable[int]) -> list[int]:
    return [b for b in sorted(brokers) if not world.brokers[b].running]
