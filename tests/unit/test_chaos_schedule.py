"""The seeded fault schedule and the injector's bookkeeping (pure logic: a recording backend)."""

from __future__ import annotations

import itertools
import time

import pytest

from chaos.faults import DockerBackend
from chaos.injector import FaultInjector
from chaos.schedule import FAULT_KINDS, Fault, make_schedule, parse_fault_kinds


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


class RecordingBackend:
    name = "recording"

    def __init__(self, partitions: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.partitions = partitions

    def broker_ids(self):
        return [1, 2, 3]

    def can_partition(self):
        return self.partitions

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
    await injector.heal_all()
    assert sorted(backend.calls) == [("heal", 3), ("restart", 1), ("resume", 2)]


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
        ["docker", "network", "connect", "floodmark", "floodmark-broker-1"],
    ]


def test_the_chaos_tests_seed_holds_every_kind_in_a_minute():
    from tests.chaos.test_chaos_run import SEED

    assert {f.kind for f in make_schedule(SEED, 60, FAULT_KINDS, 6, pause_s=9.0)} == set(FAULT_KINDS)


def test_the_demo_seed_holds_every_kind_in_ninety_seconds():
    from client.cli.demo import DEMO_SEED

    assert {f.kind for f in make_schedule(DEMO_SEED, 90, FAULT_KINDS, 6, pause_s=9.0)} == set(FAULT_KINDS)
