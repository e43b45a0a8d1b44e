"""Schedules and sweeps (docs/design.md "Simulation"; TigerBeetle's VOPR, FoundationDB's
simulation runs): one schedule is one seed; a sweep is a range of seeds, in parallel processes.

A schedule (:func:`run_schedule`) builds the world (sim/world.py) under
:func:`sim.runner.run_simulation`, installs the invariants (sim/invariants.py) before the brokers
start, starts the workload (sim/workload.py), then runs S *steps* (or steps until V virtual
seconds have passed): each step heals the faults that fell due and maybe starts one
(sim/faults.py), starts a few produces (maybe a topic creation or deletion), lets a drawn
virtual delay pass, and checks the invariants (the cheap ones also run every few loop callbacks,
the byte comparisons after every fault and every ``full_check_every_s``). Then every fault is
healed and liveness is judged: within ``liveness_s`` virtual seconds every broker runs, a
controller is elected, every partition of every live topic has a leader that has taken the
leadership and a full ISR, and every produce started has completed or failed; the final check
then compares every replica and wants every acknowledged offset below its leader's HW.

A failure (an invariant, liveness, a spinning task or a livelock from the loop, or an exception
of the code under test) is reported with the seed, the schedule step, the schedule's recent
history, the last callbacks run and the exact ``floodmark simulate`` command that replays it;
the same seed gives the same trace hash (the loop's, sim/trace.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import IO, Any

from sim.cluster_health import unhealthy
from sim.commit_fencing import CommitFencing
from sim.consumer_visibility import ConsumerVisibility
from sim.coordinator_load import CoordinatorLoad
from sim.errors import Livelock, SimulationError, TaskSpinning
from sim.fault_kinds import ALL_KINDS, FaultKind, format_kinds
from sim.faults import FaultInjector, FaultPlan
from sim.group_faults import GroupFaultPlan, GroupFaults
from sim.group_invariants import GROUP_LIVENESS, GroupChecker
from sim.group_workload import GROUP_BROKER_PROPS, GroupWorkload, GroupWorkloadConfig
from sim.idempotence import Idempotence
from sim.invariants import ALL_INVARIANTS, LIVENESS, NO_SPIN, Invariants, InvariantViolation
from sim.progress import Limits
from sim.rebalance_callbacks import RebalanceCallbacks
from sim.runner import run_simulation
from sim.state_writes import StateWrites
from sim.workload import Workload, WorkloadConfig
from sim.world import World, WorldConfig

log = logging.getLogger(__name__)

#: Broker properties of every schedule: short timeouts, so that a session expiry, an ISR shrink
#: and a controlled shutdown all happen within a few virtual seconds.
SCHEDULE_PROPS = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "2000",
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "2",
    "controlled.shutdown.retry.backoff.ms": "200",
    # the consumer group's (sim/group_workload.py): a small offsets topic, 1 s sessions, a short
    # initial delay; small offsets segments and an eager cleaner, so that __consumer_offsets is
    # compacted within seconds and every coordinator move loads a cleaned partition
    "offsets.topic.num.partitions": "5",
    **GROUP_BROKER_PROPS,
    "offsets.topic.segment.bytes": "2048",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.cleanable.ratio": "0.01",
}
#: The broker counts a schedule's seed draws among (``seed % len``) unless one is given: RF 3 on
#: 4 and 5 brokers gives reassignments that add and remove replicas, not only reorderings.
BROKER_CHOICES = (3, 3, 4, 5)
HISTORY_KEEP = 30


@dataclass(frozen=True)
class ScheduleConfig:
    steps: int = 60
    duration_s: float | None = None  # run steps until this many virtual seconds instead
    #: the cluster's size; None: drawn from the seed (BROKER_CHOICES; :meth:`for_seed`)
    brokers: int | None = None
    faults: frozenset[FaultKind] = ALL_KINDS
    invariants: frozenset[str] = frozenset(ALL_INVARIANTS)
    step_s: tuple[float, float] = (0.01, 0.2)  # virtual time between steps, drawn
    fault_rate: float = 0.08
    fault_duration_s: tuple[float, float] = (0.2, 8.0)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    check_every: int = 16  # loop callbacks between two cheap checks
    full_check_every_s: float = 2.0
    liveness_s: float = 60.0
    props: tuple[tuple[str, str], ...] = tuple(SCHEDULE_PROPS.items())
    #: a consumer group over the first topic (sim/group_workload.py); members 0: none
    group: GroupWorkloadConfig = field(default_factory=GroupWorkloadConfig)
    #: faults aimed at the group's coordinator and members (sim/group_faults.py)
    group_faults: GroupFaultPlan = field(default_factory=GroupFaultPlan)

    def for_seed(self, seed: int) -> ScheduleConfig:
        """This config with its broker count settled for ``seed``."""
        if self.brokers is not None:
            return self
        return replace(self, brokers=BROKER_CHOICES[seed % len(BROKER_CHOICES)])

    def time_limit_s(self) -> float:
        """A virtual-time bound no healthy schedule reaches: past it the schedule hangs (a
        finding: "the schedule did not complete")."""
        length = self.duration_s if self.duration_s is not None else self.steps * self.step_s[1]
        return length + self.fault_duration_s[1] + 4 * self.liveness_s + 300.0

    def replay_command(self, seed: int) -> str:
        """The ``floodmark simulate`` command that runs this schedule again, bit for bit."""
        length = f"--duration {self.duration_s:g}" if self.duration_s is not None else f"--steps {self.steps}"
        parts = [f"floodmark simulate --seed {seed} {length} --brokers {self.for_seed(seed).brokers}"]
        parts.append(f"--faults {format_kinds(self.faults)}")
        parts.append(f"--consumers {self.group.members}")
        if self.invariants != frozenset(ALL_INVARIANTS):
            parts.append("--invariants " + ",".join(i for i in ALL_INVARIANTS if i in self.invariants))
        return " ".join(parts)


@dataclass(frozen=True)
class ScheduleResult:
    seed: int
    ok: bool
    trace_hash: str
    steps: int
    callbacks: int
    virtual_seconds: float
    wall_seconds: float
    acks: int = 0
    failures: int = 0
    faults: int = 0
    checks: int = 0
    #: consumer group (sim/group_workload.py): generations assigned, commits, coordinator moves
    group_assignments: int = 0
    group_commits: int = 0
    coordinator_moves: int = 0
    coordinator_faults: int = 0
    member_stalls: int = 0
    commits_stored: int = 0  # the members' commits the coordinators stored (sim/commit_fencing.py)
    records_given: int = 0  # records the members were given (sim/consumer_visibility.py)
    invariant: str | None = None  # which invariant failed (or "error" for an exception)
    message: str = ""
    history: tuple[str, ...] = ()
    recent: tuple[str, ...] = ()
    replay: str = ""

    def report(self) -> str:
        """What a failure prints: the seed, the step, the history and the replay command."""
        if self.ok:
            return (
                f"seed {self.seed}: ok, {self.steps} steps, {self.acks} acks, {self.failures} failed "
                f"produces, {self.faults} faults, {self.virtual_seconds:.1f} virtual s in "
                f"{self.wall_seconds:.2f} wall s, trace {self.trace_hash}"
            )
        lines = [
            f"seed {self.seed}: FAILED ({self.invariant}): {self.message}",
            f"  at step {self.steps}, virtual {self.virtual_seconds:.6f} s, after {self.callbacks} callbacks; "
            f"trace hash {self.trace_hash}",
            "  schedule history (virtual s, event):",
            *(f"    {entry}" for entry in self.history),
            "  last callbacks (virtual µs, callback):",
            *(f"    {entry}" for entry in self.recent[-20:]),
            f"  replay: {self.replay}",
        ]
        return "\n".join(lines)


class _Run:
    """The state one schedule shares with the code that reports it."""

    def __init__(self, config: ScheduleConfig) -> None:
        self.config = config
        self.history: deque[str] = deque(maxlen=HISTORY_KEEP)
        self.world: World | None = None
        self.checker: Invariants | None = None
        self.workload: Workload | None = None
        self.faults: FaultInjector | None = None
        self.group: GroupWorkload | None = None
        self.group_faults: GroupFaults | None = None
        self.fencing: CommitFencing | None = None
        self.visibility: ConsumerVisibility | None = None
        self.idempotence: Idempotence | None = None
        self.loads: CoordinatorLoad | None = None
        self.step = 0

    def note(self, event: str) -> None:
        now = self.world.loop.elapsed_ns / 1e9 if self.world is not None else 0.0
        self.history.append(f"{now:10.6f} step {self.step}: {event}")

    async def main(self) -> None:
        config = self.config
        assert config.brokers is not None, "run_schedule settles the broker count (for_seed)"
        world = World(WorldConfig(brokers=config.brokers, props=dict(config.props)))
        self.world = world
        try:
            async with world:
                await self._run(world)
        finally:
            shutil.rmtree(world.root, ignore_errors=True)

    async def _run(self, world: World) -> None:
        config = self.config
        workload = self.workload = Workload(world, config.workload, self.note)
        checker = self.checker = Invariants(
            world, workload.ledger, enabled=config.invariants, every=config.check_every
        )
        checker.install()
        StateWrites(world.zookeeper, checker.fail, config.invariants).install()
        idempotence = self.idempotence = Idempotence(world, checker.fail, config.invariants)
        fencing = self.fencing = CommitFencing(world, checker.fail, config.invariants)
        loads = self.loads = CoordinatorLoad(world, checker.fail, config.invariants)
        visibility = self.visibility = ConsumerVisibility(
            world, checker.fail, config.invariants, checker._deleting
        )
        await world.start()
        idempotence.attach()
        await workload.start()
        faults = self.faults = FaultInjector(
            world,
            FaultPlan(config.faults, config.fault_rate, config.fault_duration_s),
            self.note,
        )
        if config.group.members and workload.topics:
            fencing.attach()
            self.group = GroupWorkload(
                world,
                config.group,
                GroupChecker(checker.fail, config.invariants),
                visibility,
                RebalanceCallbacks(checker.fail, config.invariants),
                self.note,
            )
            await self.group.start(sorted(workload.topics)[0])
            partitions = int(dict(config.props).get("offsets.topic.num.partitions", "50"))
            self.group_faults = GroupFaults(world, self.group, faults, config.group_faults, partitions)
        pace = world.loop.seeds.stream("schedule")
        started = world.loop.time()
        next_full = started + config.full_check_every_s
        while not self._done(started):
            self.step += 1
            checker.step = self.step
            changed = await faults.step()
            if self.group_faults is not None:
                changed = self.group_faults.step() or changed
            workload.step()
            if self.group is not None:
                self.group.step()
            await asyncio.sleep(pace.uniform(*config.step_s))
            full = changed or world.loop.time() >= next_full
            if full:
                next_full = world.loop.time() + config.full_check_every_s
            fencing.attach()
            idempotence.attach()
            loads.check()
            checker.check(full=full)
            if full:
                with world.observing():
                    visibility.check()
                    idempotence.check(checker.current_leaders)
            checker.raise_if_violated()
        self.step += 1
        checker.step = self.step
        self.note("heal every fault")
        try:
            await faults.heal_all(config.liveness_s)
        except TimeoutError as exc:
            checker.fail(LIVENESS, str(exc))
            checker.raise_if_violated()
        checker.check(full=True)
        checker.raise_if_violated()
        await self._liveness(world, workload)
        await self._group_liveness(world, workload)
        checker.check_final()
        if checker.violation is None:
            with world.observing():
                visibility.check(final=True)
                idempotence.check(checker.current_leaders)
        checker.raise_if_violated()
        if self.group is not None:
            await self.group.close()
        await workload.close()

    def _done(self, started: float) -> bool:
        config = self.config
        if config.duration_s is not None:
            return self.world is not None and self.world.loop.time() - started >= config.duration_s
        return self.step >= config.steps

    async def _liveness(self, world: World, workload: Workload) -> None:
        if LIVENESS not in self.config.invariants:
            with contextlib.suppress(AssertionError):  # not checked here: only bounded
                await workload.finish_operations(self.config.liveness_s * 10)
            await workload.settle(self.config.liveness_s * 10)
            return
        try:
            await workload.finish_operations(self.config.liveness_s)
            await world.wait_for(
                lambda: not unhealthy(world, workload),
                "a leader, a full ISR and an HW past every acknowledged offset for every partition",
                within_s=self.config.liveness_s,
            )
            await workload.settle(self.config.liveness_s)
        except AssertionError as exc:
            what = unhealthy(world, workload) or str(exc)
            assert self.checker is not None
            self.checker.fail(LIVENESS, f"after every fault healed, {what}")
            self.checker.raise_if_violated()

    async def _group_liveness(self, world: World, workload: Workload) -> None:
        """After every fault healed: the coordinators load (``group-load-bound``, checked as it
        waits) and the group settles (``group-liveness``), within ``liveness_s``."""
        group, loads, checker = self.group, self.loads, self.checker
        assert loads is not None and checker is not None
        settle = GROUP_LIVENESS in self.config.invariants
        if group is None or group.topic is None or not (settle or loads.enabled):
            return
        topic = group.topic

        def unsettled() -> str | None:
            loads.check()
            if checker.violation is not None:
                return None  # judged: stop waiting
            if loads.enabled and loads.loading():
                return "a coordinator has not loaded its offsets partition"
            return (
                GroupChecker.unsettled(group.live(), workload.topics.get(topic, 0), topic) if settle else None
            )

        try:
            await world.wait_for(
                lambda: unsettled() is None, "the group settles", within_s=self.config.liveness_s
            )
        except AssertionError:
            if settle:
                checker.fail(GROUP_LIVENESS, f"after every fault healed, {unsettled()}")
        checker.raise_if_violated()


def run_schedule(
    seed: int, config: ScheduleConfig | None = None, trace_dump: IO[str] | None = None
) -> ScheduleResult:
    """Run one schedule; never raises for a failure of the code under test (see ``ok``). With
    ``trace_dump``, every callback the loop runs is written there (sim/trace_diff.py)."""
    config = (config or ScheduleConfig()).for_seed(seed)
    run = _Run(config)
    wall = time.perf_counter()
    invariant: str | None = None
    message = ""
    recent: tuple[str, ...] = ()
    try:
        result = run_simulation(
            run.main,
            seed,
            time_limit_s=config.time_limit_s(),
            limits=Limits(),
            trace_keep=64,
            trace_dump=trace_dump,
        )
        completed = result.completed
    except InvariantViolation as violation:
        invariant, message, recent = violation.invariant, str(violation), violation.recent
        completed = True
    except (TaskSpinning, Livelock) as exc:
        invariant, message = NO_SPIN, str(exc)
        completed = True
    except (SimulationError, Exception) as exc:  # noqa: BLE001 - the code under test failed: a finding
        invariant, message = "error", f"{type(exc).__name__}: {exc}"
        completed = True
    checker = run.checker
    if invariant is None and checker is not None and checker.violation is not None:
        violation = checker.violation
        invariant, message, recent = violation.invariant, str(violation), violation.recent
    elif invariant is None and not completed:
        invariant, message = (
            "error",
            f"the schedule did not complete within {config.time_limit_s():.0f} virtual s",
        )
    world = run.world
    loop = world.loop if world is not None else None
    ledger = run.workload.ledger if run.workload is not None else None
    if loop is not None and not recent:
        recent = tuple(loop.recent())
    step = checker.violation.step if checker is not None and checker.violation is not None else run.step
    return ScheduleResult(
        seed=seed,
        ok=invariant is None,
        trace_hash=loop.trace_hash() if loop is not None else "",
        steps=step,
        callbacks=loop.stats().callbacks if loop is not None else 0,
        virtual_seconds=loop.elapsed_ns / 1e9 if loop is not None else 0.0,
        wall_seconds=time.perf_counter() - wall,
        acks=ledger.acks if ledger is not None else 0,
        failures=len(ledger.failures) if ledger is not None else 0,
        faults=run.faults.started if run.faults is not None else 0,
        checks=checker.checks if checker is not None else 0,
        group_assignments=run.group.checker.assignments if run.group is not None else 0,
        group_commits=run.group.checker.commits if run.group is not None else 0,
        coordinator_moves=run.group_faults.coordinator_moves if run.group_faults is not None else 0,
        coordinator_faults=run.group_faults.coordinator_faults if run.group_faults is not None else 0,
        member_stalls=run.group_faults.stalls if run.group_faults is not None else 0,
        commits_stored=run.fencing.stored if run.fencing is not None else 0,
        records_given=run.visibility.given if run.visibility is not None else 0,
        invariant=invariant,
        message=message,
        history=tuple(run.history),
        recent=recent,
        replay=config.replay_command(seed),
    )


def _run_one(args: tuple[int, ScheduleConfig]) -> ScheduleResult:
    logging.disable(logging.CRITICAL)  # a worker process: the brokers' logs would only cost time
    return run_schedule(*args)


@dataclass
class SweepReport:
    results: list[ScheduleResult]
    wall_seconds: float

    @property
    def failed(self) -> list[ScheduleResult]:
        return [r for r in self.results if not r.ok]

    def summary(self) -> str:
        n = len(self.results)
        virtual = sum(r.virtual_seconds for r in self.results)
        busy = sum(r.wall_seconds for r in self.results)
        return (
            f"{n} schedules, {len(self.failed)} failed, in {self.wall_seconds:.1f} wall s "
            f"({n / self.wall_seconds if self.wall_seconds else 0:.1f} schedules/s); "
            f"{virtual:.0f} virtual s ({virtual / busy if busy else 0:.0f} virtual s per wall s of one "
            f"process); {sum(r.acks for r in self.results)} acks, "
            f"{sum(r.faults for r in self.results)} faults"
        )


def sweep(
    seeds: Iterable[int],
    config: ScheduleConfig | None = None,
    jobs: int = 1,
    on_result: Callable[[ScheduleResult], None] | None = None,
) -> SweepReport:
    """Run a schedule per seed, ``jobs`` processes at a time; results in seed order."""
    config = config or ScheduleConfig()
    seeds = list(seeds)
    wall = time.perf_counter()
    results = []
    for result in _results(seeds, config, jobs):
        results.append(result)
        if on_result is not None:
            on_result(result)
    return SweepReport(results, time.perf_counter() - wall)


def _results(seeds: list[int], config: ScheduleConfig, jobs: int) -> Iterator[ScheduleResult]:
    if jobs <= 1 or len(seeds) <= 1:
        for seed in seeds:
            yield run_schedule(seed, config)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    chunk = max(1, min(8, len(seeds) // (jobs * 4)))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        yield from pool.map(_run_one, [(seed, config) for seed in seeds], chunksize=chunk)


def with_changes(config: ScheduleConfig, **changes: Any) -> ScheduleConfig:
    return replace(config, **changes)
