"""The Acceptor: the listening socket of one listener (Kafka's ``SocketServer.Acceptor``, one per
EndPoint since KIP-103; docs/design.md "Broker").

It accepts connections itself (a reader on the listening socket, not ``loop.create_server``) so
that it decides what happens at the limits:

- each accepted socket is counted by :class:`~broker.network.quotas.ConnectionQuotas` before it
  gets a transport; one over ``max.connections`` or ``max.connections.per.ip`` is closed at once
  and counted (Kafka closes it the same way for the per-address limit);
- when ``accept()`` meets EMFILE, ENFILE, ENOBUFS or ENOMEM (the process or the system is out of
  file descriptors or buffers) the acceptor counts it (``accept_<errno>`` in the network errors),
  stops reading the listening socket and tries again after a back-off that doubles from
  ``backoff_s`` up to ``max_backoff_s``: the connections wait in the kernel's backlog instead of
  being accepted and dropped (libuv's EMFILE trick under ``create_server``) or retried in a busy
  loop, and nothing else (no log dir, no ZooKeeper session) is touched. Kafka's Acceptor logs and
  carries on.

An admitted connection is handed, round-robin, to one of the processors; after that it belongs to
the processor.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import socket
from collections.abc import Iterator, Sequence

from broker.network.metrics import NetworkMetrics
from broker.network.processor import Connection, Processor
from broker.network.quotas import ConnectionQuotas

log = logging.getLogger(__name__)

#: accept() errors that mean "out of resources, try later" (asyncio's own list).
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: accept() errors about one connection (reset before it was accepted): skip it.
CONNECTION_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})
#: Connections accepted per wake-up of the listening socket before yielding to the loop.
ACCEPTS_PER_WAKEUP = 64


class Acceptor:
    """Binds the listening socket and deals accepted connections out to processors."""

    def __init__(
        self,
        host: str,
        port: int,
        processors: Sequence[Processor],
        quotas: ConnectionQuotas,
        backlog: int = 1024,
        listener_name: str = "PLAINTEXT",
        indexes: Iterator[int] | None = None,
        metrics: NetworkMetrics | None = None,
        backoff_s: float = 0.05,
        max_backoff_s: float = 1.0,
    ) -> None:
        if not processors:
            raise ValueError("an acceptor needs at least one processor")
        self.host, self.port, self.backlog = host, port, backlog
        self.listener_name = listener_name
        self.processors = list(processors)
        self.quotas = quotas
        self.metrics = metrics
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self._next_backoff = backoff_s
        self._next_processor = itertools.cycle(self.processors)
        self._indexes = indexes if indexes is not None else itertools.count()
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._retry: asyncio.TimerHandle | None = None
        self._handshakes: set[asyncio.Task[object]] = set()
        #: accept() calls that met a resource error (each followed by a back-off).
        self.resource_errors = 0

    async def start(self) -> int:
        """Bind and listen; returns the bound port (useful when asked for port 0). An empty host
        binds every interface, as Kafka's does."""
        self._loop = asyncio.get_running_loop()
        host = self.host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, self.port), family=family, backlog=self.backlog)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._start_reading()
        log.info(
            "listener %s listening on %s:%d with %d processors",
            self.listener_name,
            self.host or "*",
            self.port,
            len(self.processors),
        )
        return self.port

    def _start_reading(self) -> None:
        self._retry = None
        if self._sock is not None and self._loop is not None and not self._reading:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
            self._reading = True

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in CONNECTION_ERRNOS:
                    continue
                self._back_off(exc)
                return
            self._next_backoff = self.backoff_s
            self._admit(conn, address)

    def _back_off(self, exc: OSError) -> None:
        """Stop accepting for a while: the pending connections stay in the backlog."""
        self.resource_errors += 1
        name = errno.errorcode.get(exc.errno or 0, "error").lower()
        if self.metrics is not None:
            self.metrics.on_error(f"accept_{name}")
        delay = self._next_backoff
        self._next_backoff = min(self.max_backoff_s, delay * 2)
        self.quotas.log_limiter.log(
            logging.WARNING,
            "listener %s: accept() failed (%s); not accepting for %.3f s (%d such failures)",
            self.listener_name,
            exc,
            delay,
            self.resource_errors,
        )
        self._stop_reading()
        if self._loop is not None:
            self._retry = self._loop.call_later(delay, self._start_reading)

    def _stop_reading(self) -> None:
        if self._reading and self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self._reading = False
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _admit(self, conn: socket.socket, address: tuple) -> None:
        ip = str(address[0]) if address else "?"
        refused = self.quotas.try_acquire(ip, self.listener_name)
        if refused is not None:
            conn.close()
            if self.metrics is not None:
                on_connection = getattr(self.metrics, "on_connection", None)
                if on_connection is not None:
                    on_connection(self.listener_name, refused)
            return
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            conn.close()
            self.quotas.release(ip, self.listener_name)
            return
        processor = next(self._next_processor)
        protocol = processor.new_connection(self.quotas, next(self._indexes), self.listener_name, ip)
        assert self._loop is not None
        task = self._loop.create_task(self._hand_over(conn, protocol, ip))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _hand_over(self, conn: socket.socket, protocol: Connection, ip: str) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, conn)
        except BaseException as exc:
            conn.close()
            if not protocol.started:  # connection_made never ran: the slot is ours to give back
                self.quotas.release(ip, self.listener_name)
            if not isinstance(exc, Exception):
                raise
            log.debug("listener %s: could not set up a connection from %s: %s", self.listener_name, ip, exc)

    def stop_accepting(self) -> None:
        self._stop_reading()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def wait_closed(self) -> None:
        """Wait until connections being set up are settled (call after the connections are closed)."""
        for task in list(self._handshakes):
            task.cancel()
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)
        self.quotas.log_limiter.flush()
