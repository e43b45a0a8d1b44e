"""Delayed operations and the purgatory that holds them (Kafka's
DelayedOperationPurgatory; docs/design.md "Broker").

A request that cannot be answered yet (a long-poll fetch waiting for bytes, an acks=all
produce waiting for the high watermark) becomes a :class:`DelayedOperation` parked under
one or more keys, usually ``(topic, partition)``. Whoever changes the state an operation
waits on calls :meth:`Purgatory.check_and_complete` with that key; the operation then
re-checks its own condition. Each operation completes exactly once: by its condition, by
its timeout, or by being forced when the broker shuts down.

Timers run on the asyncio loop; the condition checks are plain synchronous code.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Hashable, Iterable

log = logging.getLogger(__name__)


class DelayedOperation(abc.ABC):
    """Subclasses implement :meth:`try_complete` (call :meth:`force_complete` when done) and
    :meth:`on_complete` (send the response); :meth:`on_expiration` is optional."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.completed = False
        self._timer: asyncio.TimerHandle | None = None

    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Complete (:meth:`force_complete`) if this operation's condition holds now."""

    @abc.abstractmethod
    def on_complete(self) -> None:
        """Send this operation's response."""

    def on_expiration(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Called just before on_complete when the operation completes by timing out."""

    def force_complete(self) -> bool:
        """Complete now if nobody else has; returns True for the caller that completed it."""
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
        try:
            self.on_complete()
        except Exception:
            log.exception("delayed operation %r failed while completing", self)
        return True

    def _expire(self) -> None:
        if not self.completed:
            try:
                self.on_expiration()
            except Exception:
                log.exception("delayed operation %r failed while expiring", self)
            self.force_complete()


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}

    def try_complete_else_watch(self, operation: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete the operation now if it can be; otherwise park it under ``keys`` with its
        timeout. Returns True if it completed at once."""
        if operation.try_complete():
            return True
        keys = list(keys)
        for key in keys:
            self._watchers.setdefault(key, []).append(operation)
        # The state may have changed between the check and the watch (not on one loop, but
        # a subclass may complete itself while registering): check once more.
        if operation.try_complete():
            return True
        operation._timer = asyncio.get_running_loop().call_later(operation.delay_ms / 1000, operation._expire)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-check every operation watching ``key``; returns how many completed."""
        operations = self._watchers.get(key)
        if not operations:
            return 0
        completed = 0
        remaining = []
        for operation in operations:
            if operation.completed:
                continue
            if operation.try_complete():
                completed += 1
            else:
                remaining.append(operation)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        return completed

    def watched(self) -> int:
        """Operations still waiting (across keys, each counted once)."""
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.completed})

    def purge_completed(self) -> None:
        for key in list(self._watchers):
            live = [op for op in self._watchers[key] if not op.completed]
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]

    def shutdown(self) -> None:
        """Complete everything still waiting (each answers with its timeout result)."""
        for operations in list(self._watchers.values()):
            for operation in operations:
                operation._expire()
        self._watchers.clear()
