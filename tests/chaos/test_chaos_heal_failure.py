"""Issue 19 item 7: a chaos run whose heal fails is reported, verified and stopped.

A one-broker cluster, RF 1, on a faultable disk (root, FUSE: the run asks for ``disk-full``
too, so it sizes the disk), and one fault: SIGTERM the leader (a controlled shutdown, so the
broker checkpoints its high watermark on the way out). When the runner announces the fault, the
test appends a line to every broker's server.properties that the broker refuses, so the heal
(restart the broker) fails: the broker exits before it registers, as broker 1 did in the issue.
The run must then

1. have put the broker on a disk sized for the run, and said so (run.json, the progress lines);
2. record the failed heal on the timeline (``heal_failed``), in the result and in R/summary.md,
   go on, and verify what was acknowledged: offline from the log dirs, since no broker serves;
   ``chaos run`` exits 4 with both facts;
3. with ``--stop``, leave no ZooKeeper, broker or FUSE daemon running and nothing mounted.

Bounded: 16 s of run (one fault for any seed: the schedule's rules), a 12 s delivery timeout so
the records in flight to the stopped broker resolve within the run, and a verification of a
few thousand records.

A second test drives another way out: the topic cannot be created (replication factor 3 on one
broker), and ``--stop`` still stops the cluster the run started.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from chaos.run import ChaosSettings, plan_disks
from chaos.schedule import make_schedule
from cli.chaos import conclusion, run_chaos
from client.protocol.errors import KafkaError
from devcluster.cluster import LocalCluster
from devcluster.disk import mount_type, unavailable_reason

pytestmark = pytest.mark.integration

SEED = 5  # with 16 s and these kinds: one fault, a SIGTERM of the leader of partition 0
KINDS = ("term", "disk-full")
BROKEN = "this line is no property: the broker refuses its config (tests/chaos/test_chaos_heal_failure.py)"


def alive(pid: int | None) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def pids_of(cluster_dir: Path) -> dict[str, int]:
    """Every process the cluster's state file names now: ZooKeeper, brokers, FUSE daemons."""
    if not (cluster_dir / "cluster.json").exists():
        return {}
    doc = json.loads((cluster_dir / "cluster.json").read_text())
    pids = {"zookeeper": doc["zookeeper"]["pid"]}
    pids |= {f"broker {i}": b["pid"] for i, b in doc["brokers"].items()}
    pids |= {f"faulty_fs {i}": pid for i, pid in ((doc.get("disks") or {}).get("fs_pids") or {}).items()}
    return {name: pid for name, pid in pids.items() if pid}


def breaking_configs_at_the_fault(cluster_dir: Path, said: list[str], seen: dict[str, int]) -> Callable:
    def say(message: str) -> None:
        said.append(message)
        print(message)
        if message.startswith("fault: "):
            seen.update(pids_of(cluster_dir))
            for props in cluster_dir.glob("broker-*/server.properties"):
                with props.open("a") as out:
                    out.write(BROKEN + "\n")

    return say


def stop_leftovers(cluster_dir: Path) -> None:
    if (cluster_dir / "cluster.json").exists():
        LocalCluster(cluster_dir).down(timeout=10)


async def test_a_failed_heal_is_reported_verified_offline_and_stop_leaves_nothing_running(tmp_path, spark):
    if reason := unavailable_reason():
        pytest.fail(reason)
    cluster_dir = tmp_path / "cluster"
    settings = ChaosSettings(
        data_dir=cluster_dir,
        report_dir=tmp_path / "report",
        duration_s=16,
        seed=SEED,
        faults=KINDS,
        partitions=2,
        replication_factor=1,
        min_insync_replicas=1,
        brokers=1,
        writers=1,
        records_per_second=150,
        stop_cluster=True,
        delivery_timeout_ms=12_000,
    )
    (fault,) = make_schedule(SEED, 16, settings.faults, 2, pause_s=9.0)
    assert fault.kind == "term"
    said: list[str] = []
    seen: dict[str, int] = {}
    try:
        result = await run_chaos(
            settings, breaking_configs_at_the_fault(cluster_dir, said, seen), spark=spark
        )
        left = {name: pid for name, pid in (seen | pids_of(cluster_dir)).items() if alive(pid)}
        mounted = [
            p for p in (cluster_dir / "broker-1" / "disk", cluster_dir / "broker-1" / "data") if mount_type(p)
        ]
    finally:
        stop_leftovers(cluster_dir)
    report = settings.report_dir

    # 1. the disk was sized for the run, and the run said which basis it used
    plan = plan_disks(settings)
    assert json.loads((report / "run.json").read_text())["disks"] == plan.as_dict()
    assert json.loads((cluster_dir / "cluster.json").read_text())["disks"]["size"] == plan.size
    assert f"faultable disks: {plan.describe()}" in said and plan.basis == "run"

    # 2. the heal failed, was recorded, and the run went on to verify what was acknowledged
    events = [json.loads(line) for line in (report / "events.jsonl").read_text().splitlines()]
    failed = [e["detail"] for e in events if e["type"] == "heal_failed"]
    assert [(f["kind"], f["broker"]) for f in failed] == [("term", 1), ("final", 1)], failed
    assert all("before registering" in f["error"] for f in failed)
    assert result.heal_failures == failed and result.unhealed == ["broker 1"]
    assert result.verified_offline and result.verification_ok
    verification = json.loads((report / "verification.json").read_text())
    assert verification["verdict"] == "PASSED", verification
    assert verification["counts"]["acknowledged"] == result.acknowledged > 300
    summary = (report / "summary.md").read_text()
    assert "2 heal(s) failed" in summary and "still faulted at the end: broker 1" in summary
    assert "Verified **offline** from the log dirs" in summary
    outcome = json.loads((report / "run.json").read_text())["outcome"]
    assert outcome["heal_failures"] == failed and outcome["verified_offline"]
    lines, code = conclusion(result)
    assert code == 4
    assert any(line.startswith("heal FAILED: broker 1 (term)") for line in lines), lines
    assert any(
        line.startswith("verification (offline")
        and line.endswith("OK (nothing lost, duplicated or divergent)")
        for line in lines
    )

    # 3. --stop stopped everything, the failed heal notwithstanding
    assert {"zookeeper", "broker 1", "faulty_fs 1"} <= set(seen), seen
    assert not left, f"still running after --stop: {left}"
    assert not mounted, f"still mounted after --stop: {mounted}"
    assert json.loads((cluster_dir / "cluster.json").read_text())["status"] == "stopped"


@pytest.mark.parametrize("way_out", ["error", "cancel"])
async def test_stop_stops_the_cluster_on_an_error_and_on_a_cancellation(tmp_path, way_out):
    """An error (the topic cannot be created: replication factor 3 on one broker) and a
    cancellation (Ctrl-C: asyncio.Runner cancels the main task) once the topic exists."""
    cluster_dir = tmp_path / "cluster"
    settings = ChaosSettings(
        data_dir=cluster_dir,
        report_dir=tmp_path / "report",
        duration_s=10,
        brokers=1,
        replication_factor=3 if way_out == "error" else 1,
        min_insync_replicas=1,
        stop_cluster=True,
        verify=False,
    )
    said: list[str] = []

    def say(message: str) -> None:
        said.append(message)
        if way_out == "cancel" and message.startswith("created topic"):
            run.cancel()  # called on the loop: ensure_topic says it

    run = asyncio.ensure_future(run_chaos(settings, say))
    try:
        with pytest.raises(KafkaError if way_out == "error" else asyncio.CancelledError):
            await run
        pids = {n: p for n, p in (pids_of(cluster_dir) | _started(said)).items() if alive(p)}
    finally:
        stop_leftovers(cluster_dir)
    assert _started(said), said
    assert not pids, f"still running after --stop: {pids}"
    assert json.loads((cluster_dir / "cluster.json").read_text())["status"] == "stopped"


def _started(said: list[str]) -> dict[str, int]:
    """The pids the runner's progress lines name ("broker 1 registered (pid 123)")."""
    found = {}
    for line in said:
        if line.startswith("broker ") and "registered (pid " in line:
            found[line.split(" registered")[0]] = int(line.rsplit("pid ", 1)[1].rstrip(")"))
    return found
