"""``floodmark chaos run``: the main job (docs/operations.md "Chaos runs and verification"; issue 4
item 3).

1. Start a local cluster (devcluster/) in the data dir unless one runs there (brokers in
   network namespaces when partitions are asked for and this is root; on faultable disks,
   devcluster/disk.py, when disk-full or disk-error is asked for, each sized for the run by
   chaos/disk_budget.py, which says whether from the run's rate or from the logs' retention),
   or use the docker-compose cluster.
2. Create the topic (partitions, replication factor, min.insync.replicas) if it is missing.
3. Run the workload (idempotent acks=all producers, every outcome in the ledger), a watcher
   that records every leadership change, and the seeded fault schedule, for ``duration_s``;
   with ``consumers`` (``--consumers N``), a consumer group reading the topic meanwhile, whose
   members the ``consumer`` fault crashes (chaos/consumers.py; its own ledger, R/consumed/).
   ``client`` (``--client``): floodmark's producers and consumers, or librdkafka's (chaos/clients.py).
4. Heal everything (a ``reassign`` fault's move: wait until no reassignment is in progress,
   chaos/reassign.py), wait until every partition has a leader and a full ISR, and record the
   partition assignment (R/assignment.json, chaos/assignment.py; recorded at the start too). A heal that fails
   does not end the run (issue 19 item 7): the injector records it (``heal_failed`` on the
   timeline), the result carries it, and R/summary.md gets a section on it. Then the consumer
   group reads on to the end of every partition (bounded), commits and closes.
5. Hand the ledger, the bootstrap and every replica's log dirs to the ``verifier`` the caller
   passed in (cli/ passes the Spark verification job; chaos never imports verify): through the
   cluster when it serves every partition, else offline from the log dirs (bootstrap None).
   The consumer ledger lies in the same report dir, where the verification finds it.

With ``stop_cluster`` (``--stop``) the local cluster is stopped on every way out of the run: a
result, an exception, a cancellation (Ctrl-C), a failed heal.

The exit status (cli/chaos.py) is the verification's: 0 only when nothing acknowledged was lost,
nothing was duplicated and no two replicas disagree, and every heal succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.assignment import record_assignment
from chaos.clients import CLIENTS, Clients, RunningWorkload
from chaos.consumers import ConsumerGroup, finish
from chaos.disk_budget import DiskPlan, check_fits, plan_disk
from chaos.faults import DockerBackend, FaultBackend, LocalBackend
from chaos.injector import FaultInjector
from chaos.reassign import PartitionMover
from chaos.run_report import SUMMARY_FILE, append_summary, write_run_json
from chaos.schedule import CONSUMER_FAULT_KINDS, DISK_FAULT_KINDS, Fault, make_schedule
from chaos.serving import Served, wait_fully_replicated, wait_served
from chaos.workload import LeadershipWatcher, WorkloadSettings, WorkloadStats
from client.admin import AdminClient
from client.protocol.errors import ErrorCode, KafkaError
from devcluster.cluster import LocalCluster
from devcluster.disk import DiskError, size_bytes
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
    delivery_timeout_ms: int = 60_000  # the workload's producers': how long a record may stay unresolved
    consumers: int = 0  # members of the group reading the topic (chaos/consumers.py); 0: none
    client: str = "floodmark"  # or "kafka": librdkafka producers and consumers (chaos/clients.py)
    kafka_bootstrap: str | None = None  # the docker backend's KAFKA listener, for client "kafka"
    zookeeper_port: int | None = None  # a cluster this run starts: None picks free ports
    base_port: int | None = None  # broker i on base_port + i - 1; None: a free block
    kafka_base_port: int | None = None  # the KAFKA listeners; None: the runner's default


@dataclass
class ChaosResult:
    acknowledged: int
    failed: int
    faults: int
    verification_ok: bool | None
    report_dir: Path
    errors: dict[str, int]
    heal_failures: list[dict] = field(default_factory=list)  # chaos.injector's, in order
    unhealed: list[str] = field(default_factory=list)  # still faulted at the end ("broker 2")
    verified_offline: bool = False  # from the log dirs: the cluster could not serve
    disk_plan: DiskPlan | None = None
    moves: dict[str, int] = field(default_factory=dict)  # reassign faults: completed, refused, unfinished
    consumers: dict = field(default_factory=dict)  # chaos.consumers.GroupStats; {} without consumers

    def outcome(self) -> dict:
        return {
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "moves": self.moves,
            "consumers": self.consumers,
            "heal_failures": self.heal_failures,
            "unhealed": self.unhealed,
            "verification_ok": self.verification_ok,
            "verified_offline": self.verified_offline,
        }


Say = Callable[[str], None]
#: Checks a finished run: (report dir, bootstrap or None for offline, log dirs, Spark master,
#: topics, progress) -> ok. The composition root (cli/) passes one that runs the verification job.
Verifier = Callable[[Path, str | None, list[str], str, list[str], Say], bool]


def _session_timeout_ms(settings: ChaosSettings) -> int:
    return int(
        settings.overrides.get(
            "zookeeper.session.timeout.ms", CHAOS_BROKER_SETTINGS["zookeeper.session.timeout.ms"]
        )
    )


def _existing_bytes(cluster: LocalCluster) -> int:
    """The most data one broker's log dir holds now (a stopped cluster's, on the real disk)."""
    if cluster.state is None:
        return 0
    sizes = [0]
    for broker in cluster.state.brokers.values():
        for log_dir in broker.log_dirs:
            with contextlib.suppress(OSError):  # a FUSE mount left without its daemon: remounted
                sizes.append(sum(f.stat().st_size for f in Path(log_dir).rglob("*") if f.is_file()))
    return max(sizes)


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def plan_disks(settings: ChaosSettings, existing_bytes: int = 0) -> DiskPlan:
    """The faultable disk each broker gets for this run (chaos/disk_budget.py)."""
    return plan_disk(
        records_per_second=settings.records_per_second,
        duration_s=settings.duration_s,
        partitions=settings.partitions,
        replication_factor=settings.replication_factor,
        brokers=settings.brokers,
        overrides={**CHAOS_BROKER_SETTINGS, **settings.overrides},
        existing_bytes=existing_bytes,
    )


def prepare_local_cluster(
    settings: ChaosSettings, say: Say, cluster: LocalCluster | None = None
) -> tuple[LocalCluster, DiskPlan | None]:
    """The cluster in the data dir, started when it is not running (with disk faults asked for,
    on faultable disks sized for the run); the disk plan it applied (None without disk faults, or
    for a cluster that was already running: its disks keep their size, with a warning if short)."""
    cluster = cluster or LocalCluster(settings.data_dir, progress=say)
    disks = any(kind in DISK_FAULT_KINDS for kind in settings.faults)
    running = cluster.running()
    plan = plan_disks(settings, 0 if running else _existing_bytes(cluster)) if disks else None
    if running:
        recorded = cluster.state.disks.size if cluster.state.disks is not None else None
        if plan is not None and recorded is not None and size_bytes(recorded) < plan.size_bytes:
            say(
                f"warning: the running cluster's disks are {recorded}, this run needs {plan.describe()}; "
                "they may fill for real (`floodmark cluster down` first lets the run size them)"
            )
        return cluster, None
    if plan is not None:
        reason = check_fits(plan, settings.brokers, _memory_available())
        if reason:
            raise DiskError(reason)
        say(f"faultable disks: {plan.describe()}")
    netns = "partition" in settings.faults and netns_available()
    base = settings.base_port
    if base is None:
        base = free_port_block(settings.brokers)
        zookeeper_port = settings.zookeeper_port if settings.zookeeper_port is not None else base - 1
    else:
        zookeeper_port = (
            settings.zookeeper_port if settings.zookeeper_port is not None else free_port_block(0) - 1
        )
    cluster.up(
        settings.brokers,
        zookeeper_port=zookeeper_port,
        base_port=base,
        kafka_base_port=settings.kafka_base_port,
        overrides={**CHAOS_BROKER_SETTINGS, **settings.overrides},
        timeout=90,
        netns=netns if cluster.state is None else cluster.state.netns_index is not None,
        disk_size=plan.size if plan is not None else None,
    )
    return cluster, plan


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


async def run_chaos(settings: ChaosSettings, say: Say, verifier: Verifier | None = None) -> ChaosResult:
    """One run; with ``settings.verify`` and a ``verifier``, its verdict is the result's
    ``verification_ok`` (None when the run was not verified). With ``settings.stop_cluster`` the
    local cluster is stopped on every way out: a result, an error, a cancellation."""
    settings.report_dir.mkdir(parents=True, exist_ok=True)
    if settings.backend not in ("local", "docker"):
        raise ValueError(f"unknown backend {settings.backend!r}: local or docker")
    if settings.client not in CLIENTS:
        raise ValueError(f"unknown client {settings.client!r}: {' or '.join(CLIENTS)}")
    cluster = LocalCluster(settings.data_dir, progress=say) if settings.backend == "local" else None
    starting: asyncio.Future | None = None
    try:
        plan = None
        if cluster is not None:  # shielded: a cancelled run waits for the start-up, then stops it
            starting = asyncio.ensure_future(asyncio.to_thread(prepare_local_cluster, settings, say, cluster))
            _, plan = await asyncio.shield(starting)
        return await _run(settings, say, verifier, cluster, plan)
    finally:
        if settings.stop_cluster and cluster is not None:
            await _stop_cluster(cluster, starting, say)


async def _stop_cluster(cluster: LocalCluster, starting: asyncio.Future | None, say: Say) -> None:
    if starting is not None and not starting.done():
        say("waiting for the cluster's start-up to end, to stop it")
        with contextlib.suppress(BaseException):
            await starting
    if cluster.state is None:
        return
    try:
        await asyncio.to_thread(cluster.down)
    except Exception as exc:  # noqa: BLE001 - reported; the run's own outcome stands
        say(f"could not stop the cluster in {cluster.data_dir}: {exc}")


async def _run(
    settings: ChaosSettings,
    say: Say,
    verifier: Verifier | None,
    cluster: LocalCluster | None,
    plan: DiskPlan | None,
) -> ChaosResult:
    bootstrap, backend, log_dirs = await _backend(settings, cluster, say)
    clients = Clients.of(settings.client, bootstrap, cluster, settings.kafka_bootstrap)
    await ensure_topic(bootstrap, settings, say)
    await wait_fully_replicated(bootstrap, settings.topic, 60, say)
    zookeeper_port = cluster.state.zookeeper.port if cluster is not None else None
    record = (settings.report_dir, settings.topic)
    await record_assignment(*record, "start", bootstrap, zookeeper_port, say)  # R/assignment.json
    pause_s = _session_timeout_ms(settings) / 1000 * PAUSE_OVER_SESSION
    schedule = make_schedule(
        settings.seed, settings.duration_s, settings.faults, settings.partitions, pause_s
    )
    run_doc = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "bootstrap": bootstrap,
        "log_dirs": log_dirs,
        "disks": plan.as_dict() if plan is not None else None,
        "schedule": [f.as_dict() for f in schedule],
    }
    write_run_json(settings.report_dir, run_doc)
    say(f"fault schedule (seed {settings.seed}):")
    for fault in schedule:
        say(f"  {fault.describe()}")

    run_id = f"{settings.seed}-{int(time.time())}-{os.getpid()}"
    group = None
    if settings.consumers:
        group = clients.group(
            settings.report_dir, settings.topic, settings.consumers, run_id, say, settings.duration_s
        )
    try:
        stats, injector = await _workload_under_faults(
            settings, clients, backend, schedule, say, run_id, group
        )
        unhealed = injector.unhealed()
        served = await _after_heal(settings, bootstrap, injector, unhealed, say)
        await record_assignment(*record, "after_heal", bootstrap, zookeeper_port, say)
        consumed = await finish(group, served is not Served.NONE)  # drain, commit, close: {} without
    finally:
        if group is not None:
            await group.abort()  # an error or Ctrl-C: no member outlives the run (a no-op once closed)

    ok, offline = None, False
    if settings.verify and verifier is not None:
        online = bootstrap if served is not Served.NONE else None
        ok, offline = await _verify(verifier, settings, online, log_dirs, say)
    result = ChaosResult(
        stats.acknowledged,
        stats.failed,
        len(schedule),
        ok,
        settings.report_dir,
        stats.errors,
        heal_failures=list(injector.heal_failures),
        unhealed=unhealed,
        verified_offline=offline,
        disk_plan=plan,
        moves=_moves(injector),
        consumers=consumed,
    )
    write_run_json(settings.report_dir, {**run_doc, "outcome": result.outcome()})
    if result.heal_failures or offline:
        append_summary(settings.report_dir / SUMMARY_FILE, result)
    return result


async def _backend(
    settings: ChaosSettings, cluster: LocalCluster | None, say: Say
) -> tuple[str, FaultBackend, list[str]]:
    """(bootstrap, fault backend, every broker's log dirs) of the local cluster or the compose one;
    a warning for each fault kind asked for that this backend will skip."""
    if cluster is not None:
        bootstrap = cluster.bootstrap_servers
        isolate = cluster.isolate if cluster.state.layout is not None else None
        backend: FaultBackend = LocalBackend(cluster, isolate)
        log_dirs = [d for b in sorted(cluster.state.brokers.values(), key=lambda b: b.id) for d in b.log_dirs]
    else:
        if not settings.bootstrap:
            raise ValueError("the docker backend needs --bootstrap-server (see docs/docker.md)")
        docker = DockerBackend(settings.brokers)
        bootstrap, backend = settings.bootstrap, docker
        log_dirs = await asyncio.to_thread(docker.log_dirs)  # the named volumes, read from the host
    if "partition" in settings.faults and not backend.can_partition():
        say(
            "network partitions need the brokers in network namespaces (root): partition faults will be skipped"
        )
    if set(DISK_FAULT_KINDS) & set(settings.faults) and not backend.can_fault_disks():
        say(
            "the brokers are not on faultable disks (`cluster up --disk-faults`): disk faults will be skipped"
        )
    if set(CONSUMER_FAULT_KINDS) & set(settings.faults) and settings.consumers < 1:
        raise ValueError("the consumer fault crashes the run's consumers: it needs consumers (--consumers N)")
    return bootstrap, backend, log_dirs


async def _after_heal(
    settings: ChaosSettings, bootstrap: str, injector: FaultInjector, unhealed: list[str], say: Say
) -> Served:
    """Report the moves and what is still faulted; wait until the cluster serves (bounded)."""
    if any(_moves(injector).values()):
        say("partition moves: " + ", ".join(f"{n} {what}" for what, n in _moves(injector).items()))
    if unhealed:
        say(f"still faulted after the heal: {', '.join(unhealed)}")
    # with a broker still down a full ISR cannot come: wait for leaders, two session timeouts
    patience = 2 * _session_timeout_ms(settings) / 1000 + 3 if unhealed else 120
    served = await wait_served(bootstrap, settings.topic, patience, say, full_isr=not unhealed)
    say(served.value if served is not Served.NONE else "the cluster cannot serve every partition")
    return served


async def _workload_under_faults(
    settings: ChaosSettings,
    clients: Clients,
    backend: FaultBackend,
    schedule: list[Fault],
    say: Say,
    run_id: str,
    group: ConsumerGroup | None,
) -> tuple[WorkloadStats, FaultInjector]:
    """The workload, the leadership watcher, the consumer group (started here, ended by the
    caller after its drain) and the fault schedule for the run's duration, then the heal of
    everything and the outcome of every record in flight."""
    bootstrap = clients.bootstrap
    with LedgerWriter(settings.report_dir, format=settings.ledger_format) as ledger:
        workload = clients.workload(
            WorkloadSettings(
                settings.topic,
                run_id,
                settings.writers,
                settings.records_per_second,
                delivery_timeout_ms=settings.delivery_timeout_ms,
            ),
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
            mover=PartitionMover(bootstrap, settings.topic),
            consumers=group,
        )
        if group is not None:
            group.start()
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
    return stats, injector


async def _verify(
    verifier: Verifier, settings: ChaosSettings, bootstrap: str | None, log_dirs: list[str], say: Say
) -> tuple[bool, bool]:
    """(verdict, offline): through the cluster when it serves every partition, else (or when the
    job cannot read it) offline from the log dirs: what lies below the highest checkpointed HW."""
    args = (settings.master, [settings.topic], say)
    if bootstrap is not None:
        try:
            return await asyncio.to_thread(verifier, settings.report_dir, bootstrap, log_dirs, *args), False
        except Exception as exc:  # noqa: BLE001 - the offline job below fails the same way if it is ours
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            say(f"the verification could not read the cluster ({first}): verifying offline from the log dirs")
    else:
        say("the cluster cannot serve every partition: verifying offline from the log dirs")
    return await asyncio.to_thread(verifier, settings.report_dir, None, log_dirs, *args), True


def _moves(injector: FaultInjector) -> dict[str, int]:
    done, unfinished = len(injector.completed_moves), len(injector.unfinished_moves)
    return {"completed": done, "refused": len(injector.refused_moves), "unfinished": unfinished}


async def _controller_id(bootstrap: str) -> int:
    async with AdminClient(bootstrap) as admin:
        return (await admin.describe_cluster()).controller_id


async def _progress(
    workload: RunningWorkload, injector: FaultInjector, started: float, duration_s: float, say: Say
) -> None:
    while True:
        await asyncio.sleep(5)
        workload.ledger.flush()  # chunks are written as entries arrive; this one if they stopped
        s = workload.stats
        down = sorted(injector.faulted())
        say(
            f"t+{time.monotonic() - started:4.0f}s/{duration_s:.0f}s  acknowledged {s.acknowledged:,}  "
            f"failed {s.failed:,}  brokers faulted now: {down or 'none'}"
        )
