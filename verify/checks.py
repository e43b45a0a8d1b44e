"""The verification checks of SPEC 8 as Spark DataFrame operations; each returns offending rows.

Inputs (column names as the data sources and :mod:`verify.job` build them):

* ``acks`` - the ledger's acknowledged writes (:data:`verify.ledger.LEDGER_DDL` rows of type ack);
* ``committed`` - the committed log (:data:`verify.sources.COMMITTED_DDL`): from the live cluster,
  or, offline, :func:`committed_from_replicas`;
* ``replica_rows`` - every replica's records from its segment files (:data:`verify.sources.SEGMENTS_DDL`);
* ``hws`` - ``(topic, partition, high_watermark)``: the cluster's committed high watermark, or
  offline the highest HW any replica checkpointed;
* ``extents`` - per replica ``(broker, topic, partition, first_offset, log_start, leo,
  checkpointed_hw)`` from :func:`replica_extents`;
* ``epoch_checkpoints`` - per replica its ``leader-epoch-checkpoint``: ``(broker, topic, partition,
  checkpoint array<struct<epoch, start_offset>>, checkpoint_error)``.

The checks, one row per offence:

* :func:`lost` - an acknowledged write whose (topic, partition, offset, value digest) is not in
  the committed log (per ack; ``reason`` says what is there instead);
* :func:`duplicate` - a value digest at more than one committed offset (per value);
* :func:`out_of_order` - within a partition, for one producer id and epoch, a sequence that does
  not increase with the offset (per record; sequence wrap-around at 2^31 is not modelled);
* :func:`divergent` - one offset below the HW held differently by the replicas: more than one
  (value digest, batch CRC, batch leader epoch, batch base offset), a copy that fails its CRC, or
  missing on a replica whose log spans that offset (per offset);
* :func:`hw_above_leo` - a replica whose checkpointed HW is above its log end offset (per replica);
* :func:`epoch_cache_inconsistent` - a replica whose leader-epoch-checkpoint disagrees with the
  epochs stamped in its batches (per replica, with every problem listed).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

TP = ["topic", "partition"]
_ENTRIES = "array<struct<epoch:int,start_offset:bigint>>"
REPLICA = ["broker", "topic", "partition"]


# -- derived inputs -------------------------------------------------------------------------------


def committed_from_replicas(replica_rows: DataFrame, hws: DataFrame) -> DataFrame:
    """Offline stand-in for the cluster's committed log: every CRC-valid record below the HW on
    any replica, one row per distinct (offset, value, producer facts). Replicas that agree
    collapse to one row; where they disagree :func:`divergent` reports it."""
    below = replica_rows.where(F.col("crc_valid")).join(F.broadcast(hws), TP).where(
        F.col("offset") < F.col("high_watermark")
    )
    return below.groupBy(
        "topic", "partition", "offset", "value_digest", "key", "producer_id", "producer_epoch", "sequence"
    ).agg(
        F.max("leader_epoch").alias("leader_epoch"),
        F.max("timestamp").alias("timestamp"),
        F.min("batch_base_offset").alias("batch_base_offset"),
    ).withColumn("crc_valid", F.lit(True))


def replica_extents(replica_rows: DataFrame, replicas: DataFrame) -> DataFrame:
    """Per replica: the first offset its segments can hold (first segment's base), its log start
    offset (that or the checkpointed one, whichever is higher), and its log end offset: past the
    last framed batch, or the last segment's base when that segment is empty."""
    data_end = replica_rows.groupBy(*REPLICA).agg((F.max("batch_last_offset") + 1).alias("data_end"))
    leo = F.greatest(F.coalesce("last_segment_base", F.lit(0)), F.coalesce("data_end", F.lit(0)))
    first = F.coalesce("first_segment_base", leo)
    return (
        replicas.join(data_end, REPLICA, "left")
        .select(
            *REPLICA,
            first.alias("first_offset"),
            F.greatest(first, F.coalesce("checkpointed_log_start", first)).alias("log_start"),
            leo.alias("leo"),
            "checkpointed_hw",
        )
    )


# -- the checks -----------------------------------------------------------------------------------


def lost(acks: DataFrame, committed: DataFrame, hws: DataFrame) -> DataFrame:
    a = acks.alias("a")
    valid = committed.where(F.col("crc_valid")).select(*TP, "offset", "value_digest").alias("c")
    match = (
        (F.col("a.topic") == F.col("c.topic"))
        & (F.col("a.partition") == F.col("c.partition"))
        & (F.col("a.offset") == F.col("c.offset"))
        & F.col("a.value_digest").eqNullSafe(F.col("c.value_digest"))
    )
    missing = a.join(valid, match, "left_anti")
    found = committed.groupBy(*TP, "offset").agg(
        F.sort_array(F.collect_set("value_digest")).alias("found_digests"),
        F.min(F.col("crc_valid").cast("int")).alias("found_valid"),
    )
    reason = (
        F.when(F.col("high_watermark").isNull(), "partition absent from the committed log")
        .when(F.col("offset") >= F.col("high_watermark"), "offset at or above the high watermark")
        .when(F.col("found_valid") == 0, "the batch at that offset fails its CRC")
        .when(F.col("found_digests").isNotNull(), "another value at that offset")
        .otherwise("no record at that offset")
    )
    return (
        missing.join(found, [*TP, "offset"], "left")
        .join(F.broadcast(hws), TP, "left")
        .select(
            *TP,
            "offset",
            "value_digest",
            "key",
            "producer_id",
            "sequence",
            "time_ms",
            "high_watermark",
            "found_digests",
            reason.alias("reason"),
        )
    )


def duplicate(committed: DataFrame) -> DataFrame:
    rows = committed.where(F.col("value_digest").isNotNull() & F.col("crc_valid"))
    return (
        rows.groupBy("value_digest")
        .agg(F.sort_array(F.collect_set(F.struct(*TP, "offset"))).alias("locations"))
        .where(F.size("locations") > 1)
        .select("value_digest", F.size("locations").alias("copies"), "locations")
    )


def out_of_order(committed: DataFrame) -> DataFrame:
    rows = (
        committed.where((F.col("producer_id") >= 0) & (F.col("sequence") >= 0) & F.col("crc_valid"))
        .select(*TP, "offset", "producer_id", "producer_epoch", "sequence", "value_digest")
        .dropDuplicates([*TP, "offset", "producer_id", "producer_epoch", "sequence"])
    )
    w = Window.partitionBy(*TP, "producer_id", "producer_epoch").orderBy("offset")
    return (
        rows.withColumn("previous_offset", F.lag("offset").over(w))
        .withColumn("previous_sequence", F.lag("sequence").over(w))
        .where(F.col("sequence") <= F.col("previous_sequence"))
        .select(
            *TP,
            "offset",
            "producer_id",
            "producer_epoch",
            "sequence",
            "previous_offset",
            "previous_sequence",
            "value_digest",
        )
    )


def divergent(replica_rows: DataFrame, extents: DataFrame, hws: DataFrame) -> DataFrame:
    below = replica_rows.join(F.broadcast(hws), TP).where(F.col("offset") < F.col("high_watermark"))
    variant = F.struct(
        F.coalesce("value_digest", F.lit("?")), "batch_crc", "leader_epoch", "batch_base_offset"
    )
    per_offset = below.groupBy(*TP, "offset").agg(
        F.sort_array(
            F.collect_list(
                F.struct("broker", "value_digest", "batch_crc", "crc_valid", "leader_epoch", "batch_base_offset")
            )
        ).alias("copies"),
        F.size(F.collect_set(variant)).alias("variants"),
        F.min(F.col("crc_valid").cast("int")).alias("all_valid"),
        F.collect_set("broker").alias("present_on"),
        F.first("high_watermark").alias("high_watermark"),
    )
    spans = extents.groupBy(*TP).agg(
        F.collect_list(F.struct("broker", "first_offset", "leo")).alias("spans")
    )
    expected = F.transform(
        F.filter("spans", lambda s: (s["first_offset"] <= F.col("offset")) & (F.col("offset") < s["leo"])),
        lambda s: s["broker"],
    )
    joined = per_offset.join(F.broadcast(spans), TP).withColumn(
        "missing_on", F.array_sort(F.array_except(expected, F.col("present_on")))
    )
    reason = F.concat_ws(
        "; ",
        F.when(F.col("variants") > 1, F.lit("replicas hold different records")),
        F.when(F.col("all_valid") == 0, F.lit("a copy fails its batch CRC")),
        F.when(F.size("missing_on") > 0, F.lit("missing on a replica whose log spans it")),
    )
    return joined.where((F.col("variants") > 1) | (F.col("all_valid") == 0) | (F.size("missing_on") > 0)).select(
        *TP, "offset", "high_watermark", "copies", "missing_on", reason.alias("reason")
    )


def hw_above_leo(extents: DataFrame) -> DataFrame:
    return extents.where(F.col("checkpointed_hw") > F.col("leo")).select(
        *REPLICA, "checkpointed_hw", F.col("leo").alias("log_end_offset")
    )


def epoch_cache_inconsistent(replica_rows: DataFrame, extents: DataFrame, epoch_checkpoints: DataFrame) -> DataFrame:
    """Every checkpoint entry (epoch, start) must be where a run of batches stamped with that
    epoch begins (a run that began before the log start offset counts as beginning there), and
    every such run must have its entry; batch epochs must not decrease with offset; entries must
    increase. One exception, as in Kafka: the last entry may start at the log end offset with an
    epoch above every batch's (a leader that has not written in its epoch yet).

    ``epoch_checkpoints``: per replica ``checkpoint`` (array of struct(epoch int, start_offset
    bigint) in file order; null when the file is absent) and ``checkpoint_error`` (why the file
    could not be read, else null). Works per replica on sorted arrays: one shuffle in all."""
    batches = (
        replica_rows.where((F.col("offset") == F.col("batch_base_offset")) & (F.col("leader_epoch") >= 0))
        .groupBy(*REPLICA)
        .agg(
            F.array_sort(
                F.collect_list(
                    F.struct(
                        F.col("batch_base_offset").alias("base"),
                        F.col("batch_last_offset").alias("last"),
                        F.col("leader_epoch").alias("epoch"),
                    )
                )
            ).alias("all_batches")
        )
    )
    steps = (
        extents.select(*REPLICA, "log_start", "leo")
        .join(batches, REPLICA, "left")
        .join(F.broadcast(epoch_checkpoints), REPLICA, "left")
        .withColumn("cp", F.coalesce("checkpoint", F.expr("array()").cast(_ENTRIES)))
        .withColumn("b", F.expr("filter(coalesce(all_batches, array()), x -> x.last >= log_start)"))
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
    problems = F.expr(
        "array_sort(concat("
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
