"""The event-loop stall monitor and cooperative yields (docs/design.md "The controller at scale
(issue 25)"; docs/operations.md "Metrics (`/metrics`)").

Everything a broker does runs on one asyncio loop: the ZooKeeper session's heartbeats are
answered on kazoo's thread, but the watches, the controller, request handling, the replica
fetchers and their deadlines all wait for the loop. A synchronous step that holds the loop for
seconds (applying a LeaderAndIsr of thousands of partitions, encoding a huge frame) delays them
all, and one as long as a session timeout costs the broker its registration.

* :class:`LoopStallMonitor` measures it the way Node's ``monitorEventLoopDelay`` and Go's
  scheduler-latency probes do: a task sleeps ``interval`` and records how late it woke, by the
  injected monotonic clock (the simulator's virtual clock never runs late, so there it records
  nothing; the simulator turns it off so that its timers do not reshuffle the schedules). The
  worst lateness, a histogram of all of them and a warning for each stall of a second or more
  are what it offers; ``broker/metrics.py`` exposes them as
  ``floodmark_event_loop_stall_max_seconds`` and ``floodmark_event_loop_stall_seconds``.
* :class:`CooperativeYield` is how a long loop over partitions gives the loop back: it yields
  once ``budget_ms`` of the injected clock has passed since its last yield (by time, not count,
  so a cheap partition costs nothing and an expensive one cannot stack up; under the
  simulator's virtual clock it never yields).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Upper bounds of the stall histogram's buckets, in seconds (+Inf follows).
STALL_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: A stall this long is logged as a warning (ZooKeeper heartbeats and fetch deadlines suffer).
WARN_STALL_S = 1.0
#: What :class:`CooperativeYield` lets a loop run before it yields, by default.
YIELD_BUDGET_MS = 50


@dataclass
class StallStats:
    """What the monitor measured so far: the longest stall, and every wake-up's lateness as a
    cumulative histogram over STALL_BUCKETS_S (``buckets[i]`` counts those <= the i-th bound)."""

    max_s: float = 0.0
    count: int = 0
    sum_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(STALL_BUCKETS_S))

    def record(self, stall_s: float) -> None:
        self.max_s = max(self.max_s, stall_s)
        self.count += 1
        self.sum_s += stall_s
        for i in range(bisect.bisect_left(STALL_BUCKETS_S, stall_s), len(STALL_BUCKETS_S)):
            self.buckets[i] += 1


class LoopStallMonitor:
    """A task that sleeps ``interval_s`` again and again and records how late it woke up."""

    def __init__(self, interval_s: float, monotonic: Callable[[], float], name: str = "broker") -> None:
        self.interval_s = interval_s
        self.monotonic = monotonic
        self.name = name
        self.stats = StallStats()

    @classmethod
    def start(
        cls, config: Mapping[str, Any], monotonic: Callable[[], float], tasks: list[asyncio.Task]
    ) -> LoopStallMonitor | None:
        """The broker's monitor, running (its task added to ``tasks``, which the broker cancels
        at shutdown), every ``event.loop.stall.monitor.interval.ms``; None when that is 0."""
        interval_ms = config["event.loop.stall.monitor.interval.ms"]
        if interval_ms <= 0:
            return None
        monitor = cls(interval_ms / 1000, monotonic, f"KafkaServer id={config['broker.id']}")
        tasks.append(asyncio.get_running_loop().create_task(monitor.run(), name="loop-stall-monitor"))
        return monitor

    def snapshot(self) -> StallStats:
        """A copy, safe to read from the metrics server's thread."""
        s = self.stats
        return StallStats(s.max_s, s.count, s.sum_s, list(s.buckets))

    def record(self, stall_s: float) -> None:
        stall_s = max(0.0, stall_s)
        self.stats.record(stall_s)
        if stall_s >= WARN_STALL_S:
            log.warning(
                "[%s] event loop stalled for %.2fs (longest so far %.2fs): ZooKeeper watches, "
                "requests and fetches waited that long",
                self.name,
                stall_s,
                self.stats.max_s,
            )

    async def run(self) -> None:
        while True:
            start = self.monotonic()
            await asyncio.sleep(self.interval_s)
            self.record(self.monotonic() - start - self.interval_s)


class CooperativeYield:
    """``await pause()`` in a long loop: yields to the event loop once ``budget_ms`` of the
    clock ``time_ms`` has passed since the last yield, else returns at once."""

    def __init__(self, time_ms: Callable[[], int], budget_ms: int = YIELD_BUDGET_MS) -> None:
        self.time_ms = time_ms
        self.budget_ms = budget_ms
        self._since = time_ms()
        self.yields = 0

    async def __call__(self) -> None:
        now = self.time_ms()
        if now - self._since >= self.budget_ms:
            await asyncio.sleep(0)
            self.yields += 1
            self._since = self.time_ms()
