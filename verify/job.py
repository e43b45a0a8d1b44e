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

Then it runs the checks (:mod:`verify.check_runner`: :mod:`verify.checks`,
:mod:`verify.ledger_checks`, :mod:`verify.producer_checks`, :mod:`verify.replica_checks`), writes
``R/verification.json``, ``R/summary.md`` and ``R/timeline.png`` and returns a
:class:`verify.report.Result`, ``ok`` only when every check ran over every input and found
nothing: an input it could not read in full (no ledger or nothing acknowledged, an unclosed or
damaged ledger, a missing HW checkpoint, an assigned broker's log dir not given) makes it
INCOMPLETE unless ``allow`` names it (:mod:`verify.inputs`). Against a cluster, the
assignment comes from the metadata; offline it is inferred from the log dirs. The replica checks (divergent, hw_above_leo,
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
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from ledger.columnar import inspect as inspect_chunks
from ledger.format import EVENTS_FILE, LEDGER_DIR, LEDGER_FILE, closed_totals, ledger_form, read_events
from verify import checks, replica_checks, staging
from verify.check_runner import Frames, coverage, run_checks
from verify.inputs import LedgerFacts, SkippedInputs, checkpoint_inputs, ledger_inputs, log_dir_inputs
from verify.ledger_frame import ledger_entries
from verify.progress import Timings
from verify.replica_checks import Assignment, inferred_assignment
from verify.replicas import Inventory, list_replicas, split_log_dirs
from verify.report import TIMELINE_FILE, Result, verdict_line, write_report, write_summary
from verify.scan_facts import read_facts
from verify.session import DEFAULT_MASTER, SMALL_INPUT_CONF, SMALL_INPUT_SHUFFLE_PARTITIONS, build_session
from verify.sources import (
    NARROW_COMMITTED_DDL,
    NARROW_SEGMENTS_DDL,
    CommittedReader,
    SegmentsReader,
    offsets_key,
)
from verify.timeline import plot_run

DEFAULT_ROW_CAP = 100
#: Input size (ledger + segments) up to which the fast-start JVM is the faster choice.
FAST_START_MAX_INPUT_BYTES = 32 * 1024 * 1024
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
    allow: Collection[str] = (),
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
            frozenset(allow),
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
    allow: frozenset[str],
) -> Result:
    started = time.perf_counter()
    notes: list[str] = []
    skipped_inputs = SkippedInputs(allow)
    stage_dir = report_dir / STAGE_DIR  # the staged replicas and committed log (run_verification removes it)

    def keep(df: Any) -> Any:  # inputs read more than once; run_verification drops them at the end
        from pyspark import StorageLevel

        return df.persist(StorageLevel.MEMORY_AND_DISK)

    say(f"reading the ledger in {report_dir}")
    entries = ledger_entries(spark, report_dir, notes, keep)
    with timings.measure("ledger"):
        bad = F.col("offset").isNull() | F.col("partition").isNull()
        stats = entries.groupBy("kind", "topic", bad.alias("bad")).count().collect()
    topics, inventory = _topics(stats, topics_arg, log_dirs)
    notes.extend(inventory.notes)
    if log_dirs:
        say(
            f"found {len(inventory.replicas)} replica(s) of {len(topics)} topic(s) in {len(log_dirs)} log dir(s)"
        )
    acks, errors = _acks_and_errors(entries, topics)
    ledger = _ledger_facts(report_dir, stats, topics)
    ledger_inputs(skipped_inputs, ledger)
    checkpoint_inputs(skipped_inputs, inventory.missing_hw_checkpoints)

    mode, offsets, hw_map, assigned = _high_watermarks(
        bootstrap, topics, inventory, notes, timeout_s, say, timings
    )
    hws = spark.createDataFrame(
        [(t, p, hw) for (t, p), hw in sorted(hw_map.items())],
        "topic string, partition int, high_watermark bigint",
    )
    frames = Frames(acks=acks, errors=errors, committed=None, hws=hws, hw_map=hw_map)
    facts_dir = stage_dir / "facts"
    if log_dirs:
        _read_replicas(spark, frames, inventory, topics, log_dirs, stage_dir, facts_dir, timings, keep, say)
        frames.brokers_read = set(inventory.brokers)
        if assigned is not None:
            frames.assignment = Assignment("metadata", assigned)
            log_dir_inputs(skipped_inputs, {b for rs in assigned.values() for b in rs}, inventory.brokers)
        else:
            frames.assignment = inferred_assignment(frames.extent_rows)
    frames.committed = _committed(
        spark, frames, bootstrap, topics, offsets, timeout_s, stage_dir, facts_dir, timings, say
    )
    if mode == "log-dirs":
        notes.append(
            "offline: the committed log is the most complete replica of each partition below the highest "
            "checkpointed HW, not necessarily what the last leader held (replica_incomplete compares every "
            "replica with it)"
        )

    counts: dict[str, int] = {}
    with timings.measure("committed"):
        counts["committed"] = frames.committed.count()
    counts["acknowledged"] = ledger.verified_acks
    errors_by_name = {row["error"]: int(row["count"]) for row in errors.groupBy("error").count().collect()}
    counts["errors"] = sum(errors_by_name.values())
    counts["malformed_ledger_lines"] = ledger.malformed
    frames.facts = read_facts(facts_dir)
    notes.extend(replica_checks.torn_tail_notes(frames.facts))
    if frames.replica_rows is not None:
        frames.epoch_checkpoints = replica_checks.epoch_checkpoints(spark, inventory.replicas)

    found = run_checks(frames, keep, row_cap, small_input, say, lambda name: timings.measure(name))
    counts.update(found.counts)
    for name, seconds in found.timings.items():
        timings[name] = seconds

    events = _timeline(report_dir, acks, errors, plot, notes, say, timings)

    timings["total"] = round(time.perf_counter() - started + timings.get("spark_start", 0.0), 3)
    if slowest := timings.slowest():
        say(f"slowest phase: {slowest[0]} ({slowest[1]:.1f} s of {timings['total']:.1f} s)")
    result = Result(  # ok only when every check ran over every input and found nothing (verify.report)
        mode=mode,
        report_dir=report_dir,
        counts=counts,
        violations=found.violations,
        truncated=found.truncated,
        skipped=found.skipped,
        notes=notes,
        timings_s=dict(timings),
        high_watermarks={offsets_key(t, p): hw for (t, p), hw in sorted(hw_map.items())},
        replicas=frames.extent_rows,
        errors_by_name=errors_by_name,
        inputs={
            "bootstrap": bootstrap,
            "log_dirs": log_dirs,
            "topics": topics,
            "events": len(events),
            "jvm": jvm,
        },
        skipped_inputs=skipped_inputs.skipped,
        allowed_inputs=skipped_inputs.allowed,
        coverage=coverage(frames, counts, mode),
        unacknowledged=found.unacknowledged,
    )
    write_report(result)
    write_summary(result)
    say(f"verification {verdict_line(result)}; report in {result.report_path}")
    return result


def _timeline(
    report_dir: Path, acks: Any, errors: Any, plot: bool, notes: list[str], say: Progress, timings: Timings
) -> list[Any]:
    events = read_events(report_dir)
    if plot:
        say("plotting the timeline")
        with timings.measure("timeline"):
            plot_run(acks, errors, events, report_dir / TIMELINE_FILE)
    if not (report_dir / EVENTS_FILE).exists():
        notes.append(f"no {EVENTS_FILE}: no faults or leader changes on the timeline")
    return events


def _acks_and_errors(entries: Any, topics: list[str]) -> tuple[Any, Any]:
    """The verified topics' usable acks (an ack without partition or offset is counted as a
    skipped input instead) and errors."""
    verified = F.col("topic").isin(topics)
    usable = F.col("offset").isNotNull() & F.col("partition").isNotNull()
    acks = entries.where((F.col("kind") == "ack") & verified & usable).select(*ACK_COLUMNS)
    errors = entries.where((F.col("kind") == "error") & verified).select(
        "topic", "partition", "error", "time_ms", "digest_hi", "digest_lo"
    )
    return acks, errors


ACK_COLUMNS = (
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


def _topics(
    stats: list[Any], topics_arg: Sequence[str] | None, log_dirs: list[str]
) -> tuple[list[str], Inventory]:
    """The topics to verify (the argument's, else the ledger's, else the log dirs'), and the
    replicas of those topics in the log dirs."""
    ledger_topics = sorted(
        {row["topic"] for row in stats if row["topic"] and row["kind"] in ("ack", "error")}
    )
    if topics_arg:
        topics = sorted(set(topics_arg))
    elif ledger_topics:
        topics = ledger_topics
    elif log_dirs:
        topics = sorted(t for t in list_replicas(log_dirs).topics() if not t.startswith("__"))
    else:
        raise ValueError("no topics to verify: the ledger names none; pass --topic")
    return topics, list_replicas(log_dirs, set(topics)) if log_dirs else Inventory()


def _ledger_facts(report_dir: Path, stats: list[Any], topics: list[str]) -> LedgerFacts:
    def total(kind: str, **where: Any) -> int:
        return sum(
            int(row["count"])
            for row in stats
            if row["kind"] == kind and all(row[k] == v for k, v in where.items())
        )

    return LedgerFacts(
        form=ledger_form(report_dir),
        closed=closed_totals(report_dir),
        acks=total("ack"),
        errors=total("error"),
        verified_acks=sum(
            int(row["count"])
            for row in stats
            if row["kind"] == "ack" and row["topic"] in topics and not row["bad"]
        ),
        malformed=total("malformed"),
        unusable_acks=total("ack", bad=True)
        + sum(int(r["count"]) for r in stats if r["kind"] == "ack" and not r["topic"] and not r["bad"]),
    )


def _high_watermarks(
    bootstrap: str | None,
    topics: list[str],
    inventory: Inventory,
    notes: list[str],
    timeout_s: float,
    say: Progress,
    timings: Timings,
) -> tuple[
    str,
    dict[tuple[str, int], tuple[int, int]],
    dict[tuple[str, int], int],
    dict[tuple[str, int], list[int]] | None,
]:
    """(mode, offsets, HW per partition, the metadata's assignment or None offline)."""
    if bootstrap:
        from verify.fetch import partition_layout, run_sync

        say(f"reading the high watermarks and the assignment of {','.join(topics)} from {bootstrap}")
        with timings.measure("high_watermarks"):
            offsets, assigned = run_sync(partition_layout(bootstrap, topics, int(timeout_s * 1000)))
        return "cluster", offsets, {key: hw for key, (_, hw) in offsets.items()}, assigned
    hw_map = inventory.max_checkpointed_hw()
    for r in inventory.replicas:
        if (r.topic, r.partition) not in hw_map:
            notes.append(f"no replica of {r.topic}-{r.partition} checkpointed an HW: treated as 0")
            hw_map[(r.topic, r.partition)] = 0
    return "log-dirs", {}, hw_map, None


def _read_replicas(
    spark: Any,
    frames: Frames,
    inventory: Inventory,
    topics: list[str],
    log_dirs: list[str],
    stage_dir: Path,
    facts_dir: Path,
    timings: Timings,
    keep: Callable[[Any], Any],
    say: Progress,
) -> None:
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
        # The narrow rows (digests as two longs), decoded once into Parquet that every check then
        # scans (verify/staging.py); what the readers saw beside the rows goes to facts_dir.
        reader = SegmentsReader(
            list(log_dirs), topics, NARROW_SEGMENTS_DDL, str(timings.progress_dir), str(facts_dir)
        )
        frames.replica_rows = staging.stage(spark, reader, NARROW_SEGMENTS_DDL, stage_dir / "replicas")
        frames.extents = keep(checks.replica_extents(frames.replica_rows, replicas_df))
        frames.extent_rows = [
            row.asDict() for row in frames.extents.orderBy("topic", "partition", "broker").collect()
        ]


def _committed(
    spark: Any,
    frames: Frames,
    bootstrap: str | None,
    topics: list[str],
    offsets: dict[tuple[str, int], tuple[int, int]],
    timeout_s: float,
    stage_dir: Path,
    facts_dir: Path,
    timings: Timings,
    say: Progress,
) -> Any:
    if not bootstrap:
        say(
            "taking the committed log from the most complete replica of each partition, below the checkpointed HW"
        )
        return checks.committed_from_replicas(frames.replica_rows, frames.extents, frames.hws)
    say(f"reading the committed log of {','.join(topics)} from the cluster")
    with timings.measure("read_committed"):
        reader = CommittedReader(
            bootstrap,
            topics,
            {offsets_key(t, p): list(v) for (t, p), v in offsets.items()},
            timeout_s,
            NARROW_COMMITTED_DDL,
            str(timings.progress_dir),
            str(facts_dir),
        )
        return staging.stage(spark, reader, NARROW_COMMITTED_DDL, stage_dir / "committed")
