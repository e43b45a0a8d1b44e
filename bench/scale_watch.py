"""What :mod:`bench.partitions_at_scale` watches on every broker while it works (docs/benchmarks.md
"Partitions at scale (issue 25)"): the Prometheus ``/metrics`` gauges it waits on, the event-loop
stall metrics of :mod:`broker.loop_stall`, open files and RSS from ``/proc``, start-up timestamps
from ``broker.out``, and an outside probe of each broker's event loop.

The probe is the stall measurement that needs nothing from the broker: a thread with its own event
loop sends ApiVersions to every broker every ``PROBE_INTERVAL_S`` on its own connection and keeps
each answer's latency. A request is answered on the broker's loop, so a stalled loop shows up as a
late answer; the probe therefore measures a baseline revision that has no stall metric as well.
Every call is bounded in time.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError

SCRAPE_TIMEOUT_S = 10.0
PROBE_INTERVAL_S = 0.1
PROBE_TIMEOUT_S = 30.0
STALL_MAX = "floodmark_event_loop_stall_max_seconds"
STALL_HISTOGRAM = "floodmark_event_loop_stall_seconds"


# -- /metrics -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scrape:
    """One broker's samples by name (labels dropped, except ``le`` of the stall histogram)."""

    values: dict[str, float]
    stall_buckets: dict[float, float] = field(default_factory=dict)

    def get(self, name: str, default: float = 0.0) -> float:
        return self.values.get(name, default)


def scrape(address: str) -> Scrape | None:
    """``/metrics`` of one broker, or None when it does not answer within SCRAPE_TIMEOUT_S."""
    try:
        with urllib.request.urlopen(address, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode()
    except OSError:
        return None
    values: dict[str, float] = {}
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{STALL_HISTOGRAM}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
            elif not sample.labels:
                values[sample.name] = sample.value
    return Scrape(values, buckets)


def stall_during(before: Scrape | None, after: Scrape | None) -> str:
    """The longest loop stall between two scrapes of one broker's stall metrics: exact when the
    broker's maximum rose meanwhile, else the bound of the lowest histogram bucket that counted a
    stall meanwhile ("<= x"). '-' when the broker has no such metric (a baseline revision)."""
    if after is None or STALL_MAX not in after.values:
        return "-"
    previous = before.get(STALL_MAX) if before is not None else 0.0
    if after.get(STALL_MAX) > previous:
        return f"{after.get(STALL_MAX):.2f}"
    earlier = before.stall_buckets if before is not None else {}
    counted = [le for le, n in after.stall_buckets.items() if n > earlier.get(le, 0.0)]
    if not counted:
        return "0.00"
    lowest = min(counted)  # buckets are cumulative: the lowest bound that counted a new stall
    return f"<= {lowest:g}" if lowest != float("inf") else f"<= {previous:.2f}"


# -- /proc ----------------------------------------------------------------------------------------


def open_files(pid: int | None) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd")) if pid else None
    except OSError:
        return None


def rss_mb(pid: int | None) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


# -- broker.out -----------------------------------------------------------------------------------

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(path: Path, needle: str, after: float) -> float | None:
    """The wall time of the first line of ``path`` containing ``needle`` logged at or after
    ``after`` (``logging``'s asctime, local time, millisecond resolution)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        match = _STAMP.match(line)
        if match is None or needle not in line:
            continue
        stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if stamp >= after - 0.001:
            return stamp
    return None


# -- the outside probe ----------------------------------------------------------------------------


class LoopProbe:
    """ApiVersions to each broker every PROBE_INTERVAL_S from a thread of its own; the latency of
    each answer, by the wall time it was sent at."""

    def __init__(self, endpoints: dict[int, tuple[str, int]]) -> None:
        self.endpoints = endpoints
        self.samples: dict[int, list[tuple[float, float]]] = {b: [] for b in endpoints}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="loop-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT_S + 5)

    def max_latency(self, broker_id: int, start: float, end: float) -> float | None:
        """The longest answer to a probe sent in [start, end]; an unanswered probe counts as
        PROBE_TIMEOUT_S. None: no probe in the window (the broker was down)."""
        with self._lock:
            samples = list(self.samples.get(broker_id, []))
        times = [t for t, _ in samples]
        window = samples[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]
        return max((latency for _, latency in window), default=None)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        await asyncio.gather(*(self._probe(b, host, port) for b, (host, port) in self.endpoints.items()))

    async def _probe(self, broker_id: int, host: str, port: int) -> None:
        connection: BrokerConnection | None = None
        while not self._stop.is_set():
            sent = time.time()
            try:
                if connection is None or not connection.is_open:
                    connection = await asyncio.wait_for(
                        BrokerConnection.open(host, port, client_id="loop-probe", timeout=PROBE_TIMEOUT_S),
                        PROBE_TIMEOUT_S,
                    )
                    sent = time.time()
                await connection.request(ApiKey.API_VERSIONS, {}, PROBE_TIMEOUT_S)
                self._record(broker_id, sent, time.time() - sent)
            except KafkaError as exc:
                if exc.code == ErrorCode.REQUEST_TIMED_OUT:
                    self._record(broker_id, sent, PROBE_TIMEOUT_S)
                connection = self._drop(connection)
            except Exception:  # noqa: BLE001 - the broker is down or restarting: no sample
                connection = self._drop(connection)
            await asyncio.sleep(max(0.0, PROBE_INTERVAL_S - (time.time() - sent)))
        self._drop(connection)

    def _record(self, broker_id: int, sent: float, latency: float) -> None:
        with self._lock:
            self.samples[broker_id].append((sent, latency))

    @staticmethod
    def _drop(connection: BrokerConnection | None) -> None:
        if connection is not None:
            connection.close()
        return None


def wait_until(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.25) -> float | None:
    """Poll ``condition`` until true (the wall time then) or ``timeout_s`` passed (None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return time.time()
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
