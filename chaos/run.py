"""``floodmark chaos run``: the main job (docs/operations.md "Chaos runs and verification"; issue 4
item 3).

1. Start a local cluster (devcluster/) in the data dir unless one runs there (brokers in
   network namespaces when partitions are asked for and this is root; on faultable disks,
   devcluster/disk.py, when disk-full or disk-error is asked for), or use the docker-compose cluster.
2. Create the topic (partitions, replication factor, min.insync.replicas) if it is missing.
3. Run the workload (idempotent acks=all producers, every outcome in the ledger), a watcher
   that records every leadership change, and the seeded fault schedule, for ``duration_s``.
4. Heal everything, wait until every partition has a leader and a full ISR.
5. Hand the ledger, the bootstrap and every replica's log dirs to the ``verifier`` the caller
   passed in (cli/ passes the Spark verification job; chaos never imports verify).

The exit status is the verification's: 0 only when nothing acknowledged was lost, nothing was
duplicated and no two replicas disagree.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.faults import DockerBackend, FaultBackend, LocalBackend
from chaos.injector import FaultInjector
from chaos.schedule import DISK_FAULT_KINDS, make_schedule
from chaos.workload import LeadershipWatcher, Workload, WorkloadSettings
from client.admin import AdminClient
from client.protocol.errors import ErrorCode, KafkaError
from devcluster.cluster import LocalCluster
from devcluster.disk import DEFAULT_SIZE as DEFAULT_DISK_SIZE
from devcluster.netns import netns_available
from devcluster.ports import free_port_block
from ledger.format import LedgerWriter

#: The runner's broker settings: a short session so a pause or a crash is noticed in seconds.
CHAOS_BROKER_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "1000",
}
PAUSE_OVER_SESSION = 1.5  # a pause lasts this many session timeouts: the session does expire


@dataclass
class ChaosSettings:
    data_dir: Path
    report_dir: Path
    duration_s: float = 90.0
    seed: int = 1
    faults: tuple[str, ...] = ("kill", "pause", "controller", "term")
    topic: str = "chaos"
    partitions: int = 6
    replication_factor: int = 3
    min_insync_replicas: int = 2
    backend: str = "local"
    bootstrap: str | None = None  # the docker backend's; the local runner knows its own
    brokers: int = 3
    overrides: dict[str, str] = field(default_factory=dict)
    writers: int = 2
    records_per_second: float = 400.0
    verify: bool = True
    master: str = "local[2]"
    stop_cluster: bool = False
    ledger_format: str = "parquet"  # ledger/format.py: Parquet chunks, or "jsonl" (the old form)


@dataclass
class ChaosResult:
    acknowledged: int
    failed: int
    faults: int
    verification_ok: bool | None
    report_dir: Path
    errors: dict[str, int]


Say = Callable[[str], None]
#: Checks a finished run: (report dir, bootstrap, log dirs, Spark master, topics, progress) -> ok.
#: The composition root (cli/) passes one that runs the verification job over the ledger.
Verifier = Callable[[Path, str, list[str], str, list[str], Say], bool]


def _session_timeout_ms(settings: ChaosSettings) -> int:
    return int(
        settings.overrides.get(
            "zookeeper.session.timeout.ms", CHAOS_BROKER_SETTINGS["zookeeper.session.timeout.ms"]
        )
    )


def prepare_local_cluster(settings: ChaosSettings, say: Say) -> LocalCluster:
    """The cluster in the data dir, started when it is not running."""
    cluster = LocalCluster(settings.data_dir, progress=say)
    if not cluster.running():
        netns = "partition" in settings.faults and netns_available()
        disks = any(kind in DISK_FAULT_KINDS for kind in settings.faults)
        base = free_port_block(settings.brokers)
        cluster.up(
            settings.brokers,
            zookeeper_port=base - 1,
            base_port=base,
            overrides={**CHAOS_BROKER_SETTINGS, **settings.overrides},
            timeout=90,
            netns=netns if cluster.state is None else cluster.state.netns_index is not None,
            disk_size=DEFAULT_DISK_SIZE if disks else None,
        )
    return cluster


async def ensure_topic(bootstrap: str, settings: ChaosSettings, say: Say) -> None:
    async with AdminClient(bootstrap) as admin:
        if settings.topic in await admin.list_topics():
            say(f"topic {settings.topic} exists")
            return
        try:
            await admin.create_topic(
                settings.topic,
                settings.partitions,
                settings.replication_factor,
                {"min.insync.replicas": str(settings.min_insync_replicas)},
            )
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        say(
            f"created topic {settings.topic}: {settings.partitions} partitions, replication factor "
            f"{settings.replication_factor}, min.insync.replicas={settings.min_insync_replicas}"
        )


async def wait_fully_replicated(bootstrap: str, topic: str, timeout_s: float, say: Say) -> bool:
    """Every partition has a leader and an ISR equal to its replicas (bounded)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    async with AdminClient(bootstrap) as admin:
        while time.monotonic() < deadline:
            try:
                (d,) = await admin.describe_topics([topic])
            except KafkaError as exc:
                last = str(exc)
            else:
                lagging = [p for p in d.partitions if p.leader < 0 or sorted(p.isr) != sorted(p.replicas)]
                if not lagging:
                    return True
                last = ", ".join(f"{p.partition}: leader {p.leader} isr {p.isr}" for p in lagging)
            await asyncio.sleep(1)
    say(f"not fully replicated after {timeout_s:.0f}s: {last}")
    return False


async def run_chaos(settings: ChaosSettings, say: Say, verifier: Verifier | None = None) -> ChaosResult:
    """One run; with ``settings.verify`` and a ``verifier``, its verdict is the result's
    ``verification_ok`` (None when the run was not verified)."""
    settings.report_dir.mkdir(parents=True, exist_ok=True)
    if settings.backend == "local":
        cluster = await asyncio.to_thread(prepare_local_cluster, settings, say)
        bootstrap = cluster.bootstrap_servers
        isolate = cluster.isolate if cluster.state.layout is not None else None
        backend: FaultBackend = LocalBackend(cluster, isolate)
        log_dirs = [d for b in sorted(cluster.state.brokers.values(), key=lambda b: b.id) for d in b.log_dirs]
    elif settings.backend == "docker":
        if not settings.bootstrap:
            raise ValueError("the docker backend needs --bootstrap-server (see docs/docker.md)")
        docker = DockerBackend(settings.brokers)
        cluster, bootstrap, backend = None, settings.bootstrap, docker
        log_dirs = await asyncio.to_thread(docker.log_dirs)  # the named volumes, read from the host
    else:
        raise ValueError(f"unknown backend {settings.backend!r}: local or docker")
    if "partition" in settings.faults and not backend.can_partition():
        say(
            "network partitions need the brokers in network namespaces (root): partition faults will be skipped"
        )
    if set(DISK_FAULT_KINDS) & set(settings.faults) and not backend.can_fault_disks():
        say(
            "the brokers are not on faultable disks (`cluster up --disk-faults`): disk faults will be skipped"
        )

    await ensure_topic(bootstrap, settings, say)
    await wait_fully_replicated(bootstrap, settings.topic, 60, say)
    pause_s = _session_timeout_ms(settings) / 1000 * PAUSE_OVER_SESSION
    schedule = make_schedule(
        settings.seed, settings.duration_s, settings.faults, settings.partitions, pause_s
    )
    (settings.report_dir / "run.json").write_text(
        json.dumps(
            {
                "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
                "bootstrap": bootstrap,
                "log_dirs": log_dirs,
                "schedule": [f.as_dict() for f in schedule],
            },
            indent=2,
        )
        + "\n"
    )
    say(f"fault schedule (seed {settings.seed}):")
    for fault in schedule:
        say(f"  {fault.describe()}")

    run_id = f"{settings.seed}-{int(time.time())}-{os.getpid()}"
    with LedgerWriter(settings.report_dir, format=settings.ledger_format) as ledger:
        workload = Workload(
            bootstrap,
            WorkloadSettings(settings.topic, run_id, settings.writers, settings.records_per_second),
            ledger,
        )
        watcher = LeadershipWatcher(
            bootstrap, settings.topic, lambda kind, detail: ledger.event(kind, detail)
        )
        injector = FaultInjector(
            backend,
            watcher.leader_of,
            lambda: _controller_id(bootstrap),
            lambda kind, detail: ledger.event(kind, detail),
            say,
            follower_of=watcher.follower_of,
        )
        started = time.monotonic()
        tasks = [asyncio.create_task(workload.run()), asyncio.create_task(watcher.run())]
        ticker = asyncio.create_task(_progress(workload, injector, started, settings.duration_s, say))
        try:
            await injector.run(schedule, started)
            remaining = started + settings.duration_s - time.monotonic()
            if remaining > 0:
                await asyncio.sleep(remaining)
        finally:
            await injector.heal_all()
            workload.stop()
            watcher.stop()
            ticker.cancel()
            say("workload stopping: waiting for the outcome of every record in flight")
            await asyncio.gather(*tasks, return_exceptions=True)
        stats = workload.stats
        say(f"workload: {stats.acknowledged:,} acknowledged, {stats.failed:,} failed {stats.errors or ''}")

    healthy = await wait_fully_replicated(bootstrap, settings.topic, 120, say)
    say(
        "every partition has a leader and a full ISR"
        if healthy
        else "continuing: not every replica caught up"
    )

    ok: bool | None = None
    if settings.verify and verifier is not None:
        ok = await asyncio.to_thread(
            verifier, settings.report_dir, bootstrap, log_dirs, settings.master, [settings.topic], say
        )
    if settings.stop_cluster and cluster is not None:
        await asyncio.to_thread(cluster.down)
    return ChaosResult(stats.acknowledged, stats.failed, len(schedule), ok, settings.report_dir, stats.errors)


async def _controller_id(bootstrap: str) -> int:
    async with AdminClient(bootstrap) as admin:
        return (await admin.describe_cluster()).controller_id


async def _progress(
    workload: Workload, injector: FaultInjector, started: float, duration_s: float, say: Say
) -> None:
    while True:
        await asyncio.sleep(5)
        workload.ledger.flush()  # chunks are written as entries arrive; this one if they stopped
        s = workload.stats
        down = sorted(injector.down | injector.paused | injector.isolated | set(injector.disks))
        say(
            f"t+{time.monotonic() - started:4.0f}s/{duration_s:.0f}s  acknowledged {s.acknowledged:,}  "
            f"failed {s.failed:,}  brokers faulted now: {down or 'none'}"
        )
