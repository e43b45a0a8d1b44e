"""The consumer ledger (``R/consumed/``, :mod:`ledger.consumed`) as the verification job reads it,
and held against its own closing record (docs/operations.md "Chaos runs and verification";
issue 34 item 8).

The writer's ``_CLOSED`` carries its totals: the chunks written, the rows, and the rows of each
kind (``consumed``, ``committed``, ``assigned``). A ledger whose complete chunks hold fewer (a
chunk lost in the middle) or more rows than that is a skipped input, ``consumer_ledger``: the
verdict is INCOMPLETE, not PASSED, because a check over part of the ledger proves only that part.
With rows missing, the checks that a missing row could make fire falsely (a consumed row gone
looks like a record missed or skipped, or a commit ahead of its consumption; an assignment row
gone makes its records look unassigned) are skipped, and the others run: what they find is
there. An unclosed ledger (no ``_CLOSED``) may miss only its tail, which fakes nothing but
``group_missed`` (:func:`verify.consumer_checks.ledger_notes`). A closing record written before
totals existed is read as it is, with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from ledger.columnar import inspect as inspect_chunks
from ledger.consumed import CONSUMED_DIR, CONSUMER_KINDS, CONSUMER_LEDGER_DDL
from verify.inputs import SkippedInputs

CONSUMER_LEDGER_INPUT = "consumer_ledger"


def read_consumer_rows(spark: Any, report_dir: Path) -> DataFrame:
    """Every row of the consumer ledger's complete chunks (every topic)."""
    directory = Path(report_dir) / CONSUMED_DIR
    if inspect_chunks(directory).chunks:
        return spark.read.schema(CONSUMER_LEDGER_DDL).parquet(str(directory))
    return spark.createDataFrame([], CONSUMER_LEDGER_DDL)


def _totals(chunks: int, rows: int, kinds: dict[str, int]) -> str:
    each = ", ".join(f"{kinds.get(k, 0)} {k}" for k in CONSUMER_KINDS)
    return f"{chunks} chunk(s) of {rows} row(s) ({each})"


def check_totals(
    ledger: DataFrame,
    directory: Path,
    closed: dict[str, Any] | None,
    skipped: SkippedInputs | None,
    notes: list[str],
) -> str | None:
    """Hold the ledger's rows against its closing record's totals; a mismatch is the skipped
    input :data:`CONSUMER_LEDGER_INPUT`. Returns why rows are missing (None: none are)."""
    if closed is None:
        return None  # unclosed: ledger_notes says so
    if "rows" not in closed:
        notes.append(
            f"{directory}/_CLOSED records no totals (a ledger written before they were): whether "
            "rows are missing in between cannot be told"
        )
        return None
    kinds = {r["kind"]: int(r["count"]) for r in ledger.groupBy("kind").count().collect()}
    chunks = len(inspect_chunks(directory).chunks)
    want = {k: int(closed.get(k) or 0) for k in CONSUMER_KINDS}
    got = {k: kinds.get(k, 0) for k in CONSUMER_KINDS}
    rows, expected, written = sum(kinds.values()), int(closed["rows"]), int(closed.get("chunks", chunks))
    if (chunks, rows, got) == (written, expected, want):
        return None
    why = (
        f"{directory}: its closing record counts {_totals(written, expected, want)}; "
        f"{chunks} chunk(s) were read, {rows} row(s) ({', '.join(f'{n} {k}' for k, n in got.items())})"
    )
    if skipped is not None:
        skipped.skip(CONSUMER_LEDGER_INPUT, why, None)
    else:
        notes.append(why)
    short = rows < expected or chunks < written or any(got[k] < n for k, n in want.items())
    return f"rows of the consumer ledger are missing ({why})" if short else None


def outside_assignment(closed: dict[str, Any] | None) -> int | None:
    """The workload's own count of records its members' polls returned from partitions not
    assigned to them then (chaos/consumers.py), None when the closing record has none."""
    value = (closed or {}).get("outside_assignment")
    return int(value) if isinstance(value, int) else None
