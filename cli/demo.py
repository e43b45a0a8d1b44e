"""``floodmark demo`` (what ``make demo`` runs): the main job end to end (README; issue 4 item 5).

On free loopback ports in a fresh directory: ZooKeeper and three brokers (each in its own
network namespace when running as root, so a leader can be cut off the network), a topic of
6 partitions with replication factor 3 and min.insync.replicas 2, about 90 seconds of
idempotent acks=all writes read by a group of three consumers (``--consumers 3``,
chaos/consumers.py) while the seeded schedule pauses a leader past its ZooKeeper session, shuts
one down (SIGTERM, controlled), crashes a consumer (no commit, no LeaveGroup: the coordinator
expels it by session timeout), crashes a leader, partitions one and crashes the controller; then
everything is healed, the consumers read to the end of every partition, the Spark job verifies
the committed logs and what the group consumed and committed (the consumer checks), the report
is printed with the timeline picture's path, and the cluster is stopped.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import click

from cli.chaos import run_chaos
from cli.common import run

#: With 90 s and the consumer fault: pause, term, consumer, kill, partition, controller (without
#: root, no partition); tests/unit/test_chaos_schedule.py and test_chaos_consumers.py hold it to that.
DEMO_SEED = 1
DEMO_CONSUMERS = 3


def say(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}")


@click.command("demo")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path(".floodmark-demo"),
    show_default=True,
    help="Fresh directory for the cluster and the report (emptied first).",
)
@click.option(
    "--duration", type=click.FloatRange(min=20), default=90, show_default=True, help="Seconds of chaos."
)
@click.option("--seed", type=int, default=DEMO_SEED, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the cluster running afterwards.")
def demo(data_dir: Path, duration: float, seed: int, keep: bool) -> None:
    """Start a 3-broker cluster, write and consume through 90 s of faults, verify with Spark, stop."""
    from chaos.run import ChaosSettings
    from chaos.schedule import CONSUMER_FAULT_KINDS, FAULT_KINDS
    from devcluster.cluster import LocalCluster  # the operator's composition root (docs/design.md)
    from devcluster.netns import netns_available

    cluster_dir, report_dir = data_dir / "cluster", data_dir / "report"
    if data_dir.exists():
        with contextlib.suppress(Exception):  # a stale or partial directory from an interrupted run
            LocalCluster(cluster_dir).down()
        shutil.rmtree(data_dir)
    kinds = FAULT_KINDS + CONSUMER_FAULT_KINDS
    if not netns_available():
        kinds = tuple(k for k in kinds if k != "partition")
        say("not root: network partitions are left out (they need network namespaces)")
    started = time.monotonic()
    settings = ChaosSettings(
        data_dir=cluster_dir,
        report_dir=report_dir,
        duration_s=duration,
        seed=seed,
        faults=kinds,
        stop_cluster=not keep,
        consumers=DEMO_CONSUMERS,
    )
    result = run(run_chaos(settings, say))
    summary = report_dir / "summary.md"
    if summary.exists():
        click.echo("\n" + summary.read_text())
    say(f"timeline picture: {report_dir / 'timeline.png'}")
    say(
        f"report: {report_dir / 'verification.json'}; state-change logs: {cluster_dir}/broker-*/state-change.log"
    )
    if keep:
        say(f"cluster left running; stop it with: floodmark cluster down --data-dir {cluster_dir}")
    verdict = (
        "OK: nothing acknowledged was lost, duplicated or diverged; the consumer group's checks passed"
        if result.verification_ok
        else "FAILED"
    )
    say(
        f"done in {time.monotonic() - started:.0f}s: {result.faults} faults, {result.acknowledged:,} acknowledged "
        f"writes, {result.failed:,} failed; verification {verdict}"
    )
    if not result.verification_ok:
        raise SystemExit(3)
