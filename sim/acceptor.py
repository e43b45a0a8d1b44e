"""A listener of a simulated broker (docs/design.md "Simulation"): Kafka's ``Acceptor`` over
the simulated network (sim/network.py), with the arguments of
:class:`broker.network.acceptor.Acceptor`. Each connection :class:`sim.network.SimNetwork`
brings is counted by the broker's real connection quotas and handed to one of its real
processors, round-robin, as the real acceptor hands over accepted sockets.
"""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from sim.network import ConnectionEnd, SimConnection, SimNetwork


class SimAcceptor:
    """A listener of a simulated broker (Kafka's ``Acceptor``, with the arguments of
    :class:`broker.network.acceptor.Acceptor`): connections come from :class:`SimNetwork`, are
    counted by the real connection quotas and handed to the real processors, round-robin."""

    def __init__(
        self,
        network: SimNetwork,
        node: str,
        host: str,
        port: int,
        processors: Sequence[Any],
        quotas: Any,
        backlog: int = 1024,
        listener_name: str = "PLAINTEXT",
        indexes: Iterator[int] | None = None,
        **_: Any,
    ) -> None:
        if not processors:
            raise ValueError("an acceptor needs at least one processor")
        self.network, self.node = network, node
        self.host, self.port = host, port
        self.listener_name = listener_name
        self.quotas = quotas
        self._next_processor = itertools.cycle(processors)
        self._indexes = indexes if indexes is not None else itertools.count()
        self.context = contextvars.copy_context()

    async def start(self) -> int:
        self.context = contextvars.copy_context()  # the broker's: its connections' callbacks run in it
        self.network.listen(self)
        return self.port

    def accept(self, connection: SimConnection, server: ConnectionEnd) -> None:
        """A connection arrived: admit it (or close it at once, over a quota) and start it."""
        ip = connection.client.address[0]
        refused = self.quotas.try_acquire(ip, self.listener_name)
        if refused is not None:
            self.network.close_end(connection, server, reset=False)
            return
        processor = next(self._next_processor)
        protocol = processor.new_connection(self.quotas, next(self._indexes), self.listener_name, ip)
        server.protocol = protocol
        protocol.connection_made(server.transport)

    def stop_accepting(self) -> None:
        self.network.unlisten(self)

    async def wait_closed(self) -> None:
        pass
