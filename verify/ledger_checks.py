"""The checks that hold the ledger against the committed log (docs/design.md "Verification job"):
what the producers were told (Kafka's ``RecordMetadata``: offset, and with KIP-98 idempotence the
producer id and sequence) against what a consumer reads.

One full outer join, :func:`ledger_match`, pairs every acknowledged write with the committed
record at its (topic, partition, offset, value digest) whose other facts agree: the producer id
and sequence (when the ledger has them), the key (the broker must not re-encode a record), and
the record's timestamp, which must lie between the send (``time_ms - latency_ms``) and the
acknowledgement (``time_ms``), give or take :data:`TIMESTAMP_SLACK_MS`. Its result holds only
the unpaired rows of both sides, which is nothing on a clean run; the job persists it and the
three checks below read it:

* :func:`lost` - an acknowledged write with no committed record of its value at its offset
  (per ack; ``reason`` says what is there instead, or that the offset lies below the partition's
  log start offset: a fetch there is OFFSET_OUT_OF_RANGE, whatever the segment files hold);
* :func:`ack_mismatch` - an acknowledged write whose value is at its offset but whose producer id,
  sequence, key or timestamp differ from the ledger's (per ack; ``differs`` names them);
* :func:`unacknowledged` - not a violation: committed records no ack accounts for, per
  (partition, producer id, what the ledger says): writes the client saw fail but that landed
  (the ledger's error rows carry the failed value's digest), and records with no ledger entry at
  all (writes still in flight when the workload stopped, or not the workload's).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from verify.checks import TP, digest_hex, digest_keys

#: How far a record's timestamp may lie outside [send, acknowledgement] (clock steps, rounding).
TIMESTAMP_SLACK_MS = 1000
KEYS = [*TP, "offset", "dh", "dl"]


def ledger_match(acks: DataFrame, committed: DataFrame) -> DataFrame:
    """The unpaired rows of both sides: ``(topic, partition, offset, dh, dl, side)`` with ``side``
    ``ack`` (an ack with no agreeing committed record) or ``log`` (a committed record with no
    agreeing ack)."""
    a = acks.select(
        *TP,
        "offset",
        *digest_keys(),
        F.col("key").alias("a_key"),
        F.col("producer_id").alias("a_pid"),
        F.col("sequence").alias("a_seq"),
        (F.col("time_ms") - F.coalesce(F.col("latency_ms"), F.lit(0.0)) - TIMESTAMP_SLACK_MS).alias("a_from"),
        (F.col("time_ms") + TIMESTAMP_SLACK_MS).alias("a_to"),
    ).alias("a")
    c = (
        committed.where(F.col("crc_valid"))
        .select(
            *TP,
            "offset",
            *digest_keys(),
            F.col("key").alias("c_key"),
            F.col("producer_id").alias("c_pid"),
            F.col("sequence").alias("c_seq"),
            F.col("timestamp").alias("c_ts"),
        )
        .alias("c")
    )
    same = [F.col(f"a.{k}") == F.col(f"c.{k}") for k in KEYS]
    agree = (
        ((F.col("a_pid") < 0) | (F.col("a_pid") == F.col("c_pid")))
        & ((F.col("a_seq") < 0) | (F.col("a_seq") == F.col("c_seq")))
        & F.col("a_key").eqNullSafe(F.col("c_key"))
        & F.col("c_ts").between(F.col("a_from"), F.col("a_to"))
    )
    condition = same[0]
    for term in [*same[1:], agree]:
        condition = condition & term
    joined = a.join(c, condition, "full_outer")
    side = F.when(F.col("c.offset").isNull(), F.lit("ack")).otherwise(F.lit("log"))
    return joined.where(F.col("a.offset").isNull() | F.col("c.offset").isNull()).select(
        *[F.coalesce(F.col(f"a.{k}"), F.col(f"c.{k}")).alias(k) for k in KEYS], side.alias("side")
    )


def _unpaired_acks(acks: DataFrame, committed: DataFrame, unpaired: DataFrame) -> DataFrame:
    """The full ledger rows of the unpaired acks, with what the log holds at their offsets."""
    ack_keys = unpaired.where(F.col("side") == "ack").drop("side")
    missing = acks.select("*", *digest_keys()).join(ack_keys, KEYS, "left_semi")
    at = committed.join(missing.select(*TP, "offset").distinct(), [*TP, "offset"], "left_semi")
    found = at.groupBy(*TP, "offset").agg(
        F.sort_array(F.collect_set(digest_hex())).alias("found_digests"),
        F.min(F.col("crc_valid").cast("int")).alias("found_valid"),
        F.collect_list(
            F.struct(
                *digest_keys(),
                F.col("crc_valid").alias("f_valid"),
                F.col("key").alias("f_key"),
                F.col("producer_id").alias("f_pid"),
                F.col("sequence").alias("f_seq"),
                F.col("timestamp").alias("f_ts"),
            )
        ).alias("held"),
    )
    return missing.join(found, [*TP, "offset"], "left")


def _same_value() -> Column:
    """The record of the ack's value among those held at its offset (CRC-valid), or null."""
    return F.get(
        F.filter("held", lambda h: (h["dh"] == F.col("dh")) & (h["dl"] == F.col("dl")) & h["f_valid"]), 0
    )


def lost(acks: DataFrame, committed: DataFrame, hws: DataFrame, unpaired: DataFrame) -> DataFrame:
    """``acks`` carry the ledger's ``value_digest`` text and its halves."""
    rows = _unpaired_acks(acks, committed, unpaired).where(_same_value().isNull())
    reason = (
        F.when(F.col("high_watermark").isNull(), "partition absent from the committed log")
        .when(
            F.col("offset") < F.col("log_start"),
            F.format_string("offset below the log start offset %d", "log_start"),
        )
        .when(F.col("offset") >= F.col("high_watermark"), "offset at or above the high watermark")
        .when(F.col("found_valid") == 0, "the batch at that offset fails its CRC")
        .when(F.col("found_digests").isNotNull(), "another value at that offset")
        .otherwise("no record at that offset")
    )
    return rows.join(F.broadcast(hws), TP, "left").select(
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


def ack_mismatch(acks: DataFrame, committed: DataFrame, unpaired: DataFrame) -> DataFrame:
    held = _same_value()
    rows = _unpaired_acks(acks, committed, unpaired).withColumn("h", held).where(F.col("h").isNotNull())
    sent = F.col("time_ms") - F.coalesce(F.col("latency_ms"), F.lit(0.0))
    differs = F.concat_ws(
        ", ",
        F.when(
            (F.col("producer_id") >= 0) & (F.col("producer_id") != F.col("h.f_pid")), F.lit("producer id")
        ),
        F.when((F.col("sequence") >= 0) & (F.col("sequence") != F.col("h.f_seq")), F.lit("sequence")),
        F.when(~F.col("key").eqNullSafe(F.col("h.f_key")), F.lit("key")),
        F.when(
            ~F.col("h.f_ts").between(sent - TIMESTAMP_SLACK_MS, F.col("time_ms") + TIMESTAMP_SLACK_MS),
            F.lit("timestamp"),
        ),
    )
    return rows.select(
        *TP,
        "offset",
        "value_digest",
        differs.alias("differs"),
        "key",
        F.col("h.f_key").alias("log_key"),
        "producer_id",
        F.col("h.f_pid").alias("log_producer_id"),
        "sequence",
        F.col("h.f_seq").alias("log_sequence"),
        "time_ms",
        F.col("h.f_ts").alias("log_timestamp"),
    )


def unacknowledged(committed: DataFrame, errors: DataFrame, unpaired: DataFrame) -> DataFrame:
    """Per (topic, partition, producer id, ledger entry): how many committed records no ack
    accounts for, and their first and last offsets. ``ledger_entry`` is the error name of a
    failed write whose value this is, else ``none``. A committed record paired with an ack
    whose other facts differ is :func:`ack_mismatch`'s, not counted here."""
    log_keys = unpaired.where(F.col("side") == "log").drop("side")
    ack_keys = unpaired.where(F.col("side") == "ack").select(*KEYS)
    only_log = log_keys.join(ack_keys, KEYS, "left_anti")
    records = committed.select("*", *digest_keys()).join(only_log, KEYS, "left_semi")
    failed = (
        errors.where(F.col("digest_hi").isNotNull())
        .select(*digest_keys(), "error")
        .groupBy("dh", "dl")
        .agg(F.min("error").alias("error"))
    )
    return (
        records.join(failed, ["dh", "dl"], "left")
        .groupBy(*TP, "producer_id", F.coalesce("error", F.lit("none")).alias("ledger_entry"))
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
        )
    )
