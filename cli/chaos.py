"""``floodmark chaos run`` (docs/operations.md "Chaos runs and verification"; issue 4 item 3): a
workload under a seeded fault schedule, then the Spark verification. The CLI is the operator's
composition root, so this command imports the chaos runner (inside the function, like ``cluster``)
and is the one place that hands it the verification job (:func:`run_chaos`): chaos and verify never
import each other.

Exit codes: 0 when the verification found nothing and every heal succeeded, 3 when the
verification found a violation (as ``floodmark verify``), 4 when it found none (or did not run)
but a heal failed (a faulted broker or ZooKeeper could not be brought back: the run verified what
was acknowledged anyway, offline from the log dirs when the cluster could not serve), 1 when the
run could not be carried out (one ``Error:`` line). With ``--stop`` the local cluster is stopped
in every one of these cases.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.common import CliError, parse_pairs, run

if TYPE_CHECKING:
    from chaos.run import ChaosResult, ChaosSettings, Say

VIOLATIONS_EXIT = 3
HEAL_FAILED_EXIT = 4


def say(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


def verify_run(
    report_dir: Path,
    bootstrap: str | None,
    log_dirs: list[str],
    master: str,
    topics: list[str],
    progress: Say,
    spark: Any = None,
) -> bool:
    """The chaos runner's verifier: the Spark verification job over the run's ledger, the
    committed log and every replica's segments (offline, from the log dirs alone, when
    ``bootstrap`` is None). Here, in the composition root, because chaos and verify never import
    each other."""
    from verify.job import run_verification

    return run_verification(
        report_dir, bootstrap, log_dirs, master, topics=topics, progress=progress, spark=spark
    ).ok


async def run_chaos(settings: ChaosSettings, progress: Say, spark: Any = None) -> ChaosResult:
    """``chaos.run.run_chaos`` with the verification job wired in (``settings.verify`` decides);
    ``spark``: a SparkSession to verify in (left running) instead of one the job starts."""
    from chaos.run import run_chaos as run_faults

    verifier = verify_run if spark is None else functools.partial(verify_run, spark=spark)
    return await run_faults(settings, progress, verifier=verifier)


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
    "zk-pause, fd-pressure, reassign, consumer (partition and the disk faults need root; the disk "
    "faults put the brokers on faultable disks; zk-pause stops ZooKeeper for half a session timeout, "
    "local backend only; fd-pressure lowers a leader's open-file limit just above the descriptors it "
    "holds with prlimit, then restores it; reassign moves a partition to random live brokers, so it needs more "
    "brokers than replicas; consumer crashes a member of the consumer group, so it needs --consumers).",
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
    "--consumers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Members of a consumer group reading the topic during the faults (R/consumed/ records what "
    "they consumed and committed; the verification checks it). 0: no consumers.",
)
@click.option(
    "--client",
    type=click.Choice(["floodmark", "kafka"]),
    default="floodmark",
    show_default=True,
    help="The producers and consumers: floodmark's own client, or Kafka's (confluent-kafka, librdkafka: "
    "idempotent acks=all producers, a Range group of consumer processes) over the brokers' KAFKA "
    "listener. The ledgers and the verification are the same.",
)
@click.option(
    "--kafka-bootstrap-server",
    "kafka_bootstrap_server",
    metavar="HOST:PORT[,HOST:PORT]",
    help="The KAFKA listener to use with --client kafka and --backend docker (the local runner knows its own).",
)
@click.option(
    "--zookeeper-port",
    type=click.IntRange(1, 65535),
    help="ZooKeeper's port for a cluster this run starts.  [default: a free port]",
)
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535),
    help="Broker i's port for a cluster this run starts is base-port + i - 1.  [default: a free block]",
)
@click.option(
    "--kafka-base-port",
    type=click.IntRange(1, 65535),
    help="Broker i's KAFKA listener for a cluster this run starts is kafka-base-port + i - 1.  "
    "[default: base-port + 100, or a free block]",
)
@click.option(
    "--master", default="local[2]", show_default=True, help="Spark master URL for the verification."
)
@click.option(
    "--no-verify", is_flag=True, help="Skip the Spark verification (run it later with `floodmark verify`)."
)
@click.option(
    "--stop",
    "stop_cluster",
    is_flag=True,
    help="Stop the local cluster at the end, whatever the outcome (a failed heal, an error, Ctrl-C).",
)
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
    consumers: int,
    client: str,
    kafka_bootstrap_server: str | None,
    zookeeper_port: int | None,
    base_port: int | None,
    kafka_base_port: int | None,
    master: str,
    no_verify: bool,
    stop_cluster: bool,
    ledger_format: str,
) -> None:
    """Write with idempotent acks=all producers while brokers crash, pause, shut down and get cut
    off; heal; then verify with Spark that nothing acknowledged was lost, duplicated or diverged."""
    from chaos.run import ChaosSettings

    kinds = _fault_kinds(faults, backend, consumers)
    if client == "kafka" and backend == "docker" and not kafka_bootstrap_server:
        raise click.BadParameter(
            "--client kafka with --backend docker needs --kafka-bootstrap-server (the KAFKA listener)",
            param_hint="--client",
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
        consumers=consumers,
        client=client,
        kafka_bootstrap=kafka_bootstrap_server,
        zookeeper_port=zookeeper_port,
        base_port=base_port,
        kafka_base_port=kafka_base_port,
        records_per_second=rate,
        verify=not no_verify,
        master=master,
        stop_cluster=stop_cluster,
        ledger_format=ledger_format,
    )
    result = _run_reporting_runner_errors(settings)
    lines, code = conclusion(result)
    for line in lines:
        click.echo(line)
    if code:
        raise SystemExit(code)


def _fault_kinds(faults: str, backend: str, consumers: int) -> tuple[str, ...]:
    """``--faults`` parsed, refusing the kinds this run cannot inject (click's BadParameter)."""
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
    if "consumer" in kinds and consumers < 1:
        raise click.BadParameter(
            "the consumer fault crashes a member of the run's consumer group: add --consumers N (N >= 1)",
            param_hint="--faults",
        )
    return kinds


def conclusion(result: ChaosResult) -> tuple[list[str], int]:
    """The lines ``chaos run`` ends with, and its exit code: every failed heal and the verdict,
    both, since either alone would hide the other."""
    lines = [
        f"chaos run: {result.faults} faults, {result.acknowledged:,} acknowledged, {result.failed:,} failed; "
        f"report in {result.report_dir}"
    ]
    if result.disk_plan is not None:
        lines.append(f"faultable disks: {result.disk_plan.describe()}")
    if result.consumers:
        c = result.consumers
        drained = {True: "read to the end", False: "NOT read to the end", None: "not drained"}[
            c.get("drained")
        ]
        lines.append(
            f"consumer group: {c.get('consumed', 0):,} consumed, {c.get('commits', 0):,} commits, "
            f"{c.get('crashes', 0)} crashed; {drained}"
        )
    for failure in result.heal_failures:
        whom = f"broker {failure['broker']}" if "broker" in failure else failure.get("target", "?")
        lines.append(f"heal FAILED: {whom} ({failure['kind']}): {failure['error']}")
    if result.unhealed:
        lines.append(f"still faulted at the end: {', '.join(result.unhealed)}")
    how = " (offline, from the log dirs: the cluster could not serve)" if result.verified_offline else ""
    if result.verification_ok is None:
        lines.append(f"verification skipped: run `floodmark verify --report-dir {result.report_dir}`")
    elif result.verification_ok:
        also = "; the consumer group's checks passed" if result.consumers else ""
        lines.append(f"verification{how}: OK (nothing lost, duplicated or divergent{also})")
    else:
        lines.append(f"verification{how}: FAILED, see {result.report_dir / 'summary.md'}")
        return lines, VIOLATIONS_EXIT
    if result.heal_failures:
        lines.append(f"exit {HEAL_FAILED_EXIT}: a heal failed (see {result.report_dir / 'summary.md'})")
        return lines, HEAL_FAILED_EXIT
    return lines, 0
