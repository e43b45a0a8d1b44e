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
  the offline HW (:func:`verify.checks.committed_from_replicas`): what a consumer would read if
  that replica led. A checkpointed HW lags the HW the cluster had (it is written periodically),
  and a broker that halted early never wrote one, so the offline HW is the highest checkpointed
  one or, past it, the end of the stretch every replica read holds identically
  (:mod:`verify.offline_hw`, with a note per partition); an acknowledged write above that, held by
  some replicas only, still counts as lost ("offset at or above the high watermark"): verify a
  live, healed cluster, or one stopped cleanly, for an exact answer.

Then it runs the checks (:mod:`verify.check_runner`: :mod:`verify.checks`,
:mod:`verify.ledger_checks`, :mod:`verify.producer_checks`, :mod:`verify.replica_checks`; and,
when the report dir holds a consumer ledger ``R/consumed/``, the consumer group's checks of
:mod:`verify.consumer_checks`), writes
``R/verification.json``, ``R/summary.md`` and ``R/timeline.png`` and returns a
:class:`verify.report.Result`, ``ok`` only when every check ran over every input and found
nothing: an input it could not read in full (no ledger or nothing acknowledged, an unclosed or
damaged ledger, a missing HW checkpoint or an unreadable log-start one, an assigned broker's log
dir not given, a recorded assignment that cannot be read, no consumer ledger from a run whose
``R/run.json`` says it had consumers) makes it INCOMPLETE unless ``allow`` names it
(:mod:`verify.inputs`). Against a cluster, the
assignment comes from the metadata; offline from the run's recorded one, else from the brokers'
checkpoints (:mod:`verify.assignment`, never inferred from the surviving replicas). The replica
checks (divergent, hw_above_leo, epoch_cache_inconsistent) need ``log_dirs``: without them they are skipped and the verdict is
INCOMPLETE (not ok), since a check that did not run proves nothing.

The session: the caller's active one if there is one (used as is, left running, its cache
cleared at the end), else one built here and stopped at the end: the fast-start JVM with the
small-input Spark settings below 32 MiB of input (ledger + segments, about 100,000 records),
the throughput JVM with Spark's defaults above. Around that size the two took about as long
here; far below it fast-start wins, far above throughput does (docs/benchmarks.md,
"Verification cost").

The steps, one function each: the session (:func:`verify.session_choice.choose_session`), the ledger
(:func:`_read_ledger`), the high watermarks, replicas and committed log (:func:`_read_logs`),
the input counts (:func:`_counts`), the checks, the timeline, the report (:func:`_report`).

Topics checked: ``topics`` if given, else those in the ledger, else every topic in the log dirs
whose name does not start with ``__`` (internal topics such as ``__consumer_offsets`` rewrite
values by design, so the duplicate check means nothing there).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from ledger.consumed import consumer_ledger_present
from ledger.format import EVENTS_FILE, ledger_form, read_events
from verify import checks, replica_checks, staging
from verify.assignment import METADATA, Assignment, offline_assignment
from verify.check_runner import Found, Frames, coverage, run_checks
from verify.consumer_checks import check_consumers
from verify.inputs import (
    LedgerFacts,
    SkippedInputs,
    checkpoint_inputs,
    ledger_inputs,
    log_dir_inputs,
    log_start_checkpoint_inputs,
)
from verify.ledger_frame import acks_and_errors, ledger_entries, ledger_facts
from verify.offline_hw import offline_bounds
from verify.progress import Timings
from verify.replicas import Inventory, list_replicas, split_log_dirs
from verify.report import TIMELINE_FILE, Result, verdict_line, write_report, write_summary
from verify.run_record import read_run_record
from verify.scan_facts import read_facts
from verify.session import DEFAULT_MASTER
from verify.session_choice import FAST_START_MAX_INPUT_BYTES, choose_session, input_bytes
from verify.sources import (
    NARROW_COMMITTED_DDL,
    NARROW_SEGMENTS_DDL,
    CommittedReader,
    SegmentsReader,
    offsets_key,
)
from verify.timeline import plot_run

DEFAULT_ROW_CAP = 100
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
    the input (below :data:`verify.session_choice.FAST_START_MAX_INPUT_BYTES` of ledger and segments: fast-start)."""
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
    spark, owned, jvm = choose_session(spark, master, fast_start, small_input, say, timings)
    timings.spark = spark
    try:
        run = _Run(
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
        run.skipped_inputs = SkippedInputs(frozenset(allow))
        return _run(run)
    finally:
        shutil.rmtree(progress_dir, ignore_errors=True)
        staging.remove(report_dir / STAGE_DIR)
        if owned:
            spark.stop()
        else:
            spark.catalog.clearCache()  # leave a borrowed session as we found it


@dataclass
class _Run:
    """One run of the job: its settings, and what its steps hand each other."""

    spark: Any
    report_dir: Path
    bootstrap: str | None
    log_dirs: list[str]
    topics_arg: Sequence[str] | None
    say: Progress
    row_cap: int
    plot: bool
    timeout_s: float
    timings: Timings
    jvm: str
    small_input: bool
    started: float = field(default_factory=time.perf_counter)
    notes: list[str] = field(default_factory=list)
    skipped_inputs: SkippedInputs = field(default_factory=lambda: SkippedInputs(frozenset()))
    # set by the steps
    topics: list[str] = field(default_factory=list)
    inventory: Inventory = field(default_factory=Inventory)
    ledger: LedgerFacts | None = None
    mode: str = ""

    @property
    def stage_dir(self) -> Path:
        """The staged replicas and committed log (run_verification removes it)."""
        return self.report_dir / STAGE_DIR

    @property
    def facts_dir(self) -> Path:
        return self.stage_dir / "facts"

    def keep(self, df: Any) -> Any:
        """Persist an input read more than once (run_verification drops them at the end)."""
        from pyspark import StorageLevel

        return df.persist(StorageLevel.MEMORY_AND_DISK)


def _run(run: _Run) -> Result:
    run.notes.extend(read_run_record(run.report_dir).retention_notes())  # R/run.json's retention
    acks, errors = _read_ledger(run)
    frames = _read_logs(run, acks, errors)
    counts, errors_by_name = _counts(run, frames, errors)
    found = run_checks(
        frames, run.keep, run.row_cap, run.small_input, run.say, lambda name: run.timings.measure(name)
    )
    args = (run.topics, frames.committed, counts["committed"], found, run.notes, run.row_cap, run.say)
    if consumer_ledger_present(run.report_dir):  # chaos run --consumers N: R/consumed/
        with run.timings.measure("consumer_checks"):
            check_consumers(run.spark, run.report_dir, *args, run.skipped_inputs)
    else:  # nothing to check, unless R/run.json says the run had consumers (verify/run_record.py)
        check_consumers(run.spark, run.report_dir, *args, run.skipped_inputs)
    counts.update(found.counts)
    for name, seconds in found.timings.items():
        run.timings[name] = seconds
    events = _timeline(run.report_dir, acks, errors, run.plot, run.notes, run.say, run.timings)
    return _report(run, frames, found, counts, errors_by_name, len(events))


def _read_ledger(run: _Run) -> tuple[Any, Any]:
    """The ledger's acks and errors of the verified topics; sets the run's topics, inventory
    and ledger facts, and names what the ledger and the checkpoints could not give in full."""
    run.say(f"reading the ledger in {run.report_dir}")
    entries = ledger_entries(run.spark, run.report_dir, run.notes, run.keep)
    with run.timings.measure("ledger"):
        bad = F.col("offset").isNull() | F.col("partition").isNull()
        stats = entries.groupBy("kind", "topic", bad.alias("bad")).count().collect()
    run.topics, run.inventory = _topics(stats, run.topics_arg, run.log_dirs)
    run.notes.extend(run.inventory.notes)
    if run.log_dirs:
        run.say(
            f"found {len(run.inventory.replicas)} replica(s) of {len(run.topics)} topic(s) "
            f"in {len(run.log_dirs)} log dir(s)"
        )
    acks, errors = acks_and_errors(entries, run.topics)
    run.ledger = ledger_facts(run.report_dir, stats, run.topics)
    ledger_inputs(run.skipped_inputs, run.ledger)
    checkpoint_inputs(run.skipped_inputs, run.inventory.missing_hw_checkpoints)
    log_start_checkpoint_inputs(run.skipped_inputs, run.inventory.unreadable_log_start_checkpoints)
    return acks, errors


def _read_logs(run: _Run, acks: Any, errors: Any) -> Frames:
    """The high watermarks, the replicas (with log dirs) and the committed log, as the checks read them."""
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    assigned = None
    if run.bootstrap:
        run.mode = "cluster"
        offsets, assigned = _cluster_layout(run)
        hw_map = {key: hw for key, (_, hw) in offsets.items()}
    else:
        run.mode, hw_map = "log-dirs", {}
    frames = Frames(acks=acks, errors=errors, committed=None, hws=None, hw_map=hw_map)
    frames.log_starts = {key: start for key, (start, _) in offsets.items()}  # ListOffsets earliest
    leaders = None
    if run.log_dirs:
        _read_replicas(run, frames)
        frames.brokers_read = set(run.inventory.brokers)
        if assigned is not None:
            frames.assignment = Assignment(METADATA, assigned)
        else:
            args = (frames.extent_rows, run.inventory.checkpointed, run.notes, run.skipped_inputs)
            frames.assignment = offline_assignment(run.report_dir, run.topics, *args)
        if frames.assignment.exact:
            assigned_brokers = {b for rs in frames.assignment.replicas.values() for b in rs}
            log_dir_inputs(run.skipped_inputs, assigned_brokers, run.inventory.brokers)
    if not run.bootstrap:  # offline: the most complete replicas, their log starts, the offline HWs
        replicas = (frames.replica_rows, frames.extents, frames.extent_rows)
        bounds = offline_bounds(run.spark, run.inventory.max_checkpointed_hw(), *replicas, acks, run.notes)
        frames.log_starts, frames.hw_map, leaders = bounds.log_starts, bounds.high_watermarks, bounds.leaders
    frames.hws = run.spark.createDataFrame(
        [(t, p, frames.log_starts.get((t, p), 0), hw) for (t, p), hw in sorted(frames.hw_map.items())],
        "topic string, partition int, log_start bigint, high_watermark bigint",
    )
    frames.committed = _committed(run, frames, offsets, leaders)
    if run.mode == "log-dirs":
        run.notes.append(
            "offline: the committed log is the most complete replica of each partition from its log start "
            "offset to the highest checkpointed HW (or further, where every replica holds the same records), "
            "not necessarily what the last leader held (replica_incomplete compares every replica with it)"
        )
    return frames


def _counts(run: _Run, frames: Frames, errors: Any) -> tuple[dict[str, int], dict[str, int]]:
    """The input counts, and the facts the readers saw beside the rows (torn tails, epoch
    checkpoints), before the checks run."""
    assert run.ledger is not None
    counts: dict[str, int] = {}
    with run.timings.measure("committed"):
        counts["committed"] = frames.committed.count()
    counts["acknowledged"] = run.ledger.verified_acks
    errors_by_name = {row["error"]: int(row["count"]) for row in errors.groupBy("error").count().collect()}
    counts["errors"] = sum(errors_by_name.values())
    counts["malformed_ledger_lines"] = run.ledger.malformed
    frames.facts = read_facts(run.facts_dir)
    run.notes.extend(replica_checks.torn_tail_notes(frames.facts))
    if frames.replica_rows is not None:
        frames.epoch_checkpoints = replica_checks.epoch_checkpoints(run.spark, run.inventory.replicas)
    return counts, errors_by_name


def _report(
    run: _Run,
    frames: Frames,
    found: Found,
    counts: dict[str, int],
    errors_by_name: dict[str, int],
    events: int,
) -> Result:
    timings = run.timings
    timings["total"] = round(time.perf_counter() - run.started + timings.get("spark_start", 0.0), 3)
    if slowest := timings.slowest():
        run.say(f"slowest phase: {slowest[0]} ({slowest[1]:.1f} s of {timings['total']:.1f} s)")
    result = Result(  # ok only when every check ran over every input and found nothing (verify.report)
        mode=run.mode,
        report_dir=run.report_dir,
        counts=counts,
        violations=found.violations,
        truncated=found.truncated,
        skipped=found.skipped,
        notes=run.notes,
        timings_s=dict(timings),
        high_watermarks={offsets_key(t, p): hw for (t, p), hw in sorted(frames.hw_map.items())},
        replicas=frames.extent_rows,
        errors_by_name=errors_by_name,
        inputs={
            "bootstrap": run.bootstrap,
            "log_dirs": run.log_dirs,
            "topics": run.topics,
            "events": events,
            "jvm": run.jvm,
            "assignment": frames.assignment.source if frames.assignment else None,  # verify/assignment.py
        },
        skipped_inputs=run.skipped_inputs.skipped,
        allowed_inputs=run.skipped_inputs.allowed,
        coverage={**coverage(frames, counts, run.mode), **found.coverage},
        unacknowledged=found.unacknowledged,
    )
    write_report(result)
    write_summary(result)
    run.say(f"verification {verdict_line(result)}; report in {result.report_path}")
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


def _cluster_layout(
    run: _Run,
) -> tuple[dict[tuple[str, int], tuple[int, int]], dict[tuple[str, int], list[int]]]:
    """(log start and HW per partition, the metadata's assignment), from the cluster."""
    from verify.fetch import partition_layout, run_sync

    run.say(f"reading the high watermarks and the assignment of {','.join(run.topics)} from {run.bootstrap}")
    with run.timings.measure("high_watermarks"):
        return run_sync(partition_layout(run.bootstrap, run.topics, int(run.timeout_s * 1000)))


def _read_replicas(run: _Run, frames: Frames) -> None:
    replicas_df = run.spark.createDataFrame(
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
            for r in run.inventory.replicas
        ],
        "broker int, topic string, partition int, first_segment_base bigint, last_segment_base bigint, "
        "checkpointed_hw bigint, checkpointed_log_start bigint",
    )
    run.say("reading every replica's segment files")
    with run.timings.measure("read_segments"):
        # The narrow rows (digests as two longs), decoded once into Parquet that every check then
        # scans (verify/staging.py); what the readers saw beside the rows goes to facts_dir.
        reader = SegmentsReader(
            list(run.log_dirs),
            run.topics,
            NARROW_SEGMENTS_DDL,
            str(run.timings.progress_dir),
            str(run.facts_dir),
        )
        frames.replica_rows = staging.stage(
            run.spark, reader, NARROW_SEGMENTS_DDL, run.stage_dir / "replicas"
        )
        frames.extents = run.keep(checks.replica_extents(frames.replica_rows, replicas_df))
        frames.extent_rows = [
            row.asDict() for row in frames.extents.orderBy("topic", "partition", "broker").collect()
        ]


def _committed(
    run: _Run, frames: Frames, offsets: dict[tuple[str, int], tuple[int, int]], leaders: Any
) -> Any:
    if not run.bootstrap:
        run.say(
            "taking the committed log from the most complete replica of each partition, below the offline HW"
        )
        return checks.committed_from_replicas(frames.replica_rows, leaders, frames.hws)
    run.say(f"reading the committed log of {','.join(run.topics)} from the cluster")
    with run.timings.measure("read_committed"):
        reader = CommittedReader(
            run.bootstrap,
            run.topics,
            {offsets_key(t, p): list(v) for (t, p), v in offsets.items()},
            run.timeout_s,
            NARROW_COMMITTED_DDL,
            str(run.timings.progress_dir),
            str(run.facts_dir),
        )
        return staging.stage(run.spark, reader, NARROW_COMMITTED_DDL, run.stage_dir / "committed")
