"""The broker's network layer, wired (Kafka's ``SocketServer``; docs/design.md "Broker"): one
Acceptor per listener (KIP-103), ``num.network.threads`` Processors shared by them, a RequestChannel and ``num.io.threads`` request
handlers feeding an injected API handler. It knows nothing of logs, partitions or ZooKeeper.

Why tasks on one loop, not threads: in CPython the GIL lets only one thread run Python code, and
everything here (msgpack decoding, validation, the API layer) is Python code, so threads would add
locking and cross-thread wake-ups without adding CPU. The pipeline's worth is isolation (a bad
connection only hurts itself), backpressure (a bounded request queue), fairness (round-robin
processors, FIFO admission) and ordering (a muted connection answers in request order); tasks on
the broker's uvloop loop give all four. Blocking disk work belongs in an executor, not here.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import NamedTuple

from broker.network.acceptor import Acceptor
from broker.network.handlers import ApiHandler, RequestHandlerPool
from broker.network.log_limiter import LogLimiter
from broker.network.metrics import NetworkMetrics
from broker.network.processor import Processor
from broker.network.quotas import ConnectionQuotas
from broker.network.request_channel import RequestChannel

log = logging.getLogger(__name__)


class Listener(NamedTuple):
    """One address to bind (a ``listeners`` entry): its name, host ("" = every interface) and port
    (0 = an ephemeral port; SocketServer.bound_ports holds the bound one)."""

    name: str
    host: str
    port: int


@dataclass(frozen=True)
class NetworkConfig:
    """The network settings of docs/operations.md "Broker configuration" (``listeners``,
    ``num.network.threads`` and friends)."""

    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    num_network_threads: int = 3
    num_io_threads: int = 8
    queued_max_requests: int = 500
    socket_request_max_bytes: int = 104857600
    max_connections: int = 2**31 - 1
    connections_max_idle_ms: int = 600000


class SocketServer:
    """Start with :meth:`start`, stop with :meth:`stop`; requests go to ``api_handler``."""

    def __init__(
        self, config: NetworkConfig, api_handler: ApiHandler, metrics: NetworkMetrics | None = None
    ) -> None:
        for name in (
            "num_network_threads",
            "num_io_threads",
            "queued_max_requests",
            "socket_request_max_bytes",
        ):
            if getattr(config, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not config.listeners:
            raise ValueError("a socket server needs at least one listener")
        self.config = config
        self.api_handler = api_handler
        self.metrics = metrics
        #: Listener name -> bound port, once started (Kafka's SocketServer.boundPort).
        self.bound_ports: dict[str, int] = {lst.name: lst.port for lst in config.listeners}
        self.channel: RequestChannel | None = None
        self.processors: list[Processor] = []
        self._handlers: RequestHandlerPool | None = None
        self._acceptors: list[Acceptor] = []
        self._quotas = ConnectionQuotas(config.max_connections)

    @property
    def port(self) -> int:
        """The first listener's bound port."""
        return self.bound_ports[self.config.listeners[0].name]

    @property
    def connection_count(self) -> int:
        return self._quotas.count

    @property
    def request_queue_size(self) -> int:
        return self.channel.request_queue_size if self.channel is not None else 0

    async def start(self) -> None:
        if self._acceptors:
            raise RuntimeError("the socket server is already started")
        config = self.config
        self.channel = RequestChannel(config.queued_max_requests, config.num_network_threads)
        self.processors = [
            Processor(
                i,
                self.channel,
                config.socket_request_max_bytes,
                config.connections_max_idle_ms,
                self.metrics,
                LogLimiter(logging.getLogger(f"{Processor.__module__}.{i}")),
            )
            for i in range(config.num_network_threads)
        ]
        for processor in self.processors:
            processor.start()
        self._handlers = RequestHandlerPool(
            self.channel, self.api_handler, config.num_io_threads, self.metrics
        )
        self._handlers.start()
        indexes = itertools.count()  # connection indexes unique across the acceptors
        self._acceptors = [
            Acceptor(
                lst.host, lst.port, self.processors, self._quotas, listener_name=lst.name, indexes=indexes
            )
            for lst in config.listeners
        ]
        try:
            for acceptor in self._acceptors:
                self.bound_ports[acceptor.listener_name] = await acceptor.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop accepting, close every connection, stop the tasks. Safe to call twice."""
        for acceptor in self._acceptors:
            acceptor.stop_accepting()
        for processor in self.processors:
            await processor.stop()
        if self._handlers is not None:
            await self._handlers.stop()
            self._handlers = None
        if self.channel is not None:
            self.channel.close()
        for acceptor in self._acceptors:
            await acceptor.wait_closed()
        self._acceptors = []
        self.processors = []
