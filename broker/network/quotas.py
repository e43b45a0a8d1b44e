"""Connection quotas: ``max.connections``, ``max.connections.per.ip`` and
``max.connections.per.ip.overrides`` (Kafka's ``SocketServer.ConnectionQuotas``, KIP-402's
protected inter-broker listener; docs/design.md "Broker").

Every connection an acceptor takes is counted here before it gets a transport; one over a limit
is closed at once, counted (``refused_max_connections``, ``refused_per_ip``) and logged through a
rate-limited :class:`~broker.network.log_limiter.LogLimiter`. As in Kafka, the broker-wide limit
does not apply to the inter-broker listener when the broker has more than one listener (a flood
on the client listener cannot starve replication or the controller); the per-address limit
applies everywhere.

Kafka's defaults are unbounded; here :func:`derived_connection_limits` derives them from the
file budget (the soft ``RLIMIT_NOFILE`` at start, broker/file_budget.py): client connections get
half of the quarter of the limit that the file budget keeps out of the replicas' share, the other
half staying with ZooKeeper, the inter-broker connections, checkpoint and snapshot writes and the
metrics endpoint, so a flood of idle connections runs into ``max.connections`` long before the
broker runs out of file descriptors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.network.log_limiter import LogLimiter

log = logging.getLogger(__name__)

#: The share of the open-file limit a derived ``max.connections`` takes: half of the quarter
#: broker/file_budget.py reserves for everything that is not a replica's files.
CONNECTION_SHARE = 8
#: The smallest derived ``max.connections`` (a tiny file budget still lets a few clients in).
MIN_DERIVED_CONNECTIONS = 16

REFUSED_MAX_CONNECTIONS = "refused_max_connections"
REFUSED_PER_IP = "refused_per_ip"


def derived_connection_limits(file_budget: int) -> tuple[int, int]:
    """The default ``(max.connections, max.connections.per.ip)`` for an open-file limit (the soft
    ``RLIMIT_NOFILE`` at start): ``max.connections = max(16, limit // 8)`` and
    ``max.connections.per.ip = max(1, max.connections // 2)``. Three quarters of the limit stay
    with the replicas' files, the rest of the last quarter with ZooKeeper, the inter-broker
    connections (exempt from ``max.connections`` on their own listener), checkpoints, the metrics
    endpoint."""
    max_connections = max(MIN_DERIVED_CONNECTIONS, file_budget // CONNECTION_SHARE)
    return max_connections, max(1, max_connections // 2)


@dataclass
class ConnectionQuotas:
    """Counts live connections per listener and per address against the limits (Kafka's
    ConnectionQuotas). ``protected_listener`` is the inter-broker listener's name: exempt from
    ``max_connections`` when there are ``listener_count`` > 1 listeners (Kafka's
    ``protectedListener``)."""

    max_connections: int
    max_connections_per_ip: int = 2**31 - 1
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    protected_listener: str | None = None
    listener_count: int = 1
    log_limiter: LogLimiter = field(default_factory=lambda: LogLimiter(log))
    count: int = 0
    rejected: int = 0
    by_listener: dict[str, int] = field(default_factory=dict)
    by_address: dict[str, int] = field(default_factory=dict)

    def update(
        self, max_connections: int, max_connections_per_ip: int, per_ip_overrides: Mapping[str, int]
    ) -> None:
        """New limits (dynamic broker configs, KIP-402's reconfigurable connection quotas): they
        apply to the next connection; connections already admitted stay, as in Kafka."""
        limits = (max_connections, max_connections_per_ip, dict(per_ip_overrides))
        if limits == (self.max_connections, self.max_connections_per_ip, dict(self.per_ip_overrides)):
            return
        self.max_connections, self.max_connections_per_ip, self.per_ip_overrides = limits
        log.info(
            "connection limits now max.connections=%d, max.connections.per.ip=%d, overrides %s",
            max_connections,
            max_connections_per_ip,
            dict(per_ip_overrides) or "none",
        )

    def _protected(self, listener: str) -> bool:
        return self.listener_count > 1 and listener == self.protected_listener

    def counted_toward_max(self) -> int:
        """Live connections that count against ``max.connections`` (not the protected listener's)."""
        if self.protected_listener is None or self.listener_count < 2:
            return self.count
        return self.count - self.by_listener.get(self.protected_listener, 0)

    def try_acquire(self, address: str, listener: str = "PLAINTEXT") -> str | None:
        """Count a new connection from ``address`` (an IP, no port) on ``listener``; None when
        admitted, else the reason it was refused (the caller closes it)."""
        per_ip = self.per_ip_overrides.get(address, self.max_connections_per_ip)
        if self.by_address.get(address, 0) >= per_ip:
            return self._refuse(REFUSED_PER_IP, address, listener, "max.connections.per.ip", per_ip)
        if not self._protected(listener) and self.counted_toward_max() >= self.max_connections:
            return self._refuse(
                REFUSED_MAX_CONNECTIONS, address, listener, "max.connections", self.max_connections
            )
        self.count += 1
        self.by_listener[listener] = self.by_listener.get(listener, 0) + 1
        self.by_address[address] = self.by_address.get(address, 0) + 1
        return None

    def _refuse(self, reason: str, address: str, listener: str, key: str, limit: int) -> str:
        self.rejected += 1
        self.log_limiter.log(
            logging.WARNING,
            "refused connection from %s on listener %s: %s=%d reached (%d refused so far)",
            address,
            listener,
            key,
            limit,
            self.rejected,
        )
        return reason

    def release(self, address: str, listener: str = "PLAINTEXT") -> None:
        self.count -= 1
        self.by_listener[listener] -= 1
        left = self.by_address[address] - 1
        if left:
            self.by_address[address] = left
        else:
            del self.by_address[address]
