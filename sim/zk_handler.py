"""kazoo's handler for the simulator's ZooKeeper client (:mod:`sim.zk_client`; docs/design.md
"Simulation"): ``IAsyncResult`` and the two worker threads of kazoo's SequentialThreadingHandler,
the completion queue (rawlink callbacks of answers) and the callback queue (watch events), each
FIFO, run on the asyncio loop; where both have work, the server's random source picks which runs
next (``ZkFaultRates.thread_race``), as the two real threads race.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)

COMPLETIONS, CALLBACKS = 0, 1


class _Server(Protocol):
    """What the dispatcher needs of :class:`sim.zookeeper.ZooKeeperServer` (a Protocol, so this
    module imports nothing of the server's and no import circle forms)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    rng: random.Random
    faults: Any


class Dispatcher:
    """kazoo's completion and callback worker threads, as two FIFO queues run on the loop."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._queues: tuple[deque, deque] = (deque(), deque())
        self._seq = 0
        self._scheduled = False

    def put(self, queue: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        self._queues[queue].append((self._seq, fn))
        if not self._scheduled:
            self._scheduled = True
            self._server.loop.call_soon(self._run_one)

    def _run_one(self) -> None:
        self._scheduled = False
        answers, watches = self._queues
        if answers and watches:
            if self._server.faults.thread_race:
                queue = answers if self._server.rng.random() < 0.5 else watches
            else:
                queue = answers if answers[0][0] < watches[0][0] else watches
        else:
            queue = answers or watches
        _, fn = queue.popleft()
        if answers or watches:
            self._scheduled = True
            self._server.loop.call_soon(self._run_one)
        try:
            fn()
        except Exception:
            log.exception("ZooKeeper callback failed")


class SimAsyncResult:
    """kazoo's IAsyncResult: ``rawlink`` callbacks run on the completion queue once it is set."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._callbacks: list[Callable[[SimAsyncResult], None]] = []
        self._ready = False
        self.value: Any = None
        self._exception: BaseException | None = None

    def ready(self) -> bool:
        return self._ready

    def successful(self) -> bool:
        return self._ready and self._exception is None

    @property
    def exception(self) -> BaseException | None:
        return self._exception

    def set(self, value: Any = None) -> None:
        self._settle(value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(None, exception)

    def _settle(self, value: Any, exception: BaseException | None) -> None:
        if self._ready:
            return
        self._ready, self.value, self._exception = True, value, exception
        for callback in self._callbacks:
            self._dispatcher.put(COMPLETIONS, functools.partial(callback, self))

    def get_nowait(self) -> Any:
        if not self._ready:
            raise KazooTimeoutError("not ready")
        if self._exception is not None:
            raise self._exception
        return self.value

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """As :meth:`get_nowait`: nothing may block the loop."""
        return self.get_nowait()

    def rawlink(self, callback: Callable[[SimAsyncResult], None]) -> None:
        if callback in self._callbacks:
            return
        self._callbacks.append(callback)
        if self._ready:
            self._dispatcher.put(COMPLETIONS, functools.partial(callback, self))
