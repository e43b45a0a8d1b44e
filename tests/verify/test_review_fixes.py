"""The edges of the fixes to tests/verify/test_review_verify.py's findings that its planted runs
do not reach: the consumer rules' order of facts inside one millisecond
(:mod:`verify.ledger_order`: one member's facts by ``(time_ms, seq)``, two members' by
``time_ms`` alone, a tie unordered), the record a run leaves of itself (``R/run.json``,
:mod:`verify.run_record`) and what the job expects of a report dir without one.

The group facts are handed to the checks as rows (the Spark aggregations run over them as over
a ledger's chunks, as tests/verify/test_consumer_blind_spots.py's gaps test does), so each test
sets ``time_ms`` and ``seq`` itself: the interleaving is the rows', no clock decides it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.consumed import CONSUMER_LEDGER_DDL
from verify.check_runner import Found
from verify.consumer_checks import check_consumers
from verify.group_checks import group_checks
from verify.group_rules import GroupFacts
from verify.inputs import SkippedInputs
from verify.ledger_order import before
from verify.run_record import NO_RECORD, read_run_record

TOPIC = "t"
T0 = 1_700_000_100_000


class Facts:
    """Consumer ledger rows at the times and in the order given (``seq``: the row's position)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add(self, kind: str, member: str, generation: int, offset: int | None, at: int) -> None:
        row = (kind, member, member, generation, TOPIC, 0, offset, None, None, at, len(self.rows))
        self.rows.append(row)

    def consume(self, member: str, generation: int, offsets: range, at: int) -> None:
        for o in offsets:
            self.add("consumed", member, generation, o, at)

    def run(self, spark: Any) -> dict[str, list[dict[str, Any]]]:
        committed = spark.createDataFrame(
            [(TOPIC, 0, o, 0, o) for o in range(30)],
            "topic string, partition int, offset bigint, digest_hi bigint, digest_lo bigint",
        )
        consumed = spark.createDataFrame(self.rows, CONSUMER_LEDGER_DDL)
        small = [r.asDict() for r in consumed.where("kind != 'consumed'").collect()]
        found, _ = group_checks(spark, consumed, committed, GroupFacts.of(small), 0, 0, {}, 100)
        return found


def test_the_order_of_facts_is_one_members_by_seq_and_two_members_by_time_alone() -> None:
    a = {"member": "c0-0", "time_ms": 5, "seq": 7}
    assert before({"member": "c0-0", "time_ms": 5, "seq": 3}, a)
    assert not before({"member": "c1-0", "time_ms": 5, "seq": 3}, a)  # a tie of two members
    assert not before(a, {"member": "c1-0", "time_ms": 5, "seq": 9})
    assert before({"member": "c1-0", "time_ms": 4, "seq": 99}, a)


def test_a_member_reading_below_its_own_commit_of_the_same_millisecond_is_resumed_below_commit(
    spark: Any,
) -> None:
    """The interleaving, all in one millisecond T0 + 5 of c0-0: it consumes 0..19, its commit of
    20 is acknowledged (seq after them), then it consumes 10..11 again (seq after the commit).
    Only seq orders them: the window over earlier milliseconds cannot see it, the same
    millisecond's equi-join must. The same records consumed before the commit (lower seq) are
    no rewind."""
    f = Facts()
    f.add("assigned", "c0-0", 1, None, T0)
    f.consume("c0-0", 1, range(20), T0 + 5)
    f.add("committed", "c0-0", 1, 20, T0 + 5)
    f.consume("c0-0", 1, range(10, 12), T0 + 5)
    f.consume("c0-0", 1, range(20, 30), T0 + 6)
    (row,) = f.run(spark)["resumed_below_commit"]
    assert (row["member"], row["first_offset"], row["commit_offset"], row["commit_time_ms"]) == (
        "c0-0",
        10,
        20,
        T0 + 5,
    )

    clean = Facts()
    clean.add("assigned", "c0-0", 1, None, T0)
    clean.consume("c0-0", 1, range(20), T0 + 5)
    clean.consume("c0-0", 1, range(20, 30), T0 + 5)
    clean.add("committed", "c0-0", 1, 30, T0 + 5)
    assert clean.run(spark)["resumed_below_commit"] == []


def test_a_commit_of_another_member_in_the_assignments_millisecond_is_not_before_it(spark: Any) -> None:
    """c0-0's commit of 20 and c1-0's assignment of generation 2 share T0 + 100 (two processes'
    clocks: no order), and c1-0 resumes at 10, the commit before: no violation on the strength of
    the tie. One millisecond earlier, the commit is before the assignment: resumed below it."""

    def group(commit_at: int) -> Facts:
        f = Facts()
        f.add("assigned", "c0-0", 1, None, T0)
        f.consume("c0-0", 1, range(20), T0 + 1)
        f.add("committed", "c0-0", 1, 10, T0 + 30)
        f.add("committed", "c0-0", 1, 20, commit_at)
        f.add("assigned", "c1-0", 2, None, T0 + 100)
        f.consume("c1-0", 2, range(10, 30), T0 + 110)
        f.add("committed", "c1-0", 2, 30, T0 + 120)
        return f

    assert group(T0 + 100).run(spark)["resumed_below_commit"] == []
    (row,) = group(T0 + 99).run(spark)["resumed_below_commit"]
    assert (row["member"], row["generation"], row["first_offset"], row["commit_offset"]) == (
        "c1-0",
        2,
        10,
        20,
    )


def write_run_json(report_dir: Path, settings: dict[str, Any]) -> None:
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "run.json").write_text(json.dumps({"settings": settings}) + "\n")


def no_ledger_inputs(report_dir: Path) -> tuple[dict[str, str], list[str]]:
    """What check_consumers makes of a report dir without a consumer ledger (it returns before
    Spark is needed)."""
    skipped, notes = SkippedInputs(), []
    check_consumers(None, report_dir, [TOPIC], None, None, Found(), notes, 100, lambda _: None, skipped)
    return skipped.skipped, notes


def test_no_consumer_ledger_is_a_skipped_input_only_when_the_run_says_it_had_consumers(
    tmp_path: Path,
) -> None:
    assert read_run_record(tmp_path / "none") == NO_RECORD
    assert no_ledger_inputs(tmp_path / "none") == ({}, [])  # floodmark verify on a run of one's own
    write_run_json(tmp_path / "zero", {"consumers": 0})
    assert no_ledger_inputs(tmp_path / "zero") == ({}, [])
    write_run_json(tmp_path / "two", {"consumers": 2})
    skipped, _ = no_ledger_inputs(tmp_path / "two")
    assert list(skipped) == ["consumer_ledger"]
    assert "consumer group of 2 member(s)" in skipped["consumer_ledger"]
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "run.json").write_text('{"settings": {"consu')
    skipped, notes = no_ledger_inputs(tmp_path / "torn")
    assert skipped == {} and "whether the run had a consumer group cannot be told" in notes[0]


def test_a_retention_short_enough_to_have_run_is_named(tmp_path: Path) -> None:
    """Kafka's precedence: log.retention.ms, then .minutes, then .hours; and log.retention.bytes."""
    write_run_json(tmp_path / "default", {"duration_s": 90, "overrides": {}})
    assert read_run_record(tmp_path / "default").retention_notes() == []
    write_run_json(tmp_path / "long", {"duration_s": 90, "overrides": {"log.retention.hours": "2"}})
    assert read_run_record(tmp_path / "long").retention_notes() == []
    overrides = {"log.retention.ms": "60000", "log.retention.hours": "1000", "log.retention.bytes": "1048576"}
    write_run_json(tmp_path / "short", {"duration_s": 90, "overrides": overrides})
    notes = read_run_record(tmp_path / "short").retention_notes()
    assert [n.split(":")[1].strip().split(",")[0] for n in notes] == [
        "the brokers ran with log.retention.ms=60000",
        "the brokers ran with log.retention.bytes=1048576",
    ]
    assert all("not verifiable" in n for n in notes)
