"""The seeded fault schedule and the injector's bookkeeping (pure logic: a recording backend)."""

from __future__ import annotations

import itertools
import time

import pytest

from chaos.faults import DockerBackend, FaultUnsupported
from chaos.injector import FaultInjector
from chaos.schedule import (
    ALL_FAULT_KINDS,
    DISK_FAULT_KINDS,
    FAULT_KINDS,
    REASSIGN_FAULT_KINDS,
    ZK_FAULT_KINDS,
    Fault,
    make_schedule,
    parse_fault_kinds,
)


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    a = make_schedule(7, 90, FAULT_KINDS, 6, pause_s=8)
    assert a == make_schedule(7, 90, FAULT_KINDS, 6, pause_s=8)
    assert a != make_schedule(8, 90, FAULT_KINDS, 6, pause_s=8)


def test_every_kind_appears_faults_never_overlap_and_the_run_ends_healed():
    for seed in range(20):
        schedule = make_schedule(seed, 90, ("kill", "controller", "pause", "term"), 6, pause_s=8, settle_s=4)
        assert {f.kind for f in schedule} == {"kill", "controller", "pause", "term"}
        for before, after in itertools.pairwise(schedule):
            assert before.at_s + before.duration_s + 4 <= after.at_s
        last = schedule[-1]
        assert last.at_s + last.duration_s + 4 <= 90
        assert all(f.duration_s == 8 for f in schedule if f.kind in ("pause", "partition"))
        assert all(0 <= f.partition < 6 for f in schedule)


def test_a_short_run_gets_fewer_faults_not_overlapping_ones():
    assert make_schedule(1, 5, FAULT_KINDS, 3, pause_s=8) == []


def test_fault_kinds_are_parsed_with_a_clear_error():
    assert parse_fault_kinds("kill, pause") == ("kill", "pause")
    with pytest.raises(ValueError, match="unknown fault kind.*'gc'"):
        parse_fault_kinds("kill,gc")
    assert parse_fault_kinds("kill,disk-full,disk-error") == ("kill", "disk-full", "disk-error")
    with pytest.raises(ValueError, match="choose from .*disk-full, disk-error"):
        parse_fault_kinds("disk-slow")


def test_disk_faults_are_asked_for_by_name_and_target_leaders_and_followers():
    assert not set(DISK_FAULT_KINDS) & set(FAULT_KINDS)  # not in the set every run draws from
    assert ALL_FAULT_KINDS == (
        FAULT_KINDS + DISK_FAULT_KINDS + ZK_FAULT_KINDS + ("fd-pressure",) + REASSIGN_FAULT_KINDS
    )
    assert not set(REASSIGN_FAULT_KINDS) & set(FAULT_KINDS)  # asked for by name, as the disk faults
    roles = set()
    for seed in range(20):
        schedule = make_schedule(seed, 120, ("kill", "disk-full", "disk-error"), 6, pause_s=8)
        assert {f.kind for f in schedule} == {"kill", "disk-full", "disk-error"}
        assert all(f.role == "leader" for f in schedule if f.kind == "kill")
        roles |= {f.role for f in schedule if f.kind in DISK_FAULT_KINDS}
        assert schedule == make_schedule(seed, 120, ("kill", "disk-full", "disk-error"), 6, pause_s=8)
    assert roles == {"leader", "follower"}
    # no role is drawn for the other kinds, so their seeds give the schedules they always gave
    assert all(f.role == "leader" for f in make_schedule(3, 300, FAULT_KINDS, 6, pause_s=8))
    assert Fault(1, "disk-full", 2, 3, "follower").describe() == (
        "t+1.0s: fill the disk of an in-sync follower of partition 2 (ENOSPC) for 3.0s"
    )
    assert Fault(1, "disk-error", 0, 3).describe() == (
        "t+1.0s: fail every write to the disk of the leader of partition 0 (EIO) for 3.0s"
    )


class RecordingBackend:
    name = "recording"

    def __init__(self, partitions: bool = False, disks: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.partitions = partitions
        self.disks = disks

    def broker_ids(self):
        return [1, 2, 3]

    def can_partition(self):
        return self.partitions

    def can_fault_disks(self):
        return self.disks

    def pause_zookeeper(self):
        self.calls.append(("pause_zookeeper", 0))

    def resume_zookeeper(self):
        self.calls.append(("resume_zookeeper", 0))

    def __getattr__(self, verb):
        return lambda broker_id: self.calls.append((verb, broker_id))


async def test_the_injector_targets_roles_and_undoes_each_fault():
    backend = RecordingBackend()
    events = []

    async def leader_of(partition):
        return {0: 1, 1: 2}[partition]

    async def controller_id():
        return 3

    injector = FaultInjector(
        backend, leader_of, controller_id, lambda kind, detail: events.append((kind, detail))
    )
    schedule = [
        Fault(0, "kill", 0, 0.01),
        Fault(0, "pause", 1, 0.01),
        Fault(0, "controller", 0, 0.01),
        Fault(0, "term", 1, 0.01),
        Fault(0, "partition", 0, 0.01),  # skipped: no partitions on this backend
    ]
    await injector.run(schedule, time.monotonic())
    assert backend.calls == [
        ("crash", 1),
        ("restart", 1),
        ("pause", 2),
        ("resume", 2),
        ("crash", 3),
        ("restart", 3),
        ("terminate", 2),
        ("restart", 2),
    ]
    assert [k for k, _ in events] == ["fault", "heal"] * 4
    assert not (injector.down | injector.paused | injector.isolated)


async def test_heal_all_undoes_what_an_interrupted_run_left():
    backend = RecordingBackend(partitions=True)
    injector = FaultInjector(backend, None, None, lambda *_: None)
    injector.down, injector.paused, injector.isolated = {1}, {2}, {3}
    injector.disks = {4: {"disk-full", "disk-error"}}
    await injector.heal_all()
    assert sorted(backend.calls) == [
        ("fix_disk", 4),
        ("heal", 3),
        ("restart", 1),
        ("restart", 4),
        ("resume", 2),
        ("unfill_disk", 4),
    ]
    assert not injector.disks


async def test_disk_faults_fill_or_break_then_heal_and_restart_the_broker_that_halted():
    backend = RecordingBackend(disks=True)
    events = []

    async def leader_of(partition):
        return {0: 1, 1: 2}[partition]

    async def follower_of(partition):
        return {0: 3, 1: 1}[partition]

    injector = FaultInjector(
        backend, leader_of, None, lambda kind, detail: events.append((kind, detail)), follower_of=follower_of
    )
    schedule = [Fault(0, "disk-full", 0, 0.01, "leader"), Fault(0, "disk-error", 0, 0.01, "follower")]
    await injector.run(schedule, time.monotonic())
    # the heal frees or fixes the disk, then restarts the broker (a no-op locally when it still runs)
    assert backend.calls == [
        ("fill_disk", 1),
        ("unfill_disk", 1),
        ("restart", 1),
        ("break_disk", 3),
        ("fix_disk", 3),
        ("restart", 3),
    ]
    faults = [detail for kind, detail in events if kind == "fault"]
    assert [(f["kind"], f["broker"], f["role"]) for f in faults] == [
        ("disk-full", 1, "leader"),
        ("disk-error", 3, "follower"),
    ]
    assert not (injector.down | set(injector.disks))


async def test_disk_faults_are_skipped_where_the_brokers_have_no_faultable_disks():
    backend = RecordingBackend(disks=False)
    said = []

    async def leader_of(partition):
        return 1

    injector = FaultInjector(backend, leader_of, None, lambda *_: None, said.append)
    await injector.run([Fault(0, "disk-error", 0, 0.01)], time.monotonic())
    assert backend.calls == [] and "the brokers are not on faultable disks" in said[0]


def test_the_docker_backend_speaks_the_docker_cli():
    ran = []
    docker = DockerBackend(brokers=3, network="floodmark", run=ran.append)
    docker.crash(2)
    docker.restart(2)
    docker.pause(1)
    docker.resume(1)
    docker.terminate(3)
    docker.isolate(1)
    docker.heal(1)
    assert ran == [
        ["docker", "kill", "--signal", "KILL", "floodmark-broker-2"],
        ["docker", "start", "floodmark-broker-2"],
        ["docker", "pause", "floodmark-broker-1"],
        ["docker", "unpause", "floodmark-broker-1"],
        ["docker", "stop", "--time", "60", "floodmark-broker-3"],
        ["docker", "network", "disconnect", "floodmark", "floodmark-broker-1"],
        ["docker", "network", "connect", "--alias", "broker1", "floodmark", "floodmark-broker-1"],
    ]
    assert not docker.can_fault_disks()
    for verb in (docker.fill_disk, docker.unfill_disk, docker.break_disk, docker.fix_disk):
        with pytest.raises(FaultUnsupported, match="the docker backend has none"):
            verb(1)


def test_the_chaos_tests_seed_holds_every_kind_in_a_minute():
    from tests.chaos.test_chaos_run import SEED

    assert {f.kind for f in make_schedule(SEED, 60, FAULT_KINDS, 6, pause_s=9.0)} == set(FAULT_KINDS)


def test_the_demo_seed_holds_every_kind_in_ninety_seconds():
    from cli.demo import DEMO_SEED

    assert {f.kind for f in make_schedule(DEMO_SEED, 90, FAULT_KINDS, 6, pause_s=9.0)} == set(FAULT_KINDS)


def test_zk_pause_is_asked_for_by_name_and_lasts_half_a_session():
    assert not set(ZK_FAULT_KINDS) & set(FAULT_KINDS)  # not in the set every run draws from
    assert parse_fault_kinds("kill,zk-pause") == ("kill", "zk-pause")
    # pause_s = 9 s is 1.5 x a 6 s session (chaos/run.py): a zk-pause lasts 3 s, half a session
    schedule = make_schedule(5, 120, ("kill", "zk-pause"), 6, pause_s=9.0)
    assert schedule == make_schedule(5, 120, ("kill", "zk-pause"), 6, pause_s=9.0)
    assert {f.kind for f in schedule} == {"kill", "zk-pause"}
    assert all(f.duration_s == 3.0 for f in schedule if f.kind == "zk-pause")
    explicit = make_schedule(5, 120, ("kill", "zk-pause"), 6, pause_s=9.0, zk_pause_s=2.0)
    assert all(f.duration_s == 2.0 for f in explicit if f.kind == "zk-pause")
    assert Fault(1, "zk-pause", 0, 3).describe() == "t+1.0s: SIGSTOP the ZooKeeper server for 3.0s"
    # the schedules every existing seed gives are unchanged (zk-pause takes no draw of its own)
    assert [
        (f.at_s, f.kind, f.partition, f.duration_s) for f in make_schedule(7, 60, FAULT_KINDS, 6, 9.0)
    ] == [
        (f.at_s, f.kind, f.partition, f.duration_s)
        for f in make_schedule(7, 60, FAULT_KINDS, 6, 9.0, zk_pause_s=1.0)
    ]


async def test_the_injector_pauses_and_resumes_zookeeper_and_heal_all_resumes_it():
    backend = RecordingBackend()
    events = []

    async def leader_of(partition):
        return 1

    injector = FaultInjector(backend, leader_of, None, lambda kind, detail: events.append((kind, detail)))
    await injector.run([Fault(0, "zk-pause", 0, 0.01), Fault(0, "kill", 0, 0.01)], time.monotonic())
    assert backend.calls == [("pause_zookeeper", 0), ("resume_zookeeper", 0), ("crash", 1), ("restart", 1)]
    assert events[0] == (
        "fault",
        {"kind": "zk-pause", "target": "zookeeper", "planned_at_s": 0, "duration_s": 0.01},
    )
    assert events[1] == ("heal", {"kind": "zk-pause", "target": "zookeeper"})
    assert not injector.zookeeper_paused

    backend.calls.clear()
    injector.zookeeper_paused, injector.down = True, {2}
    await injector.heal_all()
    assert backend.calls == [("resume_zookeeper", 0), ("restart", 2)]  # ZooKeeper first: a restart needs it
    assert not injector.zookeeper_paused


def test_the_docker_backend_refuses_zk_pause():
    docker = DockerBackend(brokers=3, run=lambda argv: None)
    for verb in (docker.pause_zookeeper, docker.resume_zookeeper):
        with pytest.raises(FaultUnsupported, match="zk-pause .* only the local runner"):
            verb()


def test_chaos_run_accepts_zk_pause_and_refuses_it_on_docker(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from cli import chaos as chaos_cli
    from cli.main import build_cli

    seen = []

    def no_run(settings):  # stands in for the run: only the parsed settings matter here
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(chaos_cli, "_run_reporting_runner_errors", no_run)
    args = ["chaos", "run", "--report-dir", str(tmp_path), "--no-verify", "--faults", "kill,zk-pause"]
    assert CliRunner().invoke(build_cli(), args).exit_code == 0
    assert seen[0].faults == ("kill", "zk-pause")
    result = CliRunner().invoke(build_cli(), [*args, "--backend", "docker"])
    assert result.exit_code == 2 and "zk-pause" in result.output and "--backend local" in result.output
    assert len(seen) == 1
