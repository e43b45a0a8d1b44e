"""A byte-rate throttler for the log cleaner's I/O (Kafka's ``kafka.utils.Throttler``, used by
the LogCleaner for ``log.cleaner.io.max.bytes.per.second``; docs/design.md "Log compaction").

Sans-IO: :meth:`Throttler.maybe_throttle` is told how many bytes were read or written and
returns how long to pause, and the caller sleeps (the cleaner awaits ``asyncio.sleep``, which is
virtual time under the simulator). The clock is injected.

Kafka's rule: once a check interval (100 ms) has passed since the period began, if the observed
rate exceeds the desired one, sleep for ``observed / rate - elapsed``, then start a new period.
Beyond Kafka, the check also runs as soon as the bytes observed owe more than one check interval
of sleep, so the bound holds against a clock that does not move while the work is done (a fake
clock, or the simulator's, where work in an executor takes no virtual time).
"""

from __future__ import annotations

from collections.abc import Callable

CHECK_INTERVAL_MS = 100


class Throttler:
    def __init__(
        self,
        desired_rate_per_sec: float,
        time_ms: Callable[[], int],
        check_interval_ms: int = CHECK_INTERVAL_MS,
    ) -> None:
        if desired_rate_per_sec <= 0:
            raise ValueError(f"the desired rate must be positive, got {desired_rate_per_sec}")
        self.desired_rate_per_sec = desired_rate_per_sec
        self.check_interval_ms = check_interval_ms
        self._time_ms = time_ms
        self._period_start_ms = time_ms()
        self._observed = 0.0
        #: total time this throttler asked its caller to sleep
        self.throttled_ms = 0

    def maybe_throttle(self, observed: float) -> int:
        """Count ``observed`` bytes; return the milliseconds to sleep now (0: go on)."""
        self._observed += observed
        now = self._time_ms()
        elapsed_ms = now - self._period_start_ms
        owed_ms = self._observed * 1000 / self.desired_rate_per_sec
        if self._observed <= 0 or (
            elapsed_ms <= self.check_interval_ms and owed_ms <= self.check_interval_ms
        ):
            return 0
        sleep_ms = 0
        if owed_ms > elapsed_ms:  # faster than desired: nap until the average is the desired rate
            sleep_ms = round(owed_ms - elapsed_ms)
        self._period_start_ms = now + sleep_ms
        self._observed = 0.0
        self.throttled_ms += sleep_ms
        return sleep_ms
