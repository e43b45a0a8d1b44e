"""The ledger as the verification job reads it (docs/design.md "Verification job"): one
DataFrame of entries, with the same columns (:data:`ENTRY_COLUMNS`) whichever form the report
dir's ledger has (:func:`ledger.format.ledger_form`), so every check reads it the same way.

* ``R/ledger/`` (:mod:`ledger.columnar`): Spark's Parquet reader over the chunks (its file
  listing skips the ``_OPEN``/``_CLOSED`` markers and the hidden temporary names of unfinished
  chunks); the digest's halves are columns, its hex text a projection computed only for the
  rows a report shows; no malformed entries; an unclosed ledger's note goes into the notes.
* ``R/ledger.jsonl`` (:mod:`ledger.jsonl`): Spark's JSON reader in PERMISSIVE mode, a
  malformed line kept as kind ``malformed`` (counted by the job), the hex digest split into
  halves (:func:`verify.checks.digest_halves`), all parsed once into the cache.

Then :func:`acks_and_errors` splits the entries into the verified topics' acks and errors, and
:func:`ledger_facts` sums up the ledger as a whole for :mod:`verify.inputs`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from ledger.columnar import LEDGER_COLUMNAR_DDL
from ledger.columnar import inspect as inspect_chunks
from ledger.format import LEDGER_DDL, LEDGER_DIR, LEDGER_FILE, closed_totals, ledger_form
from verify import checks
from verify.inputs import LedgerFacts

CORRUPT = "_corrupt_record"
#: The ledger's entries as the checks read them, whichever the ledger's form.
ENTRY_COLUMNS = (
    "kind",
    "topic",
    "partition",
    "offset",
    "key",
    "value_digest",
    "producer_id",
    "sequence",
    "time_ms",
    "latency_ms",
    "error",
    "digest_hi",
    "digest_lo",
)


def _empty(spark: Any, ddl: str) -> Any:
    return spark.createDataFrame([], ddl)


def ledger_entries(spark: Any, report_dir: Path, notes: list[str], keep: Callable[[Any], Any]) -> Any:
    """The report dir's ledger entries (``keep`` caches a DataFrame); notes for the report are
    appended to ``notes``."""
    if ledger_form(report_dir) == "parquet":
        return _columnar_entries(spark, report_dir / LEDGER_DIR, notes)
    return _json_entries(spark, report_dir / LEDGER_FILE, notes, keep)


def _json_entries(spark: Any, path: Path, notes: list[str], keep: Callable[[Any], Any]) -> Any:
    """The entries of a JSON-lines ledger: parsed once (malformed lines kept, as kind
    ``malformed``, to be counted), the hex digest split into its halves, cached."""
    from pyspark.sql import functions as F

    if path.exists() and path.stat().st_size > 0:
        ledger = (
            spark.read.schema(f"{LEDGER_DDL}, {CORRUPT} string")
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .json(str(path))
        )
    else:
        notes.append(f"no ledger at {path}: nothing acknowledged to look for")
        ledger = _empty(spark, f"{LEDGER_DDL}, {CORRUPT} string")
    # Parse the JSON once: every later use reads this cached projection, with the digest's halves.
    return keep(
        ledger.select(
            F.when(F.col(CORRUPT).isNotNull(), F.lit("malformed"))
            .otherwise(F.coalesce(F.col("type"), F.lit("ack")))
            .alias("kind"),
            *ENTRY_COLUMNS[1:5],
            "value_digest",
            *ENTRY_COLUMNS[6:11],
            *checks.digest_halves(),
        )
    )


def _columnar_entries(spark: Any, directory: Path, notes: list[str]) -> Any:
    """The entries of a columnar ledger, with the same columns as :func:`_json_entries`: the
    digest's halves are columns already; its hex text (for the rows a report shows) is a
    projection, computed only where a check reads it. An unclosed
    ledger's note goes into the report's notes."""
    chunk_dir = inspect_chunks(directory)
    notes.extend(chunk_dir.notes())
    if chunk_dir.chunks:
        # Spark's file listing skips the markers and the hidden temporary names, as inspect does.
        ledger = spark.read.schema(LEDGER_COLUMNAR_DDL).parquet(str(directory))
    else:
        notes.append(f"no ledger chunks in {directory}: nothing acknowledged to look for")
        ledger = _empty(spark, LEDGER_COLUMNAR_DDL)
    # Not cached: a scan of the chunks' columns costs less than building Spark's in-memory cache
    # from them (docs/design.md "Staged inputs"), and every check reads only the columns it needs.
    return ledger.select(*(checks.digest_hex().alias(c) if c == "value_digest" else c for c in ENTRY_COLUMNS))


def acks_and_errors(entries: Any, topics: list[str]) -> tuple[Any, Any]:
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


def ledger_facts(report_dir: Path, stats: list[Any], topics: list[str]) -> LedgerFacts:
    """What the job needs to know of the ledger as a whole (:mod:`verify.inputs`), from the
    per (kind, topic, unusable) counts of its entries."""

    def total(kind: str, **where: Any) -> int:
        return sum(
            int(row["count"])
            for row in stats
            if row["kind"] == kind and all(row[k] == v for k, v in where.items())
        )

    form = ledger_form(report_dir)
    where = report_dir / (LEDGER_DIR if form == "parquet" else LEDGER_FILE)
    return LedgerFacts(
        form=form,
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
        location=str(where),
        chunks_read=len(inspect_chunks(where).chunks) if form == "parquet" else None,
    )
