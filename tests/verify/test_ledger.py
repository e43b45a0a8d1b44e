"""The ledger format shared by the chaos workload and the verification job (SPEC 8), and the
timeline's fault/heal pairing. No Spark here."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from ledger.format import (
    EVENTS_FILE,
    LEDGER_FILE,
    Ack,
    Event,
    LedgerWriter,
    WriteError,
    key_text,
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
    with LedgerWriter(tmp_path, clock_ms=lambda: 42) as ledger:
        ledger.ack("t", 1, 7, b"v", key=b"k", producer_id=9, sequence=3, latency_ms=1.23456)
        ledger.error("t", -1, "NOT_ENOUGH_REPLICAS", time_ms=50)
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
    ]
    events = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    assert events == [
        {"type": "fault", "time_ms": 40, "detail": {"action": "SIGKILL", "broker": 2, "id": "f"}},
        {"type": "leader_change", "time_ms": 42, "detail": {"topic": "t", "partition": 1, "leader": 3}},
    ]
    with pytest.raises(ValueError, match="event type"):
        LedgerWriter(tmp_path).event("reboot")


def test_readers_skip_a_torn_last_line_and_accept_an_untyped_ack(tmp_path: Path) -> None:
    with LedgerWriter(tmp_path, clock_ms=lambda: 5) as ledger:
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


def test_writer_is_safe_from_several_threads(tmp_path: Path) -> None:
    ledger = LedgerWriter(tmp_path, buffer_bytes=256)

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
