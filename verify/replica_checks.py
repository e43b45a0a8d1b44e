"""The checks of each replica's own files (docs/design.md "Verification job"): is every replica the
assignment lists there, does it hold everything below the high watermark, are its batches in
offset order, and do its checkpoints agree with its batches. Kafka's mechanisms behind them:
the ISR (a replica in it holds every committed record: ``Partition.maybeExpandIsr``), the log's
append-only offsets (``LogSegment``), the ``replication-offset-checkpoint`` (a HW no replica can
be past its own log end) and the ``leader-epoch-checkpoint`` (``LeaderEpochFileCache``, what
truncation after a failover reads: KIP-101, KIP-279).

* :func:`replica_incomplete` - per replica: listed in the assignment (:mod:`verify.assignment`:
  the cluster's metadata, or offline the run's recorded one, else what the brokers'
  checkpoints list) but absent from its broker's log dir; starting above the committed log's log
  start offset (the committed records below its own log start are not on it: an election of its
  broker loses them. Kafka runs retention on every log a broker hosts, a follower's too, each on
  its own schedule, so a follower may legitimately start above its leader; but the runs this job
  verifies keep retention at Kafka's 7-day default for runs of minutes, so there a higher log
  start is records lost by a bug, not by retention, and a run with retention on is not
  verifiable: :mod:`verify.run_record` names a retention override short enough to have run); holding less than the high watermark (its log end offset below it: committed records
  lost, whatever its own HW checkpoint says, since the broker lowers that with the log when it
  truncates); or holding segment bytes that frame no batch in a segment other than the last
  (everything after them is unread). Offline the HW is the highest any replica checkpointed,
  capped by the most complete replica's log end offset (a HW above every replica's log is
  :func:`hw_above_leo`'s finding). Pure Python over the driver's small inputs.
* :func:`offset_order` - per batch: a batch that starts at or below the last offset of the batch
  before it, on a replica or in the committed log read from the leader (two records at one
  offset, or offsets going back). From the readers' facts (:mod:`verify.scan_facts`).
* :func:`hw_above_leo` - a replica whose checkpointed HW is above its log end offset.
* :func:`epoch_cache_inconsistent` - a replica whose leader-epoch-checkpoint disagrees with the
  epochs stamped in its batches, or a batch with no leader epoch (per replica, every problem
  listed).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from verify.assignment import METADATA, Assignment
from verify.checks import REPLICA
from verify.replicas import HIGH_WATERMARK_CHECKPOINT

_ENTRIES = "array<struct<epoch:int,start_offset:bigint>>"
#: Why a replica starting above the committed log's start has lost committed records, though
#: Kafka runs retention on followers too (docs/guarantees.md "The proof").
NO_RETENTION = "no retention deletes within a verified run (retention.ms 7 days); a run with retention on is not verifiable"
TopicPartition = tuple[str, int]


def _row(
    broker: int | None,
    tp: TopicPartition,
    leo: int | None,
    hw: int | None,
    reason: str,
    log_start: int | None = None,
) -> dict[str, Any]:
    return {
        "broker": broker,
        "topic": tp[0],
        "partition": tp[1],
        "log_start_offset": log_start,
        "log_end_offset": leo,
        "high_watermark": hw,
        "reason": reason,
    }


def _absent(
    assignment: Assignment, tp: TopicPartition, present: set[int], brokers_read: set[int], hw: int | None
) -> list[dict[str, Any]]:
    """The replicas of ``tp`` the assignment expects on a read broker that are not on disk."""
    if assignment.exact:
        listed = set(assignment.replicas.get(tp, ())) & brokers_read
        reason = "listed in the assignment, absent from its log dir"
        return [_row(b, tp, None, hw, reason) for b in sorted(listed - present)]
    rows = [
        _row(b, tp, None, hw, f"listed in broker {b}'s {HIGH_WATERMARK_CHECKPOINT}, absent from its log dir")
        for b in assignment.checkpoint_only.get(tp, [])
    ]
    # Every partition of a topic has as many replicas as its most replicated one.
    rf = assignment.replication_factor.get(tp[0], 0)
    if len(present | set(assignment.replicas.get(tp, ()))) < rf:
        reason = f"{len(present)} replica(s) in the log dirs, {rf} of every other partition of the topic"
        rows.append(_row(None, tp, None, hw, reason))
    return rows


def _behind(
    r: dict[str, Any], tp: TopicPartition, hw: int, target: int, start: int | None
) -> list[dict[str, Any]]:
    """A replica on disk against the committed log ``[start, target)`` (``hw`` the reported HW)."""
    rows = []
    own_start = r.get("log_start")
    if start is not None and own_start is not None and start < own_start and start < target:
        reason = (
            f"log start offset {own_start} above the committed log's log start offset {start}: "
            f"committed records {start}..{min(own_start, target) - 1} missing: {NO_RETENTION}"
        )
        rows.append(_row(r["broker"], tp, r["leo"], hw, reason, own_start))
    if r["leo"] < target:
        reason = f"log end offset {r['leo']} below the high watermark {target}: committed records missing"
        rows.append(_row(r["broker"], tp, r["leo"], hw, reason, own_start))
    return rows


def replica_incomplete(
    extents: list[dict[str, Any]],
    hws: dict[TopicPartition, int],
    assignment: Assignment,
    brokers_read: set[int],
    facts: list[dict[str, Any]],
    log_starts: dict[TopicPartition, int] | None = None,
) -> list[dict[str, Any]]:
    """See the module docstring; ``brokers_read`` are the brokers whose log dirs were read,
    ``log_starts`` the committed log's log start offset per partition (the leader's, ListOffsets
    earliest; offline the most complete replica's)."""
    rows: list[dict[str, Any]] = []
    per_tp: dict[TopicPartition, list[dict[str, Any]]] = defaultdict(list)
    for r in extents:
        per_tp[(r["topic"], r["partition"])].append(r)
    for tp in sorted(assignment.replicas):
        rows += _absent(assignment, tp, {r["broker"] for r in per_tp.get(tp, [])}, brokers_read, hws.get(tp))
    for tp, replicas in sorted(per_tp.items()):
        hw = hws.get(tp)
        if hw is None:
            continue
        listed = assignment.replicas.get(tp) if assignment.exact else None
        target = hw if assignment.source == METADATA else min(hw, max(r["leo"] for r in replicas))
        start = (log_starts or {}).get(tp)
        for r in sorted(replicas, key=lambda r: r["broker"]):
            if listed is None or r["broker"] in listed:
                rows += _behind(r, tp, hw, target, start)
    for f in facts:
        for u in f.get("unframed", []):
            if f.get("broker") is not None and not u["last"]:
                reason = (
                    f"segment {u['segment_base']}: {u['size'] - u['end']} byte(s) from position {u['end']} "
                    "frame no batch (and are not the log's tail)"
                )
                rows.append(_row(f["broker"], (f["topic"], f["partition"]), None, None, reason))
    return rows


def coverage(
    extent_rows: list[dict[str, Any]], brokers_read: set[int], assignment: Assignment | None, mode: str
) -> dict[str, str]:
    """Per replica check, what it read and what it could not see."""
    records = sum(r["records"] for r in extent_rows)
    replicas = f"{len(extent_rows)} replica(s), {records} record(s), in {len(brokers_read)} log dir(s)"
    unseen = "; a replica absent from the log dirs read is not compared"
    how = assignment.describe() if assignment else "no assignment"
    partitions = len(assignment.replicas) if assignment else 0
    return {
        "divergent": f"{replicas}: every offset below the HW, on each replica whose log spans it{unseen}",
        "hw_above_leo": f"{replicas}: each replica's checkpointed HW against its own log end{unseen}",
        "epoch_cache_inconsistent": f"{replicas}: each leader-epoch-checkpoint against its batches{unseen}",
        "offset_order": replicas + (" and the committed log" if mode == "cluster" else ""),
        "replica_incomplete": (
            f"{replicas} against {how} ({partitions} partition(s)), each from the committed log's "
            "log start offset to the HW"
        ),
    }


def torn_tail_notes(facts: list[dict[str, Any]]) -> list[str]:
    """Notes for unframed bytes at a replica's log end (a torn tail after a crash is expected)."""
    return [
        f"broker {f['broker']} {f['topic']}-{f['partition']}: the last {u['size'] - u['end']} byte(s) of "
        f"segment {u['segment_base']} frame no batch (a torn tail; replica_incomplete says if committed "
        "records lie past it)"
        for f in facts
        for u in f.get("unframed", [])
        if u["last"] and f.get("broker") is not None
    ]


def offset_order(facts: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """(count, example rows) of batches out of offset order, on replicas (``broker``) and in the
    committed log read from the leaders (``broker`` null)."""
    count = sum(int(f.get("out_of_order_batches", 0)) for f in facts)
    rows = [
        {"broker": f.get("broker"), "topic": f["topic"], "partition": f["partition"], **example}
        for f in facts
        for example in f.get("examples", [])
    ]
    return count, rows


_PROBLEMS = (
    "array_sort(concat("
    "transform(unstamped, x -> format_string("
    "'batch at offset %d has no leader epoch (%d): no leader stamped it, so truncation after a failover cannot place it', "
    "x.base, x.epoch)), "
    "transform(filter(bi, i -> i > 0 AND get(b, i).epoch < get(b, i - 1).epoch), i -> format_string("
    "'batch at offset %d has leader epoch %d, below the epoch %d of the batch before it', "
    "get(b, i).base, get(b, i).epoch, get(b, i - 1).epoch)), "
    "transform(array_except(runs, cp), e -> format_string("
    "'batches of leader epoch %d start at offset %d but the checkpoint has no entry (%d, %d)', "
    "e.epoch, e.start_offset, e.epoch, e.start_offset)), "
    "transform(array_except(array_except(cp, runs), pending), e -> format_string("
    "'checkpoint entry (%d, %d) is not where a run of epoch-%d batches starts', e.epoch, e.start_offset, e.epoch)), "
    "transform(filter(ci, i -> get(cp, i).epoch <= get(cp, i - 1).epoch "
    "OR get(cp, i).start_offset < get(cp, i - 1).start_offset), i -> format_string("
    "'checkpoint entry (%d, %d) does not follow (%d, %d)', get(cp, i).epoch, get(cp, i).start_offset, "
    "get(cp, i - 1).epoch, get(cp, i - 1).start_offset)), "
    "IF(checkpoint_error IS NULL, array(), array(concat('unreadable leader-epoch-checkpoint: ', checkpoint_error)))"
    "))"
)


def epoch_checkpoints(spark: Any, replicas: Any) -> DataFrame:
    """The ``epoch_checkpoints`` input from the :class:`verify.replicas.Replica` list the driver read."""
    rows = [
        (
            r.broker,
            r.topic,
            r.partition,
            None if r.epoch_entries is None else [list(e) for e in r.epoch_entries],
            r.epoch_error,
            r.log_start_unknown,
        )
        for r in replicas
    ]
    return spark.createDataFrame(
        rows,
        f"broker int, topic string, partition int, checkpoint {_ENTRIES}, checkpoint_error string, "
        "log_start_unknown boolean",
    )


def hw_above_leo(extents: DataFrame) -> DataFrame:
    return extents.where(F.col("checkpointed_hw") > F.col("leo")).select(
        *REPLICA, "checkpointed_hw", F.col("leo").alias("log_end_offset")
    )


def _epoch_bounds(extents: DataFrame, epoch_checkpoints: DataFrame) -> DataFrame:
    """Per replica ``(log_start, leo)`` as :func:`epoch_cache_inconsistent` reads them: a log
    start the job could not read (``log_start_unknown``) is the epoch checkpoint's first entry
    where that lies within the log."""
    first = F.element_at("checkpoint", 1).getField("start_offset")
    stand_in = (
        F.coalesce(F.col("log_start_unknown"), F.lit(False))
        & first.isNotNull()
        & first.between(F.col("log_start"), F.col("leo"))
    )
    return (
        extents.select(*REPLICA, "log_start", "leo")
        .join(
            F.broadcast(epoch_checkpoints.select(*REPLICA, "checkpoint", "log_start_unknown")),
            REPLICA,
            "left",
        )
        .select(*REPLICA, F.when(stand_in, first).otherwise(F.col("log_start")).alias("log_start"), "leo")
    )


def _batch_epochs(replica_rows: DataFrame, bounds: DataFrame) -> DataFrame:
    """Per replica, its batches from the log start on as sorted arrays of (base, epoch): ``b``
    those stamped with a leader epoch, ``unstamped`` those without."""
    # The batches from the log start on, one sorted array per replica. Building the array in the
    # aggregation makes it an attribute: every expression below reads it, none recomputes it.
    return (
        replica_rows.where(F.col("offset") == F.col("batch_base_offset"))
        .join(F.broadcast(bounds), REPLICA)
        .where(F.col("batch_last_offset") >= F.col("log_start"))
        .groupBy(*REPLICA)
        .agg(
            # A batch without a leader epoch (-1) is one no leader stamped: a problem of its own,
            # and no part of a run of epochs (collect_list skips the nulls of the other kind).
            F.array_sort(
                F.collect_list(
                    F.when(
                        F.col("leader_epoch") >= 0,
                        F.struct(
                            F.col("batch_base_offset").alias("base"), F.col("leader_epoch").alias("epoch")
                        ),
                    )
                )
            ).alias("b"),
            F.array_sort(
                F.collect_list(
                    F.when(
                        F.col("leader_epoch") < 0,
                        F.struct(
                            F.col("batch_base_offset").alias("base"), F.col("leader_epoch").alias("epoch")
                        ),
                    )
                )
            ).alias("unstamped"),
        )
    )


def epoch_cache_inconsistent(
    replica_rows: DataFrame, extents: DataFrame, epoch_checkpoints: DataFrame
) -> DataFrame:
    """Every checkpoint entry (epoch, start) must be where a run of batches stamped with that
    epoch begins (a run that began before the log start offset counts as beginning there), and
    every such run must have its entry; batch epochs must not decrease with offset; entries must
    increase. One exception, as in Kafka: the last entry may start at the log end offset with an
    epoch above every batch's (a leader that has not written in its epoch yet). A batch with no
    leader epoch (-1) is a problem of its own: a leader stamps every batch it appends.

    ``epoch_checkpoints``: per replica ``checkpoint`` (array of struct(epoch int, start_offset
    bigint) in file order; null when the file is absent) and ``checkpoint_error`` (why the file
    could not be read, else null) and ``log_start_unknown`` (its log-start-offset-checkpoint
    could not be read: a skipped input). For such a replica the log start is taken from the
    checkpoint's first entry where it lies within the log, since Kafka keeps it there
    (``UnifiedLog.maybeIncrementLogStartOffset`` -> ``LeaderEpochFileCache.truncateFromStart``): a
    cache truncated with the log start is then not reported, and one that lost its oldest entries
    on such a replica goes unseen. Works per replica on sorted arrays: one shuffle in all."""
    bounds = _epoch_bounds(extents, epoch_checkpoints)
    batches = _batch_epochs(replica_rows, bounds)
    empty = F.expr("array()").cast("array<struct<base:bigint,epoch:int>>")
    steps = (
        bounds.join(batches, REPLICA, "left")
        .join(F.broadcast(epoch_checkpoints), REPLICA, "left")
        .withColumn("b", F.coalesce("b", empty))
        .withColumn("unstamped", F.coalesce("unstamped", empty))
        .withColumn("cp", F.coalesce("checkpoint", F.expr("array()").cast(_ENTRIES)))
        .withColumn("bi", F.expr("IF(size(b) = 0, array(), sequence(0, size(b) - 1))"))
        .withColumn("ci", F.expr("IF(size(cp) < 2, array(), sequence(1, size(cp) - 1))"))
        .withColumn(
            "runs",
            F.expr(
                "transform(filter(bi, i -> i = 0 OR get(b, i).epoch != get(b, i - 1).epoch), "
                "i -> named_struct('epoch', get(b, i).epoch, 'start_offset', greatest(get(b, i).base, log_start)))"
            ).cast(_ENTRIES),
        )
        .withColumn("max_epoch", F.expr("array_max(transform(b, x -> x.epoch))"))
        .withColumn(
            "pending",
            F.expr(
                "filter(cp, e -> e = element_at(cp, -1) AND e.start_offset = leo "
                "AND (max_epoch IS NULL OR e.epoch > max_epoch))"
            ),
        )
    )
    problems = F.expr(_PROBLEMS)
    as_pairs = "transform({0}, e -> array(CAST(e.epoch AS BIGINT), e.start_offset))"
    return (
        steps.withColumn("problems", problems)
        .where(F.size("problems") > 0)
        .select(
            *REPLICA,
            "problems",
            F.expr(as_pairs.format("cp")).alias("checkpoint"),
            F.expr(as_pairs.format("runs")).alias("batch_epoch_starts"),
            "log_start",
            "leo",
        )
    )
