"""The JSON-lines ledger, ``R/ledger.jsonl`` (docs/operations.md "Chaos runs and verification"):
the original form, one JSON object per produce outcome, and the form of ``R/events.jsonl``.

:class:`JsonLinesSink` appends lines through a buffered file; :func:`json_lines` and
:func:`read_jsonl_ledger` read them back, skipping blank, torn (the workload was killed
mid-write) or non-object lines. The line format is in :mod:`ledger.format`'s docstring. Not
thread-safe: :class:`ledger.format.LedgerWriter` serialises its callers.

The file's open/closed marker is its last line: :meth:`JsonLinesSink.close` appends
``{"type": "closed", "acks": N, "errors": M, "time_ms": T}`` (the totals of the whole file, a
reopened ledger continuing them), so a reader can tell a ledger the workload closed from one
whose buffered tail was lost (:func:`closed_marker`), and count lines lost in between.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ledger.entries import NO_PRODUCER_ID, NO_SEQUENCE, Ack, WriteError, value_digest

CLOSED_TYPE = "closed"
_TAIL_BYTES = 4096


def closed_marker(path: Path) -> dict[str, Any] | None:
    """The closing line of a JSON-lines ledger (its last line, ``"type": "closed"``), or None when
    the file is absent or its last line is anything else (the workload did not close it)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read()
    except FileNotFoundError:
        return None
    lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        entry = json.loads(lines[-1])
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and entry.get("type") == CLOSED_TYPE else None


class JsonLinesSink:
    """Appends ack and error lines to one JSON-lines file, and the closing line on close."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = False,
        buffer_bytes: int = 1 << 20,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.path = path
        self._fsync = fsync
        self._clock_ms = clock_ms
        before = closed_marker(path) or {}  # a reopened ledger continues the totals
        self.acks, self.errors = int(before.get("acks", 0)), int(before.get("errors", 0))
        self._file: TextIO = open(path, "a", encoding="utf-8", buffering=buffer_bytes)  # noqa: SIM115

    def write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        if entry["type"] == "ack":
            self.acks += 1
        elif entry["type"] == "error":
            self.errors += 1

    def ack(
        self,
        topic: str,
        partition: int,
        offset: int,
        value: bytes | bytearray | memoryview | None,
        key: str | None,
        producer_id: int,
        sequence: int,
        time_ms: int,
        latency_ms: float,
    ) -> None:
        self.ack_digest(
            topic, partition, offset, value_digest(value), key, producer_id, sequence, time_ms, latency_ms
        )

    def ack_digest(
        self,
        topic: str,
        partition: int,
        offset: int,
        digest: str | None,
        key: str | None,
        producer_id: int,
        sequence: int,
        time_ms: int,
        latency_ms: float,
    ) -> None:
        self.write(
            {
                "type": "ack",
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "key": key,
                "value_digest": digest,
                "producer_id": producer_id,
                "sequence": sequence,
                "time_ms": time_ms,
                "latency_ms": round(float(latency_ms), 3),
            }
        )

    def error(self, topic: str, partition: int, error: str, time_ms: int, digest: str | None = None) -> None:
        entry: dict[str, Any] = {"type": "error", "topic": topic, "partition": partition, "error": error}
        if digest is not None:
            entry["value_digest"] = digest
        entry["time_ms"] = time_ms
        self.write(entry)

    def tick(self) -> None:
        """Nothing is due by time in a line file (the buffer fills and drains by itself)."""

    def flush(self) -> None:
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        at = self._clock_ms() if self._clock_ms is not None else None
        self.write({"type": CLOSED_TYPE, "acks": self.acks, "errors": self.errors, "time_ms": at})
        self.flush()
        self._file.close()


def json_lines(path: Path) -> Iterator[dict[str, Any]]:
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


def read_jsonl_ledger(path: Path) -> Iterator[Ack | WriteError]:
    """Every well-formed entry of a JSON-lines ledger, in file order (a line without ``type``
    is an ack)."""
    for e in json_lines(path):
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
                digest = e.get("value_digest")
                yield WriteError(
                    str(e["topic"]),
                    int(e.get("partition", -1)),
                    str(e["error"]),
                    int(e["time_ms"]),
                    None if digest is None else str(digest),
                )
        except (KeyError, TypeError, ValueError):
            continue
