"""The run's timeline (docs/operations.md "Chaos runs and verification"): acknowledged writes and
their latency, failed writes by error, faults and leader changes, bucketed with Spark and drawn
by :func:`verify.plot.plot_timeline`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from verify.plot import Bucket, ErrorBucket, plot_timeline

MAX_TIMELINE_POINTS = 600


def plot_run(acks: Any, errors: Any, events: list[Any], path: Path) -> None:
    """Plot acks per bucket (with latency percentiles), errors per bucket and the events."""
    from pyspark.sql import functions as F

    span = acks.agg(F.min("time_ms").alias("lo"), F.max("time_ms").alias("hi")).first()
    err_span = errors.agg(F.min("time_ms").alias("lo"), F.max("time_ms").alias("hi")).first()
    lows = [v for v in (span["lo"], err_span["lo"], *(e.time_ms for e in events)) if v is not None]
    highs = [v for v in (span["hi"], err_span["hi"], *(e.time_ms for e in events)) if v is not None]
    origin = min(lows) if lows else 0
    width = (max(highs) - origin) if highs else 0
    bucket_ms = max(1000, math.ceil(width / MAX_TIMELINE_POINTS / 1000) * 1000)
    bucket = (F.floor((F.col("time_ms") - F.lit(origin)) / bucket_ms) * bucket_ms + F.lit(origin)).cast(
        "long"
    )
    rows = (
        acks.groupBy(bucket.alias("start_ms"))
        .agg(
            F.count(F.lit(1)).alias("acks"),
            F.percentile_approx("latency_ms", [0.5, 0.99], 1000).alias("pct"),
            F.max("latency_ms").alias("max_ms"),
        )
        .orderBy("start_ms")
        .collect()
    )
    buckets = [
        Bucket(
            r["start_ms"],
            r["acks"],
            r["pct"][0] if r["pct"] else None,
            r["pct"][1] if r["pct"] else None,
            r["max_ms"],
        )
        for r in rows
    ]
    err_rows = (
        errors.where(F.col("time_ms").isNotNull())
        .groupBy(bucket.alias("start_ms"), "error")
        .count()
        .collect()
    )
    error_buckets = [ErrorBucket(r["start_ms"], r["error"] or "?", r["count"]) for r in err_rows]
    plot_timeline(path, buckets, error_buckets, events, bucket_ms)
