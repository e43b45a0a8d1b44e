"""Issue 19 item 7, the pure parts: a heal that fails does not end the chaos run (the injector
records it and goes on, and heals it again at the end), the faultable disks are sized for the run
(chaos/disk_budget.py), and ``chaos run`` exits with both facts (cli/chaos.py). The real run, with
a broker that cannot restart, is tests/chaos/test_chaos_heal_failure.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from click.testing import CliRunner

from chaos.injector import FaultInjector
from chaos.schedule import Fault


class FlakyBackend:
    """Records every call; the verbs in ``failing`` raise (``fails`` times each, or always)."""

    name = "flaky"

    def __init__(self, failing: dict[str, int | None]) -> None:
        self.calls: list[tuple[str, int]] = []
        self.failing = dict(failing)

    def can_partition(self) -> bool:
        return False

    def can_fault_disks(self) -> bool:
        return True

    def __getattr__(self, verb: str):
        def call(broker_id: int) -> None:
            self.calls.append((verb, broker_id))
            if verb in self.failing:
                left = self.failing[verb]
                if left is None or left > 0:
                    if left is not None:
                        self.failing[verb] = left - 1
                    raise RuntimeError(
                        f"broker {broker_id} exited with code 2 before registering\nlast lines"
                    )

        return call


async def leader_of(partition: int) -> int:
    return {0: 1, 1: 2}[partition]


async def test_a_failed_heal_is_recorded_the_schedule_goes_on_and_heal_all_tries_again():
    backend = FlakyBackend({"restart": 1})  # broker 1 cannot restart once
    events: list[tuple[str, dict]] = []
    said: list[str] = []
    injector = FaultInjector(backend, leader_of, None, lambda k, d: events.append((k, d)), said.append)
    await injector.run([Fault(0, "kill", 0, 0.01), Fault(0, "kill", 1, 0.01)], time.monotonic())

    assert backend.calls == [("crash", 1), ("restart", 1), ("crash", 2), ("restart", 2)]
    failure = {"kind": "kill", "broker": 1, "error": "broker 1 exited with code 2 before registering"}
    assert events == [
        ("fault", {"kind": "kill", "broker": 1, "partition": 0, "planned_at_s": 0, "duration_s": 0.01}),
        ("heal_failed", failure),
        ("fault", {"kind": "kill", "broker": 2, "partition": 1, "planned_at_s": 0, "duration_s": 0.01}),
        ("heal", {"kind": "kill", "broker": 2}),
    ]
    assert injector.heal_failures == [failure] and injector.unhealed() == ["broker 1"]
    assert any(line.startswith("HEAL FAILED: broker 1 (kill)") for line in said)

    await injector.heal_all()  # the end of the run: broker 1 restarts this time
    assert backend.calls[-1] == ("restart", 1) and events[-1] == ("heal", {"kind": "final", "broker": 1})
    assert injector.unhealed() == []


async def test_a_disk_that_cannot_be_freed_stays_faulted_and_is_freed_by_heal_all():
    backend = FlakyBackend({"unfill_disk": 1})
    events: list[tuple[str, dict]] = []
    injector = FaultInjector(backend, leader_of, None, lambda k, d: events.append((k, d)))
    await injector.run([Fault(0, "disk-full", 0, 0.01)], time.monotonic())
    assert [k for k, _ in events] == ["fault", "heal_failed"]
    assert injector.disks == {1: {"disk-full"}} and injector.unhealed() == ["broker 1"]

    await injector.heal_all()
    assert backend.calls == [("fill_disk", 1), ("unfill_disk", 1), ("unfill_disk", 1), ("restart", 1)]
    assert not injector.disks and injector.unhealed() == []


async def test_a_heal_that_keeps_failing_is_recorded_again_at_the_end():
    backend = FlakyBackend({"restart": None})
    events: list[tuple[str, dict]] = []
    injector = FaultInjector(backend, leader_of, None, lambda k, d: events.append((k, d)))
    await injector.run([Fault(0, "term", 0, 0.01)], time.monotonic())
    await injector.heal_all()
    assert [(k, d["kind"]) for k, d in events if k == "heal_failed"] == [
        ("heal_failed", "term"),
        ("heal_failed", "final"),
    ]
    assert len(injector.heal_failures) == 2 and injector.unhealed() == ["broker 1"]


# -- the disks, sized for the run ------------------------------------------------------------------


def test_the_long_run_of_the_issue_gets_disks_that_hold_everything_it_writes():
    from chaos.disk_budget import MIB, plan_disk

    # `chaos run --duration 1200 --rate 2500 --writers 4` with RF 3 on 3 brokers: 64 MiB filled
    # after about 900,000 records (965,894 acknowledged, about 70 bytes each on disk)
    plan = plan_disk(records_per_second=2500, duration_s=1200, partitions=6, replication_factor=3, brokers=3)
    assert plan.basis == "run"
    assert plan.size_bytes >= 2500 * 1200 * 70 * 1.25 and plan.size_bytes > 64 * MIB
    assert plan.size == f"{plan.size_bytes // MIB}m" and "sized for the run" in plan.describe()
    # RF 1 over 3 brokers: a broker hosts 2 of 6 partitions, a third of the bytes
    third = plan_disk(records_per_second=2500, duration_s=1200, partitions=6, replication_factor=1, brokers=3)
    assert third.size_bytes < plan.size_bytes / 2


def test_retention_bounds_the_disk_when_it_is_smaller_and_the_plan_says_so():
    from chaos.disk_budget import MIB, plan_disk

    overrides = {"log.retention.bytes": str(8 * MIB), "log.segment.bytes": str(4 * MIB)}
    plan = plan_disk(
        records_per_second=2500,
        duration_s=1200,
        partitions=6,
        replication_factor=3,
        brokers=3,
        overrides=overrides,
    )
    assert plan.basis == "retention" and "log.retention.bytes" in plan.explanation
    assert plan.size_bytes < 200 * MIB
    small = plan_disk(
        records_per_second=10,
        duration_s=60,
        partitions=6,
        replication_factor=3,
        brokers=3,
        overrides=overrides,
    )
    assert small.basis == "run"  # retention never deletes anything of so short a run


def test_disks_that_do_not_fit_in_memory_are_refused_with_what_to_do():
    from chaos.disk_budget import MIB, check_fits, plan_disk

    plan = plan_disk(
        records_per_second=50_000, duration_s=3600, partitions=6, replication_factor=3, brokers=3
    )
    reason = check_fits(plan, 3, 4096 * MIB)
    assert reason and "lower --rate or --duration" in reason and "log.retention.bytes" in reason
    assert check_fits(plan, 3, None) is None and check_fits(plan, 3, 1 << 50) is None


class StoppedCluster:
    """What prepare_local_cluster uses of LocalCluster, for a cluster that is not running."""

    def __init__(self) -> None:
        self.state = None
        self.up_kwargs: dict = {}

    def running(self) -> bool:
        return False

    def up(self, brokers: int, **kwargs) -> None:
        self.up_kwargs = kwargs


def test_the_runner_starts_its_cluster_on_disks_sized_for_the_run(tmp_path: Path):
    from chaos.run import ChaosSettings, plan_disks, prepare_local_cluster

    settings = ChaosSettings(
        tmp_path / "c",
        tmp_path / "r",
        duration_s=1200,
        faults=("kill", "disk-full"),
        writers=4,
        records_per_second=2500,
    )
    said: list[str] = []
    cluster = StoppedCluster()
    _, plan = prepare_local_cluster(settings, said.append, cluster)
    assert plan == plan_disks(settings) and cluster.up_kwargs["disk_size"] == plan.size != "64m"
    assert f"faultable disks: {plan.describe()}" in said


def test_the_runner_starts_its_cluster_on_the_ports_it_is_given(tmp_path: Path, monkeypatch):
    """`chaos run --zookeeper-port Z --base-port B --kafka-base-port K` reach the cluster it starts
    (a busy port of the defaults need not stop a run); without them it picks a free block."""
    from chaos.run import ChaosSettings, prepare_local_cluster
    from cli import chaos as chaos_cli
    from cli.main import build_cli

    settings = ChaosSettings(
        tmp_path / "c", tmp_path / "r", zookeeper_port=12181, base_port=19092, kafka_base_port=19192
    )
    cluster = StoppedCluster()
    prepare_local_cluster(settings, lambda _line: None, cluster)
    assert (cluster.up_kwargs["zookeeper_port"], cluster.up_kwargs["base_port"]) == (12181, 19092)
    assert cluster.up_kwargs["kafka_base_port"] == 19192
    free = StoppedCluster()
    prepare_local_cluster(ChaosSettings(tmp_path / "d", tmp_path / "r"), lambda _line: None, free)
    assert free.up_kwargs["zookeeper_port"] == free.up_kwargs["base_port"] - 1
    assert free.up_kwargs["kafka_base_port"] is None

    seen = {}
    monkeypatch.setattr(chaos_cli, "_run_reporting_runner_errors", lambda s: seen.setdefault("s", s) and None)
    args = [
        "chaos",
        "run",
        "--report-dir",
        str(tmp_path),
        "--zookeeper-port",
        "12181",
        "--base-port",
        "19092",
    ]
    CliRunner().invoke(build_cli(), [*args, "--kafka-base-port", "19192"])
    assert (seen["s"].zookeeper_port, seen["s"].base_port, seen["s"].kafka_base_port) == (12181, 19092, 19192)


# -- the exit code: both facts ---------------------------------------------------------------------


def _invoke_with_result(monkeypatch, tmp_path: Path, **fields):
    from chaos.run import ChaosResult
    from cli import chaos as chaos_cli
    from cli.main import build_cli

    result = ChaosResult(100, 2, 1, True, tmp_path, {}, **fields)
    monkeypatch.setattr(chaos_cli, "_run_reporting_runner_errors", lambda settings: result)
    return CliRunner().invoke(build_cli(), ["chaos", "run", "--report-dir", str(tmp_path)])


def test_chaos_run_exits_4_with_the_failed_heal_and_the_clean_verification(monkeypatch, tmp_path):
    failure = {"kind": "disk-full", "broker": 1, "error": "broker 1 exited with code 2 before registering"}
    out = _invoke_with_result(
        monkeypatch, tmp_path, heal_failures=[failure], unhealed=["broker 1"], verified_offline=True
    )
    assert out.exit_code == 4, out.output
    assert "heal FAILED: broker 1 (disk-full): broker 1 exited with code 2 before registering" in out.output
    assert "still faulted at the end: broker 1" in out.output
    assert "verification (offline, from the log dirs: the cluster could not serve): OK" in out.output


def test_anomalies_still_exit_3_and_a_clean_healed_run_0(monkeypatch, tmp_path):
    failure = {"kind": "kill", "broker": 2, "error": "boom"}
    out = _invoke_with_result(monkeypatch, tmp_path, heal_failures=[failure])
    assert out.exit_code == 4
    from chaos.run import ChaosResult
    from cli.chaos import conclusion

    lines, code = conclusion(ChaosResult(1, 0, 1, False, tmp_path, {}, heal_failures=[failure]))
    assert code == 3 and any("heal FAILED: broker 2" in line for line in lines)
    assert conclusion(ChaosResult(1, 0, 1, True, tmp_path, {}))[1] == 0
