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
import json
import logging
import multiprocessing
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import IO, Any

from client.types import TopicPartition
from sim.errors import Livelock, SimulationError, TaskSpinning
from sim.faults import ALL_KINDS, FaultInjector, FaultKind, FaultPlan
from sim.group_invariants import GROUP_LIVENESS, GroupChecker
from sim.group_workload import GroupWorkload, GroupWorkloadConfig
from sim.invariants import ALL_INVARIANTS, LIVENESS, NO_SPIN, Invariants, InvariantViolation
from sim.progress import Limits
from sim.runner import run_simulation
from sim.workload import Workload, WorkloadConfig
from sim.world import World, WorldConfig
from zk.data import decode_topic_assignment
from zk.paths import REASSIGN_PARTITIONS_PATH, partition_state_path, topic_path

log = logging.getLogger(__name__)

#: Broker properties of every schedule: short timeouts, so that a session expiry, an ISR shrink
#: and a controlled shutdown all happen within a few virtual seconds.
SCHEDULE_PROPS = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "2000",
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "2",
    "controlled.shutdown.retry.backoff.ms": "200",
    # the consumer group's (sim/group_workload.py): a small offsets topic, a short initial delay
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "1000",
}
HISTORY_KEEP = 30


@dataclass(frozen=True)
class ScheduleConfig:
    steps: int = 60
    duration_s: float | None = None  # run steps until this many virtual seconds instead
    brokers: int = 3
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

    def time_limit_s(self) -> float:
        """A virtual-time bound no healthy schedule reaches: past it the schedule hangs (a
        finding: "the schedule did not complete")."""
        length = self.duration_s if self.duration_s is not None else self.steps * self.step_s[1]
        return length + self.fault_duration_s[1] + 4 * self.liveness_s + 300.0

    def replay_command(self, seed: int) -> str:
        """The ``floodmark simulate`` command that runs this schedule again, bit for bit."""
        length = f"--duration {self.duration_s:g}" if self.duration_s is not None else f"--steps {self.steps}"
        parts = [f"floodmark simulate --seed {seed} {length} --brokers {self.brokers}"]
        parts.append(f"--faults {format_kinds(self.faults)}")
        if self.group.members:
            parts.append(f"--consumers {self.group.members}")
        if self.invariants != frozenset(ALL_INVARIANTS):
            parts.append("--invariants " + ",".join(i for i in ALL_INVARIANTS if i in self.invariants))
        return " ".join(parts)


def format_kinds(kinds: Iterable[FaultKind]) -> str:
    kinds = frozenset(kinds)
    if kinds == ALL_KINDS:
        return "all"
    return ",".join(k.value for k in FaultKind if k in kinds) or "none"


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
        self.step = 0

    def note(self, event: str) -> None:
        now = self.world.loop.elapsed_ns / 1e9 if self.world is not None else 0.0
        self.history.append(f"{now:10.6f} step {self.step}: {event}")

    async def main(self) -> None:
        config = self.config
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
        await world.start()
        await workload.start()
        if config.group.members and workload.topics:
            self.group = GroupWorkload(
                world, config.group, GroupChecker(checker.fail, config.invariants), self.note
            )
            await self.group.start(sorted(workload.topics)[0])
        faults = self.faults = FaultInjector(
            world,
            FaultPlan(config.faults, config.fault_rate, config.fault_duration_s),
            self.note,
        )
        pace = world.loop.seeds.stream("schedule")
        started = world.loop.time()
        next_full = started + config.full_check_every_s
        while not self._done(started):
            self.step += 1
            checker.step = self.step
            changed = await faults.step()
            workload.step()
            if self.group is not None:
                self.group.step()
            await asyncio.sleep(pace.uniform(*config.step_s))
            full = changed or world.loop.time() >= next_full
            if full:
                next_full = world.loop.time() + config.full_check_every_s
            checker.check(full=full)
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
                lambda: not _unhealthy(world, workload),
                "a leader, a full ISR and an HW past every acknowledged offset for every partition",
                within_s=self.config.liveness_s,
            )
            await workload.settle(self.config.liveness_s)
        except AssertionError as exc:
            what = _unhealthy(world, workload) or str(exc)
            assert self.checker is not None
            self.checker.fail(LIVENESS, f"after every fault healed, {what}")
            self.checker.raise_if_violated()

    async def _group_liveness(self, world: World, workload: Workload) -> None:
        group = self.group
        if group is None or group.topic is None or GROUP_LIVENESS not in self.config.invariants:
            return
        topic = group.topic

        def unsettled() -> str | None:
            return GroupChecker.unsettled(group.live(), workload.topics.get(topic, 0), topic)

        try:
            await world.wait_for(
                lambda: unsettled() is None, "the group settles", within_s=self.config.liveness_s
            )
        except AssertionError:
            assert self.checker is not None
            self.checker.fail(GROUP_LIVENESS, f"after every fault healed, {unsettled()}")
            self.checker.raise_if_violated()


def _unhealthy(world: World, workload: Workload) -> str | None:
    """What keeps the cluster from being whole, or None."""
    down = [b for b in sorted(world.brokers) if not world.brokers[b].running]
    if down:
        return f"brokers {down} are not running"
    controller = world.controller_id()
    if controller is None or not world.brokers[controller].running:
        return "no live controller"
    moving = world.znode(REASSIGN_PARTITIONS_PATH)
    if moving is not None:
        return f"a reassignment is still in progress: {moving.decode(errors='replace')}"
    for topic in sorted(workload.topics):
        data = world.znode(topic_path(topic))
        if data is None:
            return f"topic {topic} is not in ZooKeeper"
        for partition, replicas in sorted(decode_topic_assignment(data).items()):
            state_data = world.znode(partition_state_path(topic, partition))
            if state_data is None:
                return f"{topic}-{partition} has no state"
            state = json.loads(state_data)
            if state["leader"] < 0:
                return f"{topic}-{partition} has no leader"
            if sorted(state["isr"]) != sorted(replicas):
                return f"{topic}-{partition} has ISR {state['isr']}, replicas {replicas}"
            server = world.brokers[state["leader"]].server
            rm = getattr(server, "replica_manager", None)
            partition_state = rm.partitions.get((topic, partition)) if rm is not None else None
            if (
                partition_state is None
                or not partition_state.is_leader
                or partition_state.leader_epoch != state["leader_epoch"]
            ):
                return f"{topic}-{partition}: leader {state['leader']} has not taken epoch {state['leader_epoch']}"
            # a new leader's HW passes what the old one acknowledged once every follower of the ISR
            # has fetched from it (Kafka's HW after a failover lags until then)
            last = workload.ledger.last_acked.get((topic, partition), -1)
            log_ = rm.get_log(TopicPartition(topic, partition))
            if log_ is not None and log_.high_watermark <= last:
                return f"{topic}-{partition}: leader {state['leader']}'s HW {log_.high_watermark} is not past acknowledged offset {last}"
    return None


def run_schedule(
    seed: int, config: ScheduleConfig | None = None, trace_dump: IO[str] | None = None
) -> ScheduleResult:
    """Run one schedule; never raises for a failure of the code under test (see ``ok``). With
    ``trace_dump``, every callback the loop runs is written there (sim/trace_diff.py)."""
    config = config or ScheduleConfig()
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
        coordinator_moves=run.group.coordinator_moves if run.group is not None else 0,
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
