"""The consumer checks' pure parts (verify/consumer_checks.py; docs/guarantees.md): the group's
commits never going backwards, no partition owned twice in a generation, what the consumer
ledger's markers make of ``group_missed``, and how the report counts the consumer checks (only
when they ran). The Spark checks meet planted anomalies in tests/verify/test_consumer_checks.py."""

from __future__ import annotations

from pathlib import Path

from ledger.consumed import ConsumerLedgerWriter
from verify.consumer_checks import commit_went_backwards, ledger_notes, owned_twice
from verify.report import CHECKS, CONSUMER_CHECKS, Result, summary_markdown, verdict_of


def commit(member: str, generation: int, partition: int, offset: int, time_ms: int, seq: int) -> dict:
    return {
        "kind": "committed",
        "member": member,
        "generation": generation,
        "topic": "t",
        "partition": partition,
        "offset": offset,
        "time_ms": time_ms,
        "seq": seq,
    }


def assigned(member: str, generation: int, partition: int) -> dict:
    return {
        "kind": "assigned",
        "member": member,
        "generation": generation,
        "topic": "t",
        "partition": partition,
    }


def test_commits_that_only_grow_or_repeat_pass_across_members_and_generations() -> None:
    rows = [
        commit("c0-0", 1, 0, 10, 100, 0),
        commit("c0-0", 1, 0, 10, 200, 1),  # the same offset again: not backwards
        commit("c1-0", 2, 0, 25, 300, 2),  # the next owner resumes from what was committed
        commit("c0-0", 1, 1, 5, 100, 3),
        assigned("c0-0", 1, 0),  # other kinds are not commits
    ]
    assert commit_went_backwards(rows) == []


def test_a_commit_below_the_highest_before_it_is_reported_with_that_one() -> None:
    rows = [
        commit("c1-0", 2, 0, 15, 300, 5),  # acknowledged last, written first: time orders them
        commit("c0-0", 1, 0, 20, 200, 1),
        commit("c0-0", 1, 0, 10, 100, 0),
        commit("c1-0", 2, 0, 18, 400, 6),  # still below 20: reported too
        commit("c1-0", 2, 0, 30, 500, 7),
    ]
    found = commit_went_backwards(rows)
    assert [(r["offset"], r["previous_offset"], r["previous_member"]) for r in found] == [
        (15, 20, "c0-0"),
        (18, 20, "c0-0"),
    ]
    assert found[0] | {"previous_time_ms": 0} == {
        "topic": "t",
        "partition": 0,
        "offset": 15,
        "member": "c1-0",
        "generation": 2,
        "time_ms": 300,
        "previous_offset": 20,
        "previous_member": "c0-0",
        "previous_generation": 1,
        "previous_time_ms": 0,
    }


def test_commits_of_one_millisecond_are_ordered_by_the_writer_only_within_one_member() -> None:
    """One member's facts keep (time_ms, seq); two members' of one millisecond are unordered
    (verify/ledger_order.py: with --client kafka, seq is the order the parent read their pipes)."""
    rows = [commit("c0-0", 1, 0, 12, 100, 1), commit("c0-0", 1, 0, 9, 100, 2)]
    assert [r["offset"] for r in commit_went_backwards(rows)] == [9]
    rows = [commit("c0-0", 1, 0, 12, 100, 2), commit("c0-0", 1, 0, 9, 100, 1)]
    assert commit_went_backwards(rows) == []
    rows = [commit("c0-0", 1, 0, 12, 100, 1), commit("c1-0", 1, 0, 9, 100, 2)]
    assert commit_went_backwards(rows) == []
    rows = [commit("c0-0", 1, 0, 12, 100, 1), commit("c1-0", 1, 0, 9, 101, 2)]
    assert [r["offset"] for r in commit_went_backwards(rows)] == [9]


def test_a_partition_assigned_to_two_members_of_one_generation_is_owned_twice() -> None:
    rows = [
        assigned("c0-0", 1, 0),
        assigned("c1-0", 1, 1),
        assigned("c1-0", 2, 0),  # another generation: a move, not a second owner
        assigned("c0-1", 2, 1),
        assigned("c1-0", 2, 1),
        assigned("c2-0", 2, -1),  # an empty assignment
        assigned("c3-0", 2, -1),
    ]
    assert owned_twice(rows) == [{"generation": 2, "topic": "t", "partition": 1, "members": ["c0-1", "c1-0"]}]


def test_an_unclosed_consumer_ledger_skips_group_missed_and_a_short_drain_is_a_note(tmp_path: Path) -> None:
    unclosed = ConsumerLedgerWriter(tmp_path / "a")
    unclosed.flush()
    notes, skip = ledger_notes(tmp_path / "a")
    assert skip is not None and skip.startswith("the consumer ledger was not closed") and notes == [skip]

    ConsumerLedgerWriter(tmp_path / "b").close({"drained": False, "drain_s": 60.0, "behind": {"t-3": 12}})
    notes, skip = ledger_notes(tmp_path / "b")
    assert skip is None and "did not consume to the end of every partition" in notes[0]
    assert "{'t-3': 12}" in notes[0] and "group_missed reports what it could not read" in notes[0]

    ConsumerLedgerWriter(tmp_path / "c").close({"drained": True})
    assert ledger_notes(tmp_path / "c") == ([], None)


def result(tmp_path: Path, **counts: int) -> Result:
    base = {"acknowledged": 10, "committed": 10, "errors": 0} | dict.fromkeys(CHECKS, 0)
    return Result(mode="cluster", report_dir=tmp_path, counts=base | counts, violations={})


def test_the_consumer_checks_count_in_the_verdict_and_are_listed_only_when_they_ran(tmp_path: Path) -> None:
    without = result(tmp_path)
    assert without.ok and not any(f"| {name} |" in summary_markdown(without) for name in CONSUMER_CHECKS)
    clean = result(tmp_path, consumed=12, **dict.fromkeys(CONSUMER_CHECKS, 0))
    assert clean.ok and all(f"| {name} | 0 |" in summary_markdown(clean) for name in CONSUMER_CHECKS)
    assert "Consumed by the group: 12 record(s)." in summary_markdown(clean)
    failed = result(tmp_path, **{"owned_twice": 1, "group_missed": 2})
    assert failed.verdict == "FAILED" and failed.violation_count == 3
    assert summary_markdown(failed).startswith("# Verification FAILED: 3 violation(s)\n")
    assert verdict_of({"commit_went_backwards": 1}, {}) == "FAILED"
    assert verdict_of({}, {"group_missed": "the consumer ledger was not closed"}) == "INCOMPLETE"
