"""The verification job (docs/design.md "Verification job"): ledger + committed log + replicas'
segment files -> report.

``run_verification(R, bootstrap, log_dirs)`` reads the ledger, in either form (``R/ledger/``:
Parquet chunks with the digests as two long columns, read with Spark's Parquet reader; or
``R/ledger.jsonl``: JSON lines, parsed with Spark's JSON reader and the hex digests split into
halves), and ``R/events.jsonl`` (:mod:`ledger.format`), and

* with ``bootstrap``: reads the committed log of the live cluster through ``floodmark_committed``
  below high watermarks fixed once at the start with ListOffsets (the same cut for every check);
* with ``log_dirs``: reads every replica's segments through ``floodmark_segments`` and the
  checkpoint files in the driver (:mod:`verify.replicas`). Without ``bootstrap`` the job runs
  offline: the committed log is what the most complete replica of each partition holds below
  the highest HW any replica checkpointed (:func:`verify.checks.committed_from_replicas`): what a
  consumer would read if that replica led. A checkpointed HW can lag the HW the cluster had (it
  is written periodically), so offline, acknowledged writes between the two count as lost with
  the reason "offset at or above the high watermark": verify a live, healed cluster, or one
  stopped cleanly, for an exact answer.

Then it runs the checks of :mod:`verify.checks`, writes ``R/verification.json``,
``R/summary.md`` and ``R/timeline.png`` and returns a :class:`verify.report.Result`, ``ok``
only when every check ran and found nothing. The replica checks (divergent, hw_above_leo,
epoch_cache_inconsistent) need ``log_dirs``: without them they are skipped and the verdict is
INCOMPLETE (not ok), since a check that did not run proves nothing.

The session: the caller's active one if there is one (used as is, left running, its cache
cleared at the end), else one built here and stopped at the end: the fast-start JVM with the
small-input Spark settings below 32 MiB of input (ledger + segments, about 100,000 records),
the throughput JVM with Spark's defaults above. Around that size the two took about as long
here; far below it fast-start wins, far above throughput does (docs/benchmarks.md,
"Verification cost").

Topics checked: ``topics`` if given, else those in the ledger, else every topic in the log dirs
whose name does not start with ``__`` (internal topics such as ``__consumer_offsets`` rewrite
values by design, so the duplicate check means nothing there).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ledger.columnar import inspect as inspect_chunks
from ledger.format import EVENTS_FILE, LEDGER_DIR, LEDGER_FILE, ledger_form, read_events
from verify import checks, staging
from verify.ledger_frame import ledger_entries
from verify.plot import Bucket, ErrorBucket, plot_timeline
from verify.progress import Timings
from verify.replicas import Inventory, list_replicas, split_log_dirs
from verify.report import CHECKS, TIMELINE_FILE, Result, verdict_line, write_report, write_summary
from verify.session import DEFAULT_MASTER, SMALL_INPUT_CONF, SMALL_INPUT_SHUFFLE_PARTITIONS, build_session
from verify.sources import (
    NARROW_COMMITTED_DDL,
    NARROW_SEGMENTS_DDL,
    CommittedReader,
    SegmentsReader,
    offsets_key,
)

DEFAULT_ROW_CAP = 100
#: Input size (ledger + segments) up to which the fast-start JVM is the faster choice.
FAST_START_MAX_INPUT_BYTES = 32 * 1024 * 1024
#: Checks run at once on a small input (one at a time on a big one).
CONCURRENT_CHECKS = 3
MAX_TIMELINE_POINTS = 600
#: Under the report dir: the inputs staged as Parquet while the job runs (verify/staging.py).
STAGE_DIR = ".verify-staging"
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def run_verification(
    report_dir: Path | str,
    bootstrap: str | None = None,
    log_dirs: str | Sequence[str] | None = None,
    master: str = DEFAULT_MASTER,
    *,
    topics: Sequence[str] | None = None,
    spark: Any = None,
    progress: Progress | None = None,
    row_cap: int = DEFAULT_ROW_CAP,
    plot: bool = True,
    timeout_s: float = 60.0,
    fast_start: bool | None = None,
) -> Result:
    """Run every check and write the report into ``report_dir`` (see the module docstring).

    ``fast_start`` picks the settings of a session the job builds itself
    (:func:`verify.session.build_session`): True is the fast-start JVM with the small-input
    Spark settings, False the throughput JVM with Spark's defaults, None chooses by the size of
    the input (below :data:`FAST_START_MAX_INPUT_BYTES` of ledger and segments: fast-start)."""
    report_dir = Path(report_dir)
    dirs = split_log_dirs(log_dirs)
    if not bootstrap and not dirs:
        raise ValueError("nothing to verify against: give the bootstrap servers, the log dirs, or both")
    ledger_form(report_dir)  # a report dir with both forms of the ledger fails here, before Spark starts
    say = progress or _quiet
    # Readers count their rows in files here; a thread prints them while a phase runs.
    progress_dir = tempfile.mkdtemp(prefix="floodmark-verify-progress-")
    timings = Timings(say if progress else None, progress_dir)
    small_input = input_bytes(report_dir, dirs) < FAST_START_MAX_INPUT_BYTES
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # inside a test or a notebook: use theirs, leave it running
    owned = spark is None
    jvm = "the caller's session"
    if owned:
        say(f"starting Spark ({master})")
        with timings.measure("spark_start"):
            if fast_start is None:
                # the fast-start JVM wins below the line, the throughput JVM above it
                # (docs/benchmarks.md "Verification cost")
                fast_start = small_input
            jvm = "fast-start" if fast_start else "throughput"
            say(f"session settings: {'small input, fast-start JVM' if fast_start else 'throughput JVM'}")
            if fast_start:
                spark = build_session(
                    master,
                    fast_start=True,
                    shuffle_partitions=SMALL_INPUT_SHUFFLE_PARTITIONS,
                    extra_conf=SMALL_INPUT_CONF,
                )
            else:
                spark = build_session(master)
    else:
        from verify.sources import register

        register(spark)
    timings.spark = spark
    try:
        return _run(
            spark,
            report_dir,
            bootstrap,
            dirs,
            topics,
            say,
            row_cap,
            plot,
            timeout_s,
            timings,
            jvm,
            small_input,
        )
    finally:
        shutil.rmtree(progress_dir, ignore_errors=True)
        staging.remove(report_dir / STAGE_DIR)
        if owned:
            spark.stop()
        else:
            spark.catalog.clearCache()  # leave a borrowed session as we found it


def input_bytes(report_dir: Path, log_dirs: Sequence[str]) -> int:
    """The ledger's size (either form) plus every segment file's in the log dirs (a stat each,
    nothing read)."""
    total = 0
    for path in [
        report_dir / LEDGER_FILE,
        *inspect_chunks(report_dir / LEDGER_DIR).chunks,
        *(p for d in log_dirs for p in Path(d).glob("*-*/*.log")),
    ]:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total


def _run(
    spark: Any,
    report_dir: Path,
    bootstrap: str | None,
    log_dirs: list[str],
    topics_arg: Sequence[str] | None,
    say: Progress,
    row_cap: int,
    plot: bool,
    timeout_s: float,
    timings: Timings,
    jvm: str,
    small_input: bool,
) -> Result:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.perf_counter()
    notes: list[str] = []
    skipped: dict[str, str] = {}
    stage_dir = report_dir / STAGE_DIR  # the staged replicas and committed log (run_verification removes it)

    def keep(df: Any) -> Any:  # inputs read more than once; run_verification drops them at the end
        return df.persist(StorageLevel.MEMORY_AND_DISK)

    # -- the ledger ---------------------------------------------------------------------------
    say(f"reading the ledger in {report_dir}")
    entries = ledger_entries(spark, report_dir, notes, keep)
    with timings.measure("ledger"):
        stats = entries.groupBy("kind", "topic").count().collect()
    malformed = sum(row["count"] for row in stats if row["kind"] == "malformed")
    if malformed:
        notes.append(
            f"{malformed} malformed ledger line(s) ignored (a torn last line is expected after a crash)"
        )
    ledger_topics = sorted(
        {row["topic"] for row in stats if row["topic"] and row["kind"] in ("ack", "error")}
    )

    # -- which topics, which replicas ------------------------------------------------------------
    inventory = Inventory()
    if topics_arg:
        topics = sorted(set(topics_arg))
    elif ledger_topics:
        topics = ledger_topics
    elif log_dirs:
        topics = sorted(t for t in list_replicas(log_dirs).topics() if not t.startswith("__"))
    else:
        raise ValueError("no topics to verify: the ledger names none; pass --topic")
    if log_dirs:
        inventory = list_replicas(log_dirs, set(topics))
        notes.extend(inventory.notes)
        say(
            f"found {len(inventory.replicas)} replica(s) of {len(topics)} topic(s) in {len(log_dirs)} log dir(s)"
        )
    topic_list = ",".join(topics)
    verified = F.col("topic").isin(topics)
    acks = entries.where((F.col("kind") == "ack") & verified & F.col("offset").isNotNull()).select(
        "topic",
        "partition",
        "offset",
        "key",
        "value_digest",
        "digest_hi",
        "digest_lo",
        "producer_id",
        "sequence",
        "time_ms",
        "latency_ms",
    )
    errors = entries.where((F.col("kind") == "error") & verified).select(
        "topic", "partition", "error", "time_ms"
    )

    # -- high watermarks --------------------------------------------------------------------------
    if bootstrap:
        from verify.fetch import partition_offsets, run_sync

        say(f"reading the high watermarks of {topic_list} from {bootstrap}")
        with timings.measure("high_watermarks"):
            offsets = run_sync(partition_offsets(bootstrap, topics, int(timeout_s * 1000)))
        hw_map = {key: hw for key, (_, hw) in offsets.items()}
        mode = "cluster"
    else:
        offsets = {}
        hw_map = inventory.max_checkpointed_hw()
        for r in inventory.replicas:
            if (r.topic, r.partition) not in hw_map:
                notes.append(f"no replica of {r.topic}-{r.partition} checkpointed an HW: treated as 0")
                hw_map[(r.topic, r.partition)] = 0
        mode = "log-dirs"
    hws = spark.createDataFrame(
        [(t, p, hw) for (t, p), hw in sorted(hw_map.items())],
        "topic string, partition int, high_watermark bigint",
    )

    # -- replicas and the committed log ----------------------------------------------------------
    replica_rows = None
    extents = None
    if log_dirs:
        replicas_df = spark.createDataFrame(
            [
                (
                    r.broker,
                    r.topic,
                    r.partition,
                    r.first_segment_base,
                    r.last_segment_base,
                    r.checkpointed_hw,
                    r.checkpointed_log_start,
                )
                for r in inventory.replicas
            ],
            "broker int, topic string, partition int, first_segment_base bigint, last_segment_base bigint, "
            "checkpointed_hw bigint, checkpointed_log_start bigint",
        )
        say("reading every replica's segment files")
        with timings.measure("read_segments"):
            # The narrow rows (digests as two longs, no keys or timestamps: no check reads them),
            # decoded once into Parquet that every check then scans (verify/staging.py).
            replica_rows = staging.stage(
                spark,
                SegmentsReader(list(log_dirs), topics, NARROW_SEGMENTS_DDL, str(timings.progress_dir)),
                NARROW_SEGMENTS_DDL,
                stage_dir / "replicas",
            )
            extents = keep(checks.replica_extents(replica_rows, replicas_df))
            extent_rows = [row.asDict() for row in extents.orderBy("topic", "partition", "broker").collect()]
    else:
        extent_rows = []
    if bootstrap:
        say(f"reading the committed log of {topic_list} from the cluster")
        with timings.measure("read_committed"):
            committed = staging.stage(
                spark,
                CommittedReader(
                    bootstrap,
                    topics,
                    {offsets_key(t, p): list(v) for (t, p), v in offsets.items()},
                    timeout_s,
                    NARROW_COMMITTED_DDL,
                    str(timings.progress_dir),
                ),
                NARROW_COMMITTED_DDL,
                stage_dir / "committed",
            )
    else:
        committed = checks.committed_from_replicas(replica_rows, extents, hws)  # cheap from the staged rows
        say(
            "taking the committed log from the most complete replica of each partition, below the checkpointed HW"
        )

    counts: dict[str, int] = {}
    with timings.measure("committed"):
        counts["committed"] = committed.count()
    with timings.measure("acknowledged"):
        counts["acknowledged"] = acks.count()
    errors_by_name = {row["error"]: int(row["count"]) for row in errors.groupBy("error").count().collect()}
    counts["errors"] = sum(errors_by_name.values())
    counts["malformed_ledger_lines"] = malformed

    # -- the checks ---------------------------------------------------------------------------------
    violations: dict[str, list[dict[str, Any]]] = {}
    truncated: dict[str, bool] = {}
    offending: dict[str, Any] = {
        "lost": lambda: checks.lost(acks, committed, hws),
        "duplicate": lambda: checks.duplicate(committed),
        "out_of_order": lambda: checks.out_of_order(committed),
    }
    order: dict[str, list[str]] = {
        "lost": ["topic", "partition", "offset"],
        "duplicate": ["value_digest"],
        "out_of_order": ["topic", "partition", "offset"],
        "divergent": ["topic", "partition", "offset"],
        "hw_above_leo": ["topic", "partition", "broker"],
        "epoch_cache_inconsistent": ["topic", "partition", "broker"],
    }
    if log_dirs:
        epoch_checkpoints = checks.epoch_checkpoints(spark, inventory.replicas)
        offending["divergent"] = lambda: checks.divergent(replica_rows, extents, hws)
        offending["hw_above_leo"] = lambda: checks.hw_above_leo(extents)
        offending["epoch_cache_inconsistent"] = lambda: checks.epoch_cache_inconsistent(
            replica_rows, extents, epoch_checkpoints
        )
    else:
        for name in ("divergent", "hw_above_leo", "epoch_cache_inconsistent"):
            skipped[name] = "no log dirs given (--log-dirs)"

    def run_check(name: str) -> tuple[str, int, list[Any], float]:
        begun = time.perf_counter()
        df = offending[name]()
        # Count first: a clean run (the usual case) then never plans the report's rows, whose
        # sorted projection cost the lost check almost three times its count at 10 million
        # records (docs/benchmarks.md "Verification cost").
        count = df.count()
        rows = df.orderBy(*order[name]).limit(row_cap).collect() if count else []
        return name, count, rows, time.perf_counter() - begun

    for name in CHECKS:
        if name not in offending:
            counts[name] = 0
    # On a small input most of a check's time is Spark scheduling its tiny jobs, which overlaps
    # well; on a big one the checks would only compete for the cores and the memory.
    parallel = CONCURRENT_CHECKS if small_input else 1
    say(f"checking {', '.join(n for n in CHECKS if n in offending)}")
    with (
        timings.measure("checks", record=False),  # each check records its own time
        ThreadPoolExecutor(parallel, thread_name_prefix="floodmark-check") as pool,
    ):
        for name, count, rows, seconds in pool.map(run_check, [n for n in CHECKS if n in offending]):
            timings[name] = round(seconds, 3)
            counts[name] = count
            violations[name] = [row.asDict(recursive=True) for row in rows]
            truncated[name] = count > len(rows)
            say(f"  {name}: {count}")

    # -- timeline -------------------------------------------------------------------------------------
    events = read_events(report_dir)
    if plot:
        say("plotting the timeline")
        with timings.measure("timeline"):
            _timeline(acks, errors, events, report_dir / TIMELINE_FILE)
    if not (report_dir / EVENTS_FILE).exists():
        notes.append(f"no {EVENTS_FILE}: no faults or leader changes on the timeline")

    timings["total"] = round(time.perf_counter() - started + timings.get("spark_start", 0.0), 3)
    if slowest := timings.slowest():
        say(f"slowest phase: {slowest[0]} ({slowest[1]:.1f} s of {timings['total']:.1f} s)")
    result = Result(  # ok only when every check ran and found nothing (verify.report.verdict_of)
        mode=mode,
        report_dir=report_dir,
        counts=counts,
        violations=violations,
        truncated=truncated,
        skipped=skipped,
        notes=notes,
        timings_s=dict(timings),
        high_watermarks={offsets_key(t, p): hw for (t, p), hw in sorted(hw_map.items())},
        replicas=extent_rows,
        errors_by_name=errors_by_name,
        inputs={
            "bootstrap": bootstrap,
            "log_dirs": log_dirs,
            "topics": topics,
            "events": len(events),
            "jvm": jvm,
        },
    )
    write_report(result)
    write_summary(result)
    say(f"verification {verdict_line(result)}; report in {result.report_path}")
    return result


def _timeline(acks: Any, errors: Any, events: list[Any], path: Path) -> None:
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
