"""The high watermark offline (docs/design.md "Verification job"): where the committed log ends when
the job reads only the replicas' log dirs (and, :func:`offline_bounds`, where it begins: the log
start offset of the replica it is read from, :func:`verify.checks.most_complete_replicas`).

Kafka's HW reaches the broker's disk only through ``replication-offset-checkpoint``, written
every ``replica.high.watermark.checkpoint.interval.ms`` (5 s): a broker that crashed lags its
last checkpoint by up to that much, and one that halted before it ever checkpointed a partition
has none. Taking the highest checkpoint alone turned every acknowledged write above it into a
loss. The rule here, per partition:

* start at the highest HW any replica checkpointed (0 without one);
* go on, offset by offset, while every replica read whose log spans the offset holds one record
  there, the same on each (value digest, batch CRC, batch leader epoch, batch base offset) and
  CRC-valid, up to the lowest log end offset of the replicas read. Such a record survives any
  leader election among these replicas (KIP-101: a follower truncates only to what its leader
  holds, and every candidate holds it), which is what committed means; the first offset where
  one replica lacks it or holds another record ends the committed log;
* say so in a note per partition that went past its checkpoint, with how many acknowledged
  writes lie in the stretch (they are then checked like any other).

What it cannot hide: an acknowledged value that no replica holds is lost wherever its offset
lies (below the bound the committed record there is another, above it nothing is committed);
one that some replicas hold and others lack, above every checkpoint, stays lost, since offline
nothing says whether a replica that lacks it could have been elected (the ISR is in ZooKeeper).
A replica absent from the log dirs is not read: replica_incomplete and the missing-log-dirs
input say so.

The scan costs nothing on a run stopped cleanly (every checkpoint at the LEO): it reads only the
offsets between a partition's checkpoint and its replicas' lowest log end offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from verify.checks import DIGEST, TP, most_complete_replicas

Key = tuple[str, int]


@dataclass(frozen=True)
class Stretch:
    """One partition's offsets above its highest checkpointed HW that every replica may hold."""

    topic: str
    partition: int
    checkpointed: int | None  # the highest HW a replica checkpointed; None: none did
    lowest_leo: int
    replicas: int

    @property
    def start(self) -> int:
        return self.checkpointed or 0


def stretches(checkpointed: Mapping[Key, int], extent_rows: Iterable[Mapping[str, Any]]) -> list[Stretch]:
    """The partitions whose replicas all end above the highest checkpointed HW (from the
    replicas' extents: ``topic``, ``partition``, ``leo``), the only ones worth a scan."""
    leos: dict[Key, list[int]] = {}
    for row in extent_rows:
        leos.setdefault((row["topic"], row["partition"]), []).append(int(row["leo"]))
    out = []
    for (topic, partition), ends in sorted(leos.items()):
        hw = checkpointed.get((topic, partition))
        if min(ends) > (hw or 0):
            out.append(Stretch(topic, partition, hw, min(ends), len(ends)))
    return out


def first_disagreement(
    spark: Any, replica_rows: DataFrame, extents: DataFrame, todo: list[Stretch]
) -> dict[Key, int]:
    """Per partition of ``todo``, the first offset in its stretch that not every spanning
    replica holds identically and CRC-valid (absent: the whole stretch agrees)."""
    ranges = spark.createDataFrame(
        [(s.topic, s.partition, s.start, s.lowest_leo) for s in todo],
        "topic string, partition int, range_start bigint, range_end bigint",
    )
    spans = (
        extents.join(F.broadcast(ranges), TP, "left_semi")
        .groupBy(*TP)
        .agg(F.collect_list("first_offset").alias("firsts"))
    )
    variant = F.struct(*DIGEST, "batch_crc", "leader_epoch", "batch_base_offset")
    per_offset = (
        replica_rows.join(F.broadcast(ranges), TP)
        .where((F.col("offset") >= F.col("range_start")) & (F.col("offset") < F.col("range_end")))
        .groupBy(*TP, "offset")
        .agg(
            F.count(F.lit(1)).alias("copies"),
            F.size(F.collect_set("broker")).alias("holders"),
            F.size(F.collect_set(variant)).alias("variants"),
            F.min(F.col("crc_valid").cast("int")).alias("valid"),
        )
    )
    spanning = F.size(F.filter("firsts", lambda first: first <= F.col("offset")))
    disagree = (
        (F.col("holders") < spanning)
        | (F.col("copies") != F.col("holders"))
        | (F.col("variants") > 1)
        | (F.col("valid") == 0)
    )
    rows = (
        per_offset.join(F.broadcast(spans), TP)
        .where(disagree)
        .groupBy(*TP)
        .agg(F.min("offset").alias("first"))
        .collect()
    )
    return {(row["topic"], row["partition"]): int(row["first"]) for row in rows}


@dataclass(frozen=True)
class OfflineBounds:
    """Offline, per partition: where the committed log begins and ends, and whose log it is."""

    log_starts: dict[Key, int]  # the chosen replica's log start offset (below it a fetch is out of range)
    high_watermarks: dict[Key, int]  # :func:`offline_high_watermarks`
    leaders: DataFrame  # (broker, topic, partition): the replica each partition's committed log is read from


def offline_bounds(
    spark: Any,
    checkpointed: Mapping[Key, int],
    replica_rows: DataFrame,
    extents: DataFrame,
    extent_rows: list[dict[str, Any]],
    acks: DataFrame,
    notes: list[str],
) -> OfflineBounds:
    chosen = most_complete_replicas(extent_rows)
    leaders = spark.createDataFrame(
        [(r["broker"], t, p) for (t, p), r in sorted(chosen.items())],
        "broker int, topic string, partition int",
    )
    hws = offline_high_watermarks(spark, checkpointed, replica_rows, extents, extent_rows, acks, notes)
    return OfflineBounds({tp: int(r["log_start"]) for tp, r in chosen.items()}, hws, leaders)


def offline_high_watermarks(
    spark: Any,
    checkpointed: Mapping[Key, int],
    replica_rows: DataFrame,
    extents: DataFrame,
    extent_rows: list[dict[str, Any]],
    acks: DataFrame,
    notes: list[str],
) -> dict[Key, int]:
    """Per partition read, where the committed log ends offline (see the module docstring);
    a note in ``notes`` for each partition taken past its checkpoint."""
    hws = {
        (r["topic"], r["partition"]): checkpointed.get((r["topic"], r["partition"]), 0) for r in extent_rows
    }
    todo = stretches(checkpointed, extent_rows)
    first = first_disagreement(spark, replica_rows, extents, todo) if todo else {}
    extended = []
    for s in todo:
        end = first.get((s.topic, s.partition), s.lowest_leo)
        if end > s.start:
            hws[(s.topic, s.partition)] = end
            extended.append((s, end))
    for topic, partition in sorted(
        set(hws) - set(checkpointed) - {(s.topic, s.partition) for s, _ in extended}
    ):
        notes.append(
            f"offline: {topic}-{partition} no replica checkpointed an HW, and its replicas hold no "
            "record identically from offset 0: treated as 0"
        )
    counted = _acks_between(spark, acks, [(s.topic, s.partition, s.start, end) for s, end in extended])
    for s, end in extended:
        n = counted.get((s.topic, s.partition), 0)
        notes.append(
            f"offline: {s.topic}-{s.partition} "
            + (
                "no replica checkpointed an HW"
                if s.checkpointed is None
                else f"highest checkpointed HW {s.checkpointed} lags its replicas"
            )
            + f"; taken as committed to offset {end}, the records below it being held identically by "
            f"every one of its {s.replicas} replica(s) read (lowest log end offset {s.lowest_leo}): "
            f"{n} acknowledged write(s) at offsets {s.start}..{end - 1} are checked against it"
        )
    return hws


def _acks_between(spark: Any, acks: DataFrame, ranges: list[tuple[str, int, int, int]]) -> dict[Key, int]:
    """Per partition, the acks whose offset lies in [start, end)."""
    if not ranges:
        return {}
    df = spark.createDataFrame(ranges, "topic string, partition int, range_start bigint, range_end bigint")
    rows = (
        acks.join(F.broadcast(df), TP)
        .where((F.col("offset") >= F.col("range_start")) & (F.col("offset") < F.col("range_end")))
        .groupBy(*TP)
        .count()
        .collect()
    )
    return {(row["topic"], row["partition"]): int(row["count"]) for row in rows}
