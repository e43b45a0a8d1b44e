"""The JSON-lines ledger, ``R/ledger.jsonl`` (docs/operations.md "Chaos runs and verification"):
the original form, one JSON object per produce outcome, and the form of ``R/events.jsonl``.

:class:`JsonLinesSink` appends lines through a buffered file; :func:`json_lines` and
:func:`read_jsonl_ledger` read them back, skipping blank, torn (the workload was killed
mid-write) or non-object lines. The line format is in :mod:`ledger.format`'s docstring. Not
thread-safe: :class:`ledger.format.LedgerWriter` serialises its callers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ledger.entries import NO_PRODUCER_ID, NO_SEQUENCE, Ack, WriteError, value_digest


class JsonLinesSink:
    """Appends ack and error lines to one JSON-lines file."""

    def __init__(self, path: Path, *, fsync: bool = False, buffer_bytes: int = 1 << 20) -> None:
        self.path = path
        self._fsync = fsync
        self._file: TextIO = open(path, "a", encoding="utf-8", buffering=buffer_bytes)  # noqa: SIM115

    def write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")

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

    def error(self, topic: str, partition: int, error: str, time_ms: int) -> None:
        self.write(
            {"type": "error", "topic": topic, "partition": partition, "error": error, "time_ms": time_ms}
        )

    def tick(self) -> None:
        """Nothing is due by time in a line file (the buffer fills and drains by itself)."""

    def flush(self) -> None:
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
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
                yield WriteError(
                    str(e["topic"]), int(e.get("partition", -1)), str(e["error"]), int(e["time_ms"])
                )
        except (KeyError, TypeError, ValueError):
            continue
