"""``floodmark ledger convert``: a report dir's ledger from one form to the other
(docs/operations.md "Chaos runs and verification", "The ledger's two forms").

The source is left as it is. The converted ledger goes next to it (``R/ledger/`` beside
``R/ledger.jsonl`` or the reverse) or into another report dir (``out``, with a copy of
``events.jsonl`` and of the consumer ledger ``consumed/``, :mod:`ledger.consumed`, which has one
form), and only where that form is absent: an existing target is refused, never overwritten.
Every entry the readers return is written again in order, so the conversion round-trips:
digests through their halves and back to the same hex text (text that is no digest cannot be:
it becomes :data:`ledger.entries.NOT_A_DIGEST` and is counted), keys with their ``\\xNN``
escapes, null values, errors with partition -1. A JSON-lines ledger's torn or malformed lines
are not entries and are not carried over; an unclosed columnar ledger's notes are returned with
the result.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ledger.columnar import DEFAULT_CHUNK_INTERVAL_S, ChunkSink, inspect, read_columnar_ledger
from ledger.consumed import CONSUMED_DIR
from ledger.entries import (
    EVENTS_FILE,
    FORMATS,
    LEDGER_DIR,
    LEDGER_FILE,
    NOT_A_DIGEST,
    Ack,
    LedgerFormatError,
    digest_halves,
    wall_ms,
)
from ledger.jsonl import JsonLinesSink, closed_marker, read_jsonl_ledger

PROGRESS_EVERY = 1_000_000
#: Rows per chunk of a converted ledger: bigger than the workload's (nothing waits on them).
CONVERT_CHUNK_RECORDS = 1 << 20


@dataclass
class Converted:
    source: Path
    target: Path
    acks: int = 0
    errors: int = 0
    not_a_digest: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _path(report_dir: Path, form: str) -> Path:
    return report_dir / (LEDGER_DIR if form == "parquet" else LEDGER_FILE)


def convert(
    report_dir: Path | str,
    to: str = "parquet",
    *,
    out: Path | str | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every: int = PROGRESS_EVERY,
    clock_ms: Callable[[], int] = wall_ms,
) -> Converted:
    """Convert ``report_dir``'s ledger to the form ``to`` (see the module docstring)."""
    if to not in FORMATS:
        raise ValueError(f"--to must be one of {FORMATS}, got {to!r}")
    report_dir = Path(report_dir)
    out_dir = Path(out) if out is not None else report_dir
    source_form = "jsonl" if to == "parquet" else "parquet"
    source, target = _path(report_dir, source_form), _path(out_dir, to)
    if not source.exists():
        raise LedgerFormatError(f"no {source_form} ledger to convert: {source} does not exist")
    if target.exists():
        raise LedgerFormatError(f"{target} exists: will not overwrite it (move it away first)")
    if out_dir != report_dir:
        other = _path(out_dir, source_form)
        if other.exists():
            raise LedgerFormatError(f"{out_dir} already holds a ledger ({other})")
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = Converted(source, target)
    if source_form == "parquet":
        result.notes = inspect(source).notes()
        closed_at = (inspect(source).closed or {}).get("closed_ms")
    else:
        closed_at = (closed_marker(source) or {}).get("time_ms")
    if isinstance(closed_at, int):  # the copy is closed when the original was (a round trip is exact)
        clock_ms = lambda: closed_at  # noqa: E731
    sink: ChunkSink | JsonLinesSink
    if to == "parquet":
        sink = ChunkSink(
            target,
            clock_ms=clock_ms,
            monotonic_s=lambda: 0.0,  # chunks by count only
            chunk_records=CONVERT_CHUNK_RECORDS,
            chunk_interval_s=DEFAULT_CHUNK_INTERVAL_S,
        )
    else:
        sink = JsonLinesSink(target, buffer_bytes=8 << 20, clock_ms=clock_ms)
    entries = read_columnar_ledger(source) if source_form == "parquet" else read_jsonl_ledger(source)
    try:
        for n, entry in enumerate(entries, 1):
            if isinstance(entry, Ack):
                args = (entry.key, entry.producer_id, entry.sequence, entry.time_ms, entry.latency_ms)
                if isinstance(sink, ChunkSink):
                    halves = None if entry.value_digest is None else digest_halves(entry.value_digest)
                    result.not_a_digest += halves == NOT_A_DIGEST
                    sink.ack_halves(entry.topic, entry.partition, entry.offset, halves, *args)
                else:
                    sink.ack_digest(entry.topic, entry.partition, entry.offset, entry.value_digest, *args)
                result.acks += 1
            else:
                sink.error(entry.topic, entry.partition, entry.error, entry.time_ms, entry.value_digest)
                result.errors += 1
            if progress is not None and n % progress_every == 0:
                progress(f"  {n:,} entries converted ({time.perf_counter() - started:.1f} s)")
    finally:
        sink.close()
    if out_dir != report_dir and (report_dir / EVENTS_FILE).exists() and not (out_dir / EVENTS_FILE).exists():
        shutil.copyfile(report_dir / EVENTS_FILE, out_dir / EVENTS_FILE)
    consumed, consumed_out = report_dir / CONSUMED_DIR, out_dir / CONSUMED_DIR
    if out_dir != report_dir and consumed.is_dir() and not consumed_out.exists():
        shutil.copytree(consumed, consumed_out)  # the consumer ledger has one form: copied as it is
    result.seconds = time.perf_counter() - started
    return result
