"""The chaos workload (docs/design.md "Chaos and verification"; issue 4 item 2): producers with
acks=all and idempotence writing unique values, recording every acknowledged write and every error,
and a watcher recording every leadership change it observes.

Each writer is one idempotent producer. Its values are ``<run>/<writer>/<n>``, unique across
the run, keyed so they spread over every partition. The send rate is bounded (records per
second and records in flight), so the brokers keep most of this 2-core machine. Every outcome
goes to the ledger (ledger/format.py: the format chaos writes and the verifier reads; Parquet
chunks by default, each ``ledger.ack`` a SHA-256 and a row appended in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from client.admin import AdminClient
from client.producer import Producer
from client.protocol.errors import KafkaError
from ledger.format import LedgerWriter

log = logging.getLogger(__name__)


@dataclass
class WorkloadStats:
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadSettings:
    topic: str
    run_id: str
    writers: int = 2
    records_per_second: float = 400.0  # over all writers
    max_in_flight: int = 500  # per writer
    keys: int = 256
    delivery_timeout_ms: int = 60_000
    request_timeout_ms: int = 10_000


def now_ms() -> int:
    return int(time.time() * 1000)


class Workload:
    def __init__(self, bootstrap: str, settings: WorkloadSettings, ledger: LedgerWriter) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.ledger = ledger
        self.stats = WorkloadStats()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> WorkloadStats:
        """Write until :meth:`stop`; then wait for every outstanding record's outcome."""
        await asyncio.gather(*(self._writer(w) for w in range(self.settings.writers)))
        return self.stats

    async def _writer(self, writer: int) -> None:
        s = self.settings
        producer = Producer(
            self.bootstrap,
            acks="all",
            linger_ms=5,
            delivery_timeout_ms=s.delivery_timeout_ms,
            request_timeout_ms=s.request_timeout_ms,
            client_id=f"chaos-writer-{writer}",
        )
        await producer.start()
        in_flight = asyncio.Semaphore(s.max_in_flight)
        interval = s.writers / s.records_per_second
        pending: set[asyncio.Future] = set()
        n = 0
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                await in_flight.acquire()
                value = f"{s.run_id}/{writer}/{n}".encode()
                key = f"key-{(n * s.writers + writer) % s.keys}".encode()
                sent_ms = now_ms()
                try:
                    future = await producer.send(s.topic, value, key=key)
                except KafkaError as exc:  # refused before it was queued (metadata, buffer)
                    in_flight.release()
                    self._failed(exc, value)
                else:
                    pending.add(future)
                    future.add_done_callback(
                        lambda f, v=value, k=key, t=sent_ms: self._done(f, v, k, t, in_flight, pending)
                    )
                self.stats.sent += 1
                n += 1
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
                else:
                    next_at = time.monotonic()  # behind (a failover): do not burst to catch up
            await producer.flush()
            if pending:
                await asyncio.wait(pending, timeout=s.delivery_timeout_ms / 1000 + 5)
        finally:
            await producer.close()

    def _done(
        self,
        future: asyncio.Future,
        value: bytes,
        key: bytes,
        sent_ms: int,
        in_flight: asyncio.Semaphore,
        pending: set,
    ) -> None:
        in_flight.release()
        pending.discard(future)
        if future.cancelled():
            self._failed(KafkaError(-1, "cancelled"), value)
            return
        exc = future.exception()
        if exc is not None:
            self._failed(exc, value)
            return
        md = future.result()
        acked_ms = now_ms()
        self.stats.acknowledged += 1
        self.ledger.ack(
            md.topic,
            md.partition,
            md.offset,
            value,
            key=key,
            producer_id=md.producer_id,
            sequence=md.sequence,
            time_ms=acked_ms,
            latency_ms=acked_ms - sent_ms,
        )

    def _failed(self, exc: BaseException, value: bytes) -> None:
        name = exc.name if isinstance(exc, KafkaError) else exc.__class__.__name__
        self.stats.failed += 1
        self.stats.errors[name] = self.stats.errors.get(name, 0) + 1
        self.ledger.error(self.settings.topic, -1, name, value=value)


class LeadershipWatcher:
    """Polls the topic's metadata and records each leader or leader-epoch change it sees."""

    def __init__(
        self, bootstrap: str, topic: str, record: Callable[[str, dict], None], interval_s: float = 0.5
    ):
        """``record(kind, detail)`` receives each ``leader_change``."""
        self.bootstrap, self.topic, self.record, self.interval_s = bootstrap, topic, record, interval_s
        self.leaders: dict[int, tuple[int, int]] = {}
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        admin = AdminClient(self.bootstrap)
        await admin.start()
        try:
            while not self._stop.is_set():
                try:
                    (description,) = await admin.describe_topics([self.topic])
                except Exception as exc:  # mid-failover: the next poll will do
                    log.debug("leadership poll failed: %s", exc)
                else:
                    for p in description.partitions:
                        now = (p.leader, p.leader_epoch)
                        if self.leaders.get(p.partition) != now:
                            if p.partition in self.leaders:
                                self.record(
                                    "leader_change",
                                    {
                                        "partition": p.partition,
                                        "leader": p.leader,
                                        "leader_epoch": p.leader_epoch,
                                        "previous_leader": self.leaders[p.partition][0],
                                        "isr": list(p.isr),
                                    },
                                )
                            self.leaders[p.partition] = now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval_s)
        finally:
            await admin.close()

    async def leader_of(self, partition: int) -> int:
        admin = AdminClient(self.bootstrap)
        await admin.start()
        try:
            (description,) = await admin.describe_topics([self.topic])
            return description.partitions[partition].leader
        finally:
            await admin.close()

    async def follower_of(self, partition: int) -> int:
        """The first in-sync follower of ``partition`` in replica order; -1 when it has none."""
        admin = AdminClient(self.bootstrap)
        await admin.start()
        try:
            (description,) = await admin.describe_topics([self.topic])
            p = description.partitions[partition]
            return next((r for r in p.replicas if r != p.leader and r in p.isr), -1)
        finally:
            await admin.close()
