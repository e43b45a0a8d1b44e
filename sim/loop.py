"""The simulation's event loop: asyncio's own loop with a virtual clock and a seeded scheduler
(docs/design.md "Simulation"; FoundationDB's deterministic flow scheduler, TigerBeetle's VOPR).

:class:`SimEventLoop` is an ``asyncio.BaseEventLoop``: tasks, futures, ``asyncio.Event``, ``Lock``,
``Queue``, ``timeout``, ``wait_for`` and ``gather`` run on it unchanged. What differs is
``_run_once``, the loop's iteration:

* **Virtual time.** ``time()`` is a clock held in integer nanoseconds that only moves when no
  callback is ready: then it jumps straight to the earliest pending timer. Nothing ever sleeps, so
  ``await asyncio.sleep(60)`` returns at once in wall time with ``time()`` 60 s later. A run in
  which nothing is ready and no timer is pending raises :class:`sim.errors.Deadlock`.
* **A seeded order.** Each iteration takes the batch of ready callbacks (what real asyncio would
  run in FIFO order) and runs it in an order drawn from the seed: a random interleaving of the
  batch's *chains*, a chain being the callbacks scheduled by one callback run, kept in the order
  they were scheduled. Different seeds so explore which of several tasks ready at the same
  instant runs first (which real timing decides); the order asyncio does promise, callbacks
  registered by one piece of code running in registration order (``call_soon`` FIFO,
  ``add_done_callback`` order), is kept. ``Ordering.FIFO`` runs batches as asyncio does.
* **A trace.** Every callback run is recorded in :class:`sim.trace.Trace`; the same seed gives
  the same :meth:`SimEventLoop.trace_hash`.
* **Progress checks** (:mod:`sim.progress`): a task that spins, or a livelock at one instant,
  stops the run with an error naming it.
* **Isolation** (:mod:`sim.isolation`): executors run inline; sockets, subprocesses and signals
  are refused; ``call_soon_threadsafe`` from another thread is refused.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import heapq
import itertools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from sim.errors import Deadlock, SimulationError
from sim.isolation import Isolation
from sim.progress import Limits, ProgressWatchdog
from sim.rng import SeedSource
from sim.trace import Trace, awaiting_at, describe, describe_task, task_of

#: Where virtual time starts (seconds): a plausible ``time.monotonic()``, never 0, so code that
#: uses 0 as "never" behaves as it does on a real host.
DEFAULT_START_S = 10_000.0
#: Cancelled timers kept in the heap before it is rebuilt without them.
_MIN_CANCELLED_TO_PURGE = 100


class Ordering(enum.Enum):
    SHUFFLE = "shuffle"  # the seed interleaves each ready batch's chains
    FIFO = "fifo"  # asyncio's own order (for debugging a schedule)


class _Handle(asyncio.Handle):
    __slots__ = ("sim_owner", "sim_origin")


class _TimerHandle(asyncio.TimerHandle):
    __slots__ = ("sim_owner", "sim_origin")


@dataclass(frozen=True)
class LoopStats:
    callbacks: int  # callbacks run
    virtual_seconds: float  # virtual time elapsed since the loop was created
    max_callbacks_at_one_instant: int
    tasks_created: int


class SimEventLoop(Isolation, asyncio.BaseEventLoop):
    """An asyncio loop under virtual time whose ready callbacks run in an order drawn from a seed."""

    def __init__(
        self,
        seed: int,
        *,
        ordering: Ordering = Ordering.SHUFFLE,
        limits: Limits | None = None,
        trace_keep: int = 64,
        start_s: float = DEFAULT_START_S,
        trace_dump: IO[str] | None = None,
    ) -> None:
        super().__init__()
        self.seeds = SeedSource(seed)
        self.ordering = ordering
        self._scheduler_rng = self.seeds.stream("scheduler")
        self._start_ns = self._now_ns = round(start_s * 1e9)
        self._timers: list[tuple[int, int, _TimerHandle]] = []  # (due ns, sequence, handle)
        self._timer_sequence = itertools.count()
        self._cancelled_timers = 0
        self.trace = Trace(trace_keep, trace_dump)
        self.watchdog = ProgressWatchdog(limits or Limits())
        self._pending_failure: SimulationError | None = None
        self._running_owner: asyncio.Task | None = None  # whose step, or whose callback chain, runs
        self._running_origin = 0  # the number of the callback run now (0: outside any)
        self._callbacks = 0
        self._tasks_created = 0
        self._task_order: weakref.WeakKeyDictionary[asyncio.Task, int] = weakref.WeakKeyDictionary()
        #: Called with each ready handle before it runs; True means the interceptor took it (to
        #: hand back later with :meth:`requeue`, or to drop): how a world pauses or kills the
        #: callbacks of one simulated process (sim/broker_process.py).
        self.intercept: Callable[[asyncio.Handle], bool] | None = None

    @property
    def seed(self) -> int:
        return self.seeds.seed

    # -- the clock --

    def time(self) -> float:
        return self._now_ns / 1e9

    @property
    def elapsed_ns(self) -> int:
        """Virtual nanoseconds since the loop was created (exact: the clock is an integer)."""
        return self._now_ns - self._start_ns

    # -- scheduling: every handle notes the task whose chain scheduled it, and the run it came from --

    def call_soon(self, callback: Callable[..., Any], *args: Any, context: Any = None) -> asyncio.Handle:
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_soon")
        handle = _Handle(callback, args, self, context)
        task = task_of(callback)
        if task is None:
            handle.sim_owner = self._running_owner
        else:
            handle.sim_owner = task
            spin = self.watchdog.task_scheduled(task, by_itself=task is self._running_owner)
            if spin is not None and self._pending_failure is None:
                self._pending_failure = spin
        handle.sim_origin = self._running_origin
        self._ready.append(handle)
        return handle

    def call_soon_threadsafe(
        self, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        if self._thread_id is not None and threading.get_ident() != self._thread_id:
            raise self._refuse(
                "call_soon_threadsafe() from another thread", "the simulation is single-threaded"
            )
        return self.call_soon(callback, *args, context=context)

    def call_at(
        self, when: float, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        timer = _TimerHandle(when, callback, args, self, context)
        due = round(when * 1e9)
        if due <= self._now_ns and when > self.time():
            due = self._now_ns + 1  # a positive delay always moves the clock
        timer.sim_owner = task_of(callback)  # a timer firing is the clock's doing, not a task's
        timer.sim_origin = self._running_origin
        heapq.heappush(self._timers, (due, next(self._timer_sequence), timer))
        timer._scheduled = True
        return timer

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        if handle._scheduled:  # type: ignore[attr-defined]
            self._cancelled_timers += 1

    def create_task(self, coro: Any, *, name: str | None = None, context: Any = None) -> asyncio.Task:
        """asyncio's, with default names numbered per loop (asyncio's own count is process-wide)."""
        self._tasks_created += 1
        number = self._tasks_created
        task = super().create_task(coro, name=name or f"Task-{number}", context=context)
        self._task_order[task] = number
        return task

    def task_number(self, task: asyncio.Task) -> int:
        """The order in which ``task`` was created on this loop (0 if not through create_task)."""
        return self._task_order.get(task, 0)

    # -- one iteration --

    def _run_once(self) -> None:
        ready = self._ready
        if not ready and not self._stopping:
            self._advance_clock()
        self._release_due_timers()
        if not ready:
            return
        batch = list(ready)
        ready.clear()
        if self.ordering is Ordering.SHUFFLE and len(batch) > 1:
            batch = self._interleave(batch)
        time_us = self._now_ns // 1000
        intercept = self.intercept
        for handle in batch:
            if not handle._cancelled and (intercept is None or not intercept(handle)):
                self._run_handle(handle, time_us)

    def requeue(self, handles: list[asyncio.Handle]) -> None:
        """Make handles an interceptor took ready again, in the order given."""
        self._ready.extend(handles)

    def _advance_clock(self) -> None:
        """Nothing is ready: jump to the earliest pending timer, or fail if there is none."""
        if self._cancelled_timers > _MIN_CANCELLED_TO_PURGE and self._cancelled_timers * 2 > len(
            self._timers
        ):
            self._purge_cancelled_timers()
        timers = self._timers
        while timers and timers[0][2]._cancelled:
            heapq.heappop(timers)[2]._scheduled = False
            self._cancelled_timers -= 1
        if not timers:
            raise self._deadlock()
        due = timers[0][0]
        if due > self._now_ns:
            self._now_ns = due
            self.watchdog.clock_advanced()

    def _release_due_timers(self) -> None:
        timers, ready = self._timers, self._ready
        while timers and timers[0][0] <= self._now_ns:
            timer = heapq.heappop(timers)[2]
            timer._scheduled = False
            if timer._cancelled:
                self._cancelled_timers -= 1
            else:
                ready.append(timer)

    def _purge_cancelled_timers(self) -> None:
        kept = []
        for entry in self._timers:
            if entry[2]._cancelled:
                entry[2]._scheduled = False
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._timers = kept
        self._cancelled_timers = 0

    def _interleave(self, batch: list[Any]) -> list[Any]:
        """A uniformly random interleaving of the batch's chains, each chain kept in order."""
        chains: dict[int, list[Any]] = {}
        for handle in batch:
            chains.setdefault(handle.sim_origin, []).append(handle)
        if len(chains) == 1:
            return batch
        if len(chains) == len(batch):  # one callback per chain (the common case): a plain shuffle
            self._scheduler_rng.shuffle(batch)
            return batch
        picks = [handle.sim_origin for handle in batch]
        self._scheduler_rng.shuffle(picks)
        cursors = dict.fromkeys(chains, 0)
        order = []
        for origin in picks:
            order.append(chains[origin][cursors[origin]])
            cursors[origin] += 1
        return order

    def _run_handle(self, handle: Any, time_us: int) -> None:
        self._callbacks += 1
        if self.watchdog.callback_run():
            raise self.watchdog.livelock(list(self.trace.recent))
        self._running_owner = handle.sim_owner
        self._running_origin = self._callbacks
        self.trace.record(time_us, describe(handle._callback))
        dumping = self.trace.dump is not None
        arguments = _arguments(handle) if dumping else ""
        try:
            handle._run()
        finally:
            self._running_owner = None
            self._running_origin = 0
            if dumping:
                self.trace.detail(_what_it_did(handle, arguments))
        failure = self._pending_failure
        if failure is not None:
            self._pending_failure = None
            raise failure

    def _deadlock(self) -> Deadlock:
        waiting = sorted((t for t in asyncio.all_tasks(self) if not t.done()), key=self.task_number)
        return Deadlock(
            "every task is blocked and no timer is pending: nothing can happen again; waiting: "
            + ("; ".join(f"{describe_task(t)} at {awaiting_at(t)}" for t in waiting) or "no task")
        )

    # -- what a run reports --

    def trace_hash(self) -> str:
        """The hash of every callback run so far, with its virtual time: equal for equal seeds."""
        return self.trace.hexdigest()

    def recent(self) -> list[str]:
        """The last callbacks run (``<virtual µs> <description>``), oldest first."""
        return list(self.trace.recent)

    def stats(self) -> LoopStats:
        return LoopStats(
            callbacks=self._callbacks,
            virtual_seconds=self.elapsed_ns / 1e9,
            max_callbacks_at_one_instant=max(self.watchdog.max_at_instant, self.watchdog.at_instant),
            tasks_created=self._tasks_created,
        )


def _arguments(handle: Any) -> str:
    """For a trace dump: a plain callback's arguments as they were when it ran (a delivery's
    connection and queue, an executor job's function), never a repr that could hold an address."""
    callback, args = handle._callback, tuple(handle._args or ())
    while isinstance(callback, functools.partial):
        args = (*callback.args, *args)
        callback = callback.func
    return ", ".join(_argument(arg) for arg in args)


def _argument(arg: Any) -> str:
    if hasattr(arg, "trace_detail"):
        return str(arg.trace_detail())
    if callable(arg) and isinstance(getattr(arg, "__qualname__", None), str):
        return str(arg.__qualname__)
    return type(arg).__qualname__


def _what_it_did(handle: Any, arguments: str) -> str:
    """For a trace dump: where a task's step left it (the line it now waits at), or what a plain
    callback was called with."""
    task = task_of(handle._callback)
    if task is not None:
        return "done" if task.done() else f"waits at {awaiting_at(task)}"
    return arguments
