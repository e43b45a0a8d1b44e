"""Why a simulated run stops (docs/design.md "Simulation"): the failures the virtual-time event
loop detects by itself, apart from what the code under test raises.

Each is a :class:`SimulationError`; :func:`sim.runner.run_simulation` adds the seed, the virtual
time, the trace hash and the last callbacks run as a note, so the failure replays from its seed.
"""

from __future__ import annotations


class SimulationError(RuntimeError):
    """The simulated world cannot go on: a scheduling invariant broke or the real world was reached."""


class TaskSpinning(SimulationError):
    """A task ran more than K steps in a row without awaiting anything that blocks (the issue's
    "no task spins": ``while True: await asyncio.sleep(0)``); virtual time cannot advance past it."""


class Livelock(SimulationError):
    """More than M callbacks ran at one virtual instant: tasks keep waking each other and the
    virtual clock never moves."""


class Deadlock(SimulationError):
    """No callback is ready and no timer is pending while the run still waits: nothing can ever
    happen again."""


class RealWorldRefused(SimulationError):
    """The code under test reached for something outside the single simulated thread and virtual
    time (a real socket, a thread, a subprocess, a signal, name resolution)."""
