"""The consumer ledger, ``R/consumed/`` (docs/operations.md "Chaos runs and verification";
docs/guarantees.md): what the chaos run's consumer group (``chaos run --consumers N``) consumed,
committed and was assigned, beside the produce ledger (``R/ledger/``), which it leaves untouched.

The layout is the columnar produce ledger's (:mod:`ledger.columnar`): Parquet chunks
``part-NNNNNN.parquet`` written whole under a hidden temporary name and renamed into place, an
``_OPEN`` marker when the writer opens and a ``_CLOSED`` one when it closes: the run's own facts
(such as whether the final drain reached the end of every partition) and the totals, ``chunks``,
``rows`` and the rows of each kind (a reopened ledger continues them), which the verification
holds the chunks against (:mod:`verify.consumer_ledger`). One
row per fact (:data:`CONSUMER_SCHEMA`, Spark DDL :data:`CONSUMER_LEDGER_DDL`):

* ``consumed`` - a record a member's ``poll`` returned: its ``offset``, and ``digest_hi`` /
  ``digest_lo`` the value digest as the produce ledger computes it
  (:func:`ledger.entries.value_halves`; null for a null value);
* ``committed`` - one per partition of an OffsetCommit the coordinator acknowledged (Kafka's
  ``commitSync`` returning): ``offset`` is the committed offset, the next one to read. A commit
  that failed is not in the ledger;
* ``assigned`` - one per partition a member got when it joined a generation (its
  ``on_partitions_assigned``), ``offset`` null; an empty assignment is one row with ``partition``
  -1 (:data:`NO_PARTITION`).

Every row names the ``member`` (the chaos run's stable id of one consumer incarnation,
``c<i>-<incarnation>``), the coordinator's ``member_id`` for it (empty before a join) and the
``generation`` it belonged to when the fact happened (-1 outside one), the wall-clock
``time_ms`` of the process that recorded the fact, and ``seq``, the writer's running count, in
the order the writer was handed the facts. ``seq`` orders facts of one millisecond only within
one member: floodmark's own members run in the one workload process, but with ``--client kafka``
each member is a process of its own (chaos/kafka_member.py) stamping its own clock, and ``seq``
is the order in which the parent happened to read their pipes. So facts of two members are
ordered by ``time_ms`` alone, and two of one millisecond are unordered
(:mod:`verify.ledger_order`).

:class:`ConsumerLedgerWriter` buffers rows and writes a chunk every ``chunk_records`` rows or once
the oldest buffered row is ``chunk_interval_s`` old; a lock serialises its callers.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ledger.columnar import (
    CLOSED_MARKER,
    DEFAULT_CHUNK_INTERVAL_S,
    DEFAULT_CHUNK_RECORDS,
    OPEN_MARKER,
    inspect,
    table_of,
    write_chunk,
    write_marker,
)
from ledger.entries import digest_hex, value_halves, wall_ms

CONSUMED_DIR = "consumed"
CONSUMER_FORMAT_NAME = "floodmark-consumer-ledger-parquet"
CONSUMED, COMMITTED, ASSIGNED = "consumed", "committed", "assigned"
CONSUMER_KINDS = (CONSUMED, COMMITTED, ASSIGNED)
NO_PARTITION = -1
NO_GENERATION = -1

CONSUMER_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("member", pa.string()),
        ("member_id", pa.string()),
        ("generation", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("digest_hi", pa.int64()),
        ("digest_lo", pa.int64()),
        ("time_ms", pa.int64()),
        ("seq", pa.int64()),
    ]
)
CONSUMER_COLUMNS = tuple(CONSUMER_SCHEMA.names)
#: Spark DDL of a chunk's rows (the same types as :data:`CONSUMER_SCHEMA`).
CONSUMER_LEDGER_DDL = (
    "kind string, member string, member_id string, generation int, topic string, partition int, "
    "offset bigint, digest_hi bigint, digest_lo bigint, time_ms bigint, seq bigint"
)


@dataclass(frozen=True)
class ConsumerEntry:
    """One row of the consumer ledger as :func:`read_consumer_ledger` returns it."""

    kind: str
    member: str
    member_id: str
    generation: int
    topic: str
    partition: int
    offset: int | None
    value_digest: str | None
    time_ms: int
    seq: int


class ConsumerLedgerWriter:
    """Writes ``R/consumed/`` (see the module docstring). Use it as a context manager, or call
    :meth:`close`; ``summary`` (given to :meth:`close`) goes into ``_CLOSED``."""

    def __init__(
        self,
        report_dir: Path | str,
        *,
        fsync: bool = False,
        clock_ms: Callable[[], int] = wall_ms,
        monotonic_s: Callable[[], float] = time.monotonic,
        chunk_records: int = DEFAULT_CHUNK_RECORDS,
        chunk_interval_s: float = DEFAULT_CHUNK_INTERVAL_S,
    ) -> None:
        if chunk_records < 1 or chunk_interval_s < 0:
            raise ValueError("chunk_records must be at least 1 and chunk_interval_s not negative")
        self.directory = Path(report_dir) / CONSUMED_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        self._clock_ms, self._monotonic_s, self._fsync = clock_ms, monotonic_s, fsync
        self._chunk_records, self._interval_s = chunk_records, chunk_interval_s
        before = inspect(self.directory)  # a reopened ledger continues its numbering
        self._next = before.next_index
        self.chunks = len(before.chunks)
        self.seq = int((before.closed or {}).get("rows", 0))  # a reopened ledger continues its totals
        self.counts = {kind: int((before.closed or {}).get(kind, 0)) for kind in CONSUMER_KINDS}
        with contextlib.suppress(FileNotFoundError):
            (self.directory / CLOSED_MARKER).unlink()
        self._marker(OPEN_MARKER, {"opened_ms": clock_ms()})
        self._lock = threading.Lock()
        self._rows: list[tuple[Any, ...]] = []
        self._due = 0.0
        self._closed = False

    def __enter__(self) -> ConsumerLedgerWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _marker(self, name: str, content: dict[str, Any]) -> None:
        write_marker(self.directory, name, content, self._fsync, format_name=CONSUMER_FORMAT_NAME)

    def _add(self, rows: list[tuple[Any, ...]]) -> None:
        """Append rows (without ``seq``) under the lock; write a chunk when one is due."""
        with self._lock:
            if self._closed:
                raise ValueError(f"consumer ledger in {self.directory} is closed")
            now = self._monotonic_s()
            if not self._rows:
                self._due = now + self._interval_s
            for row in rows:
                self._rows.append((*row, self.seq))
                self.seq += 1
                self.counts[row[0]] += 1
            if len(self._rows) >= self._chunk_records or now >= self._due:
                self._write_chunk()

    def consumed(
        self,
        member: str,
        member_id: str,
        generation: int,
        topic: str,
        partition: int,
        offset: int,
        value: bytes | bytearray | memoryview | None,
        time_ms: int | None = None,
    ) -> None:
        """A record a member's poll returned (its value digested here)."""
        hi, lo = value_halves(value) if value is not None else (None, None)
        at = self._clock_ms() if time_ms is None else time_ms
        self._add([(CONSUMED, member, member_id, generation, topic, partition, offset, hi, lo, at)])

    def committed(
        self,
        member: str,
        member_id: str,
        generation: int,
        offsets: Iterable[tuple[str, int, int]],
        time_ms: int | None = None,
    ) -> None:
        """An acknowledged OffsetCommit: ``(topic, partition, committed offset)`` each."""
        at = self._clock_ms() if time_ms is None else time_ms
        rows = [(COMMITTED, member, member_id, generation, t, p, o, None, None, at) for t, p, o in offsets]
        self._add(rows)

    def assigned(
        self,
        member: str,
        member_id: str,
        generation: int,
        partitions: Iterable[tuple[str, int]],
        topic: str = "",
        time_ms: int | None = None,
    ) -> None:
        """A generation's assignment of ``member``: one row per partition, or one row with
        :data:`NO_PARTITION` (of ``topic``) when it got none."""
        at = self._clock_ms() if time_ms is None else time_ms
        tps = sorted(partitions) or [(topic, NO_PARTITION)]
        self._add([(ASSIGNED, member, member_id, generation, t, p, None, None, None, at) for t, p in tps])

    def tick(self) -> None:
        """Write the buffered chunk if it is due by time (for a caller with a timer)."""
        with self._lock:
            if self._rows and not self._closed and self._monotonic_s() >= self._due:
                self._write_chunk()

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._write_chunk()

    def _write_chunk(self) -> None:
        if not self._rows:
            return
        table = table_of(self._rows, self._clock_ms(), CONSUMER_SCHEMA)
        write_chunk(self.directory, self._next, table, self._fsync)
        self._next += 1
        self.chunks += 1
        self._rows = []

    def close(self, summary: dict[str, Any] | None = None) -> None:
        """Write the last chunk, then ``_CLOSED`` with the totals and ``summary``."""
        with self._lock:
            if self._closed:
                return
            self._write_chunk()
            self._closed = True
            totals = {"chunks": self.chunks, "rows": self.seq, **self.counts}
            # the totals last: a summary's key of the same name (GroupStats.consumed) must not hide them
            self._marker(CLOSED_MARKER, {**(summary or {}), **totals, "closed_ms": self._clock_ms()})


# -- reading --------------------------------------------------------------------------------------


def consumer_ledger_present(report_dir: Path | str) -> bool:
    """Whether the report dir holds a consumer ledger (the run had consumers)."""
    return (Path(report_dir) / CONSUMED_DIR).is_dir()


def consumer_ledger_closed(report_dir: Path | str) -> dict[str, Any] | None:
    """The ``_CLOSED`` marker's content, or None when the workload did not close the ledger."""
    try:
        content = json.loads((Path(report_dir) / CONSUMED_DIR / CLOSED_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def read_consumer_ledger(report_dir: Path | str, batch_rows: int = 65_536) -> Iterator[ConsumerEntry]:
    """Every row of the complete chunks, in the order written."""
    for path in inspect(Path(report_dir) / CONSUMED_DIR).chunks:
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=list(CONSUMER_COLUMNS)):
            cols = [batch.column(name).to_pylist() for name in CONSUMER_COLUMNS]
            for kind, member, mid, gen, topic, part, offset, hi, lo, at, seq in zip(*cols, strict=True):
                yield ConsumerEntry(kind, member, mid, gen, topic, part, offset, digest_hex(hi, lo), at, seq)
