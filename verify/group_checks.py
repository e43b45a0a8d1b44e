"""The consumer group's per-assignment checks (docs/guarantees.md, "Verification"; issue 34 items
2, 5, 6, 7 and 9): where each owner started, which generation each commit was acknowledged
under, which partitions each member consumed in each generation, how far each commit went and
whether each member's position moved past a record it never returned. The rules are
:mod:`verify.group_rules` (pure); the aggregations of the consumed rows they read are
:mod:`verify.group_delivery` (Spark).

* ``resumed_below_commit`` - an owner consumed a record below a commit acknowledged before it:
  the highest commit of the partition before its assignment (it resumed below it), or one of
  its own (its position went back within the assignment);
* ``fenced_commit_accepted`` - a commit acknowledged under a generation older than the
  partition's newest assignment then (the coordinator should have answered ILLEGAL_GENERATION);
* ``consumed_unassigned`` - records consumed in a generation whose assignment of the member does
  not hold their partition, or the workload's own count of them (``outside_assignment``);
* ``commit_ahead_of_consumed`` - a commit acknowledged before its member had consumed the last
  record the committed log holds below it;
* ``position_skipped`` - committed records between an assignment's lowest and highest consumed
  offset that its member never consumed, even when a later owner re-read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from verify import group_delivery as gd
from verify import group_rules as gr

RESUMED_BELOW_COMMIT = "resumed_below_commit"
FENCED_COMMIT_ACCEPTED = "fenced_commit_accepted"
CONSUMED_UNASSIGNED = "consumed_unassigned"
COMMIT_AHEAD_OF_CONSUMED = "commit_ahead_of_consumed"
POSITION_SKIPPED = "position_skipped"
GROUP_CHECKS = (
    RESUMED_BELOW_COMMIT,
    FENCED_COMMIT_ACCEPTED,
    CONSUMED_UNASSIGNED,
    COMMIT_AHEAD_OF_CONSUMED,
    POSITION_SKIPPED,
)
#: The group checks a row missing from the middle of the consumer ledger could make fire falsely.
ROW_SENSITIVE = (CONSUMED_UNASSIGNED, COMMIT_AHEAD_OF_CONSUMED, POSITION_SKIPPED)


def group_checks(
    spark: Any,
    consumed: DataFrame,
    committed: DataFrame,
    facts: gr.GroupFacts,
    unlabelled: int,
    outside_assignment: int | None,
    skip: Mapping[str, str],
    row_cap: int,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Run the checks not in ``skip``: (their rows, what they read: ``assignments``,
    ``probes``, ``gapped_partitions``)."""
    rows = gd.labelled(spark, consumed, facts, unlabelled)
    bounds = gd.log_bounds(committed)
    stats = gd.assignment_stats(spark, rows, bounds)
    read = {
        "assignments": sum(1 for s in stats if gr.key_of(s) in facts.assignments),
        "gapped_partitions": sum(1 for b in bounds.values() if not b.gapless),
        "probes": 0,
    }
    ahead = None
    if COMMIT_AHEAD_OF_CONSUMED not in skip:
        probes = gr.commit_probes(facts, bounds)
        read["probes"] = len(probes)
        ahead = _commit_ahead(spark, rows, committed, probes, row_cap)
    # A commit ahead of what its member consumed is no position it had: reading below it
    # afterwards is that commit's fault (commit_ahead_of_consumed), not a position going back.
    steps = gr.resume_steps(facts, {(gr.key_of(r), r["seq"]) for r in ahead or []})
    found: dict[str, list[dict[str, Any]]] = {
        RESUMED_BELOW_COMMIT: gr.resumed_below_commit(facts, gd.below_commit(spark, rows, steps)),
        FENCED_COMMIT_ACCEPTED: gr.fenced_commit_accepted(facts),
    }
    if CONSUMED_UNASSIGNED not in skip:
        found[CONSUMED_UNASSIGNED] = gr.consumed_unassigned(facts, stats, outside_assignment)
    if POSITION_SKIPPED not in skip:
        found[POSITION_SKIPPED] = _position_skipped(spark, rows, committed, facts, stats)
    if ahead is not None:
        found[COMMIT_AHEAD_OF_CONSUMED] = ahead
    return found, read


def _position_skipped(
    spark: Any, rows: DataFrame, committed: DataFrame, facts: gr.GroupFacts, stats: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    candidates = gr.skip_candidates(facts, stats)
    missing = {gr.key_of(m): m for m in gd.skipped_offsets(spark, rows, committed, candidates)}
    found = [
        {
            **{
                k: c[k] for k in ("topic", "partition", "member", "generation", "first_offset", "last_offset")
            },
            "skipped": missing[gr.key_of(c)]["skipped"],
            "skipped_offsets": missing[gr.key_of(c)]["skipped_offsets"],
        }
        for c in candidates
        if gr.key_of(c) in missing
    ]
    return sorted(found, key=lambda r: (r["topic"], r["partition"], r["generation"], r["member"]))


def _commit_ahead(
    spark: Any, rows: DataFrame, committed: DataFrame, probes: list[dict[str, Any]], row_cap: int
) -> list[dict[str, Any]]:
    gapped = [(p["topic"], p["partition"], p["probe"]) for p in probes if p["gapped"]]
    last = gd.last_log_offsets(spark, committed, gapped)
    probed = []
    for p in probes:
        if p["gapped"]:
            at = last.get((p["topic"], p["partition"], p["probe"]))
            if at is None:
                continue  # the log holds nothing below the commit
            p = {**p, "probe": at}
        probed.append(p)
    first = gd.first_consumed(spark, rows, [(*gr.key_of(p), p["probe"]) for p in probed])
    found = gr.commit_ahead(probed, first)
    to = gd.consumed_to(spark, rows, found[:row_cap])
    return [{**r, "consumed_to": to.get((gr.key_of(r), r["seq"]))} for r in found]
