"""``floodmark ledger convert`` (docs/operations.md "Chaos runs and verification", "The ledger's
two forms"): a chaos run's ledger from JSON lines to Parquet chunks or back
(:mod:`ledger.convert`). Like the other commands it imports the ledger package (and pyarrow)
inside the function, so ``floodmark --help`` works whatever is installed.

Progress goes to stderr (a line every million entries), the outcome to stdout.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from cli.common import CliError


def _say(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


@click.group()
def ledger() -> None:
    """A chaos run's ledger of acknowledged and failed writes."""


@ledger.command()
@click.argument("report_dir", metavar="R", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--to",
    "to",
    type=click.Choice(["parquet", "jsonl"]),
    default="parquet",
    show_default=True,
    help="The form to write: Parquet chunks in R/ledger/, or JSON lines in R/ledger.jsonl.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the converted ledger (and a copy of events.jsonl) into this report dir instead of R.",
)
def convert(report_dir: Path, to: str, out: Path | None) -> None:
    """Convert R's ledger to the other form, keeping the original; refuses an existing target.

    Next to the original (no --out), R then holds both forms, which the readers refuse: move one
    of them out of R before verifying."""
    if not report_dir.is_dir():
        raise CliError(f"report dir {report_dir} does not exist")
    from ledger.convert import convert as convert_ledger

    _say(f"converting the ledger in {report_dir} to {to}")
    result = convert_ledger(report_dir, to, out=out, progress=_say)
    for note in result.notes:
        _say(f"note: {note}")
    if result.not_a_digest:
        _say(f"note: {result.not_a_digest} value digest(s) were not 32 hex characters: stored as no digest")
    click.echo(
        f"converted {result.acks:,} ack(s) and {result.errors:,} error(s) from {result.source} to "
        f"{result.target} in {result.seconds:.1f} s"
    )
