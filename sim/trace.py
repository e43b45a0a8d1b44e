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
    every entry is also written there, one line each (sim/trace_diff.py compares two dumps).

    Each entry is hashed as ``"<virtual µs> <description>\n"`` in one update; the last entries
    are kept as (time, description) and formatted only when read (:attr:`recent`)."""

    def __init__(self, keep: int = 64, dump: IO[str] | None = None) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self._update = self._hash.update
        self._recent: deque[tuple[int, str]] = deque(maxlen=keep)
        self._keep = self._recent.append
        self.dump = dump
        self.entries = 0
        self._last: tuple[int, str] | None = None

    def record(self, time_us: int, description: str) -> None:
        self._update(f"{time_us} {description}\n".encode())
        self._last = entry = (time_us, description)
        self._keep(entry)
        self.entries += 1

    @property
    def recent(self) -> deque[str]:
        """The last entries, ``"<virtual µs> <description>"``, oldest first."""
        return deque((f"{t} {d}" for t, d in self._recent), maxlen=self._recent.maxlen)

    def detail(self, after: str) -> None:
        """Write the last entry to the dump, with what it did (not hashed: only for reading)."""
        if self.dump is not None:
            last = "" if self._last is None else f"{self._last[0]} {self._last[1]}"
            self.dump.write(f"{self.entries} {last} | {after}\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
