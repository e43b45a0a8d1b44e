"""The columnar ledger, ``R/ledger/`` (docs/operations.md "Chaos runs and verification"): Parquet
chunks that Spark reads natively, written so that a reader never sees half a chunk.

Layout of ``R/ledger/``:

* ``part-NNNNNN.parquet`` - the chunks, numbered from 0 in the order written; each one is
  written under a hidden temporary name (``.part-NNNNNN.parquet.tmp``: Spark and
  :func:`inspect` skip names starting with ``.`` or ``_``), fsynced when the writer was asked
  to, then renamed into place with ``os.replace``, so a chunk is there whole or not at all;
* ``_OPEN`` - JSON ``{"format", "version", "opened_ms"}``, written when the writer opens;
* ``_CLOSED`` - JSON ``{"format", "version", "chunks", "acks", "errors", "closed_ms"}``, written by
  ``close()`` after the last chunk. ``_OPEN`` without ``_CLOSED`` means the workload stopped
  without closing the ledger: what it had not yet written as a chunk (at most the last
  ``chunk_records`` entries or ``chunk_interval_s`` of them) is missing, and :meth:`ChunkDir.notes`
  says so.

Columns (:data:`SCHEMA`; Spark DDL :data:`LEDGER_COLUMNAR_DDL`), one row per produce outcome:
``kind`` (``ack`` | ``error``), ``topic``, ``partition`` int32, ``offset`` int64, ``key``,
``digest_hi``/``digest_lo`` int64 (the value digest's halves, :func:`ledger.entries.value_halves`,
null for a null value), ``producer_id`` int64, ``sequence`` int32, ``time_ms`` int64,
``latency_ms`` float64, ``error``. An error row has null offset, key, digest, producer id,
sequence and latency (its digest is the failed value's when the writer gave it: a failed write
that landed anyway can then be told apart); an ack row a null error. Each chunk's Parquet metadata carries
``floodmark.first_time_ms``, ``floodmark.last_time_ms`` (of its entries) and ``floodmark.written_ms``.

:class:`ChunkSink` buffers entries as rows and writes a chunk every ``chunk_records`` entries or
when the oldest buffered entry is ``chunk_interval_s`` old (the injected monotonic clock is
read on each write), on ``flush()`` and on ``close()``. Not thread-safe:
:class:`ledger.format.LedgerWriter` serialises its callers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ledger.entries import Ack, WriteError, digest_halves, digest_hex, format_ms

FORMAT_NAME = "floodmark-ledger-parquet"
FORMAT_VERSION = 1
OPEN_MARKER = "_OPEN"
CLOSED_MARKER = "_CLOSED"
DEFAULT_CHUNK_RECORDS = 65_536
DEFAULT_CHUNK_INTERVAL_S = 1.0
_CHUNK = re.compile(r"^part-(\d+)\.parquet$")
_TEMP = re.compile(r"^\.part-\d+\.parquet\.tmp$")
_HALVES = struct.Struct(">qq")

SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.string()),
        ("digest_hi", pa.int64()),
        ("digest_lo", pa.int64()),
        ("producer_id", pa.int64()),
        ("sequence", pa.int32()),
        ("time_ms", pa.int64()),
        ("latency_ms", pa.float64()),
        ("error", pa.string()),
    ]
)
COLUMNS = tuple(SCHEMA.names)
#: Spark DDL of a chunk's rows (the same types as :data:`SCHEMA`).
LEDGER_COLUMNAR_DDL = (
    "kind string, topic string, partition int, offset bigint, key string, digest_hi bigint, "
    "digest_lo bigint, producer_id bigint, sequence int, time_ms bigint, latency_ms double, error string"
)


def chunk_name(index: int) -> str:
    return f"part-{index:06d}.parquet"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_atomically(directory: Path, name: str, write: Callable[[Any], None], fsync: bool) -> None:
    """``write(binary file)`` under a hidden temporary name, then rename it to ``name``."""
    temp = directory / f".{name}.tmp"
    with open(temp, "wb") as f:
        write(f)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(temp, directory / name)
    if fsync:
        _fsync_dir(directory)


def write_marker(
    directory: Path, name: str, content: dict[str, Any], fsync: bool = False, format_name: str = FORMAT_NAME
) -> None:
    body = json.dumps({"format": format_name, "version": FORMAT_VERSION, **content}).encode() + b"\n"
    _replace_atomically(directory, name, lambda f: f.write(body), fsync)


def write_chunk(directory: Path, index: int, table: pa.Table, fsync: bool = False) -> Path:
    """Write ``table`` (:data:`SCHEMA`) as chunk ``index``, whole or not at all."""
    times = table.column("time_ms")
    meta = {
        b"floodmark.first_time_ms": str(pc.min(times).as_py()).encode(),
        b"floodmark.last_time_ms": str(pc.max(times).as_py()).encode(),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    _replace_atomically(directory, chunk_name(index), lambda f: pq.write_table(table, f), fsync)
    return directory / chunk_name(index)


def table_of(rows: list[tuple[Any, ...]], written_ms: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    """The chunk table of rows in ``schema``'s column order (:data:`COLUMNS` by default)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.names]
    arrays = [pa.array(values, type=f.type) for values, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(
        arrays, schema=schema.with_metadata({b"floodmark.written_ms": str(written_ms)})
    )


class ChunkSink:
    """Writes ``R/ledger/``'s chunks and markers (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        clock_ms: Callable[[], int],
        monotonic_s: Callable[[], float],
        fsync: bool = False,
        chunk_records: int = DEFAULT_CHUNK_RECORDS,
        chunk_interval_s: float = DEFAULT_CHUNK_INTERVAL_S,
    ) -> None:
        if chunk_records < 1 or chunk_interval_s < 0:
            raise ValueError("chunk_records must be at least 1 and chunk_interval_s not negative")
        self.directory = directory
        directory.mkdir(exist_ok=True)
        self._clock_ms, self._monotonic_s, self._fsync = clock_ms, monotonic_s, fsync
        self._chunk_records, self._interval_s = chunk_records, chunk_interval_s
        before = inspect(directory)  # a reopened ledger continues: numbering and totals
        self.chunks = len(before.chunks)
        self._next = before.next_index
        self.acks = int((before.closed or {}).get("acks", 0))
        self.errors = int((before.closed or {}).get("errors", 0))
        with contextlib.suppress(FileNotFoundError):
            (directory / CLOSED_MARKER).unlink()
        write_marker(directory, OPEN_MARKER, {"opened_ms": clock_ms()}, fsync)
        self._rows: list[tuple[Any, ...]] = []
        self._buffered_acks = 0
        self._due = 0.0

    def _added(self) -> None:
        now = self._monotonic_s()
        if len(self._rows) == 1:
            self._due = now + self._interval_s
        if len(self._rows) >= self._chunk_records or now >= self._due:
            self.write_chunk()

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
        halves = None if value is None else _HALVES.unpack_from(hashlib.sha256(value).digest())
        self.ack_halves(topic, partition, offset, halves, key, producer_id, sequence, time_ms, latency_ms)

    def ack_halves(
        self,
        topic: str,
        partition: int,
        offset: int,
        halves: tuple[int, int] | None,
        key: str | None,
        producer_id: int,
        sequence: int,
        time_ms: int,
        latency_ms: float,
    ) -> None:
        hi, lo = halves if halves is not None else (None, None)
        self._rows.append(
            ("ack", topic, partition, offset, key, hi, lo, producer_id, sequence, time_ms, latency_ms, None)
        )
        self._buffered_acks += 1
        self._added()

    def error(self, topic: str, partition: int, error: str, time_ms: int, digest: str | None = None) -> None:
        hi, lo = (None, None) if digest is None else digest_halves(digest)
        self._rows.append(("error", topic, partition, None, None, hi, lo, None, None, time_ms, None, error))
        self._added()

    def tick(self) -> None:
        """Write the buffered chunk if it is due by time (for a caller with a timer)."""
        if self._rows and self._monotonic_s() >= self._due:
            self.write_chunk()

    def write_chunk(self) -> None:
        """Write what is buffered as the next chunk (nothing when nothing is)."""
        if not self._rows:
            return
        write_chunk(self.directory, self._next, table_of(self._rows, self._clock_ms()), self._fsync)
        self._next += 1
        self.chunks += 1
        self.acks += self._buffered_acks
        self.errors += len(self._rows) - self._buffered_acks
        self._rows, self._buffered_acks = [], 0

    def flush(self) -> None:
        self.write_chunk()

    def close(self) -> None:
        self.write_chunk()
        write_marker(
            self.directory,
            CLOSED_MARKER,
            {"chunks": self.chunks, "acks": self.acks, "errors": self.errors, "closed_ms": self._clock_ms()},
            self._fsync,
        )


# -- reading --------------------------------------------------------------------------------------


def _marker(path: Path) -> dict[str, Any] | None:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else {}


@dataclass(frozen=True)
class ChunkDir:
    """What ``R/ledger/`` holds: complete chunks in order, orphan temporary files, the markers."""

    directory: Path
    chunks: list[Path]
    temp_files: list[Path]
    opened: dict[str, Any] | None
    closed: dict[str, Any] | None

    @property
    def next_index(self) -> int:
        return max((int(_CHUNK.match(p.name)[1]) for p in self.chunks), default=-1) + 1  # type: ignore[index]

    def last_time_ms(self) -> int | None:
        """The time of the last entry of the last chunk (from its footer), None without chunks."""
        for path in reversed(self.chunks):
            with contextlib.suppress(OSError, ValueError, pa.ArrowException, KeyError, TypeError):
                return int(pq.read_schema(path).metadata[b"floodmark.last_time_ms"])
        return None

    def notes(self) -> list[str]:
        """What a reader must know: an unclosed ledger (with the orphan temporary files), a
        ledger whose ``_CLOSED`` disagrees with its chunks."""
        notes: list[str] = []
        orphans = f"; {len(self.temp_files)} unfinished chunk file(s) ignored" if self.temp_files else ""
        if self.closed is None:
            last = self.last_time_ms()
            if last is not None:
                since = format_ms(last)
            elif self.opened and isinstance(self.opened.get("opened_ms"), int):
                since = (
                    f"the ledger was opened at {format_ms(self.opened['opened_ms'])} (no chunk was written)"
                )
            else:
                since = "the start (no chunk was written)"
            notes.append(
                f"the ledger was not closed (the workload stopped without closing it): acknowledgements "
                f"after {since} may be missing, so the lost check covers only what reached the ledger{orphans}"
            )
        else:
            if self.temp_files:
                notes.append(f"{len(self.temp_files)} unfinished chunk file(s) in {self.directory} ignored")
            if self.closed.get("chunks") != len(self.chunks):
                notes.append(
                    f"{self.directory}/{CLOSED_MARKER} counts {self.closed.get('chunks')} chunk(s) but "
                    f"{len(self.chunks)} are there"
                )
        return notes


def inspect(directory: Path) -> ChunkDir:
    """List ``directory`` (a missing one is an empty, unopened ledger)."""
    chunks: list[tuple[int, Path]] = []
    temps: list[Path] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if m := _CHUNK.match(entry.name):
                chunks.append((int(m[1]), Path(entry.path)))
            elif _TEMP.match(entry.name):
                temps.append(Path(entry.path))
    return ChunkDir(
        directory,
        [p for _, p in sorted(chunks)],
        sorted(temps),
        _marker(directory / OPEN_MARKER),
        _marker(directory / CLOSED_MARKER),
    )


def read_columnar_ledger(directory: Path, batch_rows: int = 65_536) -> Iterator[Ack | WriteError]:
    """Every entry of the complete chunks, in the order written (``batch_rows`` at a time in memory)."""
    for path in inspect(directory).chunks:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=list(COLUMNS)):
            yield from _entries(batch)


def _entries(batch: pa.RecordBatch) -> Iterator[Ack | WriteError]:
    cols = [batch.column(name).to_pylist() for name in COLUMNS]
    for kind, topic, partition, offset, key, hi, lo, pid, seq, at, latency, error in zip(*cols, strict=True):
        if kind == "ack":
            yield Ack(topic, partition, offset, key, digest_hex(hi, lo), pid, seq, at, latency)
        elif kind == "error":
            yield WriteError(topic, partition, error, at, digest_hex(hi, lo))
