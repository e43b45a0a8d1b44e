"""The simulated network (docs/design.md "Simulation"): TCP connections between simulated nodes
under the virtual clock, in the spirit of TigerBeetle's packet simulator, but stream-shaped.

Both ends of a connection run the real protocol code: the client side is a real
:class:`client.connection.BrokerConnection` (framing, correlation ids, pipelining, timeouts) and
the server side the real broker pipeline (:class:`broker.network.processor.Connection`, Kafka's
``SocketServer.Processor``: frame receive, memory pool, muting, validation, then the
RequestChannel, the request handlers and ``KafkaApis``). Only what lies below them is simulated:
:class:`SimTransport` (an ``asyncio.Transport``) carries bytes, and :class:`sim.acceptor.SimAcceptor` stands in
for the broker's listening socket (Kafka's ``Acceptor``): it admits each connection through the
real connection quotas and hands it to a real processor, round-robin.

The model:

* **Delay.** Every link (source node, target node) has a base latency drawn from the seed on its
  first use, plus a per-write jitter drawn from the seed. Each direction of a connection is FIFO
  (a write never overtakes an earlier one, as TCP's byte stream); writes on different
  connections overtake one another freely (reordering across connections).
* **Loss is of whole connections only** (TCP never drops or duplicates within a connection):
  :meth:`SimNetwork.break_connection`, or at random per write with ``NetworkConfig.break_rate``;
  both ends see ``connection_lost(ConnectionResetError)``, and every request in flight on the
  client side fails with ``ConnectionClosed`` (NETWORK_EXCEPTION), as on a real reset.
* **Stalls** of one connection (:meth:`SimNetwork.stall`): what its client writes is held for a
  while and then delivered in order, even after the client closed the connection (the FIN comes
  after it); other connections between the same nodes are not held.
* **Partitions** of any set of links (:meth:`SimNetwork.cut`, :meth:`SimNetwork.heal`): bytes on a
  cut link wait (TCP retransmits) and are delivered after the heal, so requests across it hang
  until their own timeouts; a connection attempt across it gets no answer (its SYNs are lost,
  retried every second) until the caller's connect timeout. Cut links are directed, so one-way
  partitions can be made too.
* **Process death** (:meth:`SimNetwork.kill_node`): the node's listeners go (connects are then
  refused after a round trip), bytes it already wrote are still delivered, then its peers see
  the connection closed (the kernel's FIN); bytes towards it are discarded. A paused node needs
  nothing here: its callbacks, deliveries included, are held by the world (sim/broker_process.py).

Every delivery runs in the context (``contextvars``) of the receiving end, so the world knows
whose callback it is. Not modelled: bandwidth and congestion, socket buffers filling (writes never
block; ``pause_writing`` is never called), half-open connections, RST after a long partition
(a peer that died behind a cut is noticed when the cut heals).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from client.connection import BrokerConnection, ConnectionClosed
from client.protocol import framing

log = logging.getLogger(__name__)

#: How often a connection attempt across a cut link retries its SYN (simplified: fixed).
SYN_RETRY_S = 1.0
_DATA, _EOF = 0, 1


class Listener(Protocol):
    """What the network needs of a listening socket (:class:`sim.acceptor.SimAcceptor`)."""

    host: str
    port: int

    def accept(self, connection: SimConnection, server: ConnectionEnd) -> None: ...


@dataclass(frozen=True)
class NetworkConfig:
    """The network's random parameters (seconds, probabilities)."""

    latency_s: tuple[float, float] = (0.0002, 0.002)  # each link's base one-way latency, drawn
    jitter_s: float = 0.0005  # added to each write, drawn uniformly from [0, jitter_s]
    break_rate: float = 0.0  # probability that a write breaks its connection instead


class ConnectionEnd:
    """One side of a connection: its node, its protocol and the context its callbacks run in."""

    def __init__(self, node: str, context: contextvars.Context, address: tuple[str, int]) -> None:
        self.node = node
        self.context = context
        self.address = address
        self.protocol: asyncio.BaseProtocol | None = None
        self.transport: SimTransport | None = None
        self.closed = False
        self.reading_paused = False
        self.inbox: deque[bytes] = deque()  # received while reading is paused


class _Pipe:
    """One direction of a connection: what ``source`` wrote that ``target`` has not read yet."""

    def __init__(self, connection: SimConnection, source: ConnectionEnd, target: ConnectionEnd) -> None:
        self.connection = connection
        self.source, self.target = source, target
        self.queue: deque[tuple[float, int, Any]] = deque()  # (due, kind, payload)
        self.last_due = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.held_until = 0.0  # a stall (:meth:`SimNetwork.stall`): nothing delivered before

    def trace_detail(self) -> str:
        """What a trace dump says of a delivery on this pipe (sim/trace_diff.py)."""
        sizes = ",".join(str(len(p)) if k == _DATA else "EOF" for _, k, p in self.queue)
        return f"{self.connection!r} {self.source.node}->{self.target.node} [{sizes}]"


class SimConnection:
    """A connection between a client end and a server end, with a pipe each way."""

    def __init__(
        self, network: SimNetwork, number: int, client: ConnectionEnd, server: ConnectionEnd
    ) -> None:
        self.network = network
        self.number = number
        self.client, self.server = client, server
        self.up = _Pipe(self, client, server)
        self.down = _Pipe(self, server, client)

    @property
    def nodes(self) -> tuple[str, str]:
        return self.client.node, self.server.node

    @property
    def open(self) -> bool:
        return not (self.client.closed and self.server.closed)

    def pipe_from(self, end: ConnectionEnd) -> _Pipe:
        return self.up if end is self.client else self.down

    def __repr__(self) -> str:
        return f"SimConnection#{self.number}({self.client.node}:{self.client.address[1]}->{self.server.node})"


class SimTransport(asyncio.Transport):
    """The ``asyncio.Transport`` of one end: writes go through the network to the other end."""

    def __init__(self, connection: SimConnection, end: ConnectionEnd, peer: ConnectionEnd) -> None:
        super().__init__()
        self._connection, self._end, self._peer = connection, end, peer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peer.address
        if name == "sockname":
            return self._end.address
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._end.closed and data:
            self._connection.network.send(self._connection, self._end, bytes(data))

    def writelines(self, list_of_data: Iterable[bytes]) -> None:
        for data in list_of_data:
            self.write(data)

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._end.closed

    def close(self) -> None:
        self._connection.network.close_end(self._connection, self._end, reset=False)

    def abort(self) -> None:
        self._connection.network.close_end(self._connection, self._end, reset=True)

    def pause_reading(self) -> None:
        self._end.reading_paused = True

    def resume_reading(self) -> None:
        if self._end.reading_paused:
            self._end.reading_paused = False
            if self._end.inbox:
                self._connection.network.loop.call_soon(
                    self._connection.network.flush_inbox, self._end, context=self._end.context
                )

    def is_reading(self) -> bool:
        return not self._end.reading_paused

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class SimNetwork:
    """The nodes' listeners, every connection, the cut links; draws from ``rng`` only."""

    def __init__(
        self,
        rng: random.Random,
        config: NetworkConfig | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.rng = rng
        self.config = config or NetworkConfig()
        self._loop = loop
        self._listeners: dict[tuple[str, int], Listener] = {}
        self._host_nodes: dict[str, str] = {}
        self._latency: dict[tuple[str, str], float] = {}
        self._cut: set[tuple[str, str]] = set()
        self.connections: list[SimConnection] = []
        self._numbers = itertools.count(1)
        self._ports = itertools.count(40000)
        #: connections broken by faults (random or placed), for tests and summaries
        self.broken = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # -- addressing ------------------------------------------------------------------------------
    def listen(self, acceptor: Listener) -> None:
        address = (acceptor.host, acceptor.port)
        if address in self._listeners:
            raise OSError(98, f"address already in use: {address[0]}:{address[1]}")
        self._listeners[address] = acceptor
        self._host_nodes[acceptor.host] = acceptor.node

    def unlisten(self, acceptor: Listener) -> None:
        if self._listeners.get((acceptor.host, acceptor.port)) is acceptor:
            del self._listeners[(acceptor.host, acceptor.port)]

    def node_of_host(self, host: str) -> str | None:
        return self._host_nodes.get(host)

    # -- partitions ------------------------------------------------------------------------------
    def cut(self, side_a: Iterable[str], side_b: Iterable[str], *, both_ways: bool = True) -> None:
        """Cut every link from a node of ``side_a`` to a node of ``side_b`` (and back)."""
        side_b = list(side_b)
        for a in side_a:
            for b in side_b:
                if a != b:
                    self._cut.add((a, b))
                    if both_ways:
                        self._cut.add((b, a))

    def isolate(self, node: str, others: Iterable[str]) -> None:
        self.cut([node], others)

    def heal(self, side_a: Iterable[str] | None = None, side_b: Iterable[str] | None = None) -> None:
        """Heal the links between the two sides (both directions), or every link."""
        if side_a is None:
            healed = set(self._cut)
        else:
            a_set, b_set = set(side_a), set(side_b or ())
            healed = {
                (a, b) for a, b in self._cut if (a in a_set and b in b_set) or (a in b_set and b in a_set)
            }
        self._cut -= healed
        for connection in self.connections:
            for pipe in (connection.up, connection.down):
                if (pipe.source.node, pipe.target.node) in healed and pipe.queue and pipe.timer is None:
                    self._arm(pipe)

    def link_up(self, source: str, target: str) -> bool:
        return (source, target) not in self._cut

    # -- connecting ------------------------------------------------------------------------------
    def connector(self, node: str) -> Callable[..., Any]:
        """A :data:`client.connection.ConnectionFactory` for connections from ``node``."""

        async def connect(
            host: str,
            port: int,
            client_id: str = "floodmark",
            timeout: float = 10.0,
            max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES,
        ) -> BrokerConnection:
            try:
                async with asyncio.timeout(timeout):
                    return await self._connect(node, host, port, client_id, max_frame_bytes)
            except (OSError, TimeoutError) as exc:
                raise ConnectionClosed(
                    f"cannot connect to {host}:{port}: {exc.__class__.__name__} {exc}"
                ) from None

        return connect

    async def _connect(
        self, node: str, host: str, port: int, client_id: str, max_frame_bytes: int
    ) -> BrokerConnection:
        target = self.node_of_host(host)
        if target is None:
            raise OSError(-2, f"Name or service not known: {host}")
        while not self.link_up(node, target):  # the SYN is lost; retried
            await asyncio.sleep(SYN_RETRY_S)
        await asyncio.sleep(self._delay(node, target))
        acceptor = self._listeners.get((host, port))
        if acceptor is None:
            await asyncio.sleep(self._delay(target, node))  # the RST comes back
            raise ConnectionRefusedError(111, "Connection refused")
        client = ConnectionEnd(node, contextvars.copy_context(), (node, next(self._ports)))
        server = ConnectionEnd(target, acceptor.context, (host, port))
        connection = SimConnection(self, next(self._numbers), client, server)
        protocol = BrokerConnection(host, port, client_id, max_frame_bytes)
        client.protocol = protocol
        client.transport = SimTransport(connection, client, server)
        server.transport = SimTransport(connection, server, client)
        self.connections.append(connection)
        server.context.run(acceptor.accept, connection, server)
        try:
            await asyncio.sleep(self._delay(target, node))  # the SYN-ACK
        except BaseException:  # the caller gave up (cancelled, timed out): reset the connection
            self.close_end(connection, client, reset=True)
            raise
        # A server end already closed (over a quota, or its process died) has its FIN on the way.
        protocol.connection_made(client.transport)
        return protocol

    # -- bytes -----------------------------------------------------------------------------------
    def _delay(self, source: str, target: str) -> float:
        """One write's one-way delay: the link's base latency (drawn once, the same both ways)
        plus a jitter drawn per write."""
        link = (source, target) if source <= target else (target, source)
        base = self._latency.get(link)
        if base is None:
            base = self._latency[link] = self.rng.uniform(*self.config.latency_s)
        return base + self.rng.uniform(0.0, self.config.jitter_s)

    def send(self, connection: SimConnection, end: ConnectionEnd, data: bytes) -> None:
        if self.config.break_rate and self.rng.random() < self.config.break_rate:
            self.break_connection(connection)
            return
        self._enqueue(connection.pipe_from(end), _DATA, data)

    def _enqueue(self, pipe: _Pipe, kind: int, payload: Any) -> None:
        if pipe.target.closed:
            return
        due = max(self.loop.time() + self._delay(pipe.source.node, pipe.target.node), pipe.last_due)
        pipe.last_due = due
        pipe.queue.append((due, kind, payload))
        if pipe.timer is None:
            self._arm(pipe)

    def _arm(self, pipe: _Pipe) -> None:
        if not self.link_up(pipe.source.node, pipe.target.node):
            return  # held until the heal
        due = max(pipe.queue[0][0], self.loop.time(), pipe.held_until)
        pipe.timer = self.loop.call_at(due, self._deliver, pipe, context=pipe.target.context)

    def _deliver(self, pipe: _Pipe) -> None:
        pipe.timer = None
        now = self.loop.time()
        if not self.link_up(pipe.source.node, pipe.target.node):
            return
        if now < pipe.held_until:
            self._arm(pipe)
            return
        target = pipe.target
        while pipe.queue and pipe.queue[0][0] <= now and not target.closed:
            _, kind, payload = pipe.queue.popleft()
            if kind == _EOF:
                pipe.queue.clear()
                self._lost(pipe.connection, target, payload)
                return
            if target.reading_paused or target.inbox:
                target.inbox.append(payload)
            else:
                target.protocol.data_received(payload)  # type: ignore[union-attr]
        if target.closed:
            pipe.queue.clear()
        elif pipe.queue:
            self._arm(pipe)

    def flush_inbox(self, end: ConnectionEnd) -> None:
        while end.inbox and not end.reading_paused and not end.closed:
            end.protocol.data_received(end.inbox.popleft())  # type: ignore[union-attr]

    # -- closing ---------------------------------------------------------------------------------
    def close_end(self, connection: SimConnection, end: ConnectionEnd, *, reset: bool) -> None:
        """``end`` closes (FIN after what it wrote) or aborts (RST: what it wrote is dropped)."""
        if end.closed:
            return
        end.closed = True
        out = connection.pipe_from(end)
        if reset:
            out.queue.clear()
        peer = connection.server if end is connection.client else connection.client
        if not peer.closed:
            self._enqueue(out, _EOF, ConnectionResetError(104, "Connection reset by peer") if reset else None)
        self.loop.call_soon(_connection_lost, end, None, context=end.context)
        self._forget_if_done(connection)

    def _lost(self, connection: SimConnection, end: ConnectionEnd, exc: Exception | None) -> None:
        if not end.closed:
            end.closed = True
            _connection_lost(end, exc)
        self._forget_if_done(connection)

    def break_connection(self, connection: SimConnection) -> None:
        """Lose the whole connection: both ends see a reset, what was in flight is gone."""
        self.broken += 1
        for end in (connection.client, connection.server):
            connection.pipe_from(end).queue.clear()
        for end in (connection.client, connection.server):
            if not end.closed:
                end.closed = True
                reset = ConnectionResetError(104, "Connection reset by peer")
                self.loop.call_soon(_connection_lost, end, reset, context=end.context)
        self._forget_if_done(connection)

    def hold_answers(self, connection: SimConnection, seconds: float) -> None:
        """Hold what the server writes on ``connection`` for ``seconds`` (its answers late)."""
        self._hold(connection.down, max(connection.down.held_until, self.loop.time() + seconds))

    def lose_answers(self, connection: SimConnection) -> None:
        """The connection breaks with its answers lost: what the client sent still reaches the
        server (which processes it), the answers on their way back are gone, and the client sees
        a reset now (a return path that died, then the RST): its requests' outcome is unknown."""
        self.broken += 1
        client, server = connection.client, connection.server
        connection.down.queue.clear()
        if not client.closed:
            client.closed = True
            reset = ConnectionResetError(104, "Connection reset by peer")
            self.loop.call_soon(_connection_lost, client, reset, context=client.context)
        if not server.closed:
            self._enqueue(connection.up, _EOF, ConnectionResetError(104, "Connection reset by peer"))
        self._forget_if_done(connection)

    def stall(self, connection: SimConnection, seconds: float) -> None:
        """Hold what the client writes on ``connection`` for ``seconds`` (TCP's retransmission
        backoff on one flow after a lost segment): its requests reach the server late, in order,
        even after the client gave up and closed it, while new connections flow freely."""
        self._hold(connection.up, max(connection.up.held_until, self.loop.time() + seconds))

    def unstall(self, connection: SimConnection) -> None:
        self._hold(connection.up, 0.0)

    def _hold(self, pipe: _Pipe, until: float) -> None:
        pipe.held_until = until
        if pipe.timer is not None:
            pipe.timer.cancel()
            pipe.timer = None
        if pipe.queue:
            self._arm(pipe)

    def kill_node(self, node: str) -> None:
        """The node's process died: its listeners go, its peers get what it wrote, then a FIN;
        nothing more is delivered to it and none of its protocols is called again."""
        for address, acceptor in list(self._listeners.items()):
            if acceptor.node == node:
                del self._listeners[address]
        for connection in list(self.connections):
            for end, peer in ((connection.client, connection.server), (connection.server, connection.client)):
                if end.node == node and not end.closed:
                    end.closed = True
                    connection.pipe_from(peer).queue.clear()
                    if not peer.closed:
                        self._enqueue(connection.pipe_from(end), _EOF, None)
            self._forget_if_done(connection)

    def connections_of(self, node: str) -> Iterator[SimConnection]:
        return (c for c in self.connections if node in c.nodes)

    def _forget_if_done(self, connection: SimConnection) -> None:
        if (
            connection.client.closed
            and connection.server.closed
            and not connection.up.queue
            and not connection.down.queue
            and connection in self.connections
        ):
            self.connections.remove(connection)


def _connection_lost(end: ConnectionEnd, exc: Exception | None) -> None:
    if end.protocol is not None:
        end.protocol.connection_lost(exc)
