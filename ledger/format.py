"""The chaos workload's ledger: what was acknowledged, what failed, and what happened
(docs/operations.md "Chaos runs and verification").

The workload (producers with acks=all and idempotence, unique values) writes; the verification
job (:mod:`verify.job`) reads. Both sides digest values with :func:`value_digest`, so the ledger
never holds value bytes. A report directory ``R`` holds two JSON-lines files, one object per
line, UTF-8, appended in the order things happened:

``R/ledger.jsonl`` - one line per produce outcome:

* an acknowledged write::

    {"type": "ack", "topic": "t", "partition": 0, "offset": 41, "key": "k-7" | null,
     "value_digest": "<first 32 hex chars of sha256(value)>", "producer_id": 1000,
     "sequence": 17, "time_ms": 1718000000123, "latency_ms": 4.2}

  ``producer_id`` / ``sequence`` are -1 when the producer is not idempotent or did not say;
  ``time_ms`` is the wall-clock time of the acknowledgement, ``latency_ms`` send-to-ack.
  A line without ``"type"`` is read as an ack.
* a failed write::

    {"type": "error", "topic": "t", "partition": 0 | -1, "error": "NOT_ENOUGH_REPLICAS",
     "time_ms": 1718000000456}

  ``partition`` is -1 when the record never got one; ``error`` is Kafka's error name.

``R/events.jsonl`` - the timeline::

    {"type": "fault" | "heal" | "leader_change", "time_ms": 1718000000000, "detail": {...}}

  ``detail`` is free-form (``{"action": "SIGKILL", "broker": 2, "id": "f1"}``,
  ``{"topic": "t", "partition": 0, "leader": 3, "leader_epoch": 4}``); a ``heal`` whose detail
  carries the same ``"id"`` as a ``fault`` closes it on the timeline plot.

Keys are text: bytes are decoded as UTF-8, undecodable bytes as ``\\xNN`` escapes
(:func:`key_text`), the same rule the data sources apply to keys read from the log.

A torn last line (the workload was killed mid-write) is skipped by the readers here and counted
as malformed by the job.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

LEDGER_FILE = "ledger.jsonl"
EVENTS_FILE = "events.jsonl"
DIGEST_HEX_CHARS = 32
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
EVENT_TYPES = ("fault", "heal", "leader_change")

#: Spark DDL of a ledger line (acks and errors share one file; absent fields read as null).
LEDGER_DDL = (
    "type string, topic string, partition int, offset bigint, key string, value_digest string, "
    "producer_id bigint, sequence int, time_ms bigint, latency_ms double, error string"
)


def value_digest(value: bytes | bytearray | memoryview | None) -> str | None:
    """The first 32 hex characters of the SHA-256 of ``value`` (None for a null value)."""
    if value is None:
        return None
    return hashlib.sha256(value).hexdigest()[:DIGEST_HEX_CHARS]


def key_text(key: bytes | bytearray | str | None) -> str | None:
    """A record key as ledger text: UTF-8, with ``\\xNN`` escapes for undecodable bytes."""
    if key is None or isinstance(key, str):
        return key
    return bytes(key).decode("utf-8", "backslashreplace")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# -- writing ------------------------------------------------------------------------------------


class LedgerWriter:
    """Appends to ``R/ledger.jsonl`` and ``R/events.jsonl``.

    Lines are buffered and a lock serialises writers, so one asyncio loop (and the odd helper
    thread) can call it from any callback; no call blocks on the disk except :meth:`flush`
    (and a full buffer's write). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        report_dir: Path | str,
        *,
        fsync: bool = False,
        clock_ms: Callable[[], int] = wall_ms,
        buffer_bytes: int = 1 << 20,
    ) -> None:
        self.report_dir = Path(report_dir)
        self.report_dir.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._ledger: TextIO = open(  # noqa: SIM115 - closed in close()
            self.report_dir / LEDGER_FILE, "a", encoding="utf-8", buffering=buffer_bytes
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

    def _write(self, stream: TextIO, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock:
            if self._closed:
                raise ValueError(f"ledger in {self.report_dir} is closed")
            stream.write(line)

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
        self.ack_digest(
            topic,
            partition,
            offset,
            value_digest(value),
            key=key,
            producer_id=producer_id,
            sequence=sequence,
            time_ms=time_ms,
            latency_ms=latency_ms,
        )

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
        """Record an acknowledged write whose value digest is already known."""
        self._write(
            self._ledger,
            {
                "type": "ack",
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "key": key_text(key),
                "value_digest": digest,
                "producer_id": producer_id,
                "sequence": sequence,
                "time_ms": self._clock_ms() if time_ms is None else time_ms,
                "latency_ms": round(float(latency_ms), 3),
            },
        )
        self.acks += 1

    def error(self, topic: str, partition: int, error: str, *, time_ms: int | None = None) -> None:
        """Record a failed write; ``error`` is Kafka's error name, ``partition`` -1 if unknown."""
        self._write(
            self._ledger,
            {
                "type": "error",
                "topic": topic,
                "partition": partition,
                "error": error,
                "time_ms": self._clock_ms() if time_ms is None else time_ms,
            },
        )
        self.errors += 1

    def event(self, kind: str, detail: dict[str, Any] | None = None, *, time_ms: int | None = None) -> None:
        """Record a ``fault``, ``heal`` or ``leader_change`` on the timeline."""
        if kind not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, got {kind!r}")
        self._write(
            self._events,
            {
                "type": kind,
                "time_ms": self._clock_ms() if time_ms is None else time_ms,
                "detail": detail or {},
            },
        )
        self.events += 1

    def fault(self, detail: dict[str, Any], *, time_ms: int | None = None) -> None:
        self.event("fault", detail, time_ms=time_ms)

    def heal(self, detail: dict[str, Any], *, time_ms: int | None = None) -> None:
        self.event("heal", detail, time_ms=time_ms)

    def leader_change(self, detail: dict[str, Any], *, time_ms: int | None = None) -> None:
        self.event("leader_change", detail, time_ms=time_ms)

    def flush(self) -> None:
        """Hand buffered lines to the OS (and fsync them when the writer was made with fsync)."""
        with self._lock:
            if self._closed:
                return
            for stream in (self._ledger, self._events):
                stream.flush()
                if self._fsync:
                    os.fsync(stream.fileno())

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._ledger.close()
            self._events.close()


# -- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    topic: str
    partition: int
    offset: int
    key: str | None
    value_digest: str | None
    producer_id: int
    sequence: int
    time_ms: int
    latency_ms: float


@dataclass(frozen=True)
class WriteError:
    topic: str
    partition: int
    error: str
    time_ms: int


@dataclass(frozen=True)
class Event:
    type: str
    time_ms: int
    detail: dict[str, Any] = field(default_factory=dict)


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The objects of a JSON-lines file; blank, torn or non-object lines are skipped."""
    try:
        f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry


def read_ledger(report_dir: Path | str) -> Iterator[Ack | WriteError]:
    """Every well-formed entry of ``R/ledger.jsonl``, in file order."""
    for e in _json_lines(Path(report_dir) / LEDGER_FILE):
        kind = e.get("type", "ack")
        try:
            if kind == "ack":
                yield Ack(
                    str(e["topic"]),
                    int(e["partition"]),
                    int(e["offset"]),
                    e.get("key"),
                    e.get("value_digest"),
                    int(e.get("producer_id", NO_PRODUCER_ID)),
                    int(e.get("sequence", NO_SEQUENCE)),
                    int(e["time_ms"]),
                    float(e.get("latency_ms", 0.0)),
                )
            elif kind == "error":
                yield WriteError(
                    str(e["topic"]), int(e.get("partition", -1)), str(e["error"]), int(e["time_ms"])
                )
        except (KeyError, TypeError, ValueError):
            continue


def read_events(report_dir: Path | str) -> list[Event]:
    """The timeline of ``R/events.jsonl``, sorted by time."""
    events: list[Event] = []
    for e in _json_lines(Path(report_dir) / EVENTS_FILE):
        try:
            kind, at = str(e["type"]), int(e["time_ms"])
        except (KeyError, TypeError, ValueError):
            continue
        detail = e.get("detail")
        events.append(Event(kind, at, detail if isinstance(detail, dict) else {}))
    events.sort(key=lambda ev: ev.time_ms)
    return events
