"""Processors: each owns a set of connections, turns their bytes into Requests and writes the
Responses back (Kafka's ``SocketServer.Processor``; docs/design.md "Broker").

A :class:`Connection` is the asyncio.Protocol of one accepted socket. It feeds bytes to a
:class:`~broker.network.receive.FrameReceive` (an oversize length closes the connection before
the body is buffered), asks the :class:`~broker.network.memory_pool.MemoryPool` for the frame's
bytes once its length is in (``queued.max.request.bytes``; until the pool grants them the
connection stops reading, so at most one socket read of a frame is buffered ungranted; the grant
is released when the request is answered), decodes the header (no readable correlation id: close), validates the body (bad shape, unknown
API, unsupported version: an error response at once, the connection stays usable; the listener's
:mod:`wire codec <broker.network.wire_codec>` decides), and puts a
:class:`Request` on the :class:`RequestChannel`. While that request is in flight the connection is
*muted*: further frames stay in the decoder, and reading pauses once more than
``MUTED_BUFFER_BYTES`` are waiting, so responses leave in request order. Reading also pauses while
the request queue is full (backpressure) and while the socket's write buffer is over its high-water
mark (a client that does not read its responses).

A :class:`Processor` is one task draining its response queue: it writes each response, unmutes the
connection and lets it process its next buffered frame. Idle connections (no bytes either way and
nothing in flight for ``connections.max.idle.ms``) are closed by a per-connection timer.

Misbehaving clients are logged through a :class:`~broker.network.log_limiter.LogLimiter` (a token
bucket per processor) and at most ``LOGGED_REJECTS_PER_CONNECTION`` lines per connection, so a
flood of garbage costs a few log lines and a count, not megabytes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping

from broker.network.log_limiter import LogLimiter
from broker.network.memory_pool import MemoryPool
from broker.network.metrics import NetworkMetrics
from broker.network.quotas import ConnectionQuotas
from broker.network.receive import FrameReceive
from broker.network.request_channel import Request, RequestChannel, Response
from broker.network.wire_codec import MSGPACK_CODEC, FrameRejected, WireCodec
from client.protocol.framing import FrameTooLarge

log = logging.getLogger(__name__)

#: A muted connection stops reading once this many bytes wait in its decoder.
MUTED_BUFFER_BYTES = 64 * 1024
#: Rejected frames logged per connection; the rest are counted and summarised at close.
LOGGED_REJECTS_PER_CONNECTION = 3


class Connection(asyncio.Protocol):
    """One client socket, owned by one :class:`Processor`."""

    def __init__(
        self,
        processor: Processor,
        quotas: ConnectionQuotas,
        index: int,
        listener_name: str = "PLAINTEXT",
        address: str = "?",
        codec: WireCodec = MSGPACK_CODEC,
    ) -> None:
        self.processor = processor
        self.codec = codec
        self.quotas = quotas  # the acceptor counted this connection from ``address`` already
        self.index = index
        self.listener_name = listener_name
        self.address = address
        self.connection_id = f"?-?-{index}"
        self.client_address = "?"
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameReceive(processor.max_frame_bytes)
        self.in_flight: Request | None = None  # muted while set
        self.last_activity = 0.0
        self.closed = asyncio.get_running_loop().create_future()
        #: connection_made ran: the quota slot is released at connection_lost.
        self.started = False
        self._granted = 0  # pool bytes granted to the frame at the head of the decoder
        self._held = 0  # pool bytes held by the in-flight request
        self._pool_waiting = False
        self._closing = False
        self._blocked = False  # request waiting for room in the request queue
        self._write_paused = False
        self._read_paused = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self.rejected = 0

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("?", 0)
        self.client_address = f"{peer[0]}:{peer[1]}"
        self.connection_id = f"{local[0]}:{local[1]}-{self.client_address}-{self.index}"
        self.started = True
        self.processor.connection_event(self.listener_name, "created")
        self.processor.register(self)
        self.last_activity = self.processor.loop.time()
        self._arm_idle_timer(self.processor.idle_seconds)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self.last_activity = self.processor.loop.time()
        if self.processor.metrics is not None:
            self.processor.metrics.on_bytes(len(data), 0)
        self.decoder.feed(data)
        self._process()

    def eof_received(self) -> bool:
        # Close our side too: like Kafka, no half-closed connections. Bytes left over while nothing
        # is in flight are a frame the client never finished.
        if (
            self.decoder.buffered
            and self.in_flight is None
            and not self._write_paused
            and not self._pool_waiting
            and not self._closing
        ):
            self._reject(
                "truncated_frame",
                "closed the connection mid-frame (%d bytes buffered)",
                self.decoder.buffered,
            )
        return False

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self.started:
            self.started = False
            self.quotas.release(self.address, self.listener_name)
            self.processor.connection_event(self.listener_name, "closed")
            pool = self.processor.pool
            if self._pool_waiting:
                pool.withdraw(self)
                self._pool_waiting = False
            if self._granted or self._held:
                granted, self._granted, held, self._held = self._granted, 0, self._held, 0
                for size in (granted, held):
                    if size:
                        pool.release(size)
            self.processor.unregister(self)
            if self.in_flight is not None and self._blocked:
                self.processor.channel.withdraw(self.in_flight)
            if self.rejected > LOGGED_REJECTS_PER_CONNECTION:
                self.processor.log_limiter.log(
                    logging.WARNING,
                    "connection %s closed after %d rejected frames (%d not logged)",
                    self.connection_id,
                    self.rejected,
                    self.rejected - LOGGED_REJECTS_PER_CONNECTION,
                )
        if not self.closed.done():
            self.closed.set_result(None)

    # -- reading ----------------------------------------------------------------------------------
    def _process(self) -> None:
        """Handle buffered frames until one becomes an in-flight request, waits for the memory
        pool, or data runs out."""
        decoder = self.decoder
        while self.in_flight is None and not self._closing and not self._write_paused:
            if self._pool_waiting:
                break
            if not self._granted:
                try:
                    size = decoder.frame_size()
                except FrameTooLarge as exc:
                    self._reject("oversize_frame", "%s", exc, close=True)
                    return
                if size is None:
                    break
                if not self.processor.pool.try_allocate(size):
                    self._pool_waiting = True
                    self.processor.pool.wait(self, size, functools.partial(self._on_granted, size))
                    break
                self._granted = size
            payload = decoder.take(self._granted)
            if payload is None:
                break
            self._held, self._granted = self._granted, 0
            self._handle_frame(payload)
            if self.in_flight is None:  # answered at once (or closed): nothing holds the bytes
                self._release_held()
        self._update_reading()

    def _on_granted(self, size: int) -> None:
        """The pool took ``size`` bytes for the frame this connection waits on (called from
        another connection's release; the frame is processed on the next loop iteration)."""
        self._pool_waiting = False
        self._granted = size
        if not self._closing:
            self.processor.loop.call_soon(self._process)

    def _release_held(self) -> None:
        if self._held:
            held, self._held = self._held, 0
            self.processor.pool.release(held)

    def _handle_frame(self, payload: bytes) -> None:
        try:
            decoded = self.codec.decode(payload)
        except FrameRejected as exc:
            if exc.answer is not None:
                self.write(exc.answer)
            self._reject(exc.kind, "%s", exc, close=exc.close)
            return
        except Exception as exc:  # a codec bug must not take the connection's processor down
            self._reject(
                "bad_header", "cannot decode the frame: %s: %s", exc.__class__.__name__, exc, close=True
            )
            return
        header = decoded.header
        request = Request(
            header=header,
            api_key=decoded.api_key,
            body=decoded.body,
            connection_id=self.connection_id,
            client_address=self.client_address,
            processor_id=self.processor.id,
            received_ms=self.processor.monotonic() * 1000,
            listener_name=self.listener_name,
            codec=self.codec,
            codec_context=decoded.context,
            _channel=self.processor.channel,
        )
        self.in_flight = request
        if not self.processor.channel.send_request(request, self._on_admitted):
            self._blocked = True

    def _on_admitted(self) -> None:
        self._blocked = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closing or self.transport is None:
            return
        pause = (
            self._blocked
            or self._write_paused
            or self._pool_waiting
            or (self.in_flight is not None and self.decoder.buffered >= MUTED_BUFFER_BYTES)
        )
        if pause and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        elif not pause and self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    # -- writing (called by the processor task) ---------------------------------------------------
    def complete(self, response: Response) -> None:
        if self._closing:
            return
        if response.request is not self.in_flight:
            log.warning(
                "dropping a response on %s that does not match its in-flight request", self.connection_id
            )
            return
        self.in_flight = None
        self._release_held()
        if response.payload is not None:
            self.write(response.payload)
        if response.close:
            self.close()
            return
        self._process()

    def write(self, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(payload)
        self.last_activity = self.processor.loop.time()
        if self.processor.metrics is not None:
            self.processor.metrics.on_bytes(0, len(payload))

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            if self.transport is not None:
                self.transport.close()

    def abort(self) -> None:
        self._closing = True
        if self.transport is not None:
            self.transport.abort()

    # -- rejections and idleness ------------------------------------------------------------------
    def _reject(self, kind: str, reason: str, *args: object, close: bool = False) -> None:
        self.rejected += 1
        if self.processor.metrics is not None:
            self.processor.metrics.on_error(kind)
        if self.rejected <= LOGGED_REJECTS_PER_CONNECTION:
            self.processor.log_limiter.log(
                logging.WARNING,
                "rejected frame from %s (%s): " + reason + ("; closing the connection" if close else ""),
                self.client_address,
                self.connection_id,
                *args,
            )
        if close:
            self.close()

    def _arm_idle_timer(self, delay: float) -> None:
        self._idle_timer = self.processor.loop.call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        if self._closing:
            return
        idle_for = self.processor.loop.time() - self.last_activity
        limit = self.processor.idle_seconds
        if self.in_flight is not None or idle_for < limit:
            self._arm_idle_timer(limit if self.in_flight is not None else limit - idle_for)
            return
        if self.processor.metrics is not None:
            self.processor.metrics.on_error("idle_timeout")
        self.processor.log_limiter.log(
            logging.INFO, "closing idle connection %s (no traffic for %.3f s)", self.connection_id, idle_for
        )
        self.close()


class Processor:
    """Owns connections and drains its response queue in one task."""

    def __init__(
        self,
        processor_id: int,
        channel: RequestChannel,
        max_frame_bytes: int,
        connections_max_idle_ms: int,
        metrics: NetworkMetrics | None = None,
        log_limiter: LogLimiter | None = None,
        pool: MemoryPool | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        codecs: Mapping[str, WireCodec] | None = None,
    ) -> None:
        """``monotonic`` times requests (seconds; the simulator passes its virtual clock);
        ``codecs`` maps a listener name to its wire codec (msgpack when absent)."""
        self.id = processor_id
        self.codecs = dict(codecs or {})
        self.monotonic = monotonic
        self.channel = channel
        self.max_frame_bytes = max_frame_bytes
        self.idle_seconds = connections_max_idle_ms / 1000
        self.metrics = metrics
        #: ``queued.max.request.bytes``, shared by the processors of one socket server.
        self.pool = pool if pool is not None else MemoryPool(None)
        # sinks written before the connection metrics have no on_connection
        self._on_connection = getattr(metrics, "on_connection", None)
        self.log_limiter = log_limiter or LogLimiter(log)
        self.connections: dict[str, Connection] = {}
        self.loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def new_connection(
        self, quotas: ConnectionQuotas, index: int, listener_name: str = "PLAINTEXT", address: str = "?"
    ) -> Connection:
        """The protocol for a socket from ``address`` the acceptor of ``listener_name`` just
        accepted (and counted in ``quotas``)."""
        codec = self.codecs.get(listener_name, MSGPACK_CODEC)
        return Connection(self, quotas, index, listener_name, address, codec)

    def connection_event(self, listener_name: str, event: str) -> None:
        """Kafka's connection-creation and connection-close meters, per listener."""
        if self._on_connection is not None:
            self._on_connection(listener_name, event)

    def register(self, connection: Connection) -> None:
        self.connections[connection.connection_id] = connection
        if self._stopping:  # accepted just as the server stopped
            connection.close()

    def unregister(self, connection: Connection) -> None:
        self.connections.pop(connection.connection_id, None)

    def start(self) -> None:
        self._task = self.loop.create_task(self._run(), name=f"network-processor-{self.id}")

    async def _run(self) -> None:
        queue = self.channel.response_queue(self.id)
        while True:
            response = await queue.get()
            self._send(response)
            while not queue.empty():
                self._send(queue.get_nowait())

    def _send(self, response: Response) -> None:
        request = response.request
        connection = self.connections.get(request.connection_id)
        if connection is None:
            log.debug("dropping response to %s: connection closed", request.connection_id)
            return
        try:
            connection.complete(response)
        except Exception:  # one broken connection must not stop the processor
            log.exception("failed to send a response on %s", request.connection_id)
            connection.abort()
            return
        if self.metrics is not None:
            self.metrics.on_request(request.api_key, self.monotonic() * 1000 - request.received_ms)

    async def stop(self, grace: float = 1.0) -> None:
        """Close every connection (flushing what was written), then stop the task."""
        self._stopping = True
        connections = list(self.connections.values())
        for connection in connections:
            connection.close()
        waiting = [c.closed for c in connections if not c.closed.done()]
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=grace)
            for connection in connections:
                if not connection.closed.done():
                    connection.abort()
            if pending:
                await asyncio.wait(pending, timeout=grace)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.log_limiter.flush()
