"""The Acceptor: the listening socket of one listener (Kafka's ``SocketServer.Acceptor``, one per
EndPoint since KIP-103; docs/design.md "Broker").

It accepts connections and hands each, round-robin, to one of the processors; after that the
connection belongs to the processor. :class:`~broker.network.quotas.ConnectionQuotas` enforces
``max.connections``: a connection over the limit is closed as soon as it is made.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator, Sequence

from broker.network.processor import Connection, Processor
from broker.network.quotas import ConnectionQuotas

log = logging.getLogger(__name__)


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
    ) -> None:
        if not processors:
            raise ValueError("an acceptor needs at least one processor")
        self.host, self.port, self.backlog = host, port, backlog
        self.listener_name = listener_name
        self.processors = list(processors)
        self.quotas = quotas
        self._next_processor = itertools.cycle(self.processors)
        self._indexes = indexes if indexes is not None else itertools.count()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Bind and listen; returns the bound port (useful when asked for port 0). An empty host
        binds every interface, as Kafka's does."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.host or "0.0.0.0", self.port, backlog=self.backlog, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info(
            "listener %s listening on %s:%d with %d processors",
            self.listener_name,
            self.host or "*",
            self.port,
            len(self.processors),
        )
        return self.port

    def _new_connection(self) -> Connection:
        return next(self._next_processor).new_connection(self.quotas, next(self._indexes), self.listener_name)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def wait_closed(self) -> None:
        """Wait until the listening socket is closed (call after the connections are closed)."""
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self.quotas.log_limiter.flush()
