"""Running the verification checks (docs/design.md "Verification job"): the Spark checks in a
thread pool (count first: a clean run never plans a report's rows), the pure-Python replica
checks over the driver's small inputs, and what each check read (``coverage``).

Two inputs several checks share are computed once and persisted before the checks run, each a
small DataFrame on a clean run: the unpaired rows of the ledger/log join
(:func:`verify.ledger_checks.ledger_match`) and the producer anomalies
(:func:`verify.producer_checks.producer_anomalies`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from verify import checks, ledger_checks, producer_checks, replica_checks
from verify.report import CHECKS

#: Checks run at once on a small input (one at a time on a big one).
CONCURRENT_CHECKS = 3
ORDER: dict[str, list[str]] = {
    "lost": ["topic", "partition", "offset"],
    "ack_mismatch": ["topic", "partition", "offset"],
    "duplicate": ["value_digest"],
    "out_of_order": ["topic", "partition", "offset"],
    "sequence_gap": ["topic", "partition", "offset"],
    "divergent": ["topic", "partition", "offset"],
    "hw_above_leo": ["topic", "partition", "broker"],
    "epoch_cache_inconsistent": ["topic", "partition", "broker"],
}
REPLICA_CHECKS = (
    "divergent",
    "offset_order",
    "replica_incomplete",
    "hw_above_leo",
    "epoch_cache_inconsistent",
)


@dataclass
class Frames:
    """The job's inputs as the checks read them (DataFrames, and the driver's small lists)."""

    acks: Any
    errors: Any
    committed: Any
    hws: Any
    replica_rows: Any = None
    extents: Any = None
    epoch_checkpoints: Any = None
    extent_rows: list[dict[str, Any]] = field(default_factory=list)
    hw_map: dict[tuple[str, int], int] = field(default_factory=dict)
    #: where the committed log begins: the leader's log start offset, offline the most complete replica's
    log_starts: dict[tuple[str, int], int] = field(default_factory=dict)
    assignment: replica_checks.Assignment | None = None
    brokers_read: set[int] = field(default_factory=set)
    facts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Found:
    counts: dict[str, int] = field(default_factory=dict)
    violations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    truncated: dict[str, bool] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    unacknowledged: list[dict[str, Any]] = field(default_factory=list)
    coverage: dict[str, str] = field(default_factory=dict)  # the consumer checks' (verify.consumer_checks)


def run_checks(
    f: Frames,
    keep: Callable[[Any], Any],
    row_cap: int,
    small_input: bool,
    say: Callable[[str], None],
    measure: Callable[[str], Any],
) -> Found:
    """Every check over ``f``; ``measure(name)`` times a shared phase."""
    found = Found()
    with measure("ledger_match"):
        unpaired = keep(ledger_checks.ledger_match(f.acks, f.committed))
        sides = {row["side"]: row["count"] for row in unpaired.groupBy("side").count().collect()}
    with measure("producer_batches"):
        anomalies = keep(producer_checks.producer_anomalies(f.committed))
        anomalies.count()
    offending: dict[str, Callable[[], Any]] = {
        "duplicate": lambda: checks.duplicate(f.committed),
        "out_of_order": lambda: producer_checks.out_of_order(anomalies),
        "sequence_gap": lambda: producer_checks.sequence_gap(anomalies),
    }
    if sides.get("ack"):
        offending["lost"] = lambda: ledger_checks.lost(f.acks, f.committed, f.hws, unpaired)
        offending["ack_mismatch"] = lambda: ledger_checks.ack_mismatch(f.acks, f.committed, unpaired)
    else:
        # Both checks report unpaired acks only (their rows are the ledger_match's "ack" side,
        # each with what the log holds): none unpaired, none to report. On a clean run this saves
        # two more scans of the ledger and the committed log (docs/benchmarks.md).
        for name in ("lost", "ack_mismatch"):
            found.timings[name] = 0.0
            _record(found, name, 0, [])
        say("  lost: 0, ack_mismatch: 0 (every acknowledged write paired with its committed record)")
    if f.replica_rows is not None:
        offending["divergent"] = lambda: checks.divergent(f.replica_rows, f.extents, f.hws)
        offending["hw_above_leo"] = lambda: replica_checks.hw_above_leo(f.extents)
        offending["epoch_cache_inconsistent"] = lambda: replica_checks.epoch_cache_inconsistent(
            f.replica_rows, f.extents, f.epoch_checkpoints
        )
    _python_checks(f, found, row_cap)

    def run(name: str) -> tuple[str, int, list[Any], float]:
        begun = time.perf_counter()
        df = offending[name]()
        # Count first: a clean run (the usual case) then never plans the report's rows, whose
        # sorted projection cost the lost check almost three times its count at 10 million
        # records (docs/benchmarks.md "Verification cost").
        count = df.count()
        rows = df.orderBy(*ORDER[name]).limit(row_cap).collect() if count else []
        return name, count, rows, time.perf_counter() - begun

    names = [n for n in CHECKS if n in offending]
    # On a small input most of a check's time is Spark scheduling its tiny jobs, which overlaps
    # well; on a big one the checks would only compete for the cores and the memory.
    say(f"checking {', '.join(names)}")
    with ThreadPoolExecutor(
        CONCURRENT_CHECKS if small_input else 1, thread_name_prefix="floodmark-check"
    ) as pool:
        for name, count, rows, seconds in pool.map(run, names):
            found.timings[name] = round(seconds, 3)
            _record(found, name, count, [row.asDict(recursive=True) for row in rows])
            say(f"  {name}: {count}")
    with measure("unacknowledged"):
        if sides.get("log"):
            _unacknowledged(f, unpaired, found, row_cap)
        else:  # every committed record paired with its ack
            found.counts["unacknowledged"] = found.counts["failed_but_landed"] = 0
    for name in CHECKS:
        found.counts.setdefault(name, 0)
    return found


def _record(found: Found, name: str, count: int, rows: list[dict[str, Any]]) -> None:
    found.counts[name] = count
    found.violations[name] = rows
    found.truncated[name] = count > len(rows)


def _python_checks(f: Frames, found: Found, row_cap: int) -> None:
    if f.replica_rows is None:
        for name in REPLICA_CHECKS:
            found.skipped[name] = "no log dirs given (--log-dirs)"
        if f.facts:  # the committed log's own batch order, read from the leaders
            found.skipped.pop("offset_order")
            count, rows = replica_checks.offset_order(f.facts)
            _record(found, "offset_order", count, rows[:row_cap])
        return
    count, rows = replica_checks.offset_order(f.facts)
    _record(found, "offset_order", count, rows[:row_cap])
    assert f.assignment is not None
    rows = replica_checks.replica_incomplete(
        f.extent_rows, f.hw_map, f.assignment, f.brokers_read, f.facts, log_starts=f.log_starts
    )
    _record(found, "replica_incomplete", len(rows), rows[:row_cap])


def _unacknowledged(f: Frames, unpaired: Any, found: Found, row_cap: int) -> None:
    groups = ledger_checks.unacknowledged(f.committed, f.errors, unpaired)
    rows = [r.asDict() for r in groups.orderBy("topic", "partition", "producer_id", "ledger_entry").collect()]
    found.counts["unacknowledged"] = sum(r["records"] for r in rows)
    found.counts["failed_but_landed"] = sum(r["records"] for r in rows if r["ledger_entry"] != "none")
    found.unacknowledged = rows[:row_cap]


def coverage(f: Frames, counts: dict[str, int], mode: str) -> dict[str, str]:
    """Per check, what it read."""
    partitions = len(f.hw_map)
    committed = f"{counts.get('committed', 0)} committed record(s) of {partitions} partition(s)"
    source = (
        "read from the leaders"
        if mode == "cluster"
        else "from the most complete replica of each partition, not necessarily the last leader"
    )
    ledger = f"{counts.get('acknowledged', 0)} ack(s) against {committed}"
    out = {
        "lost": ledger,
        "ack_mismatch": ledger,
        "duplicate": f"{committed} ({source})",
        "out_of_order": f"{committed} ({source})",
        "sequence_gap": f"{committed} ({source})",
    }
    if f.replica_rows is not None:
        out.update(replica_checks.coverage(f.extent_rows, f.brokers_read, f.assignment, mode))
    elif mode == "cluster":
        out["offset_order"] = "the committed log only"
    return out
