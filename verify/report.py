"""The verification job's written report (docs/operations.md "Chaos runs and verification"):
``R/verification.json`` and ``R/summary.md``.

``verification.json`` holds ``ok`` and the ``verdict``, the ``counts`` (acknowledged, committed, errors and one per
check), the offending rows of each check (at most ``row_cap`` each, ``truncated`` says where there
were more), which checks were skipped and why, the high watermarks the checks used, per-replica
extents, error counts by name, notes and timings. ``summary.md`` says the same for a person: a
verdict, a table of counts, the first offending rows of each check, and the notes.

The verdict is ``PASSED`` only when every check ran over every input and found nothing:
``FAILED`` when a check found a violation, ``INCOMPLETE`` when none did but a check was skipped
(the replica checks without log dirs) or an input was (no ledger or nothing acknowledged, an
unclosed or damaged ledger, a log dir without its HW checkpoint, a broker of the assignment whose
log dir was not given: ``skipped_inputs``), because a check that did not run, or ran over less
than the run wrote, proves nothing. A skipped input that the flag allowing it was given for is
listed in ``allowed_inputs`` and does not count. ``ok`` is the verdict ``PASSED``. ``coverage``
says per check what it read, so a reader sees coverage, not only zeros; ``unacknowledged`` (not
a violation) counts committed records no ack accounts for, and whose they are.

The consumer group's checks (:data:`CONSUMER_CHECKS`, :mod:`verify.consumer_checks`) are in the
report, and count towards the verdict, only when the run had consumers (a consumer ledger): a
run without one lists the checks of :data:`CHECKS` alone, as before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CHECKS = (
    "lost",
    "ack_mismatch",
    "duplicate",
    "divergent",
    "out_of_order",
    "sequence_gap",
    "offset_order",
    "replica_incomplete",
    "hw_above_leo",
    "epoch_cache_inconsistent",
)
#: The consumer group's checks (verify/consumer_checks.py), run when the report dir has a consumer ledger.
CONSUMER_CHECKS = (
    "group_missed",
    "commit_went_backwards",
    "consumed_value_mismatch",
    "owned_twice",
    # the per-assignment checks (verify/group_checks.py; issue 34)
    "resumed_below_commit",
    "fenced_commit_accepted",
    "consumed_unassigned",
    "commit_ahead_of_consumed",
    "position_skipped",
)
ALL_CHECKS = CHECKS + CONSUMER_CHECKS
PASSED, FAILED, INCOMPLETE = "PASSED", "FAILED", "INCOMPLETE"
REPORT_FILE = "verification.json"
SUMMARY_FILE = "summary.md"
TIMELINE_FILE = "timeline.png"

DESCRIPTIONS = {
    "lost": "acknowledged writes missing from the committed log",
    "ack_mismatch": "acknowledged writes whose record has another producer id, sequence, key or timestamp",
    "duplicate": "values at more than one committed offset",
    "divergent": "offsets below the HW that replicas hold differently",
    "out_of_order": "batches whose producer epoch and sequence do not increase with the offset",
    "sequence_gap": "batches that skip producer sequences (or start a new epoch past 0)",
    "offset_order": "batches starting at or below the last offset of the batch before them",
    "replica_incomplete": "assigned replicas absent, starting above the log start or ending below the HW, or with unframed bytes mid-log",
    "hw_above_leo": "replicas whose checkpointed HW is above their log end offset",
    "epoch_cache_inconsistent": "replicas whose leader-epoch-checkpoint disagrees with their batches",
    "group_missed": "committed records no member of the consumer group consumed",
    "commit_went_backwards": "acknowledged group commits below an earlier one of their partition",
    "consumed_value_mismatch": "consumed records whose value differs from the committed log's at their offset",
    "owned_twice": "partitions one generation assigned to more than one member",
    "resumed_below_commit": (
        "owners that consumed below a commit acknowledged before their assignment, or below their own"
    ),
    "fenced_commit_accepted": "commits acknowledged under a generation older than the partition's assignment",
    "consumed_unassigned": "records a member consumed from a partition its generation did not assign it",
    "commit_ahead_of_consumed": "commits acknowledged before their member consumed the record below them",
    "position_skipped": "committed records a member's position passed in an assignment without consuming",
}


def verdict_of(
    counts: dict[str, int], skipped: dict[str, str], skipped_inputs: dict[str, str] | None = None
) -> str:
    """FAILED on any violation, else INCOMPLETE when a check or an input was skipped, else PASSED."""
    if any(counts.get(name, 0) for name in ALL_CHECKS):
        return FAILED
    return INCOMPLETE if skipped_inputs or any(name in skipped for name in ALL_CHECKS) else PASSED


def verdict_line(result: Result) -> str:
    """The one-line verdict: ``PASSED``, ``FAILED: n violation(s)`` or ``INCOMPLETE: ... skipped``."""
    if result.verdict == FAILED:
        return f"{FAILED}: {result.violation_count} violation(s)"
    if result.verdict == INCOMPLETE:
        names = [name for name in ALL_CHECKS if name in result.skipped]
        parts = [f"{len(names)} check(s) skipped ({', '.join(names)})"] if names else []
        if result.skipped_inputs:
            parts.append(
                f"{len(result.skipped_inputs)} input(s) skipped ({', '.join(result.skipped_inputs)})"
            )
        return f"{INCOMPLETE}: {'; '.join(parts)}"
    return PASSED


@dataclass
class Result:
    """What :func:`verify.job.run_verification` found; ``ok`` only when every check ran clean."""

    mode: str
    report_dir: Path
    counts: dict[str, int]
    violations: dict[str, list[dict[str, Any]]]
    truncated: dict[str, bool] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    high_watermarks: dict[str, int] = field(default_factory=dict)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    errors_by_name: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    skipped_inputs: dict[str, str] = field(default_factory=dict)
    allowed_inputs: dict[str, str] = field(default_factory=dict)
    coverage: dict[str, str] = field(default_factory=dict)
    unacknowledged: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return verdict_of(self.counts, self.skipped, self.skipped_inputs)

    @property
    def ok(self) -> bool:
        return self.verdict == PASSED

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def violation_count(self) -> int:
        return sum(self.counts.get(name, 0) for name in ALL_CHECKS)

    @property
    def report_path(self) -> Path:
        return self.report_dir / REPORT_FILE

    @property
    def summary_path(self) -> Path:
        return self.report_dir / SUMMARY_FILE

    @property
    def timeline_path(self) -> Path:
        return self.report_dir / TIMELINE_FILE


def to_json(result: Result) -> dict[str, Any]:
    doc = {"ok": result.ok, "verdict": result.verdict, **asdict(result)}
    doc["report_dir"] = str(result.report_dir)
    return doc


def write_report(result: Result) -> Path:
    path = result.report_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(to_json(result), indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8"
    )
    tmp.replace(path)
    return path


def _row_line(name: str, row: dict[str, Any]) -> str:
    if name == "lost":
        return (
            f"{row['topic']}-{row['partition']} offset {row['offset']} value {row['value_digest']}: {row['reason']}"
            + (f" (found {', '.join(row['found_digests'])})" if row.get("found_digests") else "")
        )
    if name == "duplicate":
        where = ", ".join(f"{loc['topic']}-{loc['partition']}@{loc['offset']}" for loc in row["locations"])
        return f"value {row['value_digest']} at {row['copies']} offsets: {where}"
    if name == "divergent":
        copies = "; ".join(
            f"broker {c['broker']}: {c['value_digest']} crc {c['batch_crc']}"
            + ("" if c["crc_valid"] else " (CRC fails)")
            + f" epoch {c['leader_epoch']}"
            for c in row["copies"]
        )
        missing = (
            f"; missing on broker(s) {', '.join(map(str, row['missing_on']))}" if row["missing_on"] else ""
        )
        return (
            f"{row['topic']}-{row['partition']} offset {row['offset']}: {row['reason']} ({copies}{missing})"
        )
    if name == "ack_mismatch":
        return (
            f"{row['topic']}-{row['partition']} offset {row['offset']} value {row['value_digest']}: "
            f"{row['differs']} differ (ledger key {row['key']!r}, producer {row['producer_id']}, sequence "
            f"{row['sequence']}, acked at {row['time_ms']}; log key {row['log_key']!r}, producer "
            f"{row['log_producer_id']}, sequence {row['log_sequence']}, timestamp {row['log_timestamp']})"
        )
    if name == "sequence_gap":
        return (
            f"{row['topic']}-{row['partition']} producer {row['producer_id']}: epoch/sequence "
            f"{row['producer_epoch']}/{row['sequence']} at offset {row['offset']}, expected sequence "
            f"{row['expected_sequence']} after {row['previous_epoch']}/{row['previous_sequence']} at offset "
            f"{row['previous_offset']}"
        )
    if name == "offset_order":
        where = "the committed log" if row.get("broker") is None else f"broker {row['broker']}"
        return (
            f"{where} {row['topic']}-{row['partition']}: batch {row['base_offset']}..{row['last_offset']} "
            f"after a batch ending at {row['previous_last_offset']}"
        )
    if name == "replica_incomplete":
        who = "a replica" if row.get("broker") is None else f"broker {row['broker']}"
        return f"{who} of {row['topic']}-{row['partition']}: {row['reason']}"
    if name == "out_of_order":
        return (
            f"{row['topic']}-{row['partition']} producer {row['producer_id']}: "
            f"epoch/sequence {row['producer_epoch']}/{row['sequence']} at offset {row['offset']} "
            f"after {row.get('previous_epoch', row['producer_epoch'])}/{row['previous_sequence']} "
            f"at offset {row['previous_offset']}"
        )
    if name == "hw_above_leo":
        return (
            f"broker {row['broker']} {row['topic']}-{row['partition']}: checkpointed HW {row['checkpointed_hw']} "
            f"> log end offset {row['log_end_offset']}"
        )
    if name == "epoch_cache_inconsistent":
        return (
            f"broker {row['broker']} {row['topic']}-{row['partition']}: {'; '.join(row['problems'])} "
            f"(checkpoint {row['checkpoint']}, batches {row['batch_epoch_starts']})"
        )
    return _consumer_row_line(name, row)


def _consumer_row_line(name: str, row: dict[str, Any]) -> str:
    where = f"{row.get('topic')}-{row.get('partition')}"
    if name == "group_missed":
        return f"{where} offset {row['offset']}: committed, never consumed by the group"
    if name == "commit_went_backwards":
        return (
            f"{where}: {row['member']} (generation {row['generation']}) committed {row['offset']} at "
            f"{row['time_ms']}, after {row['previous_member']} (generation {row['previous_generation']}) "
            f"committed {row['previous_offset']} at {row['previous_time_ms']}"
        )
    if name == "consumed_value_mismatch":
        return (
            f"{where} offset {row['offset']}: consumed {row['consumed_digest']} ({row['times']} time(s) by "
            f"{', '.join(row['members'])}); {row['reason']}"
            + (f" ({row['log_digest']})" if row.get("log_digest") else "")
        )
    if name == "owned_twice":
        return f"{where} in generation {row['generation']}: assigned to {', '.join(row['members'])}"
    return _group_row_line(name, row, where)


def _group_row_line(name: str, row: dict[str, Any], where: str) -> str:
    """The per-assignment consumer checks' rows (verify/group_checks.py)."""
    who = f"{row.get('member')} (generation {row.get('generation')})"
    if name == "resumed_below_commit":
        if (row["commit_member"], row["commit_generation"]) == (row["member"], row["generation"]):
            return (
                f"{where}: {who} went back to {row['first_offset']}, below {row['commit_offset']} it had "
                f"committed (acknowledged at {row['commit_time_ms']}) in its assignment from "
                f"{row['assigned_time_ms']}"
            )
        return (
            f"{where}: {who} started at {row['first_offset']}, below {row['commit_offset']} acknowledged "
            f"for {row['commit_member']} (generation {row['commit_generation']}) at {row['commit_time_ms']}, "
            f"before its assignment at {row['assigned_time_ms']}"
        )
    if name == "fenced_commit_accepted":
        return (
            f"{where}: {row['member']} committed {row['offset']} under generation {row['generation']} at "
            f"{row['time_ms']}, after generation {row['current_generation']} assigned it to "
            f"{', '.join(row['current_members'])} at {row['current_time_ms']}"
        )
    if name == "consumed_unassigned":
        if row.get("member") is None:
            return row["reason"]
        return (
            f"{where}: {who} consumed {row['records']} record(s), offsets {row['first_offset']}.."
            f"{row['last_offset']}: {row['reason']}"
        )
    if name == "commit_ahead_of_consumed":
        to = "nothing" if row.get("consumed_to") is None else f"to {row['consumed_to']}"
        return (
            f"{where}: {who} committed {row['offset']} at {row['time_ms']} having consumed {to} "
            f"(not {row['unconsumed']})"
        )
    if name == "position_skipped":
        shown = ", ".join(map(str, row["skipped_offsets"]))
        more = f" and {row['skipped'] - len(row['skipped_offsets'])} more" * (
            row["skipped"] > len(row["skipped_offsets"])
        )
        return (
            f"{where}: {who} skipped {row['skipped']} record(s) between {row['first_offset']} and "
            f"{row['last_offset']}: {shown}{more}"
        )
    return json.dumps(row, default=str)


def _checks_run(result: Result) -> list[str]:
    """The checks to list: every one of :data:`CHECKS`, and the consumer checks that ran."""
    ran = [n for n in CONSUMER_CHECKS if n in result.counts or n in result.skipped]
    return [*CHECKS, *ran]


def summary_markdown(result: Result, shown: int = 10) -> str:
    c = result.counts
    lines = [
        f"# Verification {verdict_line(result)}",
        "",
        f"Mode: {result.mode}. Acknowledged writes: {c.get('acknowledged', 0)}; committed records: "
        f"{c.get('committed', 0)}; failed writes: {c.get('errors', 0)}."
        + (f" Consumed by the group: {c['consumed']} record(s)." if "consumed" in c else ""),
        "",
        "| check | count | what it means | what it read |",
        "|---|---:|---|---|",
    ]
    for name in _checks_run(result):
        count = "skipped" if name in result.skipped else str(c.get(name, 0))
        lines.append(f"| {name} | {count} | {DESCRIPTIONS[name]} | {result.coverage.get(name, '')} |")
    for name in _checks_run(result):
        rows = result.violations.get(name) or []
        if not rows:
            continue
        lines += ["", f"## {name} ({c.get(name, 0)})", ""]
        lines += [f"- {_row_line(name, row)}" for row in rows[:shown]]
        if c.get(name, 0) > shown:
            lines.append(f"- ... {c[name] - shown} more (see {REPORT_FILE})")
    if result.skipped:
        lines += ["", "## Skipped", ""] + [f"- {name}: {why}" for name, why in result.skipped.items()]
    if result.skipped_inputs:
        lines += ["", "## Skipped inputs (the verdict is not PASSED)", ""]
        lines += [f"- {name}: {why}" for name, why in result.skipped_inputs.items()]
    if result.allowed_inputs:
        lines += ["", "## Skipped inputs allowed by a flag", ""]
        lines += [f"- {name}: {why}" for name, why in result.allowed_inputs.items()]
    lines += _unacknowledged_lines(result, shown)
    if result.errors_by_name:
        lines += ["", "## Failed writes by error", ""]
        lines += [
            f"- {name}: {n}" for name, n in sorted(result.errors_by_name.items(), key=lambda kv: -kv[1])
        ]
    if result.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in result.notes]
    if result.timings_s:
        timings = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings_s.items())
        phases = [(v, k) for k, v in result.timings_s.items() if k != "total"]
        slowest = f" Slowest phase: {max(phases)[1]}." if phases else ""
        lines += ["", f"Timings: {timings}.{slowest}", "", f"Timeline: {TIMELINE_FILE}."]
    return "\n".join(lines) + "\n"


def _unacknowledged_lines(result: Result, shown: int) -> list[str]:
    total = result.counts.get("unacknowledged", 0)
    if not total:
        return []
    lines = [
        "",
        f"## Committed records no ack accounts for ({total}; not a violation)",
        "",
        f"{result.counts.get('failed_but_landed', 0)} of them are writes the client saw fail "
        "(expected after failures); the rest have no ledger entry.",
        "",
    ]
    for row in result.unacknowledged[:shown]:
        lines.append(
            f"- {row['topic']}-{row['partition']} producer {row['producer_id']} ({row['ledger_entry']}): "
            f"{row['records']} record(s), offsets {row['first_offset']}..{row['last_offset']}"
        )
    return lines


def write_summary(result: Result) -> Path:
    path = result.summary_path
    path.write_text(summary_markdown(result), encoding="utf-8")
    return path
