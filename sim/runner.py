"""One simulated run from one seed (docs/design.md "Simulation"): create the virtual-time loop, run
the main coroutine to completion or to a virtual-time limit, cancel what is left, close the loop,
and report the trace hash and the run's numbers.

Call :func:`run_simulation` from synchronous code (a plain test function, the CLI): the loop runs
on the calling thread and cannot run inside another running loop. A failure (from the code under
test or from the loop's own checks, :mod:`sim.errors`) is re-raised after clean-up with a note that
names the seed, the virtual time, the trace hash and the last callbacks run, so it replays.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import IO, Any, Generic, TypeVar

from sim.errors import SimulationError
from sim.loop import DEFAULT_START_S, Ordering, SimEventLoop
from sim.progress import Limits

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Virtual seconds the leftover tasks get to finish once cancelled.
CLEANUP_LIMIT_S = 60.0


@dataclass(frozen=True)
class SimulationResult(Generic[T]):
    seed: int
    trace_hash: str
    completed: bool  # the main coroutine returned before the virtual-time limit
    result: T | None  # what it returned
    callbacks: int
    virtual_seconds: float
    wall_seconds: float
    max_callbacks_at_one_instant: int
    tasks_created: int
    unhandled: tuple[str, ...]  # errors asyncio's exception handler saw (callbacks, lost task errors)
    recent: tuple[str, ...]  # the last callbacks run


def run_simulation(
    main: Callable[[], Coroutine[Any, Any, T]],
    seed: int,
    *,
    time_limit_s: float | None = None,
    ordering: Ordering = Ordering.SHUFFLE,
    limits: Limits | None = None,
    trace_keep: int = 64,
    start_s: float = DEFAULT_START_S,
    trace_dump: IO[str] | None = None,
) -> SimulationResult[T]:
    """Run ``main()`` as the first task of a fresh :class:`SimEventLoop` seeded with ``seed``.

    The run ends when ``main`` returns (``completed``) or when ``time_limit_s`` virtual seconds
    have passed (not ``completed``: ``main`` is cancelled with the rest). With ``trace_dump``,
    every callback run is written there, one line each (sim/trace_diff.py).
    """
    loop = SimEventLoop(
        seed,
        ordering=ordering,
        limits=limits,
        trace_keep=trace_keep,
        start_s=start_s,
        trace_dump=trace_dump,
    )
    unhandled: list[str] = []
    loop.set_exception_handler(lambda _, context: _record_unhandled(unhandled, loop, context))
    wall_start = time.perf_counter()
    main_task = loop.create_task(main(), name="sim-main")
    try:
        completed = _run_main(loop, main_task, time_limit_s)
        _cancel_leftovers(loop)
    except BaseException as exc:
        exc.add_note(_report(loop))
        _retrieve(main_task)
        try:
            _cancel_leftovers(loop)
        except Exception:  # noqa: BLE001 - the run's own failure is the one to report
            log.exception("seed %d: cleaning up after a failed run failed too", seed)
        loop.close()
        raise
    loop.close()
    stats = loop.stats()
    return SimulationResult(
        seed=seed,
        trace_hash=loop.trace_hash(),
        completed=completed,
        result=main_task.result() if completed else None,
        callbacks=stats.callbacks,
        virtual_seconds=stats.virtual_seconds,
        wall_seconds=time.perf_counter() - wall_start,
        max_callbacks_at_one_instant=stats.max_callbacks_at_one_instant,
        tasks_created=stats.tasks_created,
        unhandled=tuple(unhandled),
        recent=tuple(loop.recent()),
    )


def _run_main(loop: SimEventLoop, main_task: asyncio.Task, time_limit_s: float | None) -> bool:
    """Run until ``main_task`` is done or the limit passes; raise what ``main`` raised."""
    main_task.add_done_callback(lambda _: loop.stop())
    limit = None if time_limit_s is None else loop.call_at(loop.time() + time_limit_s, loop.stop)
    loop.run_forever()
    if limit is not None:
        limit.cancel()
    if not main_task.done():
        return False
    main_task.result()  # raises main's exception, or CancelledError
    return True


def _cancel_leftovers(loop: SimEventLoop) -> None:
    """Cancel every task still pending, in creation order, and let them finish for a bounded while.

    Not waiting for ever: a task that swallows its cancellation and goes on is left pending (and
    logged) rather than keeping the run alive."""
    loop.watchdog.reset()
    leftovers = sorted((t for t in asyncio.all_tasks(loop) if not t.done()), key=loop.task_number)
    for task in leftovers:
        task.cancel()
    if leftovers:
        limit = loop.call_at(loop.time() + CLEANUP_LIMIT_S, loop.stop)
        try:
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
        except (SimulationError, RuntimeError) as exc:
            stuck = [t.get_name() for t in leftovers if not t.done()]
            log.warning("seed %d: tasks %s did not finish once cancelled: %s", loop.seed, stuck, exc)
        limit.cancel()
    loop.run_until_complete(loop.shutdown_asyncgens())


def _retrieve(task: asyncio.Task) -> None:
    """Mark a failed main task's exception as seen (the runner re-raises it itself)."""
    if task.done() and not task.cancelled():
        task.exception()


def _record_unhandled(unhandled: list[str], loop: SimEventLoop, context: dict[str, Any]) -> None:
    exception = context.get("exception")
    unhandled.append(
        f"{context.get('message', '')}: {exception!r}" if exception else context.get("message", "")
    )
    loop.default_exception_handler(context)


def _report(loop: SimEventLoop) -> str:
    stats = loop.stats()
    lines = [
        f"simulation seed {loop.seed} ({loop.ordering.value}): failed at virtual "
        f"{stats.virtual_seconds:.6f} s after {stats.callbacks} callbacks; trace hash {loop.trace_hash()}",
        "last callbacks (virtual µs, callback):",
        *(f"  {entry}" for entry in loop.recent()),
    ]
    return "\n".join(lines)
