"""The schedule's fingerprint (docs/design.md "Simulation"): every callback the simulation loop
runs, as a short stable description and the virtual time, folded into one running BLAKE2b hash.

Two runs with the same seed run the same callbacks in the same order at the same virtual times, so
they end with the same :meth:`Trace.hexdigest`: the replay check the simulator's CI relies on. The
last entries are kept for failure reports. Descriptions name code, never objects: no ``id()``, no
addresses, no reprs that could differ between two processes.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections import deque
from collections.abc import Callable
from typing import IO, Any

_TASK_TYPES: tuple[type, ...] = (asyncio.Task, asyncio.tasks._PyTask)  # type: ignore[attr-defined]


def task_of(callback: Callable[..., Any]) -> asyncio.Task | None:
    """The task a callback runs a step of (its step or wakeup method), or None."""
    owner = getattr(callback, "__self__", None)
    return owner if isinstance(owner, _TASK_TYPES) else None


def describe_task(task: asyncio.Task) -> str:
    coro = task.get_coro()
    return f"{task.get_name()} {getattr(coro, '__qualname__', type(coro).__qualname__)}"


def awaiting_at(task: asyncio.Task) -> str:
    """Where a suspended task waits: the innermost coroutine frame of its await chain."""
    awaitable: Any = task.get_coro()
    where = "?"
    while awaitable is not None:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            break
        where = f"{frame.f_code.co_qualname} line {frame.f_lineno}"
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None)
    return where


def describe(callback: Callable[..., Any]) -> str:
    """A callback as the trace records it: the task and its coroutine, or the callable's qualname."""
    task = task_of(callback)
    if task is not None:
        return describe_task(task)
    while isinstance(callback, functools.partial):
        callback = callback.func
    name = getattr(callback, "__qualname__", None)
    return name if isinstance(name, str) else type(callback).__qualname__


class Trace:
    """The running hash of every callback run, and the last ``keep`` of them; with a ``dump``,
    every entry is also written there, one line each (sim/trace_diff.py compares two dumps)."""

    def __init__(self, keep: int = 64, dump: IO[str] | None = None) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.recent: deque[str] = deque(maxlen=keep)
        self.dump = dump
        self.entries = 0
        self._last = ""

    def record(self, time_us: int, description: str) -> None:
        entry = f"{time_us} {description}"
        self._hash.update(entry.encode())
        self._hash.update(b"\n")
        self.recent.append(entry)
        self.entries += 1
        self._last = entry

    def detail(self, after: str) -> None:
        """Write the last entry to the dump, with what it did (not hashed: only for reading)."""
        if self.dump is not None:
            self.dump.write(f"{self.entries} {self._last} | {after}\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
