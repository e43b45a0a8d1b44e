"""``floodmark simulate`` (docs/operations.md "Simulation"; docs/design.md "Simulation"): the real
brokers, controller and logs under the deterministic simulator (sim/sweep.py), one schedule per
seed, with the invariants checked after every step.

``--seed N`` runs one schedule and prints its summary; ``--seeds A..B`` runs the range (both
ends included), ``--jobs`` processes at a time, printing each failure with the command that
replays it and a summary line. The exit code is 1 when a schedule failed. The brokers' own log
lines are shown only with ``floodmark --debug simulate``. Like the other
commands it imports the simulator inside the function, so ``floodmark --help`` stays light.

The replay tools (sim/trace_diff.py): ``--dump-trace FILE`` writes every callback the schedule
runs, one line each; ``--diff-against FILE`` runs the schedule again and prints where its trace
parts from that dump (exit code 1 if it does); ``--check-replay`` runs the seeds in two fresh
interpreters under ``PYTHONHASHSEED`` 0 and 1 (the second with its heap shifted, so that object
addresses differ too), compares their trace hashes and prints where the first differing seed's
runs part (exit code 1 if any differs).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.common import CliError

if TYPE_CHECKING:
    from sim.sweep import ScheduleConfig


def parse_seeds(seed: int | None, seeds: str | None) -> list[int]:
    """``--seed N`` or ``--seeds A..B`` (inclusive), exactly one of them."""
    if (seed is None) == (seeds is None):
        raise CliError("give exactly one of --seed N and --seeds A..B")
    if seed is not None:
        if seed < 0:
            raise CliError(f"--seed must be a non-negative integer, got {seed}")
        return [seed]
    assert seeds is not None
    first, sep, last = seeds.partition("..")
    try:
        low, high = int(first), int(last)
    except ValueError:
        raise CliError(f"--seeds must be A..B with integers A <= B, got {seeds!r}") from None
    if not sep or low < 0 or high < low:
        raise CliError(f"--seeds must be A..B with integers 0 <= A <= B, got {seeds!r}")
    return list(range(low, high + 1))


@click.command()
@click.option("--seed", type=int, help="Run the schedule of this seed.")
@click.option("--seeds", metavar="A..B", help="Run the schedules of seeds A to B (inclusive).")
@click.option("--steps", type=int, default=None, help="Steps per schedule [default: 60].")
@click.option("--duration", type=float, default=None, help="Virtual seconds per schedule instead of --steps.")
@click.option(
    "--brokers",
    type=int,
    default=None,
    help="Brokers in the simulated cluster [default: drawn from the seed: 3, 3, 4 or 5 by seed mod 4].",
)
@click.option(
    "--faults",
    default="all",
    show_default=True,
    help="Fault kinds: all (every kind but power-loss, disk-full and disk-error, held back while findings are open), none, or a comma-separated list of crash, pause, partition, "
    "zk-disconnect, zk-expire, zk-lost-answer, shutdown, stall, lost-answers, isr-lost-answer, zombie-controller, "
    "power-loss, disk-full, disk-error, disk-floor.",
)
@click.option(
    "--invariants", default="all", show_default=True, help="The invariants to check (all, or a list)."
)
@click.option(
    "--consumers",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Members of a consumer group reading the first topic (seed 004), crashing now and then (0: none).",
)
@click.option("--jobs", type=int, default=1, show_default=True, help="Processes running schedules at once.")
@click.option("--verbose", is_flag=True, help="Print every schedule's summary, not only failures.")
@click.option(
    "--dump-trace",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --seed: write every callback run to this file, one line each.",
)
@click.option(
    "--diff-against",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --seed: run it and print where its trace parts from this dump (--dump-trace).",
)
@click.option(
    "--check-replay",
    is_flag=True,
    help="Run the seeds in two processes under PYTHONHASHSEED 0 and 1 and compare the trace hashes.",
)
def simulate(
    seed: int | None,
    seeds: str | None,
    steps: int | None,
    duration: float | None,
    brokers: int | None,
    faults: str,
    invariants: str,
    consumers: int,
    jobs: int,
    verbose: bool,
    dump_trace: Path | None,
    diff_against: Path | None,
    check_replay: bool,
) -> None:
    """Run seeded schedules of a simulated cluster; a failure prints the command replaying it."""
    chosen = parse_seeds(seed, seeds)
    if (dump_trace is not None or diff_against is not None) and seed is None:
        raise CliError("--dump-trace and --diff-against take one schedule: give --seed N")
    if check_replay and (dump_trace is not None or diff_against is not None):
        raise CliError("--check-replay runs its own processes: give it without --dump-trace/--diff-against")
    if steps is not None and duration is not None:
        raise CliError("give at most one of --steps and --duration")
    if (steps is not None and steps < 1) or (duration is not None and duration <= 0):
        raise CliError("--steps and --duration must be positive")
    if brokers is not None and brokers < 1:
        raise CliError(f"--brokers must be at least 1, got {brokers}")
    if jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {jobs}")
    from sim.fault_kinds import parse_kinds
    from sim.group_workload import GroupWorkloadConfig
    from sim.invariants import ALL_INVARIANTS
    from sim.sweep import ScheduleConfig, ScheduleResult, sweep

    try:
        kinds = parse_kinds(faults)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if invariants.strip().lower() == "all":
        checked = frozenset(ALL_INVARIANTS)
    else:
        checked = frozenset(i.strip() for i in invariants.split(",") if i.strip())
        unknown = sorted(checked.difference(ALL_INVARIANTS))
        if unknown:
            raise CliError(f"unknown invariants {unknown} (known: {', '.join(ALL_INVARIANTS)})")
    config = ScheduleConfig(
        steps=steps if steps is not None else ScheduleConfig.steps,
        duration_s=duration,
        brokers=brokers,
        faults=kinds,
        invariants=checked,
        group=replace(GroupWorkloadConfig(), members=consumers),
    )
    if check_replay:
        _check_replay(chosen, config)
        return
    if dump_trace is not None or diff_against is not None:
        _one_traced(chosen[0], config, dump_trace, diff_against)
        return
    single = len(chosen) == 1
    quiet = not click.get_current_context().find_root().params.get("debug")
    previous = logging.root.manager.disable
    if quiet:
        logging.disable(logging.CRITICAL)  # the brokers' own logs: `floodmark --debug simulate` shows them

    def show(result: ScheduleResult) -> None:
        if not result.ok:
            click.echo(result.report(), err=not single)
        elif verbose or single:
            click.echo(result.report())

    try:
        report = sweep(chosen, config, jobs=min(jobs, os.cpu_count() or 1, len(chosen)), on_result=show)
    finally:
        logging.disable(previous)
    if not single:
        click.echo(report.summary())
    if report.failed:
        raise click.exceptions.Exit(1)


def _check_replay(seeds: list[int], config: ScheduleConfig) -> None:
    from sim.trace_diff import replay_check

    check = replay_check(seeds, config)
    click.echo(check.report())
    if check.differing:
        raise click.exceptions.Exit(1)


def _one_traced(seed: int, config: ScheduleConfig, dump: Path | None, against: Path | None) -> None:
    """One schedule with its trace dumped (to ``dump``, or a temp file), compared with ``against``."""
    from sim.sweep import run_schedule
    from sim.trace_diff import diff_files

    with tempfile.TemporaryDirectory(prefix="sim-trace-") as tmp:
        path = dump if dump is not None else Path(tmp) / f"{seed}.trace"
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        try:
            with path.open("w") as out:
                result = run_schedule(seed, config, trace_dump=out)
        finally:
            logging.disable(previous)
        click.echo(result.report())
        if dump is not None:
            click.echo(f"trace of seed {seed} written to {dump}")
        if against is None:
            return
        found = diff_files(against, path)
    if found is None:
        click.echo(f"the trace is the same as {against}'s")
        return
    click.echo(found.report(str(against), "this run"))
    raise click.exceptions.Exit(1)
