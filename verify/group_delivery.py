"""The consumer group's per-assignment delivery, aggregated in Spark (docs/guarantees.md,
"Verification"; issue 34): the consumer ledger's ``consumed`` rows can be millions, so they are
never collected; each function here turns them into a frame of one row per assignment
(``(member, generation, topic, partition)``, Kafka's classic protocol's unit of ownership) or
per probe, which :mod:`verify.group_rules` then judges in the driver.

* :func:`labelled` - the consumed rows with the generation they were consumed in; a row of
  generation -1 (the member's heartbeat or commit was fenced, which resets Kafka's consumer's
  generation, while it still held its partitions: they stay assigned until the next poll's
  onJoinPrepare gives them up as lost) belongs to the generation the member last joined;
* :func:`below_commit` - per assignment, the first record it consumed below a commit
  acknowledged before it (``resumed_below_commit``);
* :func:`log_bounds` - per partition the committed log's lowest and highest offset and its
  record count (whether it has gaps: compaction, control batches);
* :func:`assignment_stats` - per assignment its lowest and highest consumed offset, its record
  count and, inside the committed log's bounds, the lowest, highest and distinct offsets: what
  ``resumed_below_commit``, ``consumed_unassigned`` and ``position_skipped`` read;
* :func:`skipped_offsets` - for the few assignments whose consumed offsets leave room for a
  skip, the committed log's records between their lowest and highest offset that they did not
  consume (``position_skipped``);
* :func:`last_log_offsets` and :func:`first_consumed` - for ``commit_ahead_of_consumed``: the
  committed log's last offset below a commit (where the log has gaps), and when its member first
  consumed it;
* :func:`consumed_to` - for a reported commit, the highest offset its member had consumed of
  the assignment before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ledger.consumed import CONSUMED, NO_GENERATION
from verify.checks import TP
from verify.group_rules import KEY_COLUMNS, Bounds, GroupFacts, Key, TopicPartition

KEYS = list(KEY_COLUMNS)
#: How many skipped offsets a row of position_skipped names (it counts them all).
SKIPPED_SHOWN = 20


def _small(spark: Any, rows: Sequence[tuple[Any, ...]], ddl: str) -> DataFrame:
    return F.broadcast(spark.createDataFrame(list(rows), ddl))


def labelled(spark: Any, consumed: DataFrame, facts: GroupFacts, unlabelled: int) -> DataFrame:
    """``(member, generation, topic, partition, offset, seq, time_ms)`` of each consumed record, its
    generation -1 replaced by the one its member last joined before it (``unlabelled``: how many
    rows have -1; with none the rows are read as they are)."""
    rows = consumed.where(F.col("kind") == CONSUMED).select(*KEYS, "offset", "seq", "time_ms")
    if not unlabelled:
        return rows
    joins = [(m, seq, g) for m, joined in facts.joined.items() for seq, g in joined]
    if not joins:
        return rows
    joined = _small(spark, joins, "j_member string, j_seq bigint, j_generation int")
    lost = rows.where(F.col("generation") == NO_GENERATION)
    resolved = (
        lost.join(joined, (F.col("member") == F.col("j_member")) & (F.col("j_seq") < F.col("seq")), "left")
        .groupBy("member", "topic", "partition", "offset", "seq", "time_ms")
        .agg(F.max("j_generation").alias("joined"))
        .select(
            "member",
            F.coalesce("joined", F.lit(NO_GENERATION)).cast("int").alias("generation"),
            "topic",
            "partition",
            "offset",
            "seq",
            "time_ms",
        )
    )
    return rows.where(F.col("generation") != NO_GENERATION).unionByName(resolved)


def below_commit(spark: Any, rows: DataFrame, steps: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Per assignment, the first consumed record (in time) below a commit acknowledged before it:
    ``(member, generation, topic, partition, time_ms, seq, offset, commit_offset)``. ``steps``
    (:func:`verify.group_rules.resume_steps`, small) are per assignment ``(time_ms, seq,
    offset)`` of the commits its records must not go below once acknowledged.

    Cheap on millions of rows, and nothing collected but the findings: the records are reduced
    to one row per assignment and millisecond (its lowest offset), each held against the highest
    step of an earlier millisecond by a window over those few rows and the steps; a step of the
    same millisecond (the member's own commit, ordered by ``seq``) is met by a broadcast
    equi-join on (assignment, millisecond), which only such records pass."""
    if not steps:
        return []
    s = _small(
        spark,
        steps,
        "member string, generation int, topic string, partition int, time_ms bigint, c_seq bigint, "
        "c_offset bigint",
    )
    mine = rows.join(s.select(*KEYS).distinct(), KEYS, "left_semi")
    late = (F.col("seq") > F.col("c_seq")) & (F.col("offset") < F.col("c_offset"))
    polls = (
        mine.join(s, [*KEYS, "time_ms"], "left")
        .groupBy(*KEYS, "time_ms")
        .agg(
            F.min(F.struct("offset", "seq")).alias("lowest"),
            F.min(F.when(late, F.struct("offset", "seq", "c_offset"))).alias("tie"),
        )
        .withColumn("c_offset", F.lit(None).cast("bigint"))
    )
    marks = s.select(
        *KEYS,
        "time_ms",
        F.lit(None).cast(polls.schema["lowest"].dataType).alias("lowest"),
        F.lit(None).cast(polls.schema["tie"].dataType).alias("tie"),
        "c_offset",
    )
    # the highest step of an earlier millisecond, over the per-millisecond rows and the steps
    frame = Window.partitionBy(*KEYS).orderBy("time_ms").rangeBetween(Window.unboundedPreceding, -1)
    judged = polls.unionByName(marks).withColumn("prior", F.max("c_offset").over(frame))
    earlier = F.col("lowest.offset") < F.col("prior")
    bad = judged.where(F.col("lowest").isNotNull() & (earlier | F.col("tie").isNotNull())).select(
        *KEYS,
        F.struct(
            "time_ms",
            F.when(earlier, F.col("lowest.seq")).otherwise(F.col("tie.seq")).alias("seq"),
            F.when(earlier, F.col("lowest.offset")).otherwise(F.col("tie.offset")).alias("offset"),
            F.when(earlier, F.col("prior")).otherwise(F.col("tie.c_offset")).alias("commit_offset"),
        ).alias("f"),
    )
    first = bad.groupBy(*KEYS).agg(F.min("f").alias("f"))
    return [{**{k: r[k] for k in KEYS}, **r["f"].asDict()} for r in first.collect()]


def log_bounds(committed: DataFrame) -> dict[TopicPartition, Bounds]:
    """Per partition of the committed log: its lowest and highest offset and how many records."""
    rows = committed.groupBy(*TP).agg(
        F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count(F.lit(1)).alias("n")
    )
    return {(r["topic"], r["partition"]): Bounds(r["lo"], r["hi"], r["n"]) for r in rows.collect()}


def assignment_stats(
    spark: Any, rows: DataFrame, bounds: Mapping[TopicPartition, Bounds]
) -> list[dict[str, Any]]:
    """Per (member, generation, topic, partition) consumed: ``first_offset``, ``last_offset``,
    ``records``, and inside the committed log's bounds ``lo``, ``hi`` and ``in_log`` (distinct
    offsets)."""
    b = _small(
        spark,
        [(t, p, x.log_min, x.log_max) for (t, p), x in bounds.items()],
        "topic string, partition int, log_min bigint, log_max bigint",
    )
    inside = F.col("offset").between(F.col("log_min"), F.col("log_max"))
    in_log = F.when(inside, F.col("offset"))
    stats = (
        rows.join(b, TP, "left")
        .groupBy(*KEYS)
        .agg(
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.count(F.lit(1)).alias("records"),
            F.min(in_log).alias("lo"),
            F.max(in_log).alias("hi"),
            F.countDistinct(in_log).alias("in_log"),
        )
    )
    return [r.asDict() for r in stats.collect()]


def skipped_offsets(
    spark: Any, rows: DataFrame, committed: DataFrame, candidates: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per candidate assignment, the committed records between its ``lo`` and ``hi`` it did not
    consume: ``skipped`` (how many) and ``skipped_offsets`` (the first :data:`SKIPPED_SHOWN`)."""
    if not candidates:
        return []
    c = _small(
        spark,
        [(*(x[k] for k in KEYS), x["lo"], x["hi"]) for x in candidates],
        "member string, generation int, topic string, partition int, lo bigint, hi bigint",
    )
    expected = (
        committed.select(*TP, "offset")
        .join(c, TP)
        .where(F.col("offset").between(F.col("lo"), F.col("hi")))
        .select(*KEYS, "offset")
    )
    seen = rows.join(c.select(*KEYS), KEYS, "left_semi").select(*KEYS, "offset")
    missing = (
        expected.join(seen, [*KEYS, "offset"], "left_anti")
        .groupBy(*KEYS)
        .agg(
            F.count(F.lit(1)).alias("skipped"),
            F.slice(F.sort_array(F.collect_list("offset")), 1, SKIPPED_SHOWN).alias("skipped_offsets"),
        )
    )
    return [r.asDict(recursive=True) for r in missing.collect()]


def last_log_offsets(
    spark: Any, committed: DataFrame, targets: Sequence[tuple[str, int, int]]
) -> dict[tuple[str, int, int], int]:
    """Per ``(topic, partition, offset)``: the highest offset of the committed log at or below it
    (absent: none)."""
    if not targets:
        return {}
    t = _small(spark, sorted(set(targets)), "topic string, partition int, target bigint")
    found = (
        committed.select(*TP, "offset")
        .join(t, TP)
        .where(F.col("offset") <= F.col("target"))
        .groupBy(*TP, "target")
        .agg(F.max("offset").alias("at"))
    )
    return {(r["topic"], r["partition"], r["target"]): r["at"] for r in found.collect()}


def first_consumed(
    spark: Any, rows: DataFrame, probes: Sequence[tuple[str, int, str, int, int]]
) -> dict[tuple[Key, int], int]:
    """Per (assignment, offset) probed: the seq of the first row its member consumed it in."""
    if not probes:
        return {}
    p = _small(
        spark,
        sorted(set(probes)),
        "member string, generation int, topic string, partition int, offset bigint",
    )
    found = (
        rows.join(p, [*KEYS, "offset"], "left_semi").groupBy(*KEYS, "offset").agg(F.min("seq").alias("seq"))
    )
    return {
        ((r["member"], r["generation"], r["topic"], r["partition"]), r["offset"]): r["seq"]
        for r in found.collect()
    }


def consumed_to(
    spark: Any, rows: DataFrame, commits: Sequence[Mapping[str, Any]]
) -> dict[tuple[Key, int], int | None]:
    """Per reported commit ``(assignment, seq)``: the highest offset its member had consumed of
    the assignment before it (None: nothing)."""
    if not commits:
        return {}
    c = _small(
        spark,
        [(*(x[k] for k in KEYS), x["seq"]) for x in commits],
        "member string, generation int, topic string, partition int, c_seq bigint",
    )
    found = (
        rows.join(c, KEYS)
        .where(F.col("seq") < F.col("c_seq"))
        .groupBy(*KEYS, "c_seq")
        .agg(F.max("offset").alias("to"))
    )
    got = {
        ((r["member"], r["generation"], r["topic"], r["partition"]), r["c_seq"]): r["to"]
        for r in found.collect()
    }
    return {
        (k, x["seq"]): got.get((k, x["seq"]))
        for x in commits
        for k in [(x["member"], x["generation"], x["topic"], x["partition"])]
    }
