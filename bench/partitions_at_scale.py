"""Partitions at scale (issue 25; docs/benchmarks.md "Partitions at scale (issue 25)"): topic
creation, controller failover and broker restart with 1,000, 4,000 and 10,000 replicas per broker
on 3 brokers, this tree against a baseline revision, side by side in one run.

For each size N (``--sizes``) and each tree (the baseline ``--base``, a ``git worktree`` of it, run
first; then this tree), a fresh 3-broker local cluster (:func:`bench.common.bench_cluster`,
``zookeeper.session.timeout.ms=6000``) is started whose brokers run that tree's code (the runner
puts the tree first on their ``PYTHONPATH``; the runner itself, this script and ZooKeeper are this
tree's), and:

1. **create**: one topic of N partitions with RF 3 (N replicas per broker) through
   ``AdminClient.create_topics``; the time until the client's answer (the broker's metadata shows a
   leader for every partition), until the brokers lead N partitions between them (the sum of
   ``kafka_server_replicamanager_leadercount``), until each broker hosts N
   (``..._partitioncount``) and until every ISR is full (``..._underreplicatedpartitions`` 0, so
   that the failover starts from a settled cluster): the creation rate is N / the all-led time;
2. **failover**: SIGKILL of the controller; the time until ``/controller`` names another broker
   and until the two survivors lead all N partitions again (the goal: session timeout + 5 s);
3. **restart**: the killed broker started again (``LocalCluster.start``, SIGKILLed so its logs are
   recovered as after a crash); the time until it starts loading its logs and has loaded them
   (``broker.out``), registered, hosts all N replicas again, and every ISR is full again.

After each step: open files and RSS of every broker (``/proc``), and the longest event-loop stall
of each broker during the step, twice: from the broker's own ``floodmark_event_loop_stall_*``
metrics (:mod:`broker.loop_stall`; "-" on a baseline without them) and from an outside probe that
sends ApiVersions to each broker every 100 ms (:class:`bench.scale_watch.LoopProbe`). A step that
fails (the file budget refusing the topic, a wait past its bound) is reported as such and ends that
round, keeping the cluster's dir; every wait is bounded. Markdown on stdout, progress on stderr,
``--json FILE`` keeps the raw rows::

    .venv/bin/python bench/partitions_at_scale.py [--sizes 1000,4000,10000] [--base HEAD] [--no-base]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CLUSTER_SETTINGS, baseline_worktree, bench_cluster, load_average, machine, say  # noqa: E402
from bench.scale_watch import (  # noqa: E402
    LoopProbe,
    Scrape,
    log_time,
    open_files,
    rss_mb,
    scrape,
    stall_during,
    wait_until,
)
from client.admin import AdminClient  # noqa: E402
from client.types import NewTopic  # noqa: E402
from devcluster import processes  # noqa: E402
from devcluster.cluster import LocalCluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "scale"
REPLICATION_FACTOR = 3
SESSION_TIMEOUT_S = int(CLUSTER_SETTINGS["zookeeper.session.timeout.ms"]) / 1000
LEADERS = "kafka_server_replicamanager_leadercount"
HOSTED = "kafka_server_replicamanager_partitioncount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"


def bound_s(size: int) -> float:
    """Each wait's bound: generous, and growing with the partition count."""
    return 60.0 + size * 0.03


@dataclass
class Step:
    """One operation of a round: its times (seconds from its start), the longest stall on each
    broker, and each broker's open files and RSS after it."""

    name: str
    ok: bool = True
    error: str | None = None
    times: dict[str, float | None] = field(default_factory=dict)
    stall_metric: dict[int, str] = field(default_factory=dict)
    stall_probe: dict[int, float | None] = field(default_factory=dict)
    open_files: dict[int, int | None] = field(default_factory=dict)
    rss_mb: dict[int, float | None] = field(default_factory=dict)


@dataclass
class Round:
    tree: str
    size: int
    steps: list[Step] = field(default_factory=list)


class StepFailed(Exception):
    pass


class Watched:
    """A running cluster, its metrics and its probe, for one round."""

    def __init__(self, cluster: LocalCluster, probe: LoopProbe) -> None:
        self.cluster = cluster
        self.probe = probe
        self.addresses = cluster.metrics_addresses()

    def pids(self) -> dict[int, int | None]:
        return {i: b.pid for i, b in sorted(self.cluster.state.brokers.items())}

    def scrape_all(self, ids: list[int] | None = None) -> dict[int, Scrape | None]:
        ids = sorted(self.addresses) if ids is None else ids
        return {i: scrape(self.addresses[i]) for i in ids if self.addresses.get(i)}

    def total(self, name: str, ids: list[int]) -> float:
        return sum(s.get(name) for s in self.scrape_all(ids).values() if s is not None)

    def each_at_least(self, name: str, value: float, ids: list[int]) -> bool:
        scrapes = self.scrape_all(ids)
        return all(scrapes.get(i) is not None and scrapes[i].get(name) >= value for i in ids)

    @contextmanager
    def step(self, round_: Round, name: str) -> Iterator[Step]:
        """Time a step; afterwards, the stalls during it and the brokers' files and RSS."""
        step = Step(name)
        round_.steps.append(step)
        before = self.scrape_all()
        start = time.time()
        try:
            yield step
        except StepFailed as exc:
            step.ok, step.error = False, str(exc)
        finally:
            end = time.time()
            after = self.scrape_all()
            for i, pid in self.pids().items():
                step.stall_metric[i] = stall_during(before.get(i), after.get(i))
                step.stall_probe[i] = self.probe.max_latency(i, start, end)
                step.open_files[i] = open_files(pid)
                step.rss_mb[i] = rss_mb(pid)
        if not step.ok:
            raise StepFailed(f"{name}: {step.error}")


def since(start: float, at: float | None) -> float | None:
    return None if at is None else round(at - start, 2)


def create_topic(w: Watched, round_: Round) -> None:
    n = round_.size
    with w.step(round_, "create") as step:
        start = time.time()

        async def create() -> None:
            async with AdminClient(w.cluster.bootstrap_servers, request_timeout_ms=60_000) as admin:
                results = await admin.create_topics(
                    [NewTopic(TOPIC, n, REPLICATION_FACTOR)], timeout_ms=int(bound_s(n) * 1000)
                )
            if results[TOPIC] is not None:
                raise StepFailed(f"CreateTopics refused: {results[TOPIC]}")

        asyncio.run(create())
        step.times["answered"] = since(start, time.time())
        ids = sorted(w.addresses)
        led = wait_until(lambda: w.total(LEADERS, ids) >= n, bound_s(n))
        step.times["all_led"] = since(start, led)
        hosted = wait_until(lambda: w.each_at_least(HOSTED, n, ids), bound_s(n))
        step.times["all_hosted"] = since(start, hosted)
        if led is None or hosted is None:
            raise StepFailed(f"not all led and hosted within {bound_s(n):.0f}s")
        step.times["partitions_per_s"] = round(n / (led - start), 1)
        # the failover starts from a settled cluster: every ISR full (a partition whose only ISR
        # member is the killed controller would stay offline, unclean election being off)
        full = wait_until(lambda: w.total(UNDER_REPLICATED, ids) == 0, bound_s(n))
        step.times["isr_full"] = since(start, full)
        if full is None:
            raise StepFailed(f"ISRs not full within {bound_s(n):.0f}s")


def kill_controller(w: Watched, round_: Round) -> int:
    n = round_.size
    controller, _ = w.cluster.controller()
    if controller is None:
        raise StepFailed("no controller to kill")
    survivors = [i for i in sorted(w.addresses) if i != controller]
    with w.step(round_, f"failover (SIGKILL controller {controller})") as step:
        start = time.time()
        w.cluster.kill(controller, "KILL")
        moved = wait_until(lambda: w.cluster.controller()[0] not in (None, controller), bound_s(n))
        step.times["new_controller"] = since(start, moved)
        led = wait_until(lambda: w.total(LEADERS, survivors) >= n, bound_s(n))
        step.times["all_led"] = since(start, led)
        step.times["goal"] = SESSION_TIMEOUT_S + 5
        if led is None:
            raise StepFailed(f"not all led again within {bound_s(n):.0f}s")
    return controller


def restart(w: Watched, round_: Round, broker_id: int) -> None:
    n = round_.size
    out = w.cluster.data_dir / f"broker-{broker_id}" / "broker.out"
    with w.step(round_, f"restart broker {broker_id}") as step:
        start = time.time()
        try:
            w.cluster.start(broker_id, timeout=bound_s(n))
        except Exception as exc:  # noqa: BLE001 - reported as the step's failure
            raise StepFailed(f"did not register: {exc}") from None
        step.times["registered"] = since(start, time.time())
        step.times["loading_logs"] = since(start, log_time(out, "loading logs from", start))
        step.times["logs_loaded"] = since(start, log_time(out, "file budget:", start))
        hosted = wait_until(lambda: w.each_at_least(HOSTED, n, [broker_id]), bound_s(n))
        step.times["all_hosted"] = since(start, hosted)
        ids = sorted(w.addresses)
        full = wait_until(lambda: w.total(UNDER_REPLICATED, ids) == 0, bound_s(n))
        step.times["isr_full"] = since(start, full)
        if hosted is None or full is None:
            raise StepFailed(f"not hosting all or ISRs not full within {bound_s(n):.0f}s")


def one_round(tree: Path, label: str, size: int) -> Round:
    """One cluster running ``tree``'s brokers through create, failover and restart."""
    round_ = Round(label, size)
    # the brokers' code: devcluster puts its own checkout first on their PYTHONPATH
    # (devcluster.processes.ROOT), so that is pointed at ``tree`` for the round
    os.environ["PYTHONPATH"] = str(tree)
    own_root, processes.ROOT = processes.ROOT, tree
    say(f"--- {label}: {size} partitions, RF {REPLICATION_FACTOR}, 3 brokers")
    try:
        with bench_cluster(prefix=f"floodmark-scale-{size}-") as cluster:
            state = cluster.state
            endpoints = {i: (state.broker_host(i), b.port) for i, b in state.brokers.items()}
            probe = LoopProbe(endpoints)
            probe.start()
            try:
                w = Watched(cluster, probe)
                create_topic(w, round_)
                killed = kill_controller(w, round_)
                restart(w, round_, killed)
            finally:
                probe.stop()
    except StepFailed as exc:  # bench_cluster kept the cluster's dir (broker.out, state-change.log)
        say(f"round ended: {exc}")
    finally:
        os.environ.pop("PYTHONPATH", None)
        processes.ROOT = own_root
    return round_


# -- the report -----------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    return str(value)


def _per_broker(values: dict[int, Any]) -> str:
    return " / ".join(_fmt(values.get(i)) for i in sorted(values))


def report(rounds: list[Round]) -> str:
    lines = [
        "| replicas per broker | tree | step | times (s from the step's start) | longest stall, metric (s) "
        "| longest stall, probe (s) | open files | RSS (MB) |",
        "|---:|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        for s in r.steps:
            times = ", ".join(f"{k} {_fmt(v)}" for k, v in s.times.items())
            if not s.ok:
                times = f"**failed**: {s.error}" + (f" ({times})" if times else "")
            lines.append(
                f"| {r.size:,} | {r.tree} | {s.name} | {times} | {_per_broker(s.stall_metric)} "
                f"| {_per_broker(s.stall_probe)} | {_per_broker(s.open_files)} | {_per_broker(s.rss_mb)} |"
            )
    m = machine()
    return "\n".join(
        [
            *m.lines(),
            f"- load average at the end (1 / 5 / 15 min): {load_average()}",
            "- per-broker columns are brokers 1 / 2 / 3; stalls are the longest during the step",
            "",
            *lines,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000,10000", help="replicas per broker, comma-separated")
    parser.add_argument("--base", default="HEAD", help="the baseline git revision (default HEAD)")
    parser.add_argument("--no-base", action="store_true", help="measure this tree only")
    parser.add_argument("--json", type=Path, help="also write the raw rows here")
    args = parser.parse_args()
    # SIGTERM ends the run through the clusters' cleanup (bench_cluster stops them)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rounds: list[Round] = []
    revision = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    base_tree = nullcontext(None) if args.no_base else baseline_worktree(revision)
    with base_tree as base:
        for size in sizes:
            if base is not None:
                rounds.append(one_round(base, f"base {revision}", size))
            rounds.append(one_round(ROOT, "this tree", size))
            if args.json:
                args.json.write_text(json.dumps([asdict(r) for r in rounds], indent=1))
    print(report(rounds))


if __name__ == "__main__":
    main()
