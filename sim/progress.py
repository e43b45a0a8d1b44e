"""Progress checks of the simulation loop (issue 21's "no task spins"; docs/design.md
"Simulation"): under virtual time a task that never blocks freezes the clock for everyone, so
the loop itself must notice.

* A spin: a task rescheduled by itself (``await asyncio.sleep(0)``, a bare ``yield``, a future it
  completes itself) more than ``Limits.spin_steps`` times in a row, without anything else waking
  it and without the clock moving. A task woken by another task, by a timer or by a completed
  request starts counting again from zero, so a task that awaits a timer each step is never one.
* A livelock: more than ``Limits.callbacks_per_instant`` callbacks at one virtual instant (tasks
  waking each other forever, none spinning on its own).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sim.errors import Livelock, TaskSpinning
from sim.trace import awaiting_at, describe_task


@dataclass(frozen=True)
class Limits:
    #: K: steps a task may take in a row, woken only by itself, before it is a spin.
    spin_steps: int = 1_000
    #: M: callbacks the loop may run at one virtual instant before the run is a livelock.
    callbacks_per_instant: int = 200_000


class ProgressWatchdog:
    """Counts self-rescheduled steps per task and callbacks per virtual instant."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._spins: dict[asyncio.Task, int] = {}
        self.at_instant = 0
        self.max_at_instant = 0

    def task_scheduled(self, task: asyncio.Task, by_itself: bool) -> TaskSpinning | None:
        """A step of ``task`` was scheduled, by one of its own steps or by something else."""
        if not by_itself:
            self._spins.pop(task, None)
            return None
        steps = self._spins.get(task, 0) + 1
        self._spins[task] = steps
        if steps <= self.limits.spin_steps:
            return None
        return TaskSpinning(
            f"task {describe_task(task)} spins: {steps} steps in a row rescheduled by itself, "
            f"without awaiting anything that blocks (at {awaiting_at(task)}); virtual time cannot "
            "advance past it"
        )

    def callback_run(self) -> bool:
        """One more callback at this instant: True when that is more than the limit."""
        self.at_instant += 1
        return self.at_instant > self.limits.callbacks_per_instant

    def livelock(self, recent: list[str]) -> Livelock:
        """The error, naming the callbacks most frequent among ``recent`` (the last trace entries)."""
        busiest: dict[str, int] = {}
        for entry in recent:
            what = entry.split(" ", 1)[1]
            busiest[what] = busiest.get(what, 0) + 1
        top = sorted(busiest.items(), key=lambda item: -item[1])[:3]
        return Livelock(
            f"{self.at_instant} callbacks at one virtual instant without the clock advancing; "
            f"busiest of the last {len(recent)}: " + ", ".join(f"{what} x{n}" for what, n in top)
        )

    def clock_advanced(self) -> None:
        self.max_at_instant = max(self.max_at_instant, self.at_instant)
        self.at_instant = 0
        self._spins.clear()

    def reset(self) -> None:
        """Forget the counts (after a failure, before the leftover tasks are cancelled)."""
        self.clock_advanced()
