"""``floodmark cluster up|status|down|kill|start|isolate|disk``: the local cluster runner's commands
(docs/operations.md "Local cluster layout"). ``disk`` fills or breaks a broker's disk
(docs/operations.md, "Disk faults"). ``up`` and ``status`` print each broker's Prometheus
``/metrics`` address (docs/operations.md "Metrics (`/metrics`)") and, beside the bootstrap
servers, the ``kafka bootstrap servers``: the brokers' KAFKA listeners (KIP-103), which speak
Kafka's binary protocol for kcat and confluent-kafka.

This group is the operator's composition root: it is the only part of ``client`` that touches
``chaos`` (lazily, inside each command). Client library code never imports ``chaos``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from cli.common import DEFAULT_DATA_DIR, CliError, parse_pairs

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DATA_DIR,
    show_default=True,
    help="Directory holding the cluster's state file, ZooKeeper data and broker log dirs.",
)


@contextmanager
def _runner_errors() -> Iterator[None]:
    """The runner's failures as CliError: first line is the error, any log tail follows indented."""
    from devcluster.disk import DiskError
    from devcluster.errors import ClusterError
    from devcluster.zookeeper import ZooKeeperUnavailable

    try:
        yield
    except (ClusterError, DiskError, ZooKeeperUnavailable) as exc:
        first, *rest = str(exc).splitlines() or [exc.__class__.__name__]
        raise CliError("\n".join([first, *("    " + line for line in rest)])) from None


def _echo(message: str) -> None:
    click.echo(message)


@click.group()
def cluster() -> None:
    """Run a local ZooKeeper plus brokers as processes (the local runner)."""


@cluster.command()
@click.option(
    "--brokers", type=click.IntRange(min=1), default=3, show_default=True, help="Number of brokers."
)
@data_dir_option
@click.option("--zookeeper-port", type=click.IntRange(1, 65535), default=2181, show_default=True)
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535),
    default=9092,
    show_default=True,
    help="Broker i listens on base-port + i - 1.",
)
@click.option(
    "--metrics-base-port",
    type=click.IntRange(1, 65535),
    help="Broker i serves Prometheus /metrics on metrics-base-port + i - 1 (`--config metrics.port=-1` "
    "turns /metrics off).  [default: a free block of loopback ports, recorded in cluster.json]",
)
@click.option(
    "--kafka-base-port",
    type=click.IntRange(1, 65535),
    help="Broker i's KAFKA listener (Kafka's wire protocol, for kcat and confluent-kafka) is on "
    "kafka-base-port + i - 1.  [default: base-port + 100, 9192.. beside 9092..; a free block when that is "
    "busy; recorded in cluster.json]",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Broker property for every broker (repeatable).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60,
    show_default=True,
    help="Seconds to wait for registration.",
)
@click.option(
    "--netns",
    is_flag=True,
    help="Run each broker in its own network namespace (root only), so `cluster isolate` can partition it.",
)
@click.option(
    "--disk-faults",
    is_flag=True,
    help="Put each broker's log dir on a FUSE filesystem over a tmpfs (root only), so `cluster disk` can fill or break it.",
)
@click.option(
    "--disk-size",
    metavar="SIZE",
    help="The size of each broker's tmpfs with --disk-faults, e.g. 64m, 512k, 1g.  [default: 64m]",
)
@click.option(
    "--log-dirs-per-broker",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="JBOD: log.dirs of each broker (data, data-2, ...); with --disk-faults only the first is on the "
    "faultable disk, so a failing disk takes one dir offline and the broker keeps serving the others.",
)
def up(
    brokers: int,
    data_dir: Path,
    zookeeper_port: int,
    base_port: int,
    metrics_base_port: int | None,
    kafka_base_port: int | None,
    configs: tuple[str, ...],
    timeout: float,
    netns: bool,
    disk_faults: bool,
    disk_size: str | None,
    log_dirs_per_broker: int,
) -> None:
    """Start ZooKeeper and N brokers; wait until all are registered and a controller is elected."""
    from devcluster.cluster import LocalCluster
    from devcluster.disk import DEFAULT_SIZE

    if disk_size is not None and not disk_faults:
        raise click.UsageError("--disk-size needs --disk-faults")
    overrides = parse_pairs(configs, "--config")
    with _runner_errors():
        runner = LocalCluster(data_dir, progress=_echo)
        state = runner.up(
            brokers,
            zookeeper_port=zookeeper_port,
            base_port=base_port,
            overrides=overrides,
            timeout=timeout,
            netns=netns,
            disk_size=(disk_size or DEFAULT_SIZE) if disk_faults else None,
            log_dirs_per_broker=log_dirs_per_broker,
            metrics_base_port=metrics_base_port,
            kafka_base_port=kafka_base_port,
        )
    click.echo(f"bootstrap servers: {state.bootstrap}")
    if state.kafka_bootstrap is not None:  # None: a cluster set up before the runner added KAFKA listeners
        click.echo(f"kafka bootstrap servers: {state.kafka_bootstrap}")
    for broker in sorted(state.brokers.values(), key=lambda b: b.id):
        metrics = metrics_text(state.metrics_address(broker.id), broker.metrics_port)
        click.echo(f"broker {broker.id} metrics: {metrics}")


def metrics_text(address: str | None, port: int | None) -> str:
    """A broker's /metrics address, or why there is none to print."""
    if address is not None:
        return address
    return "port picked by the broker (metrics.port=0; see its broker.out)" if port == 0 else "off"


@cluster.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(data_dir: Path, as_json: bool) -> None:
    """Show each broker's process, ZooKeeper registration, controller role and /metrics address."""
    from devcluster.cluster import LocalCluster

    with _runner_errors():
        report = LocalCluster.load(data_dir).status()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for line in format_status(report):
            click.echo(line)


def format_status(report: dict[str, Any]) -> list[str]:
    """``cluster status``'s table: ZooKeeper, the controller, the bootstrap servers (and the KAFKA
    listeners' when the cluster has them), then one row per broker."""
    zk = report["zookeeper"]
    zk_health = "up (imok)" if zk["ok"] else ("not answering" if zk["alive"] else "down")
    controller = report["controller"]
    lines = [
        f"cluster in {report['data_dir']}: {report['status']}",
        f"zookeeper   127.0.0.1:{zk['port']}  pid {zk['pid'] or '-'}  {zk_health}",
        "controller  "
        + (
            f"broker {controller['id']} (epoch {controller['epoch']})"
            if controller["id"] is not None
            else "none"
        ),
        f"bootstrap   {report['bootstrap']}",
        *([f"kafka bootstrap servers: {report['kafka_bootstrap']}"] if report.get("kafka_bootstrap") else []),
        "",
    ]
    metrics = {b["id"]: metrics_text(b["metrics"], b["metrics_port"]) for b in report["brokers"]}
    width = max(len("metrics"), *map(len, metrics.values())) + 2
    lines.append(
        f"{'broker':<8}{'port':<8}{'pid':<10}{'process':<10}{'registered':<12}{'controller':<12}"
        f"{'metrics':<{width}}disk"
    )
    for b in report["brokers"]:
        process = (
            "paused" if b["paused"] else ("running" if b["alive"] else "dead" if b["pid"] else "stopped")
        )
        lines.append(
            f"{b['id']:<8}{b['port']:<8}{b['pid'] or '-':<10}{process:<10}"
            f"{'yes' if b['registered'] else 'no':<12}{'yes' if b['controller'] else '':<12}"
            f"{metrics[b['id']]:<{width}}{b.get('disk') or '-'}"
        )
    return [line.rstrip() for line in lines]


@cluster.command()
@data_dir_option
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=30, show_default=True, help="Seconds before SIGKILL."
)
def down(data_dir: Path, timeout: float) -> None:
    """Stop every broker (SIGINT: a clean stop without controlled shutdown; SIGKILL after --timeout), then ZooKeeper; keep the data."""
    from devcluster.cluster import LocalCluster

    with _runner_errors():
        LocalCluster.load(data_dir, progress=_echo).down(timeout=timeout)


@cluster.command()
@click.argument("broker_id", metavar="ID", type=int)
@data_dir_option
@click.option(
    "--signal",
    "signal_name",
    type=click.Choice(["KILL", "TERM", "STOP", "CONT"], case_sensitive=False),
    default="KILL",
    show_default=True,
    help="KILL: crash; TERM: controlled shutdown (waits until the broker has exited); STOP/CONT: pause and resume.",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="With TERM: return once the signal is sent, as kafka-server-stop.sh does, not when the broker exited.",
)
def kill(broker_id: int, data_dir: Path, signal_name: str, no_wait: bool) -> None:
    """Send a signal to broker ID."""
    from devcluster.cluster import TERM_WAIT_S, LocalCluster

    with _runner_errors():
        runner = LocalCluster.load(data_dir, progress=_echo)
        runner.kill(broker_id, signal_name.upper(), term_wait_s=0 if no_wait else TERM_WAIT_S)


@cluster.command()
@click.argument("broker_id", metavar="ID", type=int)
@data_dir_option
@click.option("--heal", is_flag=True, help="Reconnect the broker instead of cutting it off.")
def isolate(broker_id: int, data_dir: Path, heal: bool) -> None:
    """Cut broker ID off the network (ZooKeeper, other brokers, clients); --heal reconnects it.
    Needs a cluster started with `cluster up --netns`."""
    from devcluster.cluster import LocalCluster

    with _runner_errors():
        LocalCluster.load(data_dir, progress=_echo).isolate(broker_id, cut=not heal)


@cluster.command()
@click.argument("broker_id", metavar="ID", type=int)
@data_dir_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60,
    show_default=True,
    help="Seconds to wait for registration (and, with --wait-in-sync, as long again for the ISR).",
)
@click.option(
    "--wait-in-sync",
    is_flag=True,
    help="Then wait until the broker is back in the ISR of every partition it is a replica of "
    "(what a preferred leader election needs).",
)
def start(broker_id: int, data_dir: Path, timeout: float, wait_in_sync: bool) -> None:
    """Restart a stopped or killed broker with its config and data."""
    from devcluster.cluster import LocalCluster

    with _runner_errors():
        runner = LocalCluster.load(data_dir, progress=_echo)
        runner.start(broker_id, timeout=timeout)
        if wait_in_sync:
            runner.wait_in_sync(broker_id, timeout=timeout)


@cluster.command()
@click.argument("broker_id", metavar="ID", type=int)
@data_dir_option
@click.option(
    "--full", "action", flag_value="fill", help="Fill the disk: the broker's next write fails with ENOSPC."
)
@click.option(
    "--error",
    "action",
    flag_value="break",
    help="Fail every write, fsync, truncate, create, rename with EIO.",
)
@click.option("--heal", "action", flag_value="heal", help="Free the disk and let writes pass through again.")
def disk(broker_id: int, data_dir: Path, action: str | None) -> None:
    """Fill broker ID's disk (--full), make it fail (--error), or heal it (--heal). Needs a cluster
    started with `cluster up --disk-faults`. A broker whose log dir failed halts (KIP-112): after
    --heal, `cluster start ID` brings it back."""
    from devcluster.cluster import LocalCluster

    if action is None:
        raise click.UsageError("say what to do to the disk: --full, --error or --heal")
    with _runner_errors():
        LocalCluster.load(data_dir, progress=_echo).disk(broker_id, action)
