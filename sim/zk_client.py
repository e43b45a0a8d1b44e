"""A kazoo ``KazooClient`` stand-in on the asyncio loop, over the simulator's in-memory ZooKeeper
(:mod:`sim.zookeeper`; docs/design.md "Simulation"). It offers what :class:`zk.bridge.ZkBridge`
uses (``start``/``stop``/``close`` as coroutines, ``connected``, ``client_id``, ``add_listener``,
the ``*_async`` calls, ``ensure_path_async``, ``transaction()``) and mirrors kazoo 2.x:

* the state machine of ``KazooClient._session_callback``: a dropped connection (CONNECTING)
  fails every request queued or in flight with ConnectionLoss, reports SUSPENDED and fires every
  watch with ``WatchedEvent(EventType.NONE, KeeperState.CONNECTING, None)``; an expired session
  found at reconnection (EXPIRED_SESSION) fails them with SessionExpiredError, reports LOST,
  fires the watches with the EXPIRED_SESSION state and forgets the session id, and the next
  attempt opens a new session (CONNECTED, a new ``client_id``); a request made while CONNECTING
  waits in the queue for the connection, one made while CLOSED or EXPIRED_SESSION fails at once;
* ``client_id`` and ``connected`` only while connected; reconnection after ``connection_retry``'s
  delays (its backoff and jitter, the jitter from the server's random source);
* watch functions kept per path in sets, registered when the answer arrives (an ``exists`` on a
  missing znode too, a failed ``get`` not), popped by the event as kazoo's
  ``ConnectionHandler._read_watch_event`` pops them;
* kazoo's two worker threads: answers (rawlink callbacks) run in order, watch callbacks run in
  order, and the two streams interleave as the random source says (``ZkFaultRates.thread_race``);
  state listeners run at once, as on kazoo's connection thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent
from kazoo.retry import KazooRetry

from sim.zk_handler import CALLBACKS, Dispatcher, SimAsyncResult
from sim.zookeeper import Connection, ZooKeeperServer
from zk.bridge import CheckOp, CreateOp, DeleteOp, SetDataOp, ZkOp

log = logging.getLogger(__name__)

_CLOSED_STATES = (KeeperState.EXPIRED_SESSION, KeeperState.AUTH_FAILED, KeeperState.CLOSED)


@dataclass(eq=False)
class Request:
    kind: str  # get, exists, get_children, create, set, delete, multi
    path: str
    result: SimAsyncResult
    ops: tuple[ZkOp, ...] = ()
    watcher: Callable[[WatchedEvent], None] | None = None


class SimTransaction:
    """kazoo's TransactionRequest: operations collected, committed as one multi."""

    def __init__(self, client: SimKazooClient) -> None:
        self._client = client
        self.operations: list[ZkOp] = []
        self.committed = False

    def create(
        self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False, sequence: bool = False
    ) -> None:
        self.operations.append(CreateOp(path, value, ephemeral, sequence))

    def delete(self, path: str, version: int = -1) -> None:
        self.operations.append(DeleteOp(path, version))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.operations.append(SetDataOp(path, value, version))

    def check(self, path: str, version: int) -> None:
        self.operations.append(CheckOp(path, version))

    def commit_async(self) -> SimAsyncResult:
        if self.committed:
            raise ValueError("Transaction already committed")
        self.committed = True
        first = self.operations[0].path if self.operations else "/"
        return self._client._request("multi", first, tuple(self.operations))


class SimKazooClient:
    """One simulated ZooKeeper client: at most one session at a time, as KazooClient."""

    def __init__(
        self,
        server: ZooKeeperServer,
        timeout: float = 10.0,
        connection_retry: KazooRetry | None = None,
        **_: Any,
    ) -> None:
        self.server = server
        self._requested_timeout_ms = int(timeout * 1000)
        retry = connection_retry or KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
        self._retry_delay, self._backoff, self._max_delay = retry.delay, retry.backoff, retry.max_delay
        self._max_jitter = retry.max_jitter
        self._cur_delay = self._retry_delay
        self._dispatcher = Dispatcher(server)
        # dicts, not sets (kazoo's): a set of callables iterates in id() order, which depends on
        # the process's history and would make a seed's replay differ (insertion order is fixed)
        self.state_listeners: dict[Callable[[KazooState], Any], None] = {}
        self._state = KeeperState.CLOSED
        self.state = KazooState.LOST
        self._live = False
        self._stopped = True
        self.connection: Connection | None = None
        self._session_id: int | None = None
        self._session_passwd = b"\x00" * 16
        self._negotiated_timeout_ms: int | None = None
        self._queue: deque[Request] = deque()
        self._pending: deque[Request] = deque()
        self._child_watchers: defaultdict[str, dict] = defaultdict(dict)
        self._data_watchers: defaultdict[str, dict] = defaultdict(dict)
        self._reconnect: asyncio.TimerHandle | None = None
        self._connected_waiters: list[asyncio.Future] = []
        self._closed_waiter: asyncio.Future | None = None

    # -- kazoo's public state ------------------------------------------------------------------
    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return (self._session_id, self._session_passwd) if self._live else None  # type: ignore[return-value]

    @property
    def connected(self) -> bool:
        return self._live

    @property
    def client_state(self) -> KeeperState:
        return self._state

    @property
    def timeout_ms(self) -> int:
        return self._negotiated_timeout_ms or self._requested_timeout_ms

    def add_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self.state_listeners[listener] = None

    def remove_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self.state_listeners.pop(listener, None)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, timeout: float = 15.0) -> None:
        if self._live:
            return
        loop = self.server.loop
        waiter = loop.create_future()
        self._connected_waiters.append(waiter)
        self._stopped = False
        self._connect()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            await self.stop()
            raise KazooTimeoutError("Connection time-out") from None

    async def stop(self) -> None:
        """End the session (its ephemerals go at once) when connected; otherwise stop trying."""
        if self._stopped:
            return
        self._stopped = True
        if self._reconnect is not None:
            self._reconnect.cancel()
            self._reconnect = None
        connection = self.connection
        if self._live and connection is not None and connection.open:
            self._closed_waiter = self.server.loop.create_future()
            connection.up.send(lambda: self.server.close_session(connection))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._closed_waiter), self.timeout_ms / 1000.0)
        connection, self.connection = self.connection, None
        if connection is not None:
            self.server.drop(connection)
        self._session_callback(KeeperState.CLOSED)

    async def close(self) -> None:
        """Nothing to free: the client holds no sockets or threads."""

    # -- the connection loop -------------------------------------------------------------------
    def _connect(self) -> None:
        self._reconnect = None
        if self._stopped:
            return
        if self._state != KeeperState.CONNECTING:
            self._session_callback(KeeperState.CONNECTING)
        connection = self.server.open_connection(self)
        self.connection = connection
        if not self.server.reachable(self):  # the Connect request goes unanswered
            connection.severed = True
            connect_timeout = self.timeout_ms / 1000.0
            connection._timers.append(
                self.server.loop.call_later(connect_timeout, self.server.drop, connection)
            )
            return
        sid, passwd, timeout = self._session_id or 0, self._session_passwd, self._requested_timeout_ms
        connection.up.send(lambda: self.server.handshake(connection, sid, passwd, timeout))

    def _schedule_reconnect(self) -> None:
        if self._stopped or self._reconnect is not None:
            return
        jitter = self.server.rng.uniform(0, self._max_jitter)
        delay = self._cur_delay + jitter
        self._cur_delay = min(self._cur_delay * self._backoff, self._max_delay)
        self._reconnect = self.server.loop.call_later(delay, self._connect)

    def _on_session(self, connection: Connection, session_id: int, passwd: bytes, timeout_ms: int) -> None:
        if connection is not self.connection:
            return
        self._session_id, self._session_passwd = session_id, passwd
        self._negotiated_timeout_ms = timeout_ms
        self._cur_delay = self._retry_delay
        self._session_callback(KeeperState.CONNECTED)
        for waiter in self._connected_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._connected_waiters.clear()
        self._pump()

    def _on_expired(self, connection: Connection) -> None:
        if connection is not self.connection:
            return
        connection.close()
        self.connection = None
        self._session_callback(KeeperState.EXPIRED_SESSION)
        self._schedule_reconnect()

    def _on_dropped(self, connection: Connection) -> None:
        if connection is not self.connection:
            return
        self.connection = None
        if self._state != KeeperState.CONNECTING:
            self._session_callback(KeeperState.CONNECTING)
        self._schedule_reconnect()

    def _on_closed(self, connection: Connection) -> None:
        if self._closed_waiter is not None and not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    # -- kazoo's KazooClient._session_callback ---------------------------------------------------
    def _session_callback(self, state: KeeperState) -> None:
        if state == self._state:
            return
        was_closed = self._state in _CLOSED_STATES
        self._state = state
        if was_closed and state == KeeperState.CONNECTING:
            return
        if state == KeeperState.CONNECTED:
            self._live = True
            self._make_state_change(KazooState.CONNECTED)
        elif state in _CLOSED_STATES:
            self._live = False
            self._make_state_change(KazooState.LOST)
            self._notify_pending(state)
            self._reset_watchers()
            self._session_id, self._session_passwd = None, b"\x00" * 16
        else:
            self._live = False
            self._notify_pending(state)
            self._make_state_change(KazooState.SUSPENDED)
            self._reset_watchers()

    def _make_state_change(self, state: KazooState) -> None:
        if self.state == state:
            return
        self.state = state
        for listener in list(self.state_listeners):
            try:
                if listener(state) is True:
                    self.remove_listener(listener)
            except Exception:
                log.exception("Error in connection state listener")

    def _notify_pending(self, state: KeeperState) -> None:
        exc_type = SessionExpiredError if state == KeeperState.EXPIRED_SESSION else ConnectionLoss
        while self._pending:
            self._pending.popleft().result.set_exception(exc_type())
        while self._queue:
            self._queue.popleft().result.set_exception(exc_type())

    def _reset_watchers(self) -> None:
        watchers = [w for ws in self._child_watchers.values() for w in ws]
        watchers += [w for ws in self._data_watchers.values() for w in ws]
        self._child_watchers.clear()
        self._data_watchers.clear()
        event = WatchedEvent(EventType.NONE, self._state, None)
        for watch in watchers:
            self._dispatcher.put(CALLBACKS, functools.partial(watch, event))

    # -- requests and answers ------------------------------------------------------------------
    def _request(
        self, kind: str, path: str, ops: tuple[ZkOp, ...] = (), watcher: Callable | None = None
    ) -> SimAsyncResult:
        result = SimAsyncResult(self._dispatcher)
        if self._state == KeeperState.CLOSED:
            result.set_exception(ConnectionClosedError("Connection has been closed"))
        elif self._state == KeeperState.EXPIRED_SESSION:
            result.set_exception(SessionExpiredError())
        else:
            self._queue.append(Request(kind, path, result, ops, watcher))
            self._pump()
        return result

    def _pump(self) -> None:
        connection = self.connection
        if not self._live or connection is None:
            return
        while self._queue:
            request = self._queue.popleft()
            self._pending.append(request)
            connection.up.send(functools.partial(self.server.receive, connection, request))

    def _on_answer(
        self, connection: Connection, request: Request, value: Any, error: ZookeeperError | None
    ) -> None:
        if connection is not self.connection or not self._pending or self._pending[0] is not request:
            return
        self._pending.popleft()
        if error is not None:
            request.result.set_exception(error)
            return
        request.result.set(value)
        if request.watcher is not None and not self._stopped:
            table = self._child_watchers if request.kind == "get_children" else self._data_watchers
            table[request.path][request.watcher] = None

    def _on_watch(self, connection: Connection, event_type: EventType, path: str) -> None:
        if connection is not self.connection:
            return
        watchers: list = []
        if event_type in (EventType.CREATED, EventType.CHANGED):
            watchers.extend(self._data_watchers.pop(path, ()))
        elif event_type == EventType.DELETED:
            watchers.extend(self._data_watchers.pop(path, ()))
            watchers.extend(self._child_watchers.pop(path, ()))
        else:
            watchers.extend(self._child_watchers.pop(path, ()))
        if self._stopped:
            return
        event = WatchedEvent(event_type, self._state, path)
        for watch in watchers:
            self._dispatcher.put(CALLBACKS, functools.partial(watch, event))

    # -- kazoo's *_async API -------------------------------------------------------------------
    def get_async(self, path: str, watch: Callable | None = None) -> SimAsyncResult:
        return self._request("get", path, watcher=watch)

    def exists_async(self, path: str, watch: Callable | None = None) -> SimAsyncResult:
        return self._request("exists", path, watcher=watch)

    def get_children_async(
        self, path: str, watch: Callable | None = None, include_data: bool = False
    ) -> SimAsyncResult:
        assert not include_data, "include_data is not simulated"
        return self._request("get_children", path, watcher=watch)

    def set_async(self, path: str, value: bytes, version: int = -1) -> SimAsyncResult:
        return self._request("set", path, (SetDataOp(path, value, version),))

    def delete_async(self, path: str, version: int = -1) -> SimAsyncResult:
        return self._request("delete", path, (DeleteOp(path, version),))

    def transaction(self) -> SimTransaction:
        return SimTransaction(self)

    def create_async(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
    ) -> SimAsyncResult:
        """A create; with ``makepath``, a NoNode answer creates the parents and tries again."""
        assert not include_data, "include_data is not simulated"
        outer = SimAsyncResult(self._dispatcher)
        op = CreateOp(path, value, ephemeral, sequence)

        def attempt() -> None:
            self._request("create", path, (op,)).rawlink(created)

        def created(result: SimAsyncResult) -> None:
            try:
                outer.set(result.get_nowait())
            except NoNodeError as exc:
                if not makepath:
                    outer.set_exception(exc)
                    return
                parent = path.rstrip("/") if sequence and path.endswith("/") else path.rpartition("/")[0]
                self.ensure_path_async(parent).rawlink(parents_made)
            except Exception as exc:  # noqa: BLE001 - handed to the caller's result
                outer.set_exception(exc)

        def parents_made(result: SimAsyncResult) -> None:
            try:
                result.get_nowait()
            except Exception as exc:  # noqa: BLE001
                outer.set_exception(exc)
                return
            attempt()

        attempt()
        return outer

    def ensure_path_async(self, path: str, acl: Any = None) -> SimAsyncResult:
        """kazoo's recursion: exists, else the parent first, then create (NodeExists is fine)."""
        outer = SimAsyncResult(self._dispatcher)

        def settle(step: Callable[[], Any]) -> None:
            try:
                outer.set(step())
            except NodeExistsError:
                outer.set(True)
            except Exception as exc:  # noqa: BLE001
                outer.set_exception(exc)

        def create() -> None:
            self._request("create", path, (CreateOp(path),)).rawlink(lambda r: settle(r.get_nowait))

        def after_parent(result: SimAsyncResult) -> None:
            try:
                result.get_nowait()
            except Exception as exc:  # noqa: BLE001
                outer.set_exception(exc)
                return
            create()

        def after_exists(result: SimAsyncResult) -> None:
            try:
                if result.get_nowait():
                    outer.set(True)
                    return
            except Exception as exc:  # noqa: BLE001
                outer.set_exception(exc)
                return
            parent, _, node = path.rpartition("/")
            if parent and node:
                self.ensure_path_async(parent).rawlink(after_parent)
            else:
                create()

        self._request("exists", path).rawlink(after_exists)
        return outer


def client_factory(server: ZooKeeperServer) -> Callable[..., SimKazooClient]:
    """The ``client_factory`` :class:`zk.bridge.ZkBridge` takes: each call makes a new
    kazoo-compatible client of ``server`` (``hosts`` is ignored: there is one server)."""

    def make(hosts: str = "sim", timeout: float = 10.0, **kwargs: Any) -> SimKazooClient:
        return SimKazooClient(server, timeout=timeout, **kwargs)

    return make
