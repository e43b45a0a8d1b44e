"""The consumer group's checks (docs/guarantees.md; docs/operations.md "Chaos runs and
verification"): what the chaos run's consumer group consumed, committed and was assigned
(:mod:`ledger.consumed`, ``R/consumed/``) held against the committed log and against the group
protocol's own rules (Kafka's classic consumer group: JoinGroup/SyncGroup generations, the eager
rebalance, OffsetCommit fenced by generation). They run when the report dir holds a consumer
ledger (``chaos run --consumers N``); without one they are absent from the report, not zero,
unless the run's own record (``R/run.json``, :mod:`verify.run_record`) says it had consumers:
then the missing ledger is the skipped input ``consumer_ledger`` (INCOMPLETE).

* ``group_missed`` (Spark, :func:`group_missed`): a record of the committed log that no member
  consumed in any generation: the group's at-least-once delivery, what a crash and the
  rebalance after it must not lose (per offset);
* ``commit_went_backwards`` (pure, :func:`commit_went_backwards`): per partition, the group's
  acknowledged commits in the order they were acknowledged (:mod:`verify.ledger_order`:
  ``time_ms``, then the writer's ``seq`` for one member's; two members' of one millisecond are
  unordered) never fall below an earlier one: a fenced member's stale commit or a member resuming
  from an old offset would (per commit below the highest before it);
* ``consumed_value_mismatch`` (Spark, :func:`consumed_value_mismatch`): a consumed record whose
  value digest differs from the committed log's at its offset, or whose offset the committed
  log does not hold (per offset and digest, with the members that consumed it);
* ``owned_twice`` (pure, :func:`owned_twice`): one generation's assignment giving a partition to
  two members (per generation and partition);
* the per-assignment checks of :mod:`verify.group_checks` (issue 34): ``resumed_below_commit``,
  ``fenced_commit_accepted``, ``consumed_unassigned``, ``commit_ahead_of_consumed`` and
  ``position_skipped``.

:func:`check_consumers` runs them and adds their counts, rows, coverage and notes to the job's
:class:`verify.check_runner.Found`. A consumer ledger the workload did not close may miss its
last chunk, so ``group_missed`` is then skipped (the verdict INCOMPLETE); one whose rows fall
short of (or exceed) its closing record's totals is a skipped input, and with rows missing the
checks a missing row could fake are skipped (:mod:`verify.consumer_ledger`). A drain that did not
reach the end of every partition is named in a note, since ``group_missed`` then reports what
the group could not read. What each check read and what it cannot see is
:mod:`verify.consumer_coverage`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ledger.consumed import (
    ASSIGNED,
    COMMITTED,
    CONSUMED,
    CONSUMED_DIR,
    NO_GENERATION,
    NO_PARTITION,
    consumer_ledger_closed,
    consumer_ledger_present,
)
from verify.check_runner import Found
from verify.checks import TP
from verify.consumer_coverage import Seen, coverage
from verify.consumer_ledger import CONSUMER_LEDGER_INPUT, check_totals, outside_assignment, read_consumer_rows
from verify.group_checks import ROW_SENSITIVE, group_checks
from verify.group_rules import GroupFacts
from verify.inputs import SkippedInputs
from verify.ledger_order import BestBefore
from verify.report import CONSUMER_CHECKS
from verify.run_record import RUN_FILE, RunRecord, read_run_record

GROUP_MISSED, COMMIT_WENT_BACKWARDS, CONSUMED_VALUE_MISMATCH, OWNED_TWICE = CONSUMER_CHECKS[:4]
ORDER = {GROUP_MISSED: [*TP, "offset"], CONSUMED_VALUE_MISMATCH: [*TP, "offset", "consumed_digest"]}


# -- the pure checks: the group's commits and assignments (small: collected to the driver) --------


def commit_went_backwards(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each acknowledged commit below the highest commit of its partition before it
    (:func:`verify.ledger_order.before`: two members' commits of one millisecond are unordered),
    with that one. ``rows``: consumer ledger rows (only ``committed`` ones are read)."""
    by_partition: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["kind"] == COMMITTED:
            by_partition[(row["topic"], row["partition"])].append(row)
    found: list[dict[str, Any]] = []
    for (topic, partition), commits in sorted(by_partition.items()):
        earlier = BestBefore(commits, lambda r: r["offset"])
        for c in earlier.facts:
            highest = earlier.best(c)
            if highest is not None and c["offset"] < highest["offset"]:
                found.append(
                    {
                        "topic": topic,
                        "partition": partition,
                        "offset": c["offset"],
                        "member": c["member"],
                        "generation": c["generation"],
                        "time_ms": c["time_ms"],
                        "previous_offset": highest["offset"],
                        "previous_member": highest["member"],
                        "previous_generation": highest["generation"],
                        "previous_time_ms": highest["time_ms"],
                    }
                )
    return found


def owned_twice(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each (generation, partition) that more than one member was assigned. ``rows``: consumer
    ledger rows (only ``assigned`` ones of a real partition are read)."""
    owners: dict[tuple[int, str, int], set[str]] = defaultdict(set)
    for row in rows:
        if row["kind"] == ASSIGNED and row["partition"] != NO_PARTITION:
            owners[(row["generation"], row["topic"], row["partition"])].add(row["member"])
    return [
        {"generation": g, "topic": t, "partition": p, "members": sorted(members)}
        for (g, t, p), members in sorted(owners.items())
        if len(members) > 1
    ]


# -- the Spark checks: what was consumed against the committed log -------------------------------


def _hex(hi: str, lo: str) -> Column:
    """32 lowercase hex characters of two digest halves (as :func:`verify.checks.digest_hex`)."""
    text = F.lower(F.concat(F.lpad(F.hex(F.col(hi)), 16, "0"), F.lpad(F.hex(F.col(lo)), 16, "0")))
    return F.when(F.col(hi).isNotNull(), text)


def group_missed(consumed: DataFrame, committed: DataFrame) -> DataFrame:
    """``(topic, partition, offset)`` of each committed record no member consumed."""
    seen = consumed.where(F.col("kind") == CONSUMED).select(*TP, "offset")
    return committed.select(*TP, "offset").join(seen, [*TP, "offset"], "left_anti")


def consumed_value_mismatch(consumed: DataFrame, committed: DataFrame) -> DataFrame:
    """Per (offset, consumed digest) that differs from the committed log's at that offset, or
    whose offset it does not hold: the digests, the reason, who consumed it and how often."""
    c = consumed.where(F.col("kind") == CONSUMED).select(
        *TP, "offset", F.col("digest_hi").alias("c_hi"), F.col("digest_lo").alias("c_lo"), "member"
    )
    log = committed.select(
        *TP,
        "offset",
        F.col("digest_hi").alias("l_hi"),
        F.col("digest_lo").alias("l_lo"),
        F.lit(True).alias("in_log"),
    )
    same = F.col("c_hi").eqNullSafe(F.col("l_hi")) & F.col("c_lo").eqNullSafe(F.col("l_lo"))
    bad = c.join(log, [*TP, "offset"], "left").where(F.col("in_log").isNull() | ~same)
    reason = F.when(F.col("in_log").isNull(), "offset not in the committed log").otherwise(
        "another value at that offset in the committed log"
    )
    return (
        bad.groupBy(*TP, "offset", "c_hi", "c_lo", "l_hi", "l_lo", "in_log")
        .agg(F.sort_array(F.collect_set("member")).alias("members"), F.count(F.lit(1)).alias("times"))
        .select(
            *TP,
            "offset",
            _hex("c_hi", "c_lo").alias("consumed_digest"),
            _hex("l_hi", "l_lo").alias("log_digest"),
            reason.alias("reason"),
            "members",
            "times",
        )
    )


# -- running them -----------------------------------------------------------------------------------


def ledger_notes(report_dir: Path) -> tuple[list[str], str | None]:
    """(notes on the consumer ledger, why ``group_missed`` cannot run or None): an unclosed
    ledger may miss its last chunk; a drain that did not reach every partition's end."""
    closed = consumer_ledger_closed(report_dir)
    if closed is None:
        why = (
            "the consumer ledger was not closed (the workload stopped without closing it): "
            "its last rows may be missing"
        )
        return [why], why
    notes = []
    if closed.get("aborted"):
        notes.append("the consumer group was stopped by an error or an interruption, not drained")
    elif closed.get("drained") is False:
        notes.append(
            f"the consumer group did not consume to the end of every partition within its drain "
            f"({closed.get('drain_s')} s; records behind: {closed.get('behind') or '?'}): "
            f"{GROUP_MISSED} reports what it could not read"
        )
    elif closed.get("drained") is None:
        notes.append(
            f"the consumer group was not drained (the cluster could not serve): {GROUP_MISSED} may "
            "report the records it did not reach"
        )
    return notes, None


def check_consumers(
    spark: Any,
    report_dir: Path,
    topics: list[str],
    committed: DataFrame,
    committed_count: int | None,
    found: Found,
    notes: list[str],
    row_cap: int,
    say: Callable[[str], None],
    skipped_inputs: SkippedInputs | None = None,
) -> None:
    """Run the consumer checks when the report dir holds a consumer ledger, adding their counts,
    rows, coverage and skips to ``found``, their notes to ``notes`` and a consumer ledger that
    disagrees with its closing totals to ``skipped_inputs``."""
    if not consumer_ledger_present(report_dir):
        _no_ledger(report_dir, read_run_record(report_dir), notes, skipped_inputs)
        return
    said, skip_missed = ledger_notes(report_dir)
    notes.extend(said)
    closed = consumer_ledger_closed(report_dir)
    ledger = read_consumer_rows(spark, report_dir)
    short = check_totals(ledger, Path(report_dir) / CONSUMED_DIR, closed, skipped_inputs, notes)
    skip = {GROUP_MISSED: skip_missed} if skip_missed is not None else {}
    if short is not None:
        skip.update({name: short for name in (GROUP_MISSED, *ROW_SENSITIVE)})
    consumed = ledger.where(F.col("topic").isin(topics))
    totals = (
        consumed.where(F.col("kind") == CONSUMED)
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.countDistinct(*TP, "offset").alias("distinct"),
            F.count(F.when(F.col("generation") == NO_GENERATION, 1)).alias("unlabelled"),
        )
        .first()
    )
    small = [
        r.asDict()
        for r in consumed.where(F.col("kind").isin(COMMITTED, ASSIGNED))
        .select("kind", "member", "generation", *TP, "offset", "time_ms", "seq")
        .collect()
    ]
    found.counts["consumed"], found.counts["consumed_offsets"] = int(totals["n"]), int(totals["distinct"])
    commits = sum(1 for r in small if r["kind"] == COMMITTED)
    say(f"checking the consumer group: {totals['n']} consumed record(s), {commits} committed offset(s)")
    _record(found, COMMIT_WENT_BACKWARDS, commit_went_backwards(small), row_cap)
    _record(found, OWNED_TWICE, owned_twice(small), row_cap)
    facts = GroupFacts.of(small)
    delivered, read = group_checks(
        spark,
        consumed,
        committed,
        facts,
        int(totals["unlabelled"]),
        outside_assignment(closed),
        skip,
        row_cap,
    )
    for name, rows in delivered.items():
        _record(found, name, rows, row_cap)
    spark_checks = {
        GROUP_MISSED: lambda: group_missed(consumed, committed),
        CONSUMED_VALUE_MISMATCH: lambda: consumed_value_mismatch(consumed, committed),
    }
    for name, why in skip.items():
        found.skipped[name] = why
        spark_checks.pop(name, None)
    for name, check in spark_checks.items():
        df = check()
        count = df.count()
        rows = (
            [r.asDict(recursive=True) for r in df.orderBy(*ORDER[name]).limit(row_cap).collect()]
            if count
            else []
        )
        _record(found, name, rows, row_cap, count)
    for name in CONSUMER_CHECKS:
        say(f"  {name}: {'skipped' if name in found.skipped else found.counts[name]}")
    seen = Seen(
        consumed=found.counts["consumed"],
        consumed_offsets=found.counts["consumed_offsets"],
        committed=committed_count,
        commits=commits,
        generations=len({r["generation"] for r in small if r["kind"] == ASSIGNED}),
        members=len({r["member"] for r in small}),
        outside_assignment=outside_assignment(closed),
        **read,
    )
    found.coverage.update(coverage(seen))


def _no_ledger(
    report_dir: Path, run: RunRecord, notes: list[str], skipped_inputs: SkippedInputs | None
) -> None:
    """No consumer ledger: nothing to check unless the run's own record (``R/run.json``) says it
    had consumers, in which case the ledger it wrote is a skipped input (the consumer checks did
    not run: INCOMPLETE)."""
    if run.problem is not None:
        notes.append(f"{run.problem}: whether the run had a consumer group cannot be told")
    if not run.consumers:
        return
    why = (
        f"{Path(report_dir) / RUN_FILE} says the run had a consumer group of {run.consumers} member(s) "
        f"(settings.consumers), but there is no consumer ledger ({Path(report_dir) / CONSUMED_DIR}): "
        "none of the consumer checks ran"
    )
    if skipped_inputs is not None:
        skipped_inputs.skip(CONSUMER_LEDGER_INPUT, why, None)
    else:
        notes.append(why)


def _record(
    found: Found, name: str, rows: list[dict[str, Any]], row_cap: int, count: int | None = None
) -> None:
    count = len(rows) if count is None else count
    found.counts[name] = count
    found.violations[name] = rows[:row_cap]
    found.truncated[name] = count > min(len(rows), row_cap)
