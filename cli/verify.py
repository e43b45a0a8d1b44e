"""``floodmark verify``: run the PySpark verification job over a chaos run's report dir
(docs/operations.md "Chaos runs and verification").

It reads the ledger (``R/ledger/``, Parquet chunks, or ``R/ledger.jsonl``) and ``R/events.jsonl``, the committed log of the live cluster
(``--bootstrap-server``, else ``$FLOODMARK_BOOTSTRAP``, else the local cluster's state file) and
every replica's segment files (``--log-dirs``, else the log dirs the local cluster's state file
lists), and writes ``R/verification.json``, ``R/summary.md`` and ``R/timeline.png``. A report dir
of a run with consumers (``chaos run --consumers N``) also holds ``R/consumed/``, the consumer
group's ledger: the consumer checks (group_missed, commit_went_backwards, consumed_value_mismatch,
owned_twice; verify/consumer_checks.py) then run too, and their counts are printed with the others.
``--offline`` ignores any cluster and verifies from the log dirs alone (the committed log is then
what lies below the highest checkpointed HW). When no bootstrap server can be found but log dirs
are given, the job runs offline too, and says so.

Progress goes to stderr, the verdict and counts to stdout. Exit codes: 0 when every check ran and
passed, 3 when any check found a violation or (verdict INCOMPLETE) a check or an input was
skipped (``--allow-empty-ledger``, ``--allow-unclosed-ledger``, ``--allow-missing-checkpoints``
and ``--allow-missing-log-dirs`` accept one kind of skipped input each: :mod:`verify.inputs`),
1 when the job could not run (one ``Error:`` line). Like the
other commands, the heavy imports (pyspark) happen inside the function. Wire it into the CLI with
``cli.add_command(verify.verify)`` in :mod:`cli.main`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.common import DEFAULT_DATA_DIR, STATE_FILE, CliError, bootstrap_option, resolve_bootstrap

VIOLATIONS_EXIT = 3


def _say(message: str) -> None:
    click.echo(message, err=True)


def local_cluster_log_dirs(cwd: Path | None = None) -> list[str]:
    """The brokers' log dirs from ``./.floodmark/cluster.json`` (its JSON is the contract), or []."""
    state_file = (cwd or Path.cwd()) / DEFAULT_DATA_DIR / STATE_FILE
    if not state_file.exists():
        return []
    try:
        brokers = json.loads(state_file.read_text())["brokers"]
        return [str(b["log_dir"]) for _, b in sorted(brokers.items(), key=lambda kv: int(kv[0]))]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"cannot read the log dirs from {state_file}: {exc}") from None


@click.command()
@click.option(
    "--report-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The chaos run's report dir: holds the ledger (ledger/ or ledger.jsonl) and events.jsonl; the report is written here.",
)
@bootstrap_option
@click.option(
    "--log-dirs",
    metavar="D1,D2,...",
    help="Every broker's log dir, comma-separated (default: those of the local cluster's state file).",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option("--topic", "topics", multiple=True, help="Topic to verify (repeatable; default: the ledger's).")
@click.option("--offline", is_flag=True, help="Verify from the log dirs alone; do not contact a cluster.")
@click.option(
    "--allow-empty-ledger",
    is_flag=True,
    help="Accept a report dir without a ledger, or whose ledger acknowledges nothing of the verified "
    "topics (otherwise the verdict is INCOMPLETE: a wrong report dir or --topic passes nothing).",
)
@click.option(
    "--allow-unclosed-ledger",
    is_flag=True,
    help="Accept a ledger the workload did not close (no closing marker; one torn last line): its "
    "buffered tail may be missing, so the lost check covers only what reached it.",
)
@click.option(
    "--allow-missing-checkpoints",
    is_flag=True,
    help="Accept log dirs with replicas but no readable replication-offset-checkpoint (hw_above_leo "
    "cannot see their replicas; offline, their HWs are unknown).",
)
@click.option(
    "--allow-missing-log-dirs",
    is_flag=True,
    help="Accept that some brokers the metadata's assignment lists were not given log dirs (their "
    "replicas are not read).",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Offending rows kept per check in verification.json.",
)
def verify(
    report_dir: Path,
    bootstrap_server: str | None,
    log_dirs: str | None,
    master: str,
    topics: tuple[str, ...],
    offline: bool,
    allow_empty_ledger: bool,
    allow_unclosed_ledger: bool,
    allow_missing_checkpoints: bool,
    allow_missing_log_dirs: bool,
    max_rows: int,
) -> None:
    """Check a chaos run: lost, duplicated, out-of-order and divergent records, HW and epoch caches,
    and (with a consumer ledger) what the consumer group consumed and committed."""
    dirs = [d for d in (log_dirs or "").split(",") if d.strip()] or local_cluster_log_dirs()
    bootstrap = None
    if not offline:
        try:
            bootstrap = resolve_bootstrap(bootstrap_server)
        except CliError:
            if not dirs:
                raise
            _say("no bootstrap servers found: verifying offline from the log dirs")
    if offline and not dirs:
        raise CliError("--offline needs --log-dirs (or a local cluster state file that lists them)")
    if not report_dir.is_dir():
        raise CliError(f"report dir {report_dir} does not exist")

    from verify import inputs
    from verify.job import run_verification

    allowed = {
        inputs.EMPTY_LEDGER: allow_empty_ledger,
        inputs.UNCLOSED_LEDGER: allow_unclosed_ledger,
        inputs.MISSING_CHECKPOINTS: allow_missing_checkpoints,
        inputs.MISSING_LOG_DIRS: allow_missing_log_dirs,
    }

    result = run_verification(
        report_dir,
        bootstrap,
        dirs or None,
        master,
        topics=list(topics) or None,
        progress=_say,
        row_cap=max_rows,
        allow=[name for name, given in allowed.items() if given],
    )
    verdict = {
        "FAILED": f"FAILED ({result.violation_count} violation(s))",
        "INCOMPLETE": f"INCOMPLETE ({len(result.skipped)} check(s) and {len(result.skipped_inputs)} "
        "input(s) skipped, none failed)",
    }.get(result.verdict, result.verdict)
    click.echo(f"verification {verdict}")
    for name, count in result.counts.items():
        suffix = " (skipped)" if name in result.skipped else ""
        click.echo(f"  {name}: {count}{suffix}")
    for name, why in result.skipped_inputs.items():
        click.echo(f"  skipped input {name}: {why}")
    click.echo(f"report: {result.report_path}")
    click.echo(f"summary: {result.summary_path}")
    if not result.ok:
        raise click.exceptions.Exit(VIOLATIONS_EXIT)
