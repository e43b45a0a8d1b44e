"""The idempotent producer's checks (KIP-98, KIP-360) on the committed log (docs/design.md
"Verification job"): what Kafka's ``ProducerStateManager`` enforces on append, checked after the
fact, per partition and producer id, batch by batch in offset order.

Within a batch the sequences are consecutive by construction (a record's sequence is the base
sequence plus its index: :mod:`verify.arrow_rows`), so only batch boundaries can break the
rules, and one row per batch is compared with the batch before it (a window over the first
record of every batch, not every record). A batch:

* of an older producer epoch than the batch before it, or of the same epoch whose first sequence
  is not above the previous batch's last, is **out of order** (a batch the producer gave up on,
  written after what it sent next; a retry written twice);
* of the same epoch whose first sequence skips past the previous last + 1, or the first batch
  of a newer epoch that does not start at sequence 0, leaves a **sequence gap**: the broker
  accepted what it must refuse with OUT_OF_ORDER_SEQUENCE_NUMBER, so a batch in between was
  never written (acknowledged or not).

The first batch of a producer id in the log has nothing to follow (Kafka accepts any sequence
from a producer it has no state for, e.g. after retention removed its earlier batches). Sequence
wrap-around at 2^31 is not modelled, nor order across two producer ids of one process.
:func:`producer_anomalies` finds both kinds in one pass; the job persists it and
:func:`out_of_order` and :func:`sequence_gap` read their rows from it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from verify.checks import DIGEST, TP, digest_hex

SEQUENCE_MODULUS = 2**31
COLUMNS = [
    *TP,
    "offset",
    "producer_id",
    "producer_epoch",
    "sequence",
    "previous_offset",
    "previous_epoch",
    "previous_sequence",
    "value_digest",
]


def producer_anomalies(committed: DataFrame) -> DataFrame:
    """Per offending batch: its first record's facts, the previous batch's last, and ``kind``
    (``out_of_order`` or ``sequence_gap``)."""
    first = committed.where(
        (F.col("offset") == F.col("batch_base_offset"))
        & (F.col("producer_id") >= 0)
        & (F.col("sequence") >= 0)
        & F.col("crc_valid")
    ).select(
        *TP,
        "offset",
        "batch_last_offset",
        "producer_id",
        "producer_epoch",
        "sequence",
        ((F.col("sequence") + F.col("batch_last_offset") - F.col("offset")) % SEQUENCE_MODULUS).alias(
            "last_seq"
        ),
        *DIGEST,
    )
    w = Window.partitionBy(*TP, "producer_id").orderBy("offset")
    epoch, previous_epoch = F.col("producer_epoch"), F.col("previous_epoch")
    sequence, previous_sequence = F.col("sequence"), F.col("previous_sequence")
    backwards = (epoch < previous_epoch) | ((epoch == previous_epoch) & (sequence <= previous_sequence))
    gap = ((epoch == previous_epoch) & (sequence != (previous_sequence + 1) % SEQUENCE_MODULUS)) | (
        (epoch > previous_epoch) & (sequence != 0)
    )
    kind = F.when(backwards, F.lit("out_of_order")).when(gap, F.lit("sequence_gap"))
    return (
        first.withColumn("previous_offset", F.lag("batch_last_offset").over(w))
        .withColumn("previous_epoch", F.lag("producer_epoch").over(w))
        .withColumn("previous_sequence", F.lag("last_seq").over(w))
        .withColumn("kind", kind)
        .where(F.col("kind").isNotNull())
        .select(*COLUMNS[:-1], digest_hex().alias("value_digest"), "kind")
    )


def out_of_order(anomalies: DataFrame) -> DataFrame:
    return anomalies.where(F.col("kind") == "out_of_order").select(*COLUMNS)


def sequence_gap(anomalies: DataFrame) -> DataFrame:
    expected = F.when(F.col("producer_epoch") > F.col("previous_epoch"), F.lit(0)).otherwise(
        (F.col("previous_sequence") + 1) % SEQUENCE_MODULUS
    )
    return anomalies.where(F.col("kind") == "sequence_gap").select(
        *COLUMNS, expected.cast("int").alias("expected_sequence")
    )
