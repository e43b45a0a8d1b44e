"""The ledger format shared by the chaos workload and the verification job (SPEC 8), in both
forms (JSON lines, Parquet chunks), its conversion, and the timeline's fault/heal pairing. No
Spark here."""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli.main import build_cli
from ledger.columnar import CLOSED_MARKER, OPEN_MARKER, SCHEMA, inspect
from ledger.convert import convert
from ledger.format import (
    EVENTS_FILE,
    FORMATS,
    LEDGER_DIR,
    LEDGER_FILE,
    Ack,
    Event,
    LedgerFormatError,
    LedgerWriter,
    WriteError,
    key_text,
    ledger_notes,
    read_events,
    read_ledger,
    value_digest,
)
from verify.plot import fault_spans


def test_value_digest_is_the_first_32_hex_chars_of_sha256() -> None:
    assert value_digest(b"abc") == hashlib.sha256(b"abc").hexdigest()[:32]
    assert value_digest(memoryview(b"abc")) == value_digest(bytearray(b"abc"))
    assert value_digest(None) is None
    assert key_text(b"k\xff") == "k\\xff" and key_text("k") == "k" and key_text(None) is None


def test_writer_lines_match_the_documented_format(tmp_path: Path) -> None:
    with LedgerWriter(tmp_path, format="jsonl", clock_ms=lambda: 42) as ledger:
        ledger.ack("t", 1, 7, b"v", key=b"k", producer_id=9, sequence=3, latency_ms=1.23456)
        ledger.error("t", -1, "NOT_ENOUGH_REPLICAS", time_ms=50)
        ledger.error("t", 0, "REQUEST_TIMED_OUT", value=b"w", time_ms=51)
        ledger.fault({"action": "SIGKILL", "broker": 2, "id": "f"}, time_ms=40)
        ledger.leader_change({"topic": "t", "partition": 1, "leader": 3})
    lines = [json.loads(line) for line in (tmp_path / LEDGER_FILE).read_text().splitlines()]
    assert lines == [
        {
            "type": "ack",
            "topic": "t",
            "partition": 1,
            "offset": 7,
            "key": "k",
            "value_digest": value_digest(b"v"),
            "producer_id": 9,
            "sequence": 3,
            "time_ms": 42,
            "latency_ms": 1.235,
        },
        {"type": "error", "topic": "t", "partition": -1, "error": "NOT_ENOUGH_REPLICAS", "time_ms": 50},
        {
            "type": "error",
            "topic": "t",
            "partition": 0,
            "error": "REQUEST_TIMED_OUT",
            "value_digest": value_digest(b"w"),
            "time_ms": 51,
        },
        {"type": "closed", "acks": 1, "errors": 2, "time_ms": 42},
    ]
    events = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    assert events == [
        {"type": "fault", "time_ms": 40, "detail": {"action": "SIGKILL", "broker": 2, "id": "f"}},
        {"type": "leader_change", "time_ms": 42, "detail": {"topic": "t", "partition": 1, "leader": 3}},
    ]
    with pytest.raises(ValueError, match="event type"):
        LedgerWriter(tmp_path, format="jsonl").event("reboot")


def test_readers_skip_a_torn_last_line_and_accept_an_untyped_ack(tmp_path: Path) -> None:
    with LedgerWriter(tmp_path, format="jsonl", clock_ms=lambda: 5) as ledger:
        ledger.ack("t", 0, 0, b"a")
        ledger.heal({"id": "f"}, time_ms=9)
        ledger.fault({"id": "f"}, time_ms=1)
    with open(tmp_path / LEDGER_FILE, "a") as f:
        f.write('{"topic": "t", "partition": 0, "offset": 1, "value_digest": "x", "time_ms": 6}\n')
        f.write('{"type": "ack", "topic": "t", "parti')
    entries = list(read_ledger(tmp_path))
    assert entries == [
        Ack("t", 0, 0, None, value_digest(b"a"), -1, -1, 5, 0.0),
        Ack("t", 0, 1, None, "x", -1, -1, 6, 0.0),
    ]
    assert [e.type for e in read_events(tmp_path)] == ["fault", "heal"]  # sorted by time
    assert not any(isinstance(e, WriteError) for e in entries)


@pytest.mark.parametrize("form", FORMATS)
def test_writer_is_safe_from_several_threads(tmp_path: Path, form: str) -> None:
    ledger = LedgerWriter(tmp_path, format=form, buffer_bytes=256, chunk_records=97)

    def write(n: int) -> None:
        for i in range(500):
            ledger.ack("t", n, i, f"{n}-{i}".encode(), latency_ms=0.5)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.close()
    acks = list(read_ledger(tmp_path))
    assert len(acks) == 2000 and ledger.acks == 2000
    assert {(a.partition, a.offset) for a in acks} == {(n, i) for n in range(4) for i in range(500)}
    with pytest.raises(ValueError, match="closed"):
        ledger.ack("t", 0, 0, b"late")


def test_faults_pair_with_their_heals_by_id_else_in_order() -> None:
    events = [
        Event("fault", 10, {"id": "a"}),
        Event("fault", 20, {"id": "b"}),
        Event("heal", 30, {"id": "b"}),
        Event("fault", 35, {}),
        Event("heal", 40, {"id": "a"}),
        Event("heal", 45, {}),
        Event("fault", 50, {"id": "c"}),
        Event("leader_change", 12, {}),
    ]
    spans = [(start, heal) for start, heal, _ in fault_spans(events)]
    assert spans == [(10, 40), (20, 30), (35, 45), (50, None)]
    # chaos/injector.py's shape: faults and heals name the broker, not an id.
    by_broker = [
        Event("fault", 1, {"kind": "pause", "broker": 2}),
        Event("fault", 2, {"kind": "crash", "broker": 3}),
        Event("heal", 3, {"kind": "crash", "broker": 3}),
        Event("heal", 4, {"kind": "final", "broker": 2}),
    ]
    assert [(start, heal) for start, heal, _ in fault_spans(by_broker)] == [(1, 4), (2, 3)]


# -- the columnar ledger (R/ledger/: Parquet chunks, _OPEN/_CLOSED) ---------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s


def columnar(tmp_path: Path, clock: FakeClock, **kwargs: Any) -> LedgerWriter:
    return LedgerWriter(tmp_path, clock_ms=lambda: 1_000 + int(clock.s * 1000), monotonic_s=clock, **kwargs)


def chunk_rows(tmp_path: Path) -> list[int]:
    return [pq.read_metadata(p).num_rows for p in inspect(tmp_path / LEDGER_DIR).chunks]


def test_columnar_writer_writes_a_chunk_every_chunk_records(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = columnar(tmp_path, clock, chunk_records=3, chunk_interval_s=60.0)
    assert json.loads((tmp_path / LEDGER_DIR / OPEN_MARKER).read_text())["opened_ms"] == 1_000
    for i in range(7):
        ledger.ack("t", 0, i, b"v%d" % i)
    assert chunk_rows(tmp_path) == [3, 3]  # the 7th waits in memory
    assert [e.offset for e in read_ledger(tmp_path)] == list(range(6))  # type: ignore[union-attr]
    ledger.flush()
    assert chunk_rows(tmp_path) == [3, 3, 1]
    ledger.error("t", -1, "REQUEST_TIMED_OUT")
    clock.s = 2.5
    ledger.close()
    assert chunk_rows(tmp_path) == [3, 3, 1, 1]
    closed = json.loads((tmp_path / LEDGER_DIR / CLOSED_MARKER).read_text())
    assert {k: closed[k] for k in ("chunks", "acks", "errors", "closed_ms")} == {
        "chunks": 4,
        "acks": 7,
        "errors": 1,
        "closed_ms": 3_500,
    }
    assert ledger_notes(tmp_path) == []
    assert [n.name for n in sorted((tmp_path / LEDGER_DIR).iterdir())] == [
        CLOSED_MARKER,
        OPEN_MARKER,
        *(f"part-{i:06d}.parquet" for i in range(4)),
    ]
    table = pq.read_table(tmp_path / LEDGER_DIR / "part-000000.parquet")
    assert table.schema.remove_metadata() == SCHEMA
    hi, lo = table.column("digest_hi")[1].as_py(), table.column("digest_lo")[1].as_py()
    assert (hi, lo) == struct.unpack(">qq", hashlib.sha256(b"v1").digest()[:16])


def test_columnar_writer_writes_a_chunk_once_its_oldest_entry_is_chunk_interval_s_old(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = columnar(tmp_path, clock, chunk_records=1000, chunk_interval_s=1.0)
    ledger.ack("t", 0, 0, b"a")  # due at 1.0
    clock.s = 0.9
    ledger.ack("t", 0, 1, b"b")
    assert chunk_rows(tmp_path) == []
    clock.s = 1.0
    ledger.error("t", 0, "NOT_LEADER_OR_FOLLOWER")  # checked on each write
    assert chunk_rows(tmp_path) == [3]
    clock.s = 5.0
    ledger.ack("t", 0, 2, b"c")  # the first entry of a chunk: due at 6.0, not overdue
    ledger.tick()
    assert chunk_rows(tmp_path) == [3]
    clock.s = 6.0
    ledger.tick()  # a timer may write a due chunk between writes
    assert chunk_rows(tmp_path) == [3, 1]
    ledger.close()
    assert chunk_rows(tmp_path) == [3, 1]


def test_a_crash_loses_at_most_the_unwritten_chunk_and_says_so(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = columnar(tmp_path, clock, chunk_records=1000, chunk_interval_s=60.0)
    for i in range(5):
        ledger.ack("t", 0, i, b"%d" % i, time_ms=2_000 + i)
    ledger.flush()
    for i in range(5, 8):
        ledger.ack("t", 0, i, b"%d" % i, time_ms=2_000 + i)
    # The workload dies: no close(), and a chunk half written under its temporary name.
    (tmp_path / LEDGER_DIR / ".part-000001.parquet.tmp").write_bytes(b"PAR1 torn")
    entries = list(read_ledger(tmp_path))
    assert [e.offset for e in entries] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    (note,) = ledger_notes(tmp_path)
    assert note.startswith("the ledger was not closed (the workload stopped without closing it): ")
    assert "acknowledgements after 1970-01-01T00:00:02.004Z (time_ms 2004) may be missing" in note
    assert "the lost check covers only what reached the ledger" in note
    assert note.endswith("; 1 unfinished chunk file(s) ignored")
    # Nothing written at all: the note names the opening time instead.
    columnar(tmp_path / "empty", clock)
    (note,) = ledger_notes(tmp_path / "empty")
    assert "after the ledger was opened at 1970-01-01T00:00:01.000Z (time_ms 1000)" in note


def test_both_forms_read_identically_and_one_report_dir_holds_one(tmp_path: Path) -> None:
    def write(ledger: LedgerWriter) -> None:
        ledger.ack("t", 1, 7, b"v", key=b"k\xff\x00", producer_id=9, sequence=3, latency_ms=1.25)
        ledger.ack("t", 2, 8, None, key="plain")
        ledger.ack_digest("u", 0, 0, "0123456789ABCDEF0123456789abcdef", time_ms=7)
        ledger.error("t", -1, "NOT_ENOUGH_REPLICAS", time_ms=50)
        ledger.ack("t", 1, 9, b"w", latency_ms=3)

    for form in FORMATS:
        with LedgerWriter(tmp_path / form, format=form, clock_ms=lambda: 42) as ledger:
            write(ledger)
    parquet, jsonl = list(read_ledger(tmp_path / "parquet")), list(read_ledger(tmp_path / "jsonl"))
    assert len(parquet) == 5
    upper = "0123456789ABCDEF0123456789abcdef"
    # The JSON lines keep the text as given; the columns keep the 128 bits (hex comes back lower case).
    assert jsonl[2].value_digest == upper and parquet[2].value_digest == upper.lower()  # type: ignore[union-attr]
    assert parquet[:2] + parquet[3:] == jsonl[:2] + jsonl[3:]
    assert parquet[1] == Ack("t", 2, 8, "plain", None, -1, -1, 42, 0.0)
    assert parquet[3] == WriteError("t", -1, "NOT_ENOUGH_REPLICAS", 50)

    (tmp_path / "jsonl" / LEDGER_DIR).mkdir()
    with pytest.raises(LedgerFormatError, match="both forms"):
        list(read_ledger(tmp_path / "jsonl"))
    with pytest.raises(LedgerFormatError, match="already holds a parquet ledger"):
        LedgerWriter(tmp_path / "parquet", format="jsonl")


def test_convert_round_trips_every_entry(tmp_path: Path) -> None:
    r = tmp_path / "r"
    with LedgerWriter(r, format="jsonl", clock_ms=lambda: 42) as ledger:
        ledger.ack("t", 0, 0, b"a", key=b"k\xfe", producer_id=3, sequence=0, latency_ms=1.5)
        ledger.ack("t", 0, 1, None, key=None)
        ledger.error("t", -1, "NOT_ENOUGH_REPLICAS")
        ledger.error("t", 0, "REQUEST_TIMED_OUT", value=b"failed")
        ledger.ack("t", 1, 0, b"b", time_ms=99, latency_ms=0.001)
        ledger.fault({"id": "f"}, time_ms=1)
    lines_before = (r / LEDGER_FILE).read_text()
    runner = CliRunner()
    done = runner.invoke(
        build_cli(), ["ledger", "convert", str(r), "--to", "parquet", "--out", str(tmp_path / "p")]
    )
    assert done.exit_code == 0, (done.output, done.stderr)
    assert "converted 3 ack(s) and 2 error(s)" in done.stdout
    assert (r / LEDGER_FILE).read_text() == lines_before  # the original is kept
    assert (tmp_path / "p" / EVENTS_FILE).read_text() == (r / EVENTS_FILE).read_text()
    done = runner.invoke(
        build_cli(), ["ledger", "convert", str(tmp_path / "p"), "--to", "jsonl", "--out", str(tmp_path / "j")]
    )
    assert done.exit_code == 0, (done.output, done.stderr)
    original = list(read_ledger(r))
    assert list(read_ledger(tmp_path / "p")) == original == list(read_ledger(tmp_path / "j"))
    assert (tmp_path / "j" / LEDGER_FILE).read_text() == lines_before
    assert original[0] == Ack("t", 0, 0, "k\\xfe", value_digest(b"a"), 3, 0, 42, 1.5)
    assert original[3] == WriteError("t", 0, "REQUEST_TIMED_OUT", 42, value_digest(b"failed"))

    # Next to the original: written once, then refused.
    done = runner.invoke(build_cli(), ["ledger", "convert", str(r)])
    assert done.exit_code == 0 and (r / LEDGER_DIR / CLOSED_MARKER).exists()
    done = runner.invoke(build_cli(), ["ledger", "convert", str(r)])
    assert done.exit_code == 1 and "exists: will not overwrite it" in done.stderr
    said: list[str] = []
    result = convert(r, "jsonl", out=tmp_path / "j2", progress=said.append, progress_every=2)
    assert (result.acks, result.errors) == (3, 2) and len(said) == 2 and "4 entries converted" in said[1]
