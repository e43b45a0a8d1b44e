"""A rate limit for log lines about misbehaving clients (docs/guarantees.md "Bad input loses
nothing"): a token bucket, so a flood of garbage from one client costs a few log lines and a count,
not megabytes. Used by the processors (rejected frames, idle connections) and by
:class:`~broker.network.quotas.ConnectionQuotas` (refused connections over ``max.connections``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class LogLimiter:
    """A token bucket for log lines about misbehaving clients; it counts the lines it drops and
    reports the count on the next line it lets through (or on :meth:`flush`)."""

    def __init__(
        self,
        logger: logging.Logger,
        burst: int = 20,
        per_second: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.burst, self.per_second, self.clock = logger, burst, per_second, clock
        self._tokens = float(burst)
        self._last = clock()
        self.suppressed = 0

    def log(self, level: int, msg: str, *args: object) -> bool:
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens < 1:
            self.suppressed += 1
            return False
        self._tokens -= 1
        if self.suppressed:
            msg, args = msg + " (%d similar lines suppressed)", (*args, self.suppressed)
            self.suppressed = 0
        self.logger.log(level, msg, *args)
        return True

    def flush(self) -> None:
        if self.suppressed:
            self.logger.warning("%d log lines about rejected clients were suppressed", self.suppressed)
            self.suppressed = 0
