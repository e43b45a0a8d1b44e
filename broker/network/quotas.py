"""Connection quotas: ``max.connections`` (Kafka's ``SocketServer.ConnectionQuotas``).

The acceptor's connections count against the limit as they are made; one over it is closed at
once, with a rate-limited log line (:class:`~broker.network.log_limiter.LogLimiter`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from broker.network.log_limiter import LogLimiter

log = logging.getLogger(__name__)


@dataclass
class ConnectionQuotas:
    """Counts live connections against ``max.connections`` (Kafka's ConnectionQuotas)."""

    max_connections: int
    log_limiter: LogLimiter = field(default_factory=lambda: LogLimiter(log))
    count: int = 0
    rejected: int = 0

    def try_acquire(self, client_address: str) -> bool:
        if self.count >= self.max_connections:
            self.rejected += 1
            self.log_limiter.log(
                logging.WARNING,
                "refused connection from %s: max.connections=%d reached (%d refused so far)",
                client_address,
                self.max_connections,
                self.rejected,
            )
            return False
        self.count += 1
        return True

    def release(self) -> None:
        self.count -= 1
