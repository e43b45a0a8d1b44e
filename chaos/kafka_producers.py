"""The chaos workload with Kafka's own producer (``chaos run --client kafka``; docs/operations.md
"Chaos runs and verification", docs/guarantees.md "The proof"): librdkafka's idempotent producer
(confluent-kafka's ``Producer`` with ``enable.idempotence=true``, ``acks=all``: KIP-98's producer
id and sequences, KIP-360's epoch bump) over the brokers' KAFKA listener, recording into the same
ledger (:mod:`ledger.format`) the same facts :mod:`chaos.workload`'s producers record, so the
verification job runs unchanged.

librdkafka is a C library with its own threads; confluent-kafka serves its delivery reports in
whichever thread calls ``poll``/``flush``. So each writer is one :class:`KafkaWriter` on its own
thread with its own producer and poll loop: it sends ``<run>/<writer>/<n>`` values at its share
of the rate (at most ``max_in_flight`` unresolved, as :class:`chaos.workload.Workload`), keyed
``key-<k>`` and partitioned with ``murmur2_random`` (the Java client's partitioner, and
floodmark's), and every delivery report (``on_delivery``) goes to the shared
:class:`DeliveryRecorder`: an acknowledgement with the partition and offset the report carries,
or a failure with librdkafka's error name (``_MSG_TIMED_OUT``, ``NOT_ENOUGH_REPLICAS``...) and
the value's digest. The report carries no producer id or sequence, so the ledger holds -1 for
both and the job checks the rest (offset, value, key, timestamp).

Everything is bounded in time: on :meth:`KafkaWorkload.stop` a writer flushes for at most the
delivery timeout (``message.timeout.ms``) plus :data:`FLUSH_SLACK_S`, then purges what is left
(its reports say ``_PURGE_QUEUE``/``_PURGE_INFLIGHT``), and a value that still has no report is
recorded failed as :data:`UNRESOLVED`. A fatal error (librdkafka's idempotence gives up) ends
that producer: its records are resolved the same way and a new producer (a new producer id)
takes over, at most :data:`MAX_PRODUCERS` times per writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import KafkaError as CkError
from confluent_kafka import KafkaException, Message, Producer

from chaos.workload import WorkloadSettings, WorkloadStats, now_ms
from ledger.format import LedgerWriter

log = logging.getLogger(__name__)
#: librdkafka's own log lines (a connection refused during a kill...) go to this file of the report
#: dir, not to the console.
LOG_FILE = "kafka-producers.log"

UNRESOLVED = "UNRESOLVED"  # no delivery report by the end of the flush and the purge
REFUSED = "PRODUCE_REFUSED"  # produce() raised without an error code (not a KafkaException)
FLUSH_SLACK_S = 5.0
PURGE_FLUSH_S = 5.0
MAX_PRODUCERS = 5  # per writer: the first and up to four after fatal errors
POLL_S = 0.05


def error_name(err: Any) -> str:
    """librdkafka's name of a delivery or produce error (``_MSG_TIMED_OUT``); the class name of
    anything else."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], CkError):
        err = err.args[0]
    if isinstance(err, CkError):
        return err.name() or f"ERROR_{err.code()}"
    return type(err).__name__ if isinstance(err, BaseException) else REFUSED


class DeliveryRecorder:
    """Turns delivery reports into ledger entries and :class:`WorkloadStats`; shared by the
    writers' threads (a lock guards the stats; the ledger has its own). After the ledger closes
    (a cancelled run) late reports are dropped, not raised into librdkafka's poll."""

    def __init__(self, ledger: LedgerWriter, topic: str, clock_ms: Callable[[], int] = now_ms) -> None:
        self.ledger, self.topic, self.clock_ms = ledger, topic, clock_ms
        self.stats = WorkloadStats()
        self._lock = threading.Lock()

    def sent(self) -> None:
        with self._lock:
            self.stats.sent += 1

    def delivered(self, value: bytes, key: bytes, sent_ms: int, err: Any, message: Message) -> None:
        """The ``on_delivery`` callback, with the send's own facts bound first."""
        if err is not None:
            self.failed(error_name(err), value, message.partition())
            return
        acked_ms = self.clock_ms()
        with self._lock:
            self.stats.acknowledged += 1
        with contextlib.suppress(ValueError):  # the ledger closed under a cancelled run
            self.ledger.ack(
                message.topic() or self.topic,
                message.partition(),
                message.offset(),
                value,
                key=key,
                time_ms=acked_ms,
                latency_ms=acked_ms - sent_ms,
            )

    def failed(self, name: str, value: bytes, partition: int | None = -1) -> None:
        """A record that failed (or never resolved): ``name`` the error, ``partition`` -1 when it
        never got one."""
        partition = -1 if partition is None or partition < 0 else partition
        with self._lock:
            self.stats.failed += 1
            self.stats.errors[name] = self.stats.errors.get(name, 0) + 1
        with contextlib.suppress(ValueError):
            self.ledger.error(self.topic, partition, name, value=value, time_ms=self.clock_ms())


def producer_config(
    bootstrap: str, writer: int, s: WorkloadSettings, on_error: Callable, logger: logging.Logger
) -> dict:
    """librdkafka's properties for one writer: idempotent, acks=all, the workload's timeouts."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": f"chaos-kafka-writer-{writer}",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": s.delivery_timeout_ms,
        "request.timeout.ms": s.request_timeout_ms,
        "partitioner": "murmur2_random",
        "error_cb": on_error,
        "logger": logger,
    }


class KafkaWriter:
    """One writer: its producer(s) and poll loop, run on a thread of its own (:meth:`run`)."""

    def __init__(
        self,
        writer: int,
        bootstrap: str,
        settings: WorkloadSettings,
        recorder: DeliveryRecorder,
        stop: threading.Event,
        producer_factory: Callable[[dict], Any] = Producer,
        logger: logging.Logger = log,
    ) -> None:
        self.writer, self.bootstrap, self.settings, self.logger = writer, bootstrap, settings, logger
        self.recorder, self.stop, self.producer_factory = recorder, stop, producer_factory
        self.pending: dict[bytes, None] = {}  # values sent whose report has not come (unique values)
        self.fatal: str | None = None
        self.producers = 0

    def _on_error(self, err: CkError) -> None:
        if err.fatal():
            self.fatal = err.name()
            log.warning("kafka writer %d: fatal error %s: %s", self.writer, err.name(), err.str())
        else:
            log.debug("kafka writer %d: %s", self.writer, err)

    def _on_delivery(self, value: bytes, key: bytes, sent_ms: int, err: Any, message: Message) -> None:
        self.pending.pop(value, None)
        self.recorder.delivered(value, key, sent_ms, err, message)

    def run(self) -> None:
        """Produce until :attr:`stop`; then every record's outcome. A fatal error replaces the
        producer (a new producer id), at most :data:`MAX_PRODUCERS` in all."""
        n = 0
        while not self.stop.is_set() and self.producers < MAX_PRODUCERS:
            self.fatal = None
            self.producers += 1
            producer = self.producer_factory(
                producer_config(self.bootstrap, self.writer, self.settings, self._on_error, self.logger)
            )
            try:
                n = self._produce(producer, n)
            finally:
                self._resolve(producer)
            if self.fatal is None:
                break
            log.warning("kafka writer %d: a new producer after %s", self.writer, self.fatal)

    def _produce(self, producer: Any, n: int) -> int:
        """Send at the writer's rate until stopped or fatal; the next value's number."""
        s = self.settings
        interval = s.writers / s.records_per_second
        next_at = time.monotonic()
        while not self.stop.is_set() and self.fatal is None:
            if len(self.pending) >= s.max_in_flight:
                producer.poll(POLL_S)
                next_at = time.monotonic()
                continue
            value = f"{s.run_id}/{self.writer}/{n}".encode()
            key = f"key-{(n * s.writers + self.writer) % s.keys}".encode()
            if self._send(producer, value, key):
                n += 1
            next_at += interval
            delay = next_at - time.monotonic()
            producer.poll(max(0.0, min(delay, 0.1)))
            if delay < 0:
                next_at = time.monotonic()  # behind (a failover): do not burst to catch up
        return n

    def _send(self, producer: Any, value: bytes, key: bytes) -> bool:
        """Hand one record to librdkafka; False when its queue is full (nothing was sent)."""
        sent_ms = now_ms()
        callback = partial(self._on_delivery, value, key, sent_ms)
        try:
            producer.produce(self.settings.topic, value=value, key=key, on_delivery=callback)
        except BufferError:
            producer.poll(POLL_S)
            return False
        except KafkaException as exc:  # refused before it was queued (a fatal state, an unknown topic)
            self.recorder.sent()
            self.recorder.failed(error_name(exc), value)
            return True
        self.pending[value] = None
        self.recorder.sent()
        return True

    def _resolve(self, producer: Any) -> None:
        """Wait (bounded) for every report; purge what is left; record the unresolved."""
        flush_s = self.settings.delivery_timeout_ms / 1000 + FLUSH_SLACK_S
        left = producer.flush(flush_s)
        if left:
            log.warning(
                "kafka writer %d: %d record(s) unresolved after %.0fs: purging", self.writer, left, flush_s
            )
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.flush(PURGE_FLUSH_S)
        for value in list(self.pending):
            self.recorder.failed(UNRESOLVED, value)
        self.pending.clear()


class KafkaWorkload:
    """:class:`chaos.workload.Workload`'s interface (``run``, ``stop``, ``stats``, ``ledger``)
    over :class:`KafkaWriter` threads."""

    def __init__(self, bootstrap: str, settings: WorkloadSettings, ledger: LedgerWriter) -> None:
        self.bootstrap, self.settings, self.ledger = bootstrap, settings, ledger
        self.recorder = DeliveryRecorder(ledger, settings.topic)
        self._stop = threading.Event()
        self.librdkafka_log = logging.getLogger(f"{__name__}.librdkafka.{settings.run_id}")
        self.librdkafka_log.propagate = False
        self.librdkafka_log.addHandler(logging.NullHandler())  # a late line after the run: dropped
        self.writers = [
            KafkaWriter(w, bootstrap, settings, self.recorder, self._stop, logger=self.librdkafka_log)
            for w in range(settings.writers)
        ]

    @property
    def stats(self) -> WorkloadStats:
        return self.recorder.stats

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> WorkloadStats:
        """Write until :meth:`stop`; then wait for every writer's outcomes (each bounded)."""
        handler = logging.FileHandler(self.ledger.report_dir / LOG_FILE)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.librdkafka_log.addHandler(handler)
        try:
            return await self._run_writers()
        finally:
            self.librdkafka_log.removeHandler(handler)
            handler.close()

    async def _run_writers(self) -> WorkloadStats:
        loop = asyncio.get_running_loop()
        done = [loop.create_future() for _ in self.writers]
        for writer, future in zip(self.writers, done, strict=True):
            threading.Thread(
                target=_run_thread,
                args=(writer, loop, future),
                name=f"chaos-kafka-writer-{writer.writer}",
                daemon=True,
            ).start()
        try:
            await asyncio.gather(*done)
        except asyncio.CancelledError:
            self.stop()  # the threads end within their flush bound; their late reports are dropped
            raise
        return self.stats


def _run_thread(writer: KafkaWriter, loop: asyncio.AbstractEventLoop, done: asyncio.Future) -> None:
    error: BaseException | None = None
    try:
        writer.run()
    except BaseException as exc:  # noqa: BLE001 - handed to the loop, which raises it in run()
        log.exception("kafka writer %d died", writer.writer)
        error = exc
    with contextlib.suppress(RuntimeError):  # the loop closed (an interrupted run)
        loop.call_soon_threadsafe(_settle, done, error)


def _settle(done: asyncio.Future, error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
