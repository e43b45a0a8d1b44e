"""The chaos workload's ledger: what was acknowledged, what failed, and what happened
(docs/operations.md "Chaos runs and verification").

The workload (producers with acks=all and idempotence, unique values) writes; the verification
job (:mod:`verify.job`) reads. Both sides digest values (:mod:`ledger.entries`), so the ledger
never holds value bytes. A report directory ``R`` holds the ledger of produce outcomes in one of
two forms, and the timeline:

``R/ledger/`` - the columnar ledger (the default for new runs, :mod:`ledger.columnar`): Parquet
chunks ``part-NNNNNN.parquet`` renamed into place whole, with ``_OPEN``/``_CLOSED`` markers; one
row per outcome, the value digest as two int64 columns ``digest_hi``/``digest_lo``.

``R/ledger.jsonl`` - the JSON-lines ledger (the original form, :mod:`ledger.jsonl`), one object
per line, UTF-8, appended in the order things happened:

* an acknowledged write::

    {"type": "ack", "topic": "t", "partition": 0, "offset": 41, "key": "k-7" | null,
     "value_digest": "<first 32 hex chars of sha256(value)>", "producer_id": 1000,
     "sequence": 17, "time_ms": 1718000000123, "latency_ms": 4.2}

  ``producer_id`` / ``sequence`` are -1 when the producer is not idempotent or did not say;
  ``time_ms`` is the wall-clock time of the acknowledgement, ``latency_ms`` send-to-ack.
  A line without ``"type"`` is read as an ack.
* a failed write::

    {"type": "error", "topic": "t", "partition": 0 | -1, "error": "NOT_ENOUGH_REPLICAS",
     "value_digest": "<as above>", "time_ms": 1718000000456}

  ``partition`` is -1 when the record never got one; ``error`` is Kafka's error name;
  ``value_digest`` (absent when the writer did not give the value) lets the job tell a failed
  write that landed in the log anyway.
* the closing line, written by ``close()`` (:func:`ledger.jsonl.closed_marker`)::

    {"type": "closed", "acks": 41, "errors": 2, "time_ms": 1718000000999}

  A ledger without it was not closed: its buffered tail may be missing.

A report dir holds one form or the other (:func:`ledger.entries.ledger_form`; both is an error);
:func:`read_ledger` and the job read either. ``floodmark ledger convert`` (:mod:`ledger.convert`)
turns one into the other.

``R/consumed/`` - with ``chaos run --consumers N``, the consumer group's ledger
(:mod:`ledger.consumed`): Parquet chunks of what its members consumed, committed and were
assigned; one form only, and separate, so the produce ledger above is the same with or without it.

``R/events.jsonl`` - the timeline, JSON lines in either case (a few lines per fault: nothing
to gain from columns, and a person reads it with ``cat``)::

    {"type": "fault" | "heal" | "leader_change", "time_ms": 1718000000000, "detail": {...}}

  ``detail`` is free-form (``{"action": "SIGKILL", "broker": 2, "id": "f1"}``,
  ``{"topic": "t", "partition": 0, "leader": 3, "leader_epoch": 4}``); a ``heal`` whose detail
  carries the same ``"id"`` as a ``fault`` closes it on the timeline plot.

Keys are text: bytes are decoded as UTF-8, undecodable bytes as ``\\xNN`` escapes
(:func:`key_text`), the same rule the data sources apply to keys read from the log.

A crash of the workload loses at most the entries not yet written: in a JSON-lines ledger a
torn last line (skipped by the readers here, counted as malformed by the job); in a columnar
one the last, unwritten chunk, which the readers report (:meth:`ledger.columnar.ChunkDir.notes`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ledger.columnar import (
    DEFAULT_CHUNK_INTERVAL_S,
    DEFAULT_CHUNK_RECORDS,
    ChunkSink,
    inspect,
    read_columnar_ledger,
)
from ledger.entries import (
    DIGEST_HEX_CHARS,
    EVENT_TYPES,
    EVENTS_FILE,
    FORMATS,
    LEDGER_DIR,
    LEDGER_FILE,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Ack,
    Event,
    LedgerFormatError,
    WriteError,
    digest_halves,
    key_text,
    ledger_form,
    value_digest,
    wall_ms,
)
from ledger.jsonl import JsonLinesSink, closed_marker, json_lines, read_jsonl_ledger

__all__ = [
    "DIGEST_HEX_CHARS",
    "EVENTS_FILE",
    "EVENT_TYPES",
    "FORMATS",
    "LEDGER_DDL",
    "LEDGER_DIR",
    "LEDGER_FILE",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "Ack",
    "Event",
    "LedgerFormatError",
    "LedgerWriter",
    "WriteError",
    "closed_totals",
    "key_text",
    "ledger_form",
    "ledger_notes",
    "read_events",
    "read_ledger",
    "value_digest",
    "wall_ms",
]

#: Spark DDL of a JSON-lines ledger line (acks and errors share one file; absent fields read as null).
LEDGER_DDL = (
    "type string, topic string, partition int, offset bigint, key string, value_digest string, "
    "producer_id bigint, sequence int, time_ms bigint, latency_ms double, error string"
)


# -- writing ------------------------------------------------------------------------------------


class LedgerWriter:
    """Writes a report dir's ledger (``R/ledger/`` or ``R/ledger.jsonl``, by ``format``) and
    appends to ``R/events.jsonl``.

    Entries are buffered and a lock serialises writers, so one asyncio loop (and the odd helper
    thread) can call it from any callback; no call blocks on the disk except :meth:`flush`, a
    full buffer's write, and in the columnar form the write of a chunk (every ``chunk_records``
    entries, or once the oldest buffered entry is ``chunk_interval_s`` old by ``monotonic_s``).
    ``fsync`` makes :meth:`flush` (and each chunk) reach the disk. Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(
        self,
        report_dir: Path | str,
        *,
        format: str = "parquet",
        fsync: bool = False,
        clock_ms: Callable[[], int] = wall_ms,
        monotonic_s: Callable[[], float] = time.monotonic,
        buffer_bytes: int = 1 << 20,
        chunk_records: int = DEFAULT_CHUNK_RECORDS,
        chunk_interval_s: float = DEFAULT_CHUNK_INTERVAL_S,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"ledger format must be one of {FORMATS}, got {format!r}")
        self.report_dir = Path(report_dir)
        self.report_dir.mkdir(parents=True, exist_ok=True)
        there = ledger_form(self.report_dir)
        if there is not None and there != format:
            raise LedgerFormatError(
                f"{self.report_dir} already holds a {there} ledger; will not add a {format} one next to it"
            )
        self.format = format
        self._fsync = fsync
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._sink: ChunkSink | JsonLinesSink
        if format == "parquet":
            self._sink = ChunkSink(
                self.report_dir / LEDGER_DIR,
                clock_ms=clock_ms,
                monotonic_s=monotonic_s,
                fsync=fsync,
                chunk_records=chunk_records,
                chunk_interval_s=chunk_interval_s,
            )
        else:
            self._sink = JsonLinesSink(
                self.report_dir / LEDGER_FILE, fsync=fsync, buffer_bytes=buffer_bytes, clock_ms=clock_ms
            )
        self._events: TextIO = open(  # noqa: SIM115 - closed in close()
            self.report_dir / EVENTS_FILE, "a", encoding="utf-8", buffering=1 << 16
        )
        self.acks = 0
        self.errors = 0
        self.events = 0
        self._closed = False

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _closed_error(self) -> ValueError:
        return ValueError(f"ledger in {self.report_dir} is closed")

    def ack(
        self,
        topic: str,
        partition: int,
        offset: int,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        producer_id: int = NO_PRODUCER_ID,
        sequence: int = NO_SEQUENCE,
        time_ms: int | None = None,
        latency_ms: float = 0.0,
    ) -> None:
        """Record an acknowledged write of ``value`` (digested here)."""
        key = key_text(key)
        at = self._clock_ms() if time_ms is None else time_ms
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._sink.ack(topic, partition, offset, value, key, producer_id, sequence, at, float(latency_ms))
            self.acks += 1

    def ack_digest(
        self,
        topic: str,
        partition: int,
        offset: int,
        digest: str | None,
        *,
        key: bytes | str | None = None,
        producer_id: int = NO_PRODUCER_ID,
        sequence: int = NO_SEQUENCE,
        time_ms: int | None = None,
        latency_ms: float = 0.0,
    ) -> None:
        """Record an acknowledged write whose value digest (32 hex characters) is already known;
        the columnar form keeps its halves (text that is no digest becomes
        :data:`ledger.entries.NOT_A_DIGEST`, as the job reads it)."""
        key = key_text(key)
        at = self._clock_ms() if time_ms is None else time_ms
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if isinstance(self._sink, ChunkSink):
                halves = None if digest is None else digest_halves(digest)
                self._sink.ack_halves(
                    topic, partition, offset, halves, key, producer_id, sequence, at, float(latency_ms)
                )
            else:
                self._sink.ack_digest(
                    topic, partition, offset, digest, key, producer_id, sequence, at, latency_ms
                )
            self.acks += 1

    def error(
        self,
        topic: str,
        partition: int,
        error: str,
        *,
        value: bytes | None = None,
        time_ms: int | None = None,
    ) -> None:
        """Record a failed write; ``error`` is Kafka's error name, ``partition`` -1 if unknown,
        ``value`` the value that failed (digested here; the job counts failed writes that landed)."""
        at = self._clock_ms() if time_ms is None else time_ms
        digest = value_digest(value)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._sink.error(topic, partition, error, at, digest)
            self.errors += 1

    def event(self, kind: str, detail: dict[str, Any] | None = None, *, time_ms: int | None = None) -> None:
        """Record a ``fault``, ``heal`` or ``leader_change`` on the timeline."""
        if kind not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, got {kind!r}")
        line = json.dumps(
            {
                "type": kind,
                "time_ms": self._clock_ms() if time_ms is None else time_ms,
                "detail": detail or {},
            },
            separators=(",", ":"),
        )
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._events.write(line + "\n")
            self.events += 1

    def fault(self, detail: dict[str, Any], *, time_ms: int | None = None) -> None:
        self.event("fault", detail, time_ms=time_ms)

    def heal(self, detail: dict[str, Any], *, time_ms: int | None = None) -> None:
        self.event("heal", detail, time_ms=time_ms)

    def leader_change(self, detail: dict[str, Any], *, time_ms: int | None = None) -> None:
        self.event("leader_change", detail, time_ms=time_ms)

    def tick(self) -> None:
        """Write the columnar ledger's buffered chunk if it is due by time (between writes)."""
        with self._lock:
            if not self._closed:
                self._sink.tick()

    def flush(self) -> None:
        """Hand buffered entries to the OS (the columnar form: write them as a chunk) and fsync
        them when the writer was made with fsync."""
        with self._lock:
            if self._closed:
                return
            self._sink.flush()
            self._events.flush()
            if self._fsync:
                os.fsync(self._events.fileno())

    def close(self) -> None:
        """Write what is buffered and close (the columnar form: its last chunk, then ``_CLOSED``)."""
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._sink.close()
            self._events.close()


# -- reading ------------------------------------------------------------------------------------


def read_ledger(report_dir: Path | str) -> Iterator[Ack | WriteError]:
    """Every well-formed entry of the report dir's ledger, whichever its form, in the order
    written (nothing when there is none; :class:`ledger.entries.LedgerFormatError` when both
    forms are there)."""
    report_dir = Path(report_dir)
    form = ledger_form(report_dir)
    if form == "parquet":
        return read_columnar_ledger(report_dir / LEDGER_DIR)
    return read_jsonl_ledger(report_dir / LEDGER_FILE)


def ledger_notes(report_dir: Path | str) -> list[str]:
    """What a reader of the report dir's ledger must be told (an unclosed columnar ledger)."""
    report_dir = Path(report_dir)
    if ledger_form(report_dir) == "parquet":
        return inspect(report_dir / LEDGER_DIR).notes()
    return []


def closed_totals(report_dir: Path | str) -> dict[str, int] | None:
    """``{"acks": N, "errors": M}`` as the ledger's closing marker counts them (the columnar
    form's ``_CLOSED``, with ``"chunks"`` too; the JSON-lines form's last line), or None when
    there is no ledger or the workload did not close it."""
    report_dir = Path(report_dir)
    form = ledger_form(report_dir)
    if form == "parquet":
        marker = inspect(report_dir / LEDGER_DIR).closed
    elif form == "jsonl":
        marker = closed_marker(report_dir / LEDGER_FILE)
    else:
        return None
    if marker is None:
        return None
    totals = {"acks": int(marker.get("acks") or 0), "errors": int(marker.get("errors") or 0)}
    if isinstance(marker.get("chunks"), int):
        totals["chunks"] = marker["chunks"]  # the columnar form's
    return totals


def read_events(report_dir: Path | str) -> list[Event]:
    """The timeline of ``R/events.jsonl``, sorted by time."""
    events: list[Event] = []
    for e in json_lines(Path(report_dir) / EVENTS_FILE):
        try:
            kind, at = str(e["type"]), int(e["time_ms"])
        except (KeyError, TypeError, ValueError):
            continue
        detail = e.get("detail")
        events.append(Event(kind, at, detail if isinstance(detail, dict) else {}))
    events.sort(key=lambda ev: ev.time_ms)
    return events
