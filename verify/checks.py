"""The verification checks (docs/design.md "Verification job") as Spark DataFrame operations; each
returns offending rows.

Inputs (column names as the data sources and :mod:`verify.job` build them):

* ``acks`` - the ledger's acknowledged writes (:data:`ledger.format.LEDGER_DDL` rows of type ack)
  with the digest's halves (:func:`digest_halves`);
* ``committed`` - the committed log (:data:`verify.sources.NARROW_COMMITTED_DDL`), one row per offset: from
  the live cluster's leaders, or, offline, :func:`committed_from_replicas`;
* ``replica_rows`` - every replica's records from its segment files
  (:data:`verify.sources.NARROW_SEGMENTS_DDL`);
* ``hws`` - ``(topic, partition, high_watermark)``: the cluster's committed high watermark, or
  offline the highest HW any replica checkpointed;
* ``extents`` - per replica ``(broker, topic, partition, first_offset, log_start, leo,
  checkpointed_hw, records, corrupt_records)`` from :func:`replica_extents`;
* ``epoch_checkpoints`` - per replica its ``leader-epoch-checkpoint``: ``(broker, topic, partition,
  checkpoint array<struct<epoch, start_offset>>, checkpoint_error)``.

Expensive comparisons run in two passes where that saves a shuffle of wide rows: cheap
aggregates (counts, min/max) find the offending keys, and only their rows are gathered in full.

The checks, one row per offence:

* :func:`lost` - an acknowledged write whose (topic, partition, offset, value digest) is not in
  the committed log (per ack; ``reason`` says what is there instead);
* :func:`duplicate` - a value digest at more than one committed offset (per value);
* :func:`out_of_order` - within a partition, for one producer session (a producer id, across
  its epochs: KIP-360's bump keeps the id), a record whose (epoch, sequence) does not increase
  with the offset: a later sequence of one epoch, or an older epoch after a newer one, which is
  a batch the producer gave up on written after what it sent next (per record; sequence
  wrap-around at 2^31 is not modelled, nor order across two ids of one process);
* :func:`divergent` - one offset below the HW held differently by the replicas: more than one
  (value digest, batch CRC, batch leader epoch, batch base offset), a copy that fails its CRC, or
  missing on a replica whose log spans that offset (per offset);
* :func:`hw_above_leo` - a replica whose checkpointed HW is above its log end offset (per replica);
* :func:`epoch_cache_inconsistent` - a replica whose leader-epoch-checkpoint disagrees with the
  epochs stamped in its batches (per replica, with every problem listed).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

TP = ["topic", "partition"]
DIGEST = ["digest_hi", "digest_lo"]
_ENTRIES = "array<struct<epoch:int,start_offset:bigint>>"
REPLICA = ["broker", "topic", "partition"]


# -- digests --------------------------------------------------------------------------------------
# The data sources hand the job each value digest as two 64-bit halves (digest_hi, digest_lo: the
# 128 bits of the ledger's 32 hex characters, verify.sources.NARROW_SEGMENTS_DDL); joins and
# aggregations use them, and only the rows of a report are turned back into hex text.


def digest_hex() -> Column:
    """The ledger's text (32 lowercase hex characters) of ``digest_hi``/``digest_lo``, null for null."""
    hi, lo = F.col("digest_hi"), F.col("digest_lo")
    text = F.lower(F.concat(F.lpad(F.hex(hi), 16, "0"), F.lpad(F.hex(lo), 16, "0")))
    return F.when(hi.isNotNull(), text)


def digest_halves(text: str = "value_digest") -> list[Column]:
    """``digest_hi``, ``digest_lo`` of a ledger's hex digest column (the inverse of :func:`digest_hex`).
    Text that is not 32 hex characters gets :data:`NOT_A_DIGEST`, which matches no record short of
    a 2^-128 coincidence; null stays null."""
    col = F.col(text)
    # No regex and no lower(): conv reads either case, unhex is null for a non-hex character.
    ok = (F.length(col) == 32) & F.unhex(col).isNotNull()

    def half(start: int, invalid: int) -> Column:
        parsed = F.conv(F.substring(col, start, 16), 16, -10).cast("bigint")
        return F.when(ok, parsed).when(col.isNotNull(), F.lit(invalid))

    return [half(1, NOT_A_DIGEST[0]).alias("digest_hi"), half(17, NOT_A_DIGEST[1]).alias("digest_lo")]


#: The halves of ledger text that is no digest, and (below) what stands for a null digest in joins.
NOT_A_DIGEST = (-(2**63), -(2**63) + 1)
NULL_DIGEST = (-(2**63), -(2**63))


def digest_keys() -> list[Column]:
    """``dh``, ``dl``: the digest halves with null (a null value) as :data:`NULL_DIGEST`, for joins."""
    return [
        F.coalesce("digest_hi", F.lit(NULL_DIGEST[0])).alias("dh"),
        F.coalesce("digest_lo", F.lit(NULL_DIGEST[1])).alias("dl"),
    ]


# -- derived inputs -------------------------------------------------------------------------------


def replica_extents(replica_rows: DataFrame, replicas: DataFrame) -> DataFrame:
    """Per replica: the first offset its segments can hold (first segment's base), its log start
    offset (that or the checkpointed one, whichever is higher), its log end offset (past the last
    framed batch, or the last segment's base when that segment is empty), how many records it
    holds and how many of them sit in batches that fail their CRC."""
    per_replica = replica_rows.groupBy(*REPLICA).agg(
        (F.max("batch_last_offset") + 1).alias("data_end"),
        F.count(F.lit(1)).alias("records"),
        F.sum(F.when(F.col("crc_valid"), 0).otherwise(1)).alias("corrupt_records"),
    )
    leo = F.greatest(F.coalesce("last_segment_base", F.lit(0)), F.coalesce("data_end", F.lit(0)))
    first = F.coalesce("first_segment_base", leo)
    return replicas.join(per_replica, REPLICA, "left").select(
        *REPLICA,
        first.alias("first_offset"),
        F.greatest(first, F.coalesce("checkpointed_log_start", first)).alias("log_start"),
        leo.alias("leo"),
        "checkpointed_hw",
        F.coalesce("records", F.lit(0)).alias("records"),
        F.coalesce("corrupt_records", F.lit(0)).alias("corrupt_records"),
    )


def committed_from_replicas(replica_rows: DataFrame, extents: DataFrame, hws: DataFrame) -> DataFrame:
    """Offline stand-in for the cluster's committed log: what a consumer would read below the HW
    from the most complete replica of each partition, as if it led: the replica without holes
    (records = LEO - first offset), then with the fewest records in corrupt batches, then with
    the highest LEO, then the lowest broker id. Where replicas disagree, :func:`divergent` says so."""
    w = Window.partitionBy(*TP).orderBy(
        F.desc((F.col("records") == F.col("leo") - F.col("first_offset")).cast("int")),
        F.asc("corrupt_records"),
        F.desc("leo"),
        F.asc("broker"),
    )
    chosen = extents.withColumn("rank", F.row_number().over(w)).where(F.col("rank") == 1).select(*REPLICA)

    return (
        replica_rows.join(F.broadcast(chosen), REPLICA)
        .join(F.broadcast(hws), TP)
        .where(F.col("offset") < F.col("high_watermark"))
        .select(
            "topic",
            "partition",
            "offset",
            *DIGEST,
            "producer_id",
            "producer_epoch",
            "sequence",
            "leader_epoch",
            "batch_base_offset",
            "crc_valid",
        )
    )


# -- the checks -----------------------------------------------------------------------------------


def lost(acks: DataFrame, committed: DataFrame, hws: DataFrame) -> DataFrame:
    """``acks`` carry the ledger's ``value_digest`` text and its halves (:func:`digest_halves`)."""
    # Pass 1 on narrow, fixed-width rows: (topic, partition, offset, digest halves) of every ack
    # without its match in the log; pass 2 fetches those acks' full rows.
    keys = [*TP, "offset", "dh", "dl"]
    valid = committed.where(F.col("crc_valid")).select(*TP, "offset", *digest_keys())
    missing_keys = acks.select(*TP, "offset", *digest_keys()).join(valid, keys, "left_anti")
    missing = acks.select("*", *digest_keys()).join(missing_keys, keys, "left_semi").drop("dh", "dl")
    # What the log holds at the missing offsets (a semi join first: missing is small, committed not).
    found = (
        committed.join(missing.select(*TP, "offset"), [*TP, "offset"], "left_semi")
        .groupBy(*TP, "offset")
        .agg(
            F.sort_array(F.collect_set(digest_hex())).alias("found_digests"),
            F.min(F.col("crc_valid").cast("int")).alias("found_valid"),
        )
    )
    reason = (
        F.when(F.col("high_watermark").isNull(), "partition absent from the committed log")
        .when(F.col("offset") >= F.col("high_watermark"), "offset at or above the high watermark")
        .when(F.col("found_valid") == 0, "the batch at that offset fails its CRC")
        .when(F.col("found_digests").isNotNull(), "another value at that offset")
        .otherwise("no record at that offset")
    )
    return (
        missing.drop(*DIGEST)
        .join(found, [*TP, "offset"], "left")
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
    rows = committed.where(F.col("digest_hi").isNotNull() & F.col("crc_valid"))
    # Pass 1 counts per digest_hi (one long: SHA-256's first 64 bits are as good as a hash); pass
    # 2 lists the offsets of the (rare) repeated ones, by both halves.
    repeated = rows.groupBy("digest_hi").count().where(F.col("count") > 1).select("digest_hi")
    return (
        rows.join(repeated, "digest_hi", "left_semi")
        .groupBy(*DIGEST)
        .agg(F.sort_array(F.collect_set(F.struct(*TP, "offset"))).alias("locations"))
        .where(F.size("locations") > 1)
        .select(digest_hex().alias("value_digest"), F.size("locations").alias("copies"), "locations")
    )


def out_of_order(committed: DataFrame) -> DataFrame:
    """Per partition and producer id, ordered by offset: a record whose epoch is below the one
    before it, or whose sequence is not above it in the same epoch. A new epoch restarts at
    sequence 0 (KIP-360), so only the epoch is compared across epochs."""
    rows = committed.where(
        (F.col("producer_id") >= 0) & (F.col("sequence") >= 0) & F.col("crc_valid")
    ).select(*TP, "offset", "producer_id", "producer_epoch", "sequence", *DIGEST)
    w = Window.partitionBy(*TP, "producer_id").orderBy("offset")
    epoch, previous_epoch = F.col("producer_epoch"), F.col("previous_epoch")
    backwards = (epoch < previous_epoch) | (
        (epoch == previous_epoch) & (F.col("sequence") <= F.col("previous_sequence"))
    )
    return (
        rows.withColumn("previous_offset", F.lag("offset").over(w))
        .withColumn("previous_epoch", F.lag("producer_epoch").over(w))
        .withColumn("previous_sequence", F.lag("sequence").over(w))
        .where(backwards)
        .select(
            *TP,
            "offset",
            "producer_id",
            "producer_epoch",
            "sequence",
            "previous_offset",
            "previous_epoch",
            "previous_sequence",
            digest_hex().alias("value_digest"),
        )
    )


def divergent(replica_rows: DataFrame, extents: DataFrame, hws: DataFrame) -> DataFrame:
    below = replica_rows.join(F.broadcast(hws), TP).where(F.col("offset") < F.col("high_watermark"))
    spans = extents.groupBy(*TP).agg(F.collect_list(F.struct("broker", "first_offset", "leo")).alias("spans"))

    def spanning(offset: str) -> Column:
        return F.filter("spans", lambda s: (s["first_offset"] <= F.col(offset)) & (F.col(offset) < s["leo"]))

    # Pass 1, per batch: every record of a batch sits in one replica's Spark partition, so this
    # aggregation happens before the shuffle and only one row per (replica, batch) moves. A batch
    # whose copies agree on CRC, epoch, extent and the sum of their records' digest hashes, are all
    # CRC-valid and exist on every replica whose log spans them cannot hold a divergent offset
    # (short of a 2^-64 hash coincidence); anything else goes to pass 2, record by record.
    h = F.xxhash64("digest_hi", "digest_lo")  # a null digest hashes to the seed
    per_copy = below.groupBy("broker", *TP, "batch_base_offset").agg(
        # The 64-bit hash summed as two 32-bit halves: no overflow (ANSI mode would raise).
        F.sum(F.shiftrightunsigned(h, 32)).alias("digests_hi"),
        F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF))).alias("digests"),
        F.count(F.lit(1)).alias("n"),
        F.max("batch_last_offset").alias("last"),
        F.max("batch_crc").alias("crc"),
        F.max("leader_epoch").alias("epoch"),
        F.min(F.col("crc_valid").cast("int")).alias("valid"),
    )
    fields = ["digests", "digests_hi", "n", "last", "crc", "epoch"]
    stats = per_copy.groupBy(*TP, "batch_base_offset").agg(
        F.count(F.lit(1)).alias("copies_n"),
        F.min("valid").alias("all_valid"),
        *[F.min(f).alias(f"min_{f}") for f in fields],
        *[F.max(f).alias(f"max_{f}") for f in fields],
    )
    differs = F.lit(False)
    for f in fields:
        differs = differs | (F.col(f"min_{f}") != F.col(f"max_{f}"))
    suspect = (
        stats.join(F.broadcast(spans), TP)
        .where(
            differs | (F.col("all_valid") == 0) | (F.col("copies_n") < F.size(spanning("batch_base_offset")))
        )
        .select(*TP, "batch_base_offset")
    )
    # Pass 2, only the records of those batches: every copy of each offset, who lacks one, and why.
    variant = F.struct(*DIGEST, "batch_crc", "leader_epoch", "batch_base_offset")
    per_offset = (
        below.join(F.broadcast(suspect), [*TP, "batch_base_offset"], "left_semi")
        .groupBy(*TP, "offset")
        .agg(
            F.sort_array(
                F.collect_list(
                    F.struct(
                        "broker",
                        digest_hex().alias("value_digest"),
                        "batch_crc",
                        "crc_valid",
                        "leader_epoch",
                        "batch_base_offset",
                    )
                )
            ).alias("copies"),
            F.size(F.collect_set(variant)).alias("variants"),
            F.min(F.col("crc_valid").cast("int")).alias("all_valid"),
            F.collect_set("broker").alias("present_on"),
            F.first("high_watermark").alias("high_watermark"),
        )
    )
    joined = per_offset.join(F.broadcast(spans), TP).withColumn(
        "missing_on",
        F.array_sort(
            F.array_except(F.transform(spanning("offset"), lambda s: s["broker"]), F.col("present_on"))
        ),
    )
    reason = F.concat_ws(
        "; ",
        F.when(F.col("variants") > 1, F.lit("replicas hold different records")),
        F.when(F.col("all_valid") == 0, F.lit("a copy fails its batch CRC")),
        F.when(F.size("missing_on") > 0, F.lit("missing on a replica whose log spans it")),
    )
    return joined.where(
        (F.col("variants") > 1) | (F.col("all_valid") == 0) | (F.size("missing_on") > 0)
    ).select(*TP, "offset", "high_watermark", "copies", "missing_on", reason.alias("reason"))


def epoch_checkpoints(spark: Any, replicas: Any) -> DataFrame:
    """The ``epoch_checkpoints`` input from the :class:`verify.replicas.Replica` list the driver read."""
    rows = [
        (
            r.broker,
            r.topic,
            r.partition,
            None if r.epoch_entries is None else [list(e) for e in r.epoch_entries],
            r.epoch_error,
        )
        for r in replicas
    ]
    return spark.createDataFrame(
        rows, f"broker int, topic string, partition int, checkpoint {_ENTRIES}, checkpoint_error string"
    )


def hw_above_leo(extents: DataFrame) -> DataFrame:
    return extents.where(F.col("checkpointed_hw") > F.col("leo")).select(
        *REPLICA, "checkpointed_hw", F.col("leo").alias("log_end_offset")
    )


def epoch_cache_inconsistent(
    replica_rows: DataFrame, extents: DataFrame, epoch_checkpoints: DataFrame
) -> DataFrame:
    """Every checkpoint entry (epoch, start) must be where a run of batches stamped with that
    epoch begins (a run that began before the log start offset counts as beginning there), and
    every such run must have its entry; batch epochs must not decrease with offset; entries must
    increase. One exception, as in Kafka: the last entry may start at the log end offset with an
    epoch above every batch's (a leader that has not written in its epoch yet).

    ``epoch_checkpoints``: per replica ``checkpoint`` (array of struct(epoch int, start_offset
    bigint) in file order; null when the file is absent) and ``checkpoint_error`` (why the file
    could not be read, else null). Works per replica on sorted arrays: one shuffle in all."""
    bounds = extents.select(*REPLICA, "log_start", "leo")
    # The batches from the log start on, one sorted array per replica. Building the array in the
    # aggregation makes it an attribute: every expression below reads it, none recomputes it.
    batches = (
        replica_rows.where((F.col("offset") == F.col("batch_base_offset")) & (F.col("leader_epoch") >= 0))
        .join(F.broadcast(bounds), REPLICA)
        .where(F.col("batch_last_offset") >= F.col("log_start"))
        .groupBy(*REPLICA)
        .agg(
            F.array_sort(
                F.collect_list(
                    F.struct(F.col("batch_base_offset").alias("base"), F.col("leader_epoch").alias("epoch"))
                )
            ).alias("b")
        )
    )
    steps = (
        bounds.join(batches, REPLICA, "left")
        .join(F.broadcast(epoch_checkpoints), REPLICA, "left")
        .withColumn("b", F.coalesce("b", F.expr("array()").cast("array<struct<base:bigint,epoch:int>>")))
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
