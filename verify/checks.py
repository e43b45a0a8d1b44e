"""The verification checks (docs/design.md "Verification job") as Spark DataFrame operations; each
returns offending rows.

Inputs (column names as the data sources and :mod:`verify.job` build them):

* ``acks`` - the ledger's acknowledged writes (:data:`ledger.format.LEDGER_DDL` rows of type ack)
  with the digest's halves (:func:`digest_halves`);
* ``committed`` - the committed log (:data:`verify.sources.NARROW_COMMITTED_DDL`), one row per offset: from
  the live cluster's leaders, or, offline, :func:`committed_from_replicas`;
* ``replica_rows`` - every replica's records from its segment files
  (:data:`verify.sources.NARROW_SEGMENTS_DDL`);
* ``hws`` - ``(topic, partition, log_start, high_watermark)``: where the committed log begins
  and ends: the leader's log start offset (ListOffsets earliest) and the cluster's high
  watermark, or offline the most complete replica's log start and the offline HW
  (:mod:`verify.offline_hw`);
* ``extents`` - per replica ``(broker, topic, partition, first_offset, log_start, leo,
  checkpointed_hw, records, corrupt_records)`` from :func:`replica_extents`;

Expensive comparisons run in two passes where that saves a shuffle of wide rows: cheap
aggregates (counts, min/max) find the offending keys, and only their rows are gathered in full.

The checks, one row per offence, by mechanism: the ledger against the committed log
(:mod:`verify.ledger_checks`: lost, ack_mismatch, and the unacknowledged count), the idempotent
producer's rules (:mod:`verify.producer_checks`: out_of_order, sequence_gap), the replicas'
own files (:mod:`verify.replica_checks`: replica_incomplete, offset_order, hw_above_leo,
epoch_cache_inconsistent), and here:

* :func:`duplicate` - a value digest at more than one committed offset (per value);
* :func:`divergent` - one offset below the HW held differently by the replicas: more than one
  (value digest, batch CRC, batch leader epoch, batch base offset), a copy that fails its CRC, or
  missing on a replica whose log spans that offset (per offset). A replica whose log ends below
  the HW, or starts above the committed log's log start offset, does not span the committed
  records it lacks: :func:`verify.replica_checks.replica_incomplete` reports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

TP = ["topic", "partition"]
DIGEST = ["digest_hi", "digest_lo"]
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


def most_complete_replicas(
    extent_rows: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, int], Mapping[str, Any]]:
    """Offline, per partition, the replica whose log a consumer would read if it led (its extent
    row): the one without holes (records = LEO - first offset), then with the fewest records in
    corrupt batches, then with the lowest log start offset (it spans the most committed records),
    then the highest LEO, then the lowest broker id. Pure Python over the driver's extents."""

    def rank(r: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
        holes = r["records"] != r["leo"] - r["first_offset"]
        return (int(holes), r["corrupt_records"], r["log_start"], -r["leo"], r["broker"])

    chosen: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in extent_rows:
        tp = (r["topic"], r["partition"])
        if tp not in chosen or rank(r) < rank(chosen[tp]):
            chosen[tp] = r
    return chosen


def committed_from_replicas(replica_rows: DataFrame, chosen: DataFrame, hws: DataFrame) -> DataFrame:
    """Offline stand-in for the cluster's committed log: what a consumer would read from the
    ``chosen`` replica of each partition (``broker, topic, partition``: :func:`most_complete_replicas`)
    as if it led, from its log start offset to the HW (``hws``: ``topic, partition, log_start,
    high_watermark``); below the log start a fetch is OFFSET_OUT_OF_RANGE, whatever the segment
    files still hold. Where replicas disagree, :func:`divergent` says so."""
    return (
        replica_rows.join(F.broadcast(chosen), REPLICA)
        .join(F.broadcast(hws), TP)
        .where((F.col("offset") >= F.col("log_start")) & (F.col("offset") < F.col("high_watermark")))
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
            "batch_last_offset",
            "crc_valid",
            "key",
            "timestamp",
        )
    )


# -- the checks -----------------------------------------------------------------------------------


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
