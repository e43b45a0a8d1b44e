"""The broker's network layer, wired (Kafka's ``SocketServer``; docs/design.md "Broker"): one
Acceptor, ``num.network.threads`` Processors, a RequestChannel and ``num.io.threads`` request
handlers feeding an injected API handler. It knows nothing of logs, partitions or ZooKeeper.

Why tasks on one loop, not threads: in CPython the GIL lets only one thread run Python code, and
everything here (msgpack decoding, validation, the API layer) is Python code, so threads would add
locking and cross-thread wake-ups without adding CPU. The pipeline's worth is isolation (a bad
connection only hurts itself), backpressure (a bounded request queue), fairness (round-robin
processors, FIFO admission) and ordering (a muted connection answers in request order); tasks on
the broker's uvloop loop give all four. Blocking disk work belongs in an executor, not here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from broker.network.acceptor import Acceptor
from broker.network.handlers import ApiHandler, RequestHandlerPool
from broker.network.log_limiter import LogLimiter
from broker.network.metrics import NetworkMetrics
from broker.network.processor import Processor
from broker.network.quotas import ConnectionQuotas
from broker.network.request_channel import RequestChannel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NetworkConfig:
    """The network settings of docs/operations.md "Broker configuration" (``num.network.threads`` and
    friends)."""

    host: str = "127.0.0.1"
    port: int = 9092  # 0 = an ephemeral port; SocketServer.port holds the bound one
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
        self.config = config
        self.api_handler = api_handler
        self.metrics = metrics
        self.port = config.port
        self.channel: RequestChannel | None = None
        self.processors: list[Processor] = []
        self._handlers: RequestHandlerPool | None = None
        self._acceptor: Acceptor | None = None
        self._quotas = ConnectionQuotas(config.max_connections)

    @property
    def connection_count(self) -> int:
        return self._quotas.count

    @property
    def request_queue_size(self) -> int:
        return self.channel.request_queue_size if self.channel is not None else 0

    async def start(self) -> None:
        if self._acceptor is not None:
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
        self._acceptor = Acceptor(config.host, config.port, self.processors, self._quotas)
        try:
            self.port = await self._acceptor.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop accepting, close every connection, stop the tasks. Safe to call twice."""
        if self._acceptor is not None:
            self._acceptor.stop_accepting()
        for processor in self.processors:
            await processor.stop()
        if self._handlers is not None:
            await self._handlers.stop()
            self._handlers = None
        if self.channel is not None:
            self.channel.close()
        if self._acceptor is not None:
            await self._acceptor.wait_closed()
            self._acceptor = None
        self.processors = []
