"""What the simulation loop refuses or runs inline: everything that would leave its single thread
or real time (docs/design.md "Simulation").

* ``run_in_executor`` (and so ``asyncio.to_thread``): the broker loads its logs and does blocking
  disk work through it. Under simulation the function runs on the loop's thread, synchronously,
  as one callback of its own scheduled with ``call_soon``; the returned future is done when that
  callback returns. A thread pool would run it concurrently with the loop, at a point of the
  schedule that real time picks: neither replayable nor seeded. Running it as its own callback
  (rather than inside ``run_in_executor`` with a future already done) keeps what the caller sees
  of a real executor: it is suspended at its ``await``, and the seeded scheduler decides which of
  the other ready callbacks run before the function and before the caller resumes. What cannot be
  simulated is the function running *while* other callbacks run (a thread interleaving in the
  middle of it): the function is atomic here.
* Threads: while the loop runs, a thread started from its thread (``threading.Thread.start``,
  so also a ``concurrent.futures.ThreadPoolExecutor``'s first ``submit``) is refused. A thread
  would run its work concurrently with the loop, in an order real timing picks (which log a
  recovery thread opens first, which call meets an injected disk error, which file descriptor a
  log gets): code under test that needs a pool takes an executor factory, and the simulator
  gives it :class:`InlineExecutor` (its work runs on the spot, on the loop's thread, in
  submission order).
* Real sockets, name resolution, pipes, subprocesses, signal handlers, reader and writer
  callbacks: refused with :class:`sim.errors.RealWorldRefused` (the simulated network stands in
  for TCP). The refusal is also recorded on the loop, which stops after the current callback, so
  code under test that catches every exception and retries cannot hide it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Callable
from typing import Any

from sim.errors import RealWorldRefused, SimulationError

_SOCKETS = "real sockets are not simulated: use the simulated network"
_PROCESSES = "a subprocess runs outside the simulation's thread and virtual time"
_SIGNALS = "signals come from outside the simulated process"
_FDS = "file-descriptor readiness is real I/O: use the simulated network"
_THREADS = (
    "a thread runs beside the loop in an order real timing picks: give the code under test an "
    "executor factory and the simulator's InlineExecutor (sim/isolation.py)"
)

#: Coroutine methods of asyncio's loop refused under simulation, and why.
REFUSED_COROUTINES = {
    "getaddrinfo": "name resolution reaches real DNS: simulated brokers are addressed by id",
    "getnameinfo": "name resolution reaches real DNS: simulated brokers are addressed by id",
    "create_connection": _SOCKETS,
    "create_server": _SOCKETS,
    "create_unix_connection": _SOCKETS,
    "create_unix_server": _SOCKETS,
    "create_datagram_endpoint": _SOCKETS,
    "connect_accepted_socket": _SOCKETS,
    "start_tls": _SOCKETS,
    "sendfile": _SOCKETS,
    "sock_sendfile": _SOCKETS,
    "sock_recv": _SOCKETS,
    "sock_recv_into": _SOCKETS,
    "sock_recvfrom": _SOCKETS,
    "sock_recvfrom_into": _SOCKETS,
    "sock_sendall": _SOCKETS,
    "sock_sendto": _SOCKETS,
    "sock_connect": _SOCKETS,
    "sock_accept": _SOCKETS,
    "connect_read_pipe": _PROCESSES,
    "connect_write_pipe": _PROCESSES,
    "subprocess_exec": _PROCESSES,
    "subprocess_shell": _PROCESSES,
}

#: Plain methods of asyncio's loop refused under simulation, and why.
REFUSED_METHODS = {
    "add_reader": _FDS,
    "add_writer": _FDS,
    "remove_reader": _FDS,
    "remove_writer": _FDS,
    "add_signal_handler": _SIGNALS,
    "remove_signal_handler": _SIGNALS,
}


class Isolation:
    """Mixed into the simulation loop: the refusals and the inline executor."""

    _pending_failure: SimulationError | None

    def _refuse(self, what: str, why: str) -> RealWorldRefused:
        """The error for reaching outside the simulation, also recorded to stop the run."""
        error = RealWorldRefused(f"{what} is not available under the simulation loop: {why}")
        if self._pending_failure is None:
            self._pending_failure = error
        return error

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future:
        """Run ``func(*args)`` on the loop's thread as one callback of its own (see the module doc)."""
        loop: Any = self
        loop._check_closed()
        future = loop.create_future()
        # Blocking work is progress from outside the caller's task, as a timer is: the caller
        # woken by its result has blocked, it has not spun.
        handle = loop.call_soon(functools.partial(_executor_call, future, func, args))
        handle.sim_owner = None
        return future

    def set_default_executor(self, executor: Any) -> None:
        raise self._refuse("set_default_executor()", "executor work runs inline, on the loop's thread")

    def run_forever(self) -> None:
        """asyncio's, with threads refused on this thread while it runs (see the module doc)."""
        _guard_threads(self)
        try:
            super().run_forever()  # type: ignore[misc]
        finally:
            _unguard_threads()


class InlineExecutor(concurrent.futures.Executor):
    """A ``concurrent.futures.Executor`` that runs each job on the spot, on the caller's thread,
    in submission order: the simulator's stand-in for the broker's thread pools (log recovery,
    log creation), whose jobs it makes a deterministic sequence. ``map`` and ``with`` are the
    base class's."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        self.thread_name_prefix = thread_name_prefix
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, as a pool does
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True


#: The simulation loop running on each thread (by thread id), while it runs.
_RUNNING: dict[int, Isolation] = {}
_REAL_THREAD_START = threading.Thread.start


def _guarded_start(thread: threading.Thread) -> None:
    loop = _RUNNING.get(threading.get_ident())
    if loop is not None:
        raise loop._refuse(f"starting thread {thread.name!r}", _THREADS)
    _REAL_THREAD_START(thread)


def _guard_threads(loop: Isolation) -> None:
    _RUNNING[threading.get_ident()] = loop
    threading.Thread.start = _guarded_start  # type: ignore[method-assign]


def _unguard_threads() -> None:
    _RUNNING.pop(threading.get_ident(), None)
    if not _RUNNING:
        threading.Thread.start = _REAL_THREAD_START  # type: ignore[method-assign]


def _executor_call(future: asyncio.Future, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if future.cancelled():  # cancelled before it started, as a queued executor job would be
        return
    try:
        result = func(*args)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller, as an executor does
        future.set_exception(exc)
    else:
        future.set_result(result)


def _refused_coroutine(name: str, why: str) -> Callable[..., Any]:
    async def refused(self: Isolation, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse(f"loop.{name}()", why)

    refused.__name__ = refused.__qualname__ = name
    return refused


def _refused_method(name: str, why: str) -> Callable[..., Any]:
    def refused(self: Isolation, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse(f"loop.{name}()", why)

    refused.__name__ = refused.__qualname__ = name
    return refused


for _name, _why in REFUSED_COROUTINES.items():
    setattr(Isolation, _name, _refused_coroutine(_name, _why))
for _name, _why in REFUSED_METHODS.items():
    setattr(Isolation, _name, _refused_method(_name, _why))
