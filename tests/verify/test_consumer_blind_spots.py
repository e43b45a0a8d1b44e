"""The consumer group's blind spots of issue 34 (items 2, 5, 6, 7, 8, 9), each planted in the
job's own harness (:mod:`tests.verify.scenario`: topic ``t``, partitions 0 and 1, offsets 0-29
each, a clean produce side) with a consumer ledger written by the project's own writer
(:class:`ledger.consumed.ConsumerLedgerWriter`, as tests/verify/test_consumer_checks.py does).
Before the fix the job answered ``verdict=PASSED`` on each; a clean group (with the facts a real
run leaves: a member fenced while it polls, a crash and its replacement, an empty assignment)
must still pass with every consumer check at 0.

The interleavings are the ledger's own order: each fact is handed to the writer in the order
given here, with the times given here (the writer's ``seq`` and ``time_ms``), so every test
forces the order it names; no clock and no thread decides it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ledger.columnar import CLOSED_MARKER, chunk_name, table_of, write_chunk
from ledger.columnar import inspect as inspect_chunks
from ledger.consumed import CONSUMED_DIR, ConsumerLedgerWriter
from ledger.format import LEDGER_DIR, LEDGER_FILE
from tests.verify import scenario as sc
from verify.job import run_verification
from verify.report import CHECKS, CONSUMER_CHECKS

TOPIC = sc.TOPIC
T0 = 1_700_000_100_000
NEW_CHECKS = (
    "resumed_below_commit",
    "fenced_commit_accepted",
    "consumed_unassigned",
    "commit_ahead_of_consumed",
    "position_skipped",
)


class Group:
    """The consumer ledger of one planted run: facts in the order (and at the times) given."""

    def __init__(self, s: sc.Scenario, **writer: Any) -> None:
        self.values = {(w.partition, w.offset): w.value for w in s.disk.written}
        self.ledger = ConsumerLedgerWriter(s.report_dir, clock_ms=lambda: T0, **writer)

    def assign(self, member: str, generation: int, partitions: Iterable[int], at: int) -> None:
        self.ledger.assigned(member, f"id-{member}", generation, [(TOPIC, p) for p in partitions], TOPIC, at)

    def consume(
        self,
        member: str,
        generation: int,
        partition: int,
        offsets: Iterable[int],
        at: int,
        value: bytes | None = None,
    ) -> None:
        for i, offset in enumerate(offsets):
            v = self.values[(partition, offset)] if value is None else value
            self.ledger.consumed(
                member, f"id-{member}", generation, TOPIC, partition, offset, v, time_ms=at + i
            )

    def commit(self, member: str, generation: int, partition: int, offset: int, at: int) -> None:
        self.ledger.committed(member, f"id-{member}", generation, [(TOPIC, partition, offset)], time_ms=at)

    def close(self, **summary: Any) -> None:
        self.ledger.close({"drained": True, "outside_assignment": 0, **summary})


def verify(s: sc.Scenario, spark: Any) -> Any:
    return run_verification(s.report_dir, None, s.log_dirs, spark=spark)


def consumer_counts(result: Any) -> dict[str, int]:
    return {c: result.counts[c] for c in CONSUMER_CHECKS}


def only(result: Any, **expected: int) -> None:
    """Every check at 0 but ``expected`` (the verdict first: what the job answered)."""
    verdict = "FAILED" if expected else "PASSED"
    assert result.verdict == verdict, f"verdict={result.verdict} ok={result.ok} {result.skipped_inputs}"
    assert {c: result.counts[c] for c in CHECKS} == dict.fromkeys(CHECKS, 0)
    assert consumer_counts(result) == {**dict.fromkeys(CONSUMER_CHECKS, 0), **expected}, {
        c: result.violations[c] for c in CONSUMER_CHECKS if result.counts[c]
    }


def clean_group(g: Group, **closing: Any) -> None:
    """Generation 1: c0-0 owns t-0, c1-0 owns t-1; c1-0 is fenced (its heartbeat's answer reset
    its generation) and its next poll still returns t-1 10..12 under generation -1, as Kafka's
    consumer does until its onJoinPrepare gives the partitions up as lost, and it never commits
    them. Generation 2 (c1-0 expelled): c0-0 owns both and resumes each at its commit. A
    replacement c1-1 and a third member c2-0 join: generation 3, c2-0 with nothing."""
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(10), T0 + 1)
    g.commit("c0-0", 1, 0, 10, T0 + 20)
    g.consume("c1-0", 1, 1, range(10), T0 + 21)
    g.commit("c1-0", 1, 1, 10, T0 + 40)
    g.consume("c0-0", 1, 0, range(10, 15), T0 + 41)
    g.commit("c0-0", 1, 0, 15, T0 + 50)
    g.consume("c1-0", -1, 1, range(10, 13), T0 + 51)
    g.assign("c0-0", 2, [0, 1], T0 + 200)
    g.consume("c0-0", 2, 0, range(15, 30), T0 + 300)
    g.consume("c0-0", 2, 1, range(10, 30), T0 + 320)
    g.ledger.committed("c0-0", "id-c0-0", 2, [(TOPIC, 0, 30), (TOPIC, 1, 30)], time_ms=T0 + 400)
    g.assign("c0-0", 3, [0], T0 + 500)
    g.assign("c1-1", 3, [1], T0 + 500)
    g.assign("c2-0", 3, [], T0 + 500)
    g.close(**closing)


def test_a_clean_group_passes_with_every_consumer_check_at_zero(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    clean_group(Group(s))
    result = verify(s, spark)
    only(result)
    assert result.verdict == "PASSED" and result.ok, (result.skipped, result.skipped_inputs)
    assert set(NEW_CHECKS) <= set(CONSUMER_CHECKS)
    assert all(result.coverage.get(c) for c in CONSUMER_CHECKS), result.coverage
    summary = result.summary_path.read_text()
    assert all(f"| {c} | 0 |" in summary for c in NEW_CHECKS)


def test_an_owner_resuming_below_an_acknowledged_commit_is_resumed_below_commit(
    tmp_path: Path, spark: Any
) -> None:
    """Item 2, the lost offset commit: c0-0 commits 10 and then 20 (both acknowledged), then dies;
    generation 2's owner c1-0 resumes t-0 at 10, re-reads to the end and commits 30. No commit
    goes backwards and every offset is consumed: only where c1-0 started says the group lost 20."""
    s = sc.build(tmp_path)
    g = Group(s)
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(10), T0 + 1)
    g.commit("c0-0", 1, 0, 10, T0 + 20)
    g.consume("c0-0", 1, 0, range(10, 20), T0 + 21)
    g.commit("c0-0", 1, 0, 20, T0 + 40)
    g.consume("c1-0", 1, 1, range(30), T0 + 41)
    g.commit("c1-0", 1, 1, 30, T0 + 80)
    g.assign("c1-0", 2, [0, 1], T0 + 200)  # c0-0 expelled
    g.consume("c1-0", 2, 0, range(10, 30), T0 + 300)
    g.commit("c1-0", 2, 0, 30, T0 + 350)
    g.close()
    result = verify(s, spark)
    only(result, resumed_below_commit=1)
    assert result.violations["resumed_below_commit"] == [
        {
            "topic": TOPIC,
            "partition": 0,
            "member": "c1-0",
            "generation": 2,
            "first_offset": 10,
            "assigned_time_ms": T0 + 200,
            "commit_offset": 20,
            "commit_member": "c0-0",
            "commit_generation": 1,
            "commit_time_ms": T0 + 40,
        }
    ]
    assert result.verdict == "FAILED"
    assert "- t-0: c1-0 (generation 2) started at 10, below 20 acknowledged for c0-0" in (
        result.summary_path.read_text()
    )


def test_a_commit_acknowledged_for_a_fenced_generation_is_fenced_commit_accepted(
    tmp_path: Path, spark: Any
) -> None:
    """Item 5: generation 2 gives t-0 to c1-0 (c0-0 expelled), c1-0 resumes at 10; then c0-0's
    commit of 20 under generation 1 is acknowledged (the coordinator should have answered
    ILLEGAL_GENERATION), moving the group forward, so commit_went_backwards sees nothing."""
    s = sc.build(tmp_path)
    g = Group(s)
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(10), T0 + 1)
    g.commit("c0-0", 1, 0, 10, T0 + 20)
    g.consume("c0-0", 1, 0, range(10, 20), T0 + 21)
    g.consume("c1-0", 1, 1, range(30), T0 + 41)
    g.commit("c1-0", 1, 1, 30, T0 + 80)
    g.assign("c1-0", 2, [0, 1], T0 + 200)
    g.consume("c1-0", 2, 0, range(10, 15), T0 + 300)
    g.commit("c0-0", 1, 0, 20, T0 + 310)  # the fenced generation's commit, acknowledged
    g.consume("c1-0", 2, 0, range(15, 30), T0 + 320)
    g.commit("c1-0", 2, 0, 30, T0 + 350)
    g.close()
    result = verify(s, spark)
    only(result, fenced_commit_accepted=1)
    assert result.violations["fenced_commit_accepted"] == [
        {
            "topic": TOPIC,
            "partition": 0,
            "member": "c0-0",
            "generation": 1,
            "offset": 20,
            "time_ms": T0 + 310,
            "current_generation": 2,
            "current_members": ["c1-0"],
            "current_time_ms": T0 + 200,
        }
    ]
    assert "- t-0: c0-0 committed 20 under generation 1 at" in result.summary_path.read_text()


def test_records_of_a_partition_outside_the_assignment_are_consumed_unassigned(
    tmp_path: Path, spark: Any
) -> None:
    """Item 6: in generation 1, c0-0 (assigned t-0) also consumes t-1 0..4, which c1-0 owns:
    delivered twice inside one generation; the workload counted them too (its closing record's
    ``outside_assignment``, as chaos/consumers.py counts it), and agrees with the ledger."""
    s = sc.build(tmp_path)
    g = Group(s)
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(30), T0 + 1)
    g.consume("c0-0", 1, 1, range(5), T0 + 40)
    g.commit("c0-0", 1, 0, 30, T0 + 50)
    g.consume("c1-0", 1, 1, range(30), T0 + 51)
    g.commit("c1-0", 1, 1, 30, T0 + 90)
    g.close(outside_assignment=5)
    result = verify(s, spark)
    only(result, consumed_unassigned=1)
    assert result.violations["consumed_unassigned"] == [
        {
            "topic": TOPIC,
            "partition": 1,
            "member": "c0-0",
            "generation": 1,
            "first_offset": 0,
            "last_offset": 4,
            "records": 5,
            "reason": "consumed in generation 1, whose assignment of c0-0 does not hold the partition",
        }
    ]


def test_the_workloads_own_outside_assignment_count_is_consumed_unassigned(
    tmp_path: Path, spark: Any
) -> None:
    """Item 6, the writer's own count: a clean ledger, but the workload's closing record says its
    members' polls returned 3 records of partitions not assigned to them then."""
    s = sc.build(tmp_path)
    clean_group(Group(s), outside_assignment=3)
    result = verify(s, spark)
    only(result, consumed_unassigned=1)
    (row,) = result.violations["consumed_unassigned"]
    assert row["records"] == 3 and row["member"] is None
    assert row["reason"] == (
        "the workload counted 3 record(s) its members' polls returned from partitions not assigned "
        "to them then (the closing record's outside_assignment); the ledger shows 0"
    )


def test_a_commit_ahead_of_what_the_member_had_consumed_is_commit_ahead_of_consumed(
    tmp_path: Path, spark: Any
) -> None:
    """Item 7: c0-0 commits 30 on t-0 when it had consumed only to 19, then reads 20..29 (so its
    highest consumed offset of the assignment, 29, would hide it: only the order of the facts
    shows it); c1-0 commits 40 on t-1, past the end of the log (30) and of what it consumed."""
    s = sc.build(tmp_path)
    g = Group(s)
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(20), T0 + 1)
    g.commit("c0-0", 1, 0, 30, T0 + 30)  # consumed to 19
    g.consume("c0-0", 1, 0, range(20, 30), T0 + 31)
    g.consume("c1-0", 1, 1, range(30), T0 + 41)
    g.commit("c1-0", 1, 1, 40, T0 + 80)
    g.close()
    result = verify(s, spark)
    only(result, commit_ahead_of_consumed=2)
    ahead = result.violations["commit_ahead_of_consumed"]
    assert [(r["partition"], r["member"], r["generation"], r["offset"], r["consumed_to"]) for r in ahead] == [
        (0, "c0-0", 1, 30, 19),
        (1, "c1-0", 1, 40, 29),
    ]
    assert ahead[0]["unconsumed"] == 29 and ahead[1]["unconsumed"] == 39
    assert "- t-0: c0-0 (generation 1) committed 30 at" in result.summary_path.read_text()


def test_an_offset_one_member_skipped_is_position_skipped_even_when_a_later_owner_reads_it(
    tmp_path: Path, spark: Any
) -> None:
    """Item 9: c0-0 consumes t-0 0..19 but not 12, commits 10 and dies; generation 2's owner
    resumes at 10 (the commit) and reads 12: group_missed passes (someone consumed it), yet c0-0's
    position moved past a record it never returned."""
    s = sc.build(tmp_path)
    g = Group(s)
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(10), T0 + 1)
    g.commit("c0-0", 1, 0, 10, T0 + 20)
    g.consume("c0-0", 1, 0, [o for o in range(10, 20) if o != 12], T0 + 21)
    g.consume("c1-0", 1, 1, range(30), T0 + 41)
    g.commit("c1-0", 1, 1, 30, T0 + 80)
    g.assign("c1-0", 2, [0, 1], T0 + 200)
    g.consume("c1-0", 2, 0, range(10, 30), T0 + 300)
    g.commit("c1-0", 2, 0, 30, T0 + 350)
    g.close()
    result = verify(s, spark)
    only(result, position_skipped=1)
    assert result.violations["position_skipped"] == [
        {
            "topic": TOPIC,
            "partition": 0,
            "member": "c0-0",
            "generation": 1,
            "first_offset": 0,
            "last_offset": 19,
            "skipped": 1,
            "skipped_offsets": [12],
        }
    ]
    assert "- t-0: c0-0 (generation 1) skipped 1 record(s) between 0 and 19: 12" in (
        result.summary_path.read_text()
    )


# -- item 8: every ledger against its own closing totals ---------------------------------------


def test_a_consumer_ledger_missing_a_middle_chunk_is_a_skipped_input(tmp_path: Path, spark: Any) -> None:
    """Item 8, the consumer ledger: three chunks; the middle one (a wrong value consumed again and a
    commit going backwards) is gone. What is left reads as a clean group; the closing record's
    totals (3 chunks, their rows) say otherwise."""
    s = sc.build(tmp_path)
    g = Group(s, chunk_records=10_000, chunk_interval_s=3600.0, monotonic_s=lambda: 0.0)
    g.assign("c0-0", 1, [0, 1], T0)
    g.consume("c0-0", 1, 0, range(20), T0 + 1)
    g.commit("c0-0", 1, 0, 20, T0 + 30)
    g.ledger.flush()  # chunk 0
    g.consume("c0-0", 1, 0, [19], T0 + 31, value=b"not what was written")
    g.commit("c0-0", 1, 0, 15, T0 + 32)
    g.ledger.flush()  # chunk 1: lost below
    g.consume("c0-0", 1, 0, range(20, 30), T0 + 40)
    g.consume("c0-0", 1, 1, range(30), T0 + 50)
    g.ledger.committed("c0-0", "id-c0-0", 1, [(TOPIC, 0, 30), (TOPIC, 1, 30)], time_ms=T0 + 90)
    g.close()
    directory = s.report_dir / CONSUMED_DIR
    assert len(inspect_chunks(directory).chunks) == 3
    (directory / chunk_name(1)).unlink()

    result = verify(s, spark)
    assert result.verdict == "INCOMPLETE", f"verdict={result.verdict} ok={result.ok}"
    assert not any(result.counts.get(c, 0) for c in CHECKS + CONSUMER_CHECKS), result.violations
    why = result.skipped_inputs["consumer_ledger"]
    assert why == (
        f"{directory}: its closing record counts 3 chunk(s) of 67 row(s) (61 consumed, 4 committed, "
        "2 assigned); 2 chunk(s) were read, 65 row(s) (60 consumed, 3 committed, 2 assigned)"
    )
    # What a missing row could make look like a violation is not run over a short ledger.
    for name in ("group_missed", "position_skipped", "commit_ahead_of_consumed", "consumed_unassigned"):
        assert name in result.skipped, result.skipped


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_produce_ledger_missing_entries_in_the_middle_is_a_skipped_input(
    tmp_path: Path, spark: Any, form: str
) -> None:
    """Item 8, the producers' ledger: its middle third (a chunk of the columnar form, lines of the
    JSON-lines form) is gone; the closing marker's totals name what is missing."""
    s = sc.build(tmp_path, ledger_format=form)
    if form == "parquet":
        directory = s.report_dir / LEDGER_DIR
        rechunk_in_three(directory)
        (directory / chunk_name(1)).unlink()
        where, chunks = f"{directory}", "3 chunk(s)"
    else:
        path = s.report_dir / LEDGER_FILE
        lines = path.read_text().splitlines(keepends=True)
        third = (len(lines) - 1) // 3
        path.write_text("".join(lines[:third] + lines[2 * third :]))
        where, chunks = f"{path}", None
    result = verify(s, spark)
    assert result.verdict == "INCOMPLETE" and not result.ok
    why = result.skipped_inputs["ledger_entries"]
    assert why.startswith(f"{where}: its closing "), why
    if chunks:
        assert f"counts {chunks}" in why and "2 chunk(s) were read" in why, why


def rechunk_in_three(directory: Path) -> None:
    """Rewrite a closed columnar ledger as three chunks with the same rows and totals."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    chunk_dir = inspect_chunks(directory)
    table = pa.concat_tables([pq.read_table(p) for p in chunk_dir.chunks])
    for p in chunk_dir.chunks:
        p.unlink()
    rows = table.to_pylist()
    third = len(rows) // 3
    for i, part in enumerate([rows[:third], rows[third : 2 * third], rows[2 * third :]]):
        write_chunk(directory, i, table_of([tuple(r.values()) for r in part], T0))
    closed = json.loads((directory / CLOSED_MARKER).read_text())
    (directory / CLOSED_MARKER).write_text(json.dumps({**closed, "chunks": 3}) + "\n")


# -- gaps the committed log itself has (compaction, control batches) ----------------------------


def test_gaps_the_committed_log_has_are_neither_skips_nor_commits_ahead(spark: Any) -> None:
    """The per-assignment checks over a committed log without offsets 10..14 (compacted away, or
    a control batch): a member that consumes 0..9 and 15..19 and commits 15 right after 9 (its
    position once the next fetch starts at 15) skipped nothing and committed nothing ahead. On t-1
    (the same gap) c1-0 skips 16, and commits 18 having consumed only to 9: both are found, the
    committed log's own gap skipped over (the checks' pure inputs from the Spark aggregations)."""
    from ledger.consumed import CONSUMER_LEDGER_DDL
    from verify.group_checks import group_checks
    from verify.group_rules import GroupFacts

    offsets = [*range(10), *range(15, 20)]
    committed = spark.createDataFrame(
        [(TOPIC, p, o, 0, o) for p in (0, 1) for o in offsets],
        "topic string, partition int, offset bigint, digest_hi bigint, digest_lo bigint",
    )
    rows: list[tuple[Any, ...]] = []

    def fact(kind: str, member: str, partition: int, offset: int | None) -> None:
        rows.append(
            (kind, member, member, 1, TOPIC, partition, offset, None, None, T0 + len(rows), len(rows))
        )

    fact("assigned", "c0-0", 0, None)
    fact("assigned", "c1-0", 1, None)
    for o in range(10):
        fact("consumed", "c0-0", 0, o)
        fact("consumed", "c1-0", 1, o)
    fact("committed", "c0-0", 0, 15)
    fact("committed", "c1-0", 1, 15)
    fact("committed", "c1-0", 1, 18)  # the last log record below 18 is 17: not consumed yet
    for o in range(15, 20):
        fact("consumed", "c0-0", 0, o)
        if o != 16:
            fact("consumed", "c1-0", 1, o)
    fact("committed", "c0-0", 0, 20)
    consumed = spark.createDataFrame(rows, CONSUMER_LEDGER_DDL)
    small = [r.asDict() for r in consumed.where("kind != 'consumed'").collect()]
    found, read = group_checks(spark, consumed, committed, GroupFacts.of(small), 0, 0, {}, 100)

    assert read == {"assignments": 2, "gapped_partitions": 2, "probes": 4}
    assert {name: len(r) for name, r in found.items()} == {
        "resumed_below_commit": 0,
        "fenced_commit_accepted": 0,
        "consumed_unassigned": 0,
        "position_skipped": 1,
        "commit_ahead_of_consumed": 1,
    }
    (skip,) = found["position_skipped"]
    assert (skip["member"], skip["partition"], skip["skipped"], skip["skipped_offsets"]) == (
        "c1-0",
        1,
        1,
        [16],
    )
    (ahead,) = found["commit_ahead_of_consumed"]
    assert (ahead["member"], ahead["offset"], ahead["unconsumed"], ahead["consumed_to"]) == (
        "c1-0",
        18,
        17,
        9,
    )


def test_a_reopened_consumer_ledger_continues_its_totals(tmp_path: Path) -> None:
    """The writer's closing record after a reopen counts both sessions' rows of each kind, as it
    counts their rows and chunks; and the run's summary cannot hide a total (GroupStats has a
    ``consumed`` of its own)."""
    first = ConsumerLedgerWriter(tmp_path, clock_ms=lambda: T0)
    first.assigned("c0-0", "m0", 1, [(TOPIC, 0)], time_ms=T0)
    first.consumed("c0-0", "m0", 1, TOPIC, 0, 0, b"v0", time_ms=T0)
    first.close()
    second = ConsumerLedgerWriter(tmp_path, clock_ms=lambda: T0)
    second.consumed("c0-0", "m0", 1, TOPIC, 0, 1, b"v1", time_ms=T0 + 1)
    second.committed("c0-0", "m0", 1, [(TOPIC, 0, 2)], time_ms=T0 + 2)
    second.close({"consumed": 999, "drained": True})
    closed = json.loads((tmp_path / CONSUMED_DIR / CLOSED_MARKER).read_text())
    assert {k: closed[k] for k in ("chunks", "rows", "consumed", "committed", "assigned")} == {
        "chunks": 2,
        "rows": 4,
        "consumed": 2,
        "committed": 1,
        "assigned": 1,
    }


def test_a_consumer_ledger_closed_without_totals_is_read_with_a_note(tmp_path: Path, spark: Any) -> None:
    """A closing record without totals (none is written so today; an older or foreign writer's)
    is no skipped input: the checks run, and a note says what cannot be told."""
    from verify.consumer_ledger import check_totals, read_consumer_rows
    from verify.inputs import SkippedInputs

    writer = ConsumerLedgerWriter(tmp_path, clock_ms=lambda: T0)
    writer.consumed("c0-0", "m0", 1, TOPIC, 0, 0, b"v0", time_ms=T0)
    writer.close()
    directory = tmp_path / CONSUMED_DIR
    skipped, notes = SkippedInputs(), []
    rows = read_consumer_rows(spark, tmp_path)
    assert check_totals(rows, directory, {"drained": True}, skipped, notes) is None
    assert not skipped.skipped and notes == [
        f"{directory}/_CLOSED records no totals (a ledger written before they were): whether rows are "
        "missing in between cannot be told"
    ]
    closed = json.loads((directory / CLOSED_MARKER).read_text())
    assert check_totals(rows, directory, closed, skipped, notes) is None and not skipped.skipped
