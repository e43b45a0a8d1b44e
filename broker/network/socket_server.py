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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker.network.acceptor import Acceptor
from broker.network.handlers import ApiHandler, RequestHandlerPool
from broker.network.log_limiter import LogLimiter
from broker.network.memory_pool import MemoryPool
from broker.network.metrics import NetworkMetrics
from broker.network.processor import Processor
from broker.network.quotas import ConnectionQuotas
from broker.network.request_channel import RequestChannel
from broker.network.wire_codec import WireCodec

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
    ``num.network.threads`` and friends). broker/config.py derives the connection limits from
    the file budget when they are not set; built directly, they are unbounded (Kafka's)."""

    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    num_network_threads: int = 3
    num_io_threads: int = 8
    queued_max_requests: int = 500
    socket_request_max_bytes: int = 104857600
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    #: ``max.connections.per.ip.overrides``: (address, limit) pairs.
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    connections_max_idle_ms: int = 600000
    #: ``queued.max.request.bytes`` (None: unbounded, Kafka's -1).
    queued_max_request_bytes: int | None = 200 * 1024 * 1024
    #: The inter-broker listener: exempt from ``max_connections`` when there are several listeners.
    inter_broker_listener: str | None = None
    accept_backoff_ms: tuple[int, int] = field(default=(50, 1000))


#: Makes a listener's acceptor, with :class:`Acceptor`'s arguments; the simulator passes one whose
#: connections come from its simulated network instead of a listening socket.
AcceptorFactory = Callable[..., Any]


class SocketServer:
    """Start with :meth:`start`, stop with :meth:`stop`; requests go to ``api_handler``."""

    def __init__(
        self,
        config: NetworkConfig,
        api_handler: ApiHandler,
        metrics: NetworkMetrics | None = None,
        acceptor_factory: AcceptorFactory = Acceptor,
        monotonic: Callable[[], float] = time.monotonic,
        codecs: Mapping[str, WireCodec] | None = None,
    ) -> None:
        """``codecs``: the wire codec of each listener by name (broker/network/wire_codec.py;
        msgpack for a listener not named)."""
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
        self.acceptor_factory = acceptor_factory
        self.monotonic = monotonic
        self.codecs = dict(codecs or {})
        #: Listener name -> bound port, once started (Kafka's SocketServer.boundPort).
        self.bound_ports: dict[str, int] = {lst.name: lst.port for lst in config.listeners}
        self.channel: RequestChannel | None = None
        self.processors: list[Processor] = []
        self._handlers: RequestHandlerPool | None = None
        self._acceptors: list[Acceptor] = []
        self._quotas = ConnectionQuotas(
            config.max_connections,
            config.max_connections_per_ip,
            dict(config.max_connections_per_ip_overrides),
            config.inter_broker_listener,
            len(config.listeners),
        )
        #: The request memory pool (``queued.max.request.bytes``) the processors share.
        self.pool = MemoryPool(config.queued_max_request_bytes)

    @property
    def port(self) -> int:
        """The first listener's bound port."""
        return self.bound_ports[self.config.listeners[0].name]

    @property
    def connection_count(self) -> int:
        return self._quotas.count

    @property
    def quotas(self) -> ConnectionQuotas:
        return self._quotas

    @property
    def acceptors(self) -> list[Acceptor]:
        return list(self._acceptors)

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
                self.pool,
                self.monotonic,
                self.codecs,
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
        backoff_ms, max_backoff_ms = config.accept_backoff_ms
        self._acceptors = [
            self.acceptor_factory(
                lst.host,
                lst.port,
                self.processors,
                self._quotas,
                listener_name=lst.name,
                indexes=indexes,
                metrics=self.metrics,
                backoff_s=backoff_ms / 1000,
                max_backoff_s=max_backoff_ms / 1000,
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
