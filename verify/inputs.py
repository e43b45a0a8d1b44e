"""Which inputs the verification job could not read in full, and which of them a flag allows
(docs/operations.md "Chaos runs and verification"): a check over less than the run wrote proves
less than its zero says, so every such input is named in the report and turns the verdict
INCOMPLETE (:mod:`verify.report`) unless the flag that allows it was given.

The inputs, and the flag (``floodmark verify --allow-...``) that allows each:

* ``ledger`` - no ledger in the report dir, or none of its acks is of a verified topic (a wrong
  report dir or ``--topic``, or a run where every write failed): ``--allow-empty-ledger``;
* ``ledger_closed`` - the ledger has no closing marker (``_CLOSED``, or the JSON-lines form's last
  line): the workload stopped without closing it and its buffered tail may be lost:
  ``--allow-unclosed-ledger``;
* ``ledger_entries`` - entries that cannot be used: malformed JSON lines, acks without topic,
  partition or offset, or counts that disagree with the closing marker (lines or chunks lost in
  between: the report names the ledger, what its marker counts and what was read).
  Only one torn last line of an unclosed ledger is what a crash leaves, and only that is allowed
  (by ``--allow-unclosed-ledger``);
* ``consumer_ledger`` - a consumer ledger (``R/consumed/``) whose complete chunks hold fewer or
  more rows, of any kind, than its closing record counts (:mod:`verify.consumer_ledger`); no flag;
* ``hw_checkpoints`` - a log dir with replicas but no readable ``replication-offset-checkpoint``:
  hw_above_leo cannot see its replicas, and offline its HWs are unknown: ``--allow-missing-checkpoints``;
* ``log_start_checkpoints`` - a log dir with replicas whose ``log-start-offset-checkpoint``
  exists but cannot be read (a missing one is a broker that has not written it yet, every
  ``log.flush.start.offset.checkpoint.interval.ms``, and reads as each replica's first segment):
  its replicas' log starts are unknown, so offline the records below them may count as
  committed: ``--allow-missing-checkpoints``;
* ``log_dirs`` - brokers that the assignment in the metadata lists for a replica but whose log
  dirs were not given: their replicas were not read: ``--allow-missing-log-dirs``;
* ``assignment`` - the run recorded its assignment (``R/assignment.json``) but the file cannot be
  read: replica_incomplete falls back on the checkpoints, which cannot see a replica lost with
  its checkpoint entry (:mod:`verify.assignment`); no flag;
* ``consumer_ledger`` (again) - no consumer ledger although the run's ``R/run.json`` says it had
  consumers (:mod:`verify.run_record`): none of the consumer checks ran; no flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

EMPTY_LEDGER = "empty-ledger"
UNCLOSED_LEDGER = "unclosed-ledger"
MISSING_CHECKPOINTS = "missing-checkpoints"
MISSING_LOG_DIRS = "missing-log-dirs"
ALLOWANCES = (EMPTY_LEDGER, UNCLOSED_LEDGER, MISSING_CHECKPOINTS, MISSING_LOG_DIRS)


def flag(allowance: str) -> str:
    return f"--allow-{allowance}"


@dataclass
class SkippedInputs:
    """The inputs skipped so far: ``skipped`` turn the verdict INCOMPLETE, ``allowed`` do not."""

    allow: frozenset[str] = frozenset()
    skipped: dict[str, str] = field(default_factory=dict)
    allowed: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.allow) - set(ALLOWANCES)
        if unknown:
            raise ValueError(f"unknown allowance(s) {sorted(unknown)}: choose from {ALLOWANCES}")

    def skip(self, name: str, why: str, allowance: str | None) -> None:
        if allowance is not None and allowance in self.allow:
            self.allowed[name] = f"{why} (allowed by {flag(allowance)})"
        elif allowance is not None:
            self.skipped[name] = f"{why}; {flag(allowance)} accepts it"
        else:
            self.skipped[name] = why


@dataclass(frozen=True)
class LedgerFacts:
    """What the job counted in the ledger."""

    form: str | None  # parquet, jsonl, or None: no ledger
    closed: dict[str, int] | None  # the closing marker's totals; None: not closed
    acks: int  # ack entries of every topic
    errors: int
    verified_acks: int  # usable acks of the verified topics
    malformed: int  # lines that are no JSON object of the schema
    unusable_acks: int  # acks without topic, partition or offset
    location: str = "the ledger"  # its path, as the report names it
    chunks_read: int | None = None  # the columnar form's complete chunks


def ledger_inputs(skipped: SkippedInputs, ledger: LedgerFacts) -> None:
    if ledger.form is None:
        skipped.skip("ledger", "no ledger in the report dir: nothing acknowledged to look for", EMPTY_LEDGER)
    elif ledger.verified_acks == 0:
        skipped.skip(
            "ledger",
            "the ledger holds no acknowledged write of the verified topics (a wrong report dir or "
            "--topic, or a run where every write failed)",
            EMPTY_LEDGER,
        )
    if ledger.form is None:
        return
    problems, short = [], None
    if ledger.closed is None:
        skipped.skip(
            "ledger_closed",
            "the ledger was not closed (the workload stopped without closing it): its buffered tail may be missing",
            UNCLOSED_LEDGER,
        )
    else:
        short = _totals_problem(ledger, ledger.closed)
    if ledger.malformed:
        problems.append(f"{ledger.malformed} malformed line(s)")
    if ledger.unusable_acks:
        problems.append(f"{ledger.unusable_acks} ack(s) without topic, partition or offset")
    if problems or short:
        torn_tail = ledger.closed is None and ledger.malformed == 1 and len(problems) == 1
        why = "; ".join(
            ([short] if short else []) + (["the ledger has " + "; ".join(problems)] if problems else [])
        )
        if torn_tail:
            why += " (a torn last line is what a crash leaves)"
        skipped.skip("ledger_entries", why, UNCLOSED_LEDGER if torn_tail else None)


def _totals_problem(ledger: LedgerFacts, closed: dict[str, int]) -> str | None:
    """The ledger against its closing totals (chunks, acks, errors): what they count and what
    was read, or None when they agree (issue 34 item 8: a chunk lost in the middle)."""
    chunks = ledger.chunks_read is not None and "chunks" in closed
    if (closed["acks"], closed["errors"]) == (ledger.acks, ledger.errors) and (
        not chunks or closed["chunks"] == ledger.chunks_read
    ):
        return None
    marker = "marker" if chunks else "line"
    counted = f"{closed['chunks']} chunk(s), " if chunks else ""
    read = f"{ledger.chunks_read} chunk(s) were read, holding " if chunks else ""
    return (
        f"{ledger.location}: its closing {marker} counts {counted}{closed['acks']} ack(s) and "
        f"{closed['errors']} error(s); {read}{ledger.acks} ack(s) and {ledger.errors} error(s)"
        + ("" if chunks else " were read")
    )


def checkpoint_inputs(skipped: SkippedInputs, missing: list[str]) -> None:
    if missing:
        skipped.skip(
            "hw_checkpoints",
            "; ".join(missing) + ": hw_above_leo cannot see these replicas",
            MISSING_CHECKPOINTS,
        )


def log_start_checkpoint_inputs(skipped: SkippedInputs, unreadable: list[str]) -> None:
    if unreadable:
        skipped.skip(
            "log_start_checkpoints",
            "; ".join(unreadable)
            + ": these replicas' log start offsets are unknown (read as their first segment's base), so "
            "records below them may count as committed",
            MISSING_CHECKPOINTS,
        )


def assignment_inputs(skipped: SkippedInputs, problem: str) -> None:
    skipped.skip(
        "assignment",
        f"the run's recorded assignment cannot be read ({problem}): replica_incomplete falls back on the "
        "checkpoints, which cannot see a replica lost together with its checkpoint entry",
        None,
    )


def log_dir_inputs(skipped: SkippedInputs, assigned: Iterable[int], read: Iterable[int]) -> None:
    unread = sorted(set(assigned) - set(read))
    if unread:
        skipped.skip(
            "log_dirs",
            f"broker(s) {', '.join(map(str, unread))} hold replicas in the assignment but their log dirs "
            "were not given: their replicas were not read",
            MISSING_LOG_DIRS,
        )
