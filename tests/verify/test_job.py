"""Every check of the verification job (SPEC 8) against a planted anomaly, and a clean run.

Each test writes a small run with the real broker log code (:mod:`tests.verify.scenario`),
breaks it in exactly one way, runs the job offline from the log dirs, and asserts that exactly
that check fires, with the expected count and offending record, and that the result is not ok.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.columnar import CLOSED_MARKER
from ledger.format import FORMATS, LEDGER_DIR, value_digest
from tests.verify import scenario as sc
from verify.job import run_verification
from verify.report import CHECKS

TOPIC = sc.TOPIC


def verify(s: sc.Scenario, spark: Any) -> Any:
    return run_verification(s.report_dir, None, s.log_dirs, spark=spark)


def assert_only(result: Any, name: str, count: int) -> list[dict]:
    """``name`` found ``count`` offences, every other check none; the run is not ok."""
    counts = {check: result.counts[check] for check in CHECKS}
    assert counts == {check: (count if check == name else 0) for check in CHECKS}
    assert not result.ok and result.exit_code != 0
    report = json.loads(result.report_path.read_text())
    assert report["ok"] is False and report["counts"][name] == count
    assert f"## {name} ({count})" in result.summary_path.read_text()
    return result.violations[name]


def test_clean_run_passes_and_writes_the_report(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    result = verify(s, spark)
    assert result.ok and result.exit_code == 0, result.violations
    assert result.counts["acknowledged"] == result.counts["committed"] == s.total == 60
    assert result.counts["errors"] == 1 and result.errors_by_name == {"NOT_LEADER_OR_FOLLOWER": 1}
    assert all(result.counts[c] == 0 for c in CHECKS) and not result.skipped
    assert result.high_watermarks == {"t-0": 30, "t-1": 30}
    report = json.loads(result.report_path.read_text())
    assert report["ok"] is True and report["mode"] == "log-dirs"
    assert {(r["broker"], r["partition"], r["leo"], r["checkpointed_hw"]) for r in report["replicas"]} == {
        (b, p, 30, 30) for b in (1, 2, 3) for p in (0, 1)
    }
    summary = result.summary_path.read_text()
    assert summary.startswith("# Verification PASSED")
    assert (
        "| divergent | 0 | offsets below the HW that replicas hold differently | 6 replica(s), 180 record(s)"
        in summary
    )
    assert result.coverage["lost"] == "60 ack(s) against 60 committed record(s) of 2 partition(s)"
    png = result.timeline_path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_flipped_byte_on_one_replica_is_divergent(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    path, pos, size, base = s.disk.batch_positions(3, TOPIC, 0)[1]  # offsets 5..9, epoch 0
    data = bytearray(path.read_bytes())
    data[pos + size - 2] ^= 0x01  # the last byte of the last record's value
    path.write_bytes(bytes(data))

    rows = assert_only(verify(s, spark), "divergent", 5)
    assert [r["offset"] for r in rows] == list(range(base, base + 5))
    for row in rows:
        assert row["missing_on"] == []
        by_broker = {c["broker"]: c for c in row["copies"]}
        assert [by_broker[b]["crc_valid"] for b in (1, 2, 3)] == [True, True, False]
        assert "a copy fails its batch CRC" in row["reason"]
    last = rows[-1]
    assert "replicas hold different records" in last["reason"]
    digests = {c["broker"]: c["value_digest"] for c in last["copies"]}
    assert digests[1] == digests[2] == value_digest(sc.value(0, 1, 4)) != digests[3]


def test_batch_dropped_from_one_replica_is_divergent(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    path, pos, size, base = s.disk.batch_positions(2, TOPIC, 1)[4]  # offsets 20..24, epoch 1
    data = path.read_bytes()
    path.write_bytes(data[:pos] + data[pos + size :])

    rows = assert_only(verify(s, spark), "divergent", 5)
    assert [(r["partition"], r["offset"]) for r in rows] == [(1, o) for o in range(base, base + 5)]
    for row in rows:
        assert row["missing_on"] == [2] and row["reason"] == "missing on a replica whose log spans it"
        assert sorted(c["broker"] for c in row["copies"]) == [1, 3]


@pytest.mark.parametrize("ledger_format", FORMATS)
def test_acknowledged_write_missing_from_the_log_is_lost(
    tmp_path: Path, spark: Any, ledger_format: str
) -> None:
    def plant(s: sc.Scenario) -> None:
        s.ledger.ack(TOPIC, 0, 3, b"acknowledged but never written", producer_id=7, sequence=0)
        s.ledger.ack(TOPIC, 1, 500, b"acknowledged far past the end", producer_id=7, sequence=1)

    s = sc.build(tmp_path, plant, ledger_format=ledger_format)
    result = verify(s, spark)
    rows = assert_only(result, "lost", 2)
    first, second = rows
    assert (first["partition"], first["offset"], first["reason"]) == (0, 3, "another value at that offset")
    assert first["value_digest"] == value_digest(b"acknowledged but never written")
    assert first["found_digests"] == [value_digest(sc.value(0, 0, 3))]
    assert (second["partition"], second["offset"], second["reason"]) == (
        1,
        500,
        "offset at or above the high watermark",
    )
    assert result.counts["acknowledged"] == s.total + 2


def test_value_written_twice_is_duplicate(tmp_path: Path, spark: Any) -> None:
    again = sc.value(1, 2, 0)  # first written at t-1 offset 10

    def plant(s: sc.Scenario) -> None:  # a retry by a producer without idempotence
        s.disk.produce(TOPIC, 1, [b"fresh", again], epoch=1, leader=2, producer_id=-1, ledger=s.ledger)

    s = sc.build(tmp_path, plant)
    (row,) = assert_only(verify(s, spark), "duplicate", 1)
    assert row["value_digest"] == value_digest(again) and row["copies"] == 2
    assert [(loc["topic"], loc["partition"], loc["offset"]) for loc in row["locations"]] == [
        (TOPIC, 1, 10),
        (TOPIC, 1, 31),
    ]


def test_swapped_sequences_are_out_of_order(tmp_path: Path, spark: Any) -> None:
    def plant(s: sc.Scenario) -> None:  # a leader that took producer 2000's batches in the wrong order
        s.disk.append_unchecked(
            TOPIC, 0, [b"s5", b"s6", b"s7"], epoch=1, producer_id=2000, base_sequence=5, ledger=s.ledger
        )
        s.disk.append_unchecked(
            TOPIC, 0, [b"s0", b"s1", b"s2"], epoch=1, producer_id=2000, base_sequence=0, ledger=s.ledger
        )

    s = sc.build(tmp_path, plant)
    (row,) = assert_only(verify(s, spark), "out_of_order", 1)
    assert (row["partition"], row["producer_id"], row["offset"], row["sequence"]) == (0, 2000, 33, 0)
    assert (row["previous_offset"], row["previous_sequence"]) == (32, 7)
    assert row["value_digest"] == value_digest(b"s0")


def test_a_late_batch_of_an_older_epoch_is_out_of_order(tmp_path: Path, spark: Any) -> None:
    """Issue 18 window 10 as the log would show it: producer 2000 gave up on A (epoch 0,
    sequence 3: its future failed, so the ledger has an error, no ack), bumped its epoch and
    wrote B (epoch 1, sequence 0); a leader without the epoch fence then wrote A after B."""

    def plant(s: sc.Scenario) -> None:
        s.disk.append_unchecked(
            TOPIC, 0, [b"a0", b"a1", b"a2"], epoch=1, producer_id=2000, base_sequence=0, ledger=s.ledger
        )
        s.ledger.error(TOPIC, 0, "REQUEST_TIMED_OUT")
        s.disk.append_unchecked(
            TOPIC,
            0,
            [b"b0", b"b1"],
            epoch=1,
            producer_id=2000,
            producer_epoch=1,
            base_sequence=0,
            ledger=s.ledger,
        )
        s.disk.append_unchecked(TOPIC, 0, [b"late A"], epoch=1, producer_id=2000, base_sequence=3)

    s = sc.build(tmp_path, plant)
    (row,) = assert_only(verify(s, spark), "out_of_order", 1)
    assert (row["partition"], row["producer_id"], row["offset"]) == (0, 2000, 35)
    assert (row["producer_epoch"], row["sequence"]) == (0, 3)
    assert (row["previous_offset"], row["previous_epoch"], row["previous_sequence"]) == (34, 1, 1)
    assert row["value_digest"] == value_digest(b"late A")


def test_hw_checkpoint_above_the_log_end_is_found(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path, hw_overrides={(2, TOPIC, 1): 37})
    (row,) = assert_only(verify(s, spark), "hw_above_leo", 1)
    assert row == {"broker": 2, "topic": TOPIC, "partition": 1, "checkpointed_hw": 37, "log_end_offset": 30}


def test_epoch_checkpoint_that_disagrees_with_the_batches_is_found(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    start = s.epoch1_start[0]
    checkpoint = s.disk.partition_dir(3, TOPIC, 0) / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == f"0\n2\n0 0\n1 {start}\n"
    checkpoint.write_text(f"0\n2\n0 0\n1 {start - 5}\n")  # epoch 1 said to start one batch early

    (row,) = assert_only(verify(s, spark), "epoch_cache_inconsistent", 1)
    assert (row["broker"], row["partition"]) == (3, 0)
    assert row["problems"] == [
        f"batches of leader epoch 1 start at offset {start} but the checkpoint has no entry (1, {start})",
        f"checkpoint entry (1, {start - 5}) is not where a run of epoch-1 batches starts",
    ]
    assert row["checkpoint"] == [[0, 0], [1, start - 5]] and row["batch_epoch_starts"] == [[0, 0], [1, start]]


def test_both_ledger_forms_give_the_same_report(tmp_path: Path, spark: Any) -> None:
    """One scenario with a lost write (a null value acknowledged too), a duplicate, a divergent
    batch and two errors, its ledger written as Parquet chunks and as JSON lines: same report."""

    def plant(s: sc.Scenario) -> None:
        s.ledger.ack(TOPIC, 0, 3, b"acknowledged but never written", key=b"k\xff", producer_id=7, sequence=0)
        s.ledger.ack(TOPIC, 0, 4, None, key="k-null")  # a null value where a record is: lost too
        s.disk.produce(TOPIC, 1, [sc.value(1, 2, 0)], epoch=1, leader=2, producer_id=-1, ledger=s.ledger)
        s.ledger.error(TOPIC, -1, "REQUEST_TIMED_OUT")

    reports = {}
    for form in FORMATS:
        s = sc.build(tmp_path / form, plant, ledger_format=form)
        path, pos, size, _ = s.disk.batch_positions(3, TOPIC, 0)[1]
        data = bytearray(path.read_bytes())
        data[pos + size - 2] ^= 0x01
        path.write_bytes(bytes(data))
        report = json.loads(verify(s, spark).report_path.read_text())
        reports[form] = {k: report[k] for k in ("ok", "counts", "violations", "errors_by_name", "notes")}
    assert reports["parquet"] == reports["jsonl"]
    counts = reports["parquet"]["counts"]
    assert (counts["lost"], counts["duplicate"], counts["divergent"]) == (2, 1, 5)
    assert counts["errors"] == 2 and counts["malformed_ledger_lines"] == 0
    lost = reports["parquet"]["violations"]["lost"]
    assert [(r["offset"], r["key"], r["value_digest"]) for r in lost] == [
        (3, "k\\xff", value_digest(b"acknowledged but never written")),
        (4, "k-null", None),
    ]


def test_an_unclosed_columnar_ledger_is_incomplete_unless_allowed(tmp_path: Path, spark: Any) -> None:
    """The workload died after its last chunk: no ``_CLOSED``, a torn chunk under its temporary
    name. Spark skips the temporary file like the markers; the report says what may be missing,
    and the verdict is INCOMPLETE unless --allow-unclosed-ledger was given."""
    s = sc.build(tmp_path)
    chunks = s.report_dir / LEDGER_DIR
    (chunks / CLOSED_MARKER).unlink()
    (chunks / ".part-000009.parquet.tmp").write_bytes(b"PAR1 torn")
    unallowed = verify(s, spark)
    assert unallowed.verdict == "INCOMPLETE" and list(unallowed.skipped_inputs) == ["ledger_closed"]
    assert "--allow-unclosed-ledger accepts it" in unallowed.skipped_inputs["ledger_closed"]
    result = run_verification(s.report_dir, None, s.log_dirs, spark=spark, allow=["unclosed-ledger"])
    assert result.ok, result.violations
    assert list(result.allowed_inputs) == ["ledger_closed"]
    assert result.counts["acknowledged"] == s.total and result.counts["malformed_ledger_lines"] == 0
    (note,) = [n for n in result.notes if "ledger" in n]
    assert note.startswith("the ledger was not closed (the workload stopped without closing it)")
    assert note.endswith(
        "the lost check covers only what reached the ledger; 1 unfinished chunk file(s) ignored"
    )
    assert note in json.loads(result.report_path.read_text())["notes"]
