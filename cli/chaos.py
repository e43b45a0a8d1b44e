"""``floodmark chaos run`` (docs/operations.md "Chaos runs and verification"; issue 4 item 3): a
workload under a seeded fault schedule, then the Spark verification. The CLI is the operator's
composition root, so this command imports the chaos runner (inside the function, like ``cluster``)
and is the one place that hands it the verification job (:func:`run_chaos`): chaos and verify never
import each other.

Exit codes: 0 when the verification found nothing, 3 when it found a violation (as
``floodmark verify``), 1 when the run could not be carried out (one ``Error:`` line).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.common import CliError, parse_pairs, run

if TYPE_CHECKING:
    from chaos.run import ChaosResult, ChaosSettings, Say

VIOLATIONS_EXIT = 3


def say(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


def verify_run(
    report_dir: Path, bootstrap: str, log_dirs: list[str], master: str, topics: list[str], progress: Say
) -> bool:
    """The chaos runner's verifier: the Spark verification job over the run's ledger, the
    committed log and every replica's segments. Here, in the composition root, because chaos and
    verify never import each other."""
    from verify.job import run_verification

    return run_verification(report_dir, bootstrap, log_dirs, master, topics=topics, progress=progress).ok


async def run_chaos(settings: ChaosSettings, progress: Say) -> ChaosResult:
    """``chaos.run.run_chaos`` with the verification job wired in (``settings.verify`` decides)."""
    from chaos.run import run_chaos as run_faults

    return await run_faults(settings, progress, verifier=verify_run)


def _run_reporting_runner_errors(settings: ChaosSettings) -> ChaosResult:
    """The run; the local runner's failures (a broker that does not start, a disk that cannot be
    mounted) as one ``Error:`` line."""
    from chaos.faults import FaultUnsupported
    from devcluster.disk import DiskError
    from devcluster.errors import ClusterError
    from devcluster.zookeeper import ZooKeeperUnavailable

    try:
        return run(run_chaos(settings, say))
    except (ClusterError, DiskError, FaultUnsupported, ZooKeeperUnavailable) as exc:
        first, *rest = str(exc).splitlines() or [exc.__class__.__name__]
        raise CliError("\n".join([first, *("    " + line for line in rest)])) from None


@click.group()
def chaos() -> None:
    """Fault-injection runs against a cluster, verified from the committed logs."""


@chaos.command("run")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".floodmark"),
    show_default=True,
    help="The local cluster's directory (started there when not running).",
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where the ledger, the timeline and the verification report go.",
)
@click.option(
    "--duration", type=click.FloatRange(min=5), default=90, show_default=True, help="Seconds of chaos."
)
@click.option(
    "--seed", type=int, default=1, show_default=True, help="The same seed gives the same fault schedule."
)
@click.option(
    "--faults",
    default="kill,pause,controller,term",
    show_default=True,
    help="Comma-separated from kill, pause, controller, term, partition, disk-full, disk-error, "
    "zk-pause (partition and the disk faults need root; the disk faults put the brokers on faultable "
    "disks; zk-pause stops ZooKeeper for half a session timeout, local backend only).",
)
@click.option("--topic", default="chaos", show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--replication-factor", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--min-insync-replicas", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--backend", type=click.Choice(["local", "docker"]), default="local", show_default=True)
@click.option(
    "--bootstrap-server",
    "bootstrap_server",
    metavar="HOST:PORT[,HOST:PORT]",
    help="The cluster to use with --backend docker.",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Broker property for a cluster this run starts (repeatable).",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=1),
    default=400,
    show_default=True,
    help="Records per second over all writers.",
)
@click.option(
    "--writers", type=click.IntRange(min=1), default=2, show_default=True, help="Idempotent producers."
)
@click.option(
    "--master", default="local[2]", show_default=True, help="Spark master URL for the verification."
)
@click.option(
    "--no-verify", is_flag=True, help="Skip the Spark verification (run it later with `floodmark verify`)."
)
@click.option("--stop", "stop_cluster", is_flag=True, help="Stop the local cluster at the end.")
@click.option(
    "--ledger-format",
    type=click.Choice(["parquet", "jsonl"]),
    default="parquet",
    show_default=True,
    help="The ledger's form: Parquet chunks in R/ledger/, or JSON lines in R/ledger.jsonl (the old form).",
)
def run_command(
    data_dir: Path,
    report_dir: Path,
    duration: float,
    seed: int,
    faults: str,
    topic: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
    backend: str,
    bootstrap_server: str | None,
    configs: tuple[str, ...],
    rate: float,
    writers: int,
    master: str,
    no_verify: bool,
    stop_cluster: bool,
    ledger_format: str,
) -> None:
    """Write with idempotent acks=all producers while brokers crash, pause, shut down and get cut
    off; heal; then verify with Spark that nothing acknowledged was lost, duplicated or diverged."""
    from chaos.run import ChaosSettings
    from chaos.schedule import parse_fault_kinds

    try:
        kinds = parse_fault_kinds(faults)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    if backend == "docker" and "zk-pause" in kinds:
        raise click.BadParameter(
            "zk-pause signals the local runner's ZooKeeper process: use --backend local",
            param_hint="--faults",
        )
    settings = ChaosSettings(
        data_dir=data_dir,
        report_dir=report_dir,
        duration_s=duration,
        seed=seed,
        faults=kinds,
        topic=topic,
        partitions=partitions,
        replication_factor=replication_factor,
        min_insync_replicas=min_insync_replicas,
        backend=backend,
        bootstrap=bootstrap_server,
        overrides=parse_pairs(configs, "--config"),
        writers=writers,
        records_per_second=rate,
        verify=not no_verify,
        master=master,
        stop_cluster=stop_cluster,
        ledger_format=ledger_format,
    )
    result = _run_reporting_runner_errors(settings)
    click.echo(
        f"chaos run: {result.faults} faults, {result.acknowledged:,} acknowledged, {result.failed:,} failed; "
        f"report in {result.report_dir}"
    )
    if result.verification_ok is None:
        click.echo(f"verification skipped: run `floodmark verify --report-dir {result.report_dir}`")
    elif result.verification_ok:
        click.echo("verification: OK (nothing lost, duplicated or divergent)")
    else:
        click.echo(f"verification: FAILED, see {result.report_dir / 'summary.md'}")
        raise SystemExit(VIOLATIONS_EXIT)
