"""The simulator's in-memory ZooKeeper server (docs/design.md "Simulation"): one standalone
server shared by every simulated broker, beneath the real :class:`zk.bridge.ZkBridge` through
the kazoo-compatible :class:`sim.zk_client.SimKazooClient` (``ZkBridge(...,
client_factory=server.client)``), so that the bridge's resend and session logic runs too.

Modelled as ZooKeeper does it: the data tree (:mod:`sim.zk_tree`) with a global zxid that every
write, session creation and session close takes; sessions with a negotiated timeout (2 to 20
ticks) that expire at the server once they have had no connection for that long, taking their
ephemeral znodes and firing the watches of other sessions; one connection per session at a time,
FIFO both ways (requests applied in order, each answer after the watch events its transaction
triggered); the watches of a connection dropped with it (kazoo does not send SetWatches).

Every delay is a timer on the asyncio loop (``call_at``/``call_later``, never a thread or the
wall clock) and every choice is drawn from the ``random.Random`` it is given: latencies, session
ids, the order of getChildren, and the faults of :class:`ZkFaultRates`. Faults can also be
placed exactly with :meth:`ZooKeeperServer.inject`: the connection dropped before a request is
applied (ConnectionLoss, not applied) or after (ConnectionLoss, applied, answer lost), or the
session expired instead. :meth:`ZooKeeperServer.disconnect`, :meth:`ZooKeeperServer.expire` and
:meth:`ZooKeeperServer.isolate` act at any moment.

Not modelled: a quorum (leader election, followers lagging behind the leader, sync), ACLs and
auth, read-only mode, TTL and container znodes, persistent watches, quotas, chroots.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kazoo.exceptions import ZookeeperError
from kazoo.protocol.states import EventType

from sim.zk_tree import DataTree, WatchEvent
from zk.bridge import CreateOp, DeleteOp, SetDataOp


class Request(Protocol):
    """What the server reads of a client's request (:class:`sim.zk_client.Request`)."""

    kind: str
    path: str
    ops: tuple
    watcher: Callable[[Any], None] | None


class SimKazooClient(Protocol):
    """What the server calls on a client (:class:`sim.zk_client.SimKazooClient`). Protocols, so
    this module imports nothing of the client's and no import circle forms."""

    timeout_ms: int
    connection: Connection | None

    def _on_answer(self, *args: Any) -> None: ...
    def _on_closed(self, *args: Any) -> None: ...
    def _on_dropped(self, *args: Any) -> None: ...
    def _on_expired(self, *args: Any) -> None: ...
    def _on_session(self, *args: Any) -> None: ...
    def _on_watch(self, *args: Any) -> None: ...


log = logging.getLogger(__name__)


@dataclass
class ZkFaultRates:
    """Probabilities drawn for each request when it reaches the server."""

    drop_before: float = 0.0  # the connection drops, the request is not applied
    drop_after: float = 0.0  # applied, and the connection drops before the answer
    expire: float = 0.0  # the session expires instead of applying the request
    #: whether kazoo's two worker threads (answers, watch events) interleave at random
    thread_race: bool = True


@dataclass
class FaultRule:
    """``action`` ("drop" or "expire") at the ``count``-th matching request, ``when`` "before"
    it is applied or "after" (its answer is then lost); "observe" only calls ``on_fire`` there
    and lets the request go on (the trigger of an aimed fault: sim/zombie_controller.py)."""

    action: str
    when: str
    kind: str | None = None
    path: str | None = None
    session: int | None = None
    count: int = 1
    path_suffix: str | None = None  # e.g. "/state": any partition's state znode
    #: a further condition on the request (an aimed fault: "an ISR write that adds a replica")
    condition: Callable[[int, Request], bool] | None = None
    #: called with the session and the request when the rule fires (a composite fault's trigger)
    on_fire: Callable[[int, Request], None] | None = None

    def matches(self, session: int, request: Request) -> bool:
        return (
            self.kind in (None, request.kind)
            and self.path in (None, request.path)
            and (self.path_suffix is None or request.path.endswith(self.path_suffix))
            and self.session in (None, session)
            and (self.condition is None or self.condition(session, request))
        )


@dataclass
class Session:
    id: int
    passwd: bytes
    timeout_ms: int
    connection: Connection | None = None
    expiry: asyncio.TimerHandle | None = None


class _Channel:
    """One direction of a connection: FIFO, each message after a latency drawn per message."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, delay: Callable[[], float], context: contextvars.Context
    ) -> None:
        self._loop = loop
        self._delay = delay
        #: whose callbacks the deliveries are (sim/broker_process.py): the receiving end's, never
        #: the context of whoever happened to send first (a broker that dies or pauses would take
        #: every later delivery of the channel with it)
        self._context = context
        self._items: deque[tuple[float, Callable[[], None]]] = deque()
        self._last = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def send(self, message: Callable[[], None]) -> None:
        when = max(self._loop.time() + self._delay(), self._last)
        self._last = when
        self._items.append((when, message))
        if self._handle is None:
            self._handle = self._loop.call_at(when, self._deliver, context=self._context)

    def hold(self, seconds: float) -> None:
        """Deliver nothing sent from now on before ``seconds`` have passed (the answers and
        watch events of one client's connection held up in the network, still in order)."""
        self._last = max(self._last, self._loop.time() + seconds)

    def _deliver(self) -> None:
        self._handle = None
        _, message = self._items.popleft()
        if self._items:
            self._handle = self._loop.call_at(self._items[0][0], self._deliver, context=self._context)
        message()

    def clear(self) -> None:
        self._items.clear()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


@dataclass(eq=False)
class Connection:
    """One client's TCP connection to the server; ``open`` until either side drops it."""

    client: SimKazooClient
    up: _Channel
    down: _Channel
    session: Session | None = None
    open: bool = True
    #: set by :meth:`ZooKeeperServer.isolate`: packets vanish, neither side knows yet
    severed: bool = False
    _timers: list[asyncio.TimerHandle] = field(default_factory=list)

    def close(self) -> None:
        self.open = False
        self.up.clear()
        self.down.clear()
        for timer in self._timers:
            timer.cancel()


class ZooKeeperServer:
    """One in-memory ZooKeeper server for every simulated client of a run."""

    def __init__(
        self,
        rng: random.Random,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        latency: tuple[float, float] = (0.0, 0.0),
        faults: ZkFaultRates | None = None,
        tick_ms: int = 2000,
        epoch_ms: int = 1_700_000_000_000,
    ) -> None:
        self.rng = rng
        self._loop = loop
        self.latency = latency
        self.faults = faults or ZkFaultRates()
        self.tick_ms = tick_ms
        self.epoch_ms = epoch_ms
        self.tree = DataTree()
        self.zxid = 0
        self.sessions: dict[int, Session] = {}
        self.rules: list[FaultRule] = []
        #: (action, when, kind, path) of every fault applied, for tests and traces
        self.injected: list[tuple[str, str, str, str]] = []
        self._isolated: set[int] = set()  # id() of isolated clients
        #: called with (session, path, data before, data after) for every znode a landed write
        #: created or changed (the simulator's checks of state writes: sim/state_writes.py)
        self.write_observers: list[Callable[[int, str, bytes | None, bytes], None]] = []
        self._next_session = (1 << 56) | (rng.getrandbits(24) << 24)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def time_ms(self) -> int:
        return self.epoch_ms + int(self.loop.time() * 1000)

    def _delay(self) -> float:
        low, high = self.latency
        return self.rng.uniform(low, high) if high > 0 else 0.0

    # -- faults ----------------------------------------------------------------------------------
    def inject(self, action: str, when: str = "before", **match: Any) -> FaultRule:
        """Place a fault at a request: ``inject("drop", "after", kind="create", path=p)``."""
        assert action in ("drop", "expire", "observe") and when in ("before", "after")
        rule = FaultRule(action, when, **match)
        self.rules.append(rule)
        return rule

    def _fault(self, session: int, request: Request, when: str) -> str | None:
        for rule in self.rules:
            if rule.when == when and rule.count > 0 and rule.matches(session, request):
                rule.count -= 1
                if rule.count == 0:
                    self.rules.remove(rule)
                    if rule.on_fire is not None:
                        rule.on_fire(session, request)
                    return rule.action
                return None
        rates = self.faults
        if rates.drop_before or rates.drop_after or rates.expire:
            roll = self.rng.random()
            if when == "before" and roll < rates.expire:
                return "expire"
            if when == "before" and roll < rates.expire + rates.drop_before:
                return "drop"
            if when == "after" and roll < rates.drop_after:
                return "drop"
        return None

    def disconnect(self, session_id: int) -> None:
        """Drop the session's connection now (the client reconnects within the session)."""
        session = self.sessions.get(session_id)
        if session is not None and session.connection is not None:
            self.drop(session.connection)

    def expire(self, session_id: int) -> None:
        """Expire the session now: a closeSession transaction, its connection closed."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        if session.expiry is not None:
            session.expiry.cancel()
        self._commit(lambda zxid: self.tree.kill_session(session_id, zxid))
        if session.connection is not None:
            self.drop(session.connection)

    def isolate(self, client: SimKazooClient) -> None:
        """Cut the client off: what is in flight vanishes; the client notices after 2/3 of its
        session timeout (kazoo's read timeout), the server expires it after the timeout, and no
        connection attempt gets through until :meth:`heal`."""
        self._isolated.add(id(client))
        connection = client.connection
        if connection is None or not connection.open:
            return
        connection.severed = True
        connection.up.clear()
        connection.down.clear()
        session = connection.session
        if session is not None and session.connection is connection:
            self._detach(session)
        read_timeout = client.timeout_ms * 2 / 3 / 1000.0
        connection._timers.append(self.loop.call_later(read_timeout, self.drop, connection))

    def heal(self, client: SimKazooClient) -> None:
        self._isolated.discard(id(client))

    def reachable(self, client: SimKazooClient) -> bool:
        return id(client) not in self._isolated

    # -- connections and sessions ------------------------------------------------------------
    def open_connection(self, client: SimKazooClient) -> Connection:
        # up: the server's (no process owns it); down: the client's, as it opens the connection
        up = _Channel(self.loop, self._delay, contextvars.Context())
        return Connection(client, up, _Channel(self.loop, self._delay, contextvars.copy_context()))

    def handshake(self, connection: Connection, session_id: int, passwd: bytes, timeout_ms: int) -> None:
        """ConnectRequest at the server: a new session (id 0), the same one resumed, or expired."""
        if not connection.open or connection.severed:
            return
        if session_id == 0:
            self.zxid += 1  # createSession is a transaction
            self._next_session += 1
            timeout = max(2 * self.tick_ms, min(20 * self.tick_ms, timeout_ms))
            session = Session(self._next_session, self.rng.randbytes(16), timeout)
            self.sessions[session.id] = session
        else:
            session = self.sessions.get(session_id)
            if session is None or session.passwd != passwd:
                connection.down.send(lambda: connection.client._on_expired(connection))
                return
            if session.connection is not None and session.connection is not connection:
                self.drop(session.connection)  # the older connection of a session is closed
            if session.expiry is not None:
                session.expiry.cancel()
                session.expiry = None
        session.connection = connection
        connection.session = session
        sid, pw, to = session.id, session.passwd, session.timeout_ms
        connection.down.send(lambda: connection.client._on_session(connection, sid, pw, to))

    def _detach(self, session: Session) -> None:
        """The session has no connection: its watches go, its expiry timer starts."""
        session.connection = None
        self.tree.remove_watches(session.id)
        if session.expiry is None:
            session.expiry = self.loop.call_later(
                session.timeout_ms / 1000.0, self.expire, session.id, context=contextvars.Context()
            )

    def drop(self, connection: Connection) -> None:
        """Close a connection from the server side; the client sees the drop at once."""
        if not connection.open:
            return
        connection.close()
        session = connection.session
        if session is not None and session.connection is connection and session.id in self.sessions:
            self._detach(session)
        connection.client._on_dropped(connection)

    def close_session(self, connection: Connection) -> None:
        """The client's Close request: the session ends now, its ephemerals with it."""
        session = connection.session
        if not connection.open or connection.severed or session is None:
            return
        self.sessions.pop(session.id, None)
        if session.expiry is not None:
            session.expiry.cancel()
        self._commit(lambda zxid: self.tree.kill_session(session.id, zxid))
        connection.down.send(lambda: connection.client._on_closed(connection))

    # -- requests --------------------------------------------------------------------------------
    def receive(self, connection: Connection, request: Request) -> None:
        """A request reaches the server (in order on its connection)."""
        session = connection.session
        if not connection.open or connection.severed or session is None:
            return
        fault = self._fault(session.id, request, "before")
        if fault is not None and fault != "observe":
            self.injected.append((fault, "before", request.kind, request.path))
            (self.expire if fault == "expire" else self.disconnect)(session.id)
            return
        value, error = self._execute(session, request)
        fault = self._fault(session.id, request, "after")
        if fault is not None and fault != "observe":
            self.injected.append((fault, "after", request.kind, request.path))
            (self.expire if fault == "expire" else self.disconnect)(session.id)
            return
        connection.down.send(lambda: connection.client._on_answer(connection, request, value, error))

    def _execute(self, session: Session, request: Request) -> tuple[Any, ZookeeperError | None]:
        tree = self.tree
        watcher = session.id if request.watcher is not None else None
        try:
            if request.kind == "get":
                return tree.get(request.path, watcher), None
            if request.kind == "exists":
                return tree.exists(request.path, watcher), None
            if request.kind == "get_children":
                children = tree.get_children(request.path, watcher)
                self.rng.shuffle(children)  # ZooKeeper's order is a HashSet's
                return children, None
        except ZookeeperError as exc:
            return None, exc
        outcome: list[Any] = [None, None]
        time_ms = self.time_ms()

        def write(zxid: int) -> list:
            if request.kind == "multi":
                outcome[0], triggers = tree.multi(request.ops, session.id, zxid, time_ms)
                return triggers
            try:
                result, triggers = tree.apply(request.ops[0], session.id, zxid, time_ms, [])
            except ZookeeperError as exc:  # an ErrorTxn: it takes its zxid too
                outcome[1] = exc
                return []
            outcome[0] = result
            return triggers

        observed = self._before_write(request) if self.write_observers else None
        self._commit(write)
        if observed:
            self._after_write(session.id, observed)
        return outcome[0], outcome[1]

    def _before_write(self, request: Request) -> list[tuple[str, bytes | None]]:
        nodes = self.tree.nodes
        found = []
        for op in request.ops:
            if isinstance(op, SetDataOp | CreateOp):
                node = nodes.get(op.path)
                found.append((op.path, node.data if node is not None else None))
        return found

    def _after_write(self, session: int, observed: list[tuple[str, bytes | None]]) -> None:
        nodes = self.tree.nodes
        for path, before in observed:
            node = nodes.get(path)
            if node is not None and node.mzxid == self.zxid:
                for observer in self.write_observers:
                    observer(session, path, before, node.data)

    def hold_answers(self, session_id: int, seconds: float) -> None:
        """Hold what the server sends on the session's connection for ``seconds``."""
        session = self.sessions.get(session_id)
        if session is not None and session.connection is not None:
            session.connection.down.hold(seconds)

    def admin_delete(self, path: str) -> bool:
        """Delete a znode as an operator's ``zkCli.sh delete`` would (outside every session,
        watches fired): e.g. ``/controller``, Kafka's documented way to move the controller."""
        if path not in self.tree.nodes:
            return False
        self._commit(lambda zxid: self.tree.delete(DeleteOp(path, -1), zxid, []))
        return True

    def _commit(self, transaction: Callable[[int], list]) -> None:
        """One transaction with the next zxid; its watch events go out before its answer."""
        self.zxid += 1
        self._route(self.tree.fire(transaction(self.zxid)))

    def _route(self, events: list[WatchEvent]) -> None:
        for session_id, event_type, path in events:
            session = self.sessions.get(session_id)
            connection = session.connection if session is not None else None
            if connection is not None and connection.open:
                connection.down.send(_watch_message(connection, event_type, path))


def _watch_message(connection: Connection, event_type: EventType, path: str) -> Callable[[], None]:
    return lambda: connection.client._on_watch(connection, event_type, path)
