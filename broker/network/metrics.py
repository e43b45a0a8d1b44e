"""The network layer's metrics sink (docs/operations.md "Metrics"; Kafka's RequestMetrics and
SocketServer meters): processors report each answered request with its latency and the bytes they
read, the request handlers report the requests that failed, the acceptors the accept() failures
they backed off from (``accept_emfile`` and friends). A sink may also have ``on_connection``
(:class:`ConnectionMetrics`: Kafka's connection-creation and connection-close meters per listener,
and the connections refused at a limit). ``broker/metrics.py`` implements both; without a sink
nothing is counted.
"""

from __future__ import annotations

from typing import Protocol

from client.protocol.api import ApiKey


class NetworkMetrics(Protocol):
    """An optional sink for request, byte and error counts (broker/metrics.py implements it)."""

    def on_request(self, api_key: ApiKey, latency_ms: float) -> None: ...

    def on_bytes(self, received: int, sent: int) -> None: ...

    def on_error(self, kind: str) -> None: ...


class ConnectionMetrics(Protocol):
    """Optional part of a sink: ``event`` is ``created``, ``closed``, ``refused_max_connections``
    or ``refused_per_ip`` (broker/network/quotas.py)."""

    def on_connection(self, listener: str, event: str) -> None: ...
