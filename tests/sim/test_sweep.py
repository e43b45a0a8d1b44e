"""The bounded sweep of `make test` (issue 21; docs/design.md "Simulation"): hundreds of seeded
schedules of the real brokers, controller and logs under faults, every invariant checked after
every step, in two processes; a schedule replays bit for bit (the same trace hash) in-process,
in another process with another string hash seed, and through ``floodmark simulate``; a failure's
replay command gives the failure again with the same trace hash. Seeds that once failed are
kept as regressions.

The sweep's speed (schedules per second, virtual seconds per wall second) is printed for
docs/benchmarks.md, never asserted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from sim.fault_kinds import parse_kinds
from sim.invariants import NO_SPIN, REPLICAS_IDENTICAL
from sim.sweep import ScheduleConfig, run_schedule, sweep
from sim.workload import WorkloadConfig
from tests.sim.test_invariants import CASES, CONFIG

#: The bounded sweep: at least 500 schedules (each about 6 to 20 virtual seconds).
SWEEP_SEEDS = range(0, 512)
SWEEP_JOBS = 2


@pytest.mark.timeout(1200)  # 512 schedules with a group on 3-5 brokers: about 3-6 minutes on 2 cores
def test_the_bounded_sweep_finds_nothing_in_todays_code(capsys: pytest.CaptureFixture[str]) -> None:
    report = sweep(SWEEP_SEEDS, CONFIG, jobs=SWEEP_JOBS)
    failures = "\n\n".join(r.report() for r in report.failed)
    assert not report.failed, failures
    assert len(report.results) >= 500
    assert sum(r.faults for r in report.results) > len(report.results)  # a sweep under faults
    with capsys.disabled():
        print(f"\nsim sweep: {report.summary()}")


def test_a_schedule_replays_to_the_same_trace_hash_and_other_seeds_differ() -> None:
    first = run_schedule(3, CONFIG)
    again = run_schedule(3, CONFIG)
    other = run_schedule(4, CONFIG)
    assert first.ok and again.ok and other.ok
    assert first.trace_hash == again.trace_hash
    assert (first.callbacks, first.virtual_seconds, first.history) == (
        again.callbacks,
        again.virtual_seconds,
        again.history,
    )
    assert other.trace_hash != first.trace_hash


def test_a_schedule_replays_in_another_process_with_another_hash_seed() -> None:
    config = replace(CONFIG, steps=30)
    here = run_schedule(5, config)
    code = (
        "import logging; logging.disable(logging.CRITICAL)\n"
        "from sim.sweep import ScheduleConfig, run_schedule\n"
        "print(run_schedule(5, ScheduleConfig(steps=30)).trace_hash)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=120
    )
    assert there.stdout.strip() == here.trace_hash


def test_floodmark_simulate_runs_one_seed_and_a_range() -> None:
    runner = CliRunner()
    expected = run_schedule(3, replace(CONFIG, steps=20)).trace_hash
    one = runner.invoke(build_cli(), ["simulate", "--seed", "3", "--steps", "20"])
    assert one.exit_code == 0, one.output
    assert "seed 3: ok, 21 steps" in one.output and expected in one.output
    many = runner.invoke(build_cli(), ["simulate", "--seeds", "1..3", "--steps", "10", "--verbose"])
    assert many.exit_code == 0, many.output
    assert "3 schedules, 0 failed" in many.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "5..1"], "Error: --seeds must be A..B"),
        (["--seed", "1", "--seeds", "1..2"], "Error: give exactly one of --seed N and --seeds A..B"),
        (["--seed", "1", "--faults", "crash,meteor"], "Error: unknown fault kind 'meteor'"),
        (["--seed", "1", "--steps", "5", "--duration", "3"], "Error: give at most one of --steps"),
        (["--seed", "1", "--invariants", "no-bugs"], "Error: unknown invariants ['no-bugs']"),
    ],
)
def test_floodmark_simulate_refuses_bad_arguments_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(build_cli(), ["simulate", *args])
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_failure_prints_a_replay_command_that_gives_the_same_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant, seeds = CASES[REPLICAS_IDENTICAL]
    plant(monkeypatch)
    config = replace(CONFIG, invariants=frozenset({REPLICAS_IDENTICAL, NO_SPIN}))
    failure = next(r for r in (run_schedule(seed, config) for seed in seeds) if not r.ok)
    assert failure.invariant == REPLICAS_IDENTICAL
    command = failure.replay.split()
    assert command[:2] == ["floodmark", "simulate"]
    replayed = CliRunner().invoke(build_cli(), command[1:])
    assert replayed.exit_code == 1
    assert f"trace hash {failure.trace_hash}" in replayed.output
    assert f"FAILED ({REPLICAS_IDENTICAL})" in replayed.output


def test_a_controlled_shutdown_and_restart_heals() -> None:
    """Regression (found by the sweep at seed 1, a simulator bug): a broker's clean shutdown closed
    its ZooKeeper session from its own process context, so the watch events that close sent to the
    other brokers were timers of a dead process, dropped, and the controller's ZooKeeper
    connection never delivered anything again (no BrokerChange: the restarted broker's
    LeaderAndIsr went out with its old broker epoch for ever, and the ISR never became full).
    Controlled shutdowns only, on three brokers, until one has run."""
    config = replace(CONFIG, brokers=3, faults=parse_kinds("shutdown"), fault_rate=0.15)
    for seed in range(8):
        result = run_schedule(seed, config)
        assert result.ok, result.report()
        if any("controlled shutdown of broker" in event for event in result.history):
            return
    raise AssertionError("no schedule of seeds 0..7 ran a controlled shutdown")


def test_a_duration_bounds_a_schedule_in_virtual_time() -> None:
    result = run_schedule(7, ScheduleConfig(duration_s=5.0))
    assert result.ok, result.report()
    assert result.virtual_seconds >= 5.0
    assert "--duration 5" in result.replay


def test_the_aimed_isr_fault_loses_an_expands_answer_and_pauses_its_joiner() -> None:
    """``isr-lost-answer`` waits for the broker's next ISR expand, loses its answer after it
    landed, and pauses the joiner it added (so the other followers run ahead of it) and keeps the
    leader away from ZooKeeper: issue 18's window 1 needs that interleaving (today's code holds)."""
    config = replace(
        CONFIG,
        brokers=3,
        faults=parse_kinds("pause,isr-lost-answer"),
        fault_rate=0.15,
        group=replace(CONFIG.group, members=0),  # the history keeps the ISR's story only
    )
    pattern = r"lost the answer to broker (\d)'s ISR expand \S+ \(joiners \[(\d)\]\)"
    for seed in range(8):
        result = run_schedule(seed, config)
        assert result.ok, result.report()
        history = "\n".join(result.history)
        if (lost := re.search(pattern, history)) is not None:
            break
    assert lost is not None, history
    leader, joiner = lost.groups()
    after = history[lost.end() :]
    assert f"pause broker {joiner}" in after and f"cut broker {leader} off ZooKeeper" in after, history


def test_schedules_add_partitions_and_run_preferred_elections_under_faults() -> None:
    """The operations of issue 22 among the workload (here at ten times the sweep's rates): a topic
    grows and a preferred election runs while faults come and go, and every invariant holds,
    the added partitions' acknowledged records included."""
    config = replace(CONFIG, workload=WorkloadConfig(add_partitions_rate=0.1, preferred_election_rate=0.1))
    result = run_schedule(0, config)
    assert result.ok, result.report()
    history = "\n".join(result.history)
    assert re.search(r"topic t\d grew to \d+ partitions", history), history
    assert "preferred election: " in history, history
