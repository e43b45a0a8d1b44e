"""``floodmark simulate`` (docs/operations.md "Simulation"; docs/design.md "Simulation"): the real
brokers, controller and logs under the deterministic simulator (sim/sweep.py), one schedule per
seed, with the invariants checked after every step.

``--seed N`` runs one schedule and prints its summary; ``--seeds A..B`` runs the range (both
ends included), ``--jobs`` processes at a time, printing each failure with the command that
replays it and a summary line. The exit code is 1 when a schedule failed. The brokers' own log
lines are shown only with ``floodmark --debug simulate``. Like the other
commands it imports the simulator inside the function, so ``floodmark --help`` stays light.
"""

from __future__ import annotations

import logging
import os

import click

from cli.common import CliError


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
@click.option("--brokers", type=int, default=3, show_default=True, help="Brokers in the simulated cluster.")
@click.option(
    "--faults",
    default="all",
    show_default=True,
    help="Fault kinds: all, none, or a comma-separated list of crash, pause, partition, "
    "zk-disconnect, zk-expire, zk-lost-answer, shutdown, stall, isr-lost-answer.",
)
@click.option(
    "--invariants", default="all", show_default=True, help="The invariants to check (all, or a list)."
)
@click.option(
    "--consumers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Members of a consumer group reading the first topic (seed 004), crashing now and then.",
)
@click.option("--jobs", type=int, default=1, show_default=True, help="Processes running schedules at once.")
@click.option("--verbose", is_flag=True, help="Print every schedule's summary, not only failures.")
def simulate(
    seed: int | None,
    seeds: str | None,
    steps: int | None,
    duration: float | None,
    brokers: int,
    faults: str,
    invariants: str,
    consumers: int,
    jobs: int,
    verbose: bool,
) -> None:
    """Run seeded schedules of a simulated cluster; a failure prints the command replaying it."""
    chosen = parse_seeds(seed, seeds)
    if steps is not None and duration is not None:
        raise CliError("give at most one of --steps and --duration")
    if (steps is not None and steps < 1) or (duration is not None and duration <= 0):
        raise CliError("--steps and --duration must be positive")
    if brokers < 1:
        raise CliError(f"--brokers must be at least 1, got {brokers}")
    if jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {jobs}")
    from sim.faults import parse_kinds
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
        group=GroupWorkloadConfig(members=consumers),
    )
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
