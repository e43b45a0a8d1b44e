"""The consumer ledger, ``R/consumed/`` (ledger/consumed.py; docs/operations.md "Chaos runs and
verification"): its rows as documented, its chunks and markers, and that it leaves the produce
ledger alone (a report dir with both is one form of produce ledger, and ``ledger convert --out``
carries the consumer ledger along)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from ledger.columnar import CLOSED_MARKER, OPEN_MARKER, inspect
from ledger.consumed import (
    CONSUMED_DIR,
    CONSUMER_COLUMNS,
    CONSUMER_SCHEMA,
    NO_PARTITION,
    ConsumerEntry,
    ConsumerLedgerWriter,
    consumer_ledger_closed,
    consumer_ledger_present,
    read_consumer_ledger,
)
from ledger.convert import convert
from ledger.entries import value_digest, value_halves
from ledger.format import LedgerWriter, ledger_form

T = 1_700_000_000_000


def test_rows_are_the_documented_columns_in_the_order_written(tmp_path: Path) -> None:
    w = ConsumerLedgerWriter(tmp_path, clock_ms=lambda: T)
    w.assigned("c0-0", "member-a", 3, [("t", 2), ("t", 0)], time_ms=T + 1)
    w.assigned("c1-0", "member-b", 3, [], topic="t", time_ms=T + 1)
    w.consumed("c0-0", "member-a", 3, "t", 0, 41, b"v-41", time_ms=T + 2)
    w.consumed("c0-0", "member-a", 3, "t", 0, 42, None, time_ms=T + 3)
    w.committed("c0-0", "member-a", 3, [("t", 0, 43), ("t", 2, 7)], time_ms=T + 4)
    w.close({"drained": True, "behind": {}})
    assert consumer_ledger_present(tmp_path) and not consumer_ledger_present(tmp_path / "other")

    rows = list(read_consumer_ledger(tmp_path))
    assert rows == [
        ConsumerEntry("assigned", "c0-0", "member-a", 3, "t", 0, None, None, T + 1, 0),
        ConsumerEntry("assigned", "c0-0", "member-a", 3, "t", 2, None, None, T + 1, 1),
        ConsumerEntry("assigned", "c1-0", "member-b", 3, "t", NO_PARTITION, None, None, T + 1, 2),
        ConsumerEntry("consumed", "c0-0", "member-a", 3, "t", 0, 41, value_digest(b"v-41"), T + 2, 3),
        ConsumerEntry("consumed", "c0-0", "member-a", 3, "t", 0, 42, None, T + 3, 4),
        ConsumerEntry("committed", "c0-0", "member-a", 3, "t", 0, 43, None, T + 4, 5),
        ConsumerEntry("committed", "c0-0", "member-a", 3, "t", 2, 7, None, T + 4, 6),
    ]
    (chunk,) = inspect(tmp_path / CONSUMED_DIR).chunks
    table = pq.read_table(chunk)
    assert table.schema.names == list(CONSUMER_COLUMNS) and table.schema.equals(CONSUMER_SCHEMA, False)
    first_consumed = table.slice(3, 1).to_pylist()[0]
    assert (first_consumed["digest_hi"], first_consumed["digest_lo"]) == value_halves(b"v-41")
    closed = consumer_ledger_closed(tmp_path)
    assert closed["format"] == "floodmark-consumer-ledger-parquet" and closed["drained"] is True
    assert (closed["consumed"], closed["committed"], closed["assigned"], closed["rows"]) == (2, 2, 3, 7)


def test_chunks_by_count_and_by_age_and_an_unclosed_ledger_has_no_closed_marker(tmp_path: Path) -> None:
    now = [0.0]
    w = ConsumerLedgerWriter(tmp_path, clock_ms=lambda: T, monotonic_s=lambda: now[0], chunk_records=3)
    for offset in range(7):
        w.consumed("c0-0", "m", 1, "t", 0, offset, b"x", time_ms=T)
    assert len(inspect(tmp_path / CONSUMED_DIR).chunks) == 2  # 3 + 3, one row buffered
    now[0] = 5.0
    w.tick()  # the buffered row is older than chunk_interval_s (1 s)
    assert len(inspect(tmp_path / CONSUMED_DIR).chunks) == 3
    directory = tmp_path / CONSUMED_DIR
    assert (directory / OPEN_MARKER).exists() and not (directory / CLOSED_MARKER).exists()
    assert consumer_ledger_closed(tmp_path) is None  # the workload died here: the checks are told
    assert [r.offset for r in read_consumer_ledger(tmp_path)] == list(range(7))
    w.close()
    reopened = ConsumerLedgerWriter(tmp_path, clock_ms=lambda: T)  # continues numbering and seq
    reopened.consumed("c0-1", "m2", 2, "t", 0, 7, b"x", time_ms=T)
    reopened.close()
    rows = list(read_consumer_ledger(tmp_path))
    assert [r.seq for r in rows] == list(range(8)) and rows[-1].member == "c0-1"


def test_the_consumer_ledger_leaves_the_produce_ledger_alone(tmp_path: Path) -> None:
    report = tmp_path / "r"
    with LedgerWriter(report, format="jsonl") as produce:
        produce.ack("t", 0, 0, b"v", producer_id=1, sequence=0)
    ConsumerLedgerWriter(report).close()
    assert ledger_form(report) == "jsonl"  # R/consumed/ is no second form of the produce ledger
    converted = convert(report, "parquet", out=tmp_path / "r2")
    assert converted.acks == 1 and consumer_ledger_present(tmp_path / "r2")
    assert json.loads((tmp_path / "r2" / CONSUMED_DIR / CLOSED_MARKER).read_text())["rows"] == 0
