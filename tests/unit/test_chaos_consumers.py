"""The chaos run's consumer side, the pure parts (chaos/consumers.py, chaos/schedule.py,
chaos/injector.py, cli/chaos.py; docs/operations.md "Chaos runs and verification"): the
``consumer`` fault is asked for by name and draws its own pick, the injector crashes and replaces
a member through its hook, a member commits only what it consumed of what it owns under a
generation, and ``chaos run`` refuses the fault without consumers. The real run is
tests/chaos/test_chaos_run.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.consumers import ConsumerGroup, GroupSettings, Member
from chaos.injector import FaultInjector
from chaos.schedule import (
    ALL_FAULT_KINDS,
    CONSUMER_FAULT_KINDS,
    FAULT_KINDS,
    FAULT_VOCABULARY,
    Fault,
    make_schedule,
    parse_fault_kinds,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition
from ledger.consumed import ConsumerLedgerWriter, read_consumer_ledger

TP0, TP1, TP2 = (TopicPartition("t", p) for p in range(3))


def test_the_consumer_fault_is_asked_for_by_name_and_draws_only_its_own_pick():
    assert "consumer" in FAULT_VOCABULARY and "consumer" not in FAULT_KINDS + ALL_FAULT_KINDS
    assert parse_fault_kinds("kill,consumer") == ("kill", "consumer")
    with pytest.raises(ValueError, match="choose from .*reassign, consumer"):
        parse_fault_kinds("consumers")
    kinds = ("kill", "consumer")
    schedule = make_schedule(5, 120, kinds, 6, pause_s=9.0)
    assert schedule == make_schedule(5, 120, kinds, 6, pause_s=9.0) and {f.kind for f in schedule} == set(
        kinds
    )
    assert all(f.pick for f in schedule if f.kind == "consumer") and all(
        f.pick == 0 for f in schedule if f.kind == "kill"
    )
    assert all(3.0 <= f.duration_s <= 8.0 for f in schedule if f.kind == "consumer")
    assert "pick" in next(f for f in schedule if f.kind == "consumer").as_dict()
    assert Fault(1, "consumer", 0, 4).describe() == (
        "t+1.0s: crash a consumer of the group (no commit, no LeaveGroup) for 4.0s"
    )


def test_the_demo_and_chaos_test_seeds_hold_every_kind_with_the_consumer_fault():
    from cli.demo import DEMO_SEED
    from tests.chaos.test_chaos_run import CONSUMER_KINDS, ZK_PAUSE_SEED

    for kinds in (
        FAULT_KINDS + CONSUMER_FAULT_KINDS,
        tuple(k for k in FAULT_KINDS if k != "partition") + ("consumer",),
    ):
        assert {f.kind for f in make_schedule(DEMO_SEED, 90, kinds, 6, pause_s=9.0)} == set(kinds)
    schedule = make_schedule(ZK_PAUSE_SEED, 60, CONSUMER_KINDS, 6, pause_s=9.0)
    assert {f.kind for f in schedule} == set(CONSUMER_KINDS)


class FakeConsumers:
    def __init__(self, fail_restarts: int = 0) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail_restarts = fail_restarts

    async def crash(self, pick: int) -> str | None:
        self.calls.append(("crash", pick))
        return f"c{pick % 2}-0"

    async def restart(self, name: str) -> str:
        self.calls.append(("restart", name))
        if self.fail_restarts:
            self.fail_restarts -= 1
            raise RuntimeError("no broker answers")
        return name[:-1] + "1"


async def test_the_injector_crashes_a_consumer_and_starts_a_fresh_one_after_the_fault():
    events: list[tuple[str, dict]] = []
    consumers = FakeConsumers()
    injector = FaultInjector(None, None, None, lambda k, d: events.append((k, d)), consumers=consumers)
    await injector.run([Fault(0, "consumer", 0, 0.01, pick=7)], time.monotonic())
    assert consumers.calls == [("crash", 7), ("restart", "c1-0")]
    detail = {"kind": "consumer", "id": "consumer-1", "target": "consumer c1-0", "member": "c1-0"}
    assert events == [
        ("fault", {**detail, "planned_at_s": 0, "duration_s": 0.01}),
        ("heal", {**detail, "replacement": "c1-1"}),
    ]
    assert injector.unhealed() == [] and not injector.consumers_down


async def test_a_failed_restart_is_a_failed_heal_that_heal_all_tries_again():
    said: list[str] = []
    consumers = FakeConsumers(fail_restarts=1)
    injector = FaultInjector(None, None, None, lambda *_: None, said.append, consumers=consumers)
    await injector.run([Fault(0, "consumer", 0, 0.01, pick=2)], time.monotonic())
    assert injector.unhealed() == ["consumer c0-0"]
    assert injector.heal_failures == [
        {
            "kind": "consumer",
            "id": "consumer-1",
            "target": "consumer c0-0",
            "member": "c0-0",
            "error": "no broker answers",
        }
    ]
    assert any(line.startswith("HEAL FAILED: consumer c0-0 (consumer)") for line in said)
    await injector.heal_all()
    assert consumers.calls[-1] == ("restart", "c0-0") and injector.unhealed() == []


async def test_without_consumers_the_fault_is_skipped():
    said: list[str] = []
    injector = FaultInjector(None, None, None, lambda *_: None, said.append)
    await injector.run([Fault(0, "consumer", 0, 0.01, pick=2)], time.monotonic())
    assert "this run has no consumers" in said[0]


class FakeCoordinator:
    def __init__(self) -> None:
        self.generation, self.member_id = 4, "member-x"


class FakeConsumer:
    """What a Member uses of its consumer: assignment, commit, abandon, its group metadata."""

    def __init__(self, owned: set[TopicPartition]) -> None:
        self.owned = owned
        self._coordinator = FakeCoordinator()
        self.commits: list[dict] = []
        self.fail: KafkaError | None = None
        self.abandoned = False

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def group_metadata(self) -> ConsumerGroupMetadata:
        c = self._coordinator
        return ConsumerGroupMetadata("g", c.generation, c.member_id)

    async def commit(self, offsets: dict) -> None:
        if self.fail is not None:
            raise self.fail
        self.commits.append(dict(offsets))

    def abandon(self) -> None:
        self.abandoned = True


def group_with(tmp_path: Path, members: int = 2) -> ConsumerGroup:
    return ConsumerGroup(
        "127.0.0.1:1", GroupSettings("t", "g", members), ConsumerLedgerWriter(tmp_path), lambda _: None
    )


async def test_a_member_commits_what_it_consumed_of_what_it_owns_under_a_generation(tmp_path: Path):
    group = group_with(tmp_path)
    member = Member(group, 0, 0)
    fake = member.consumer = FakeConsumer({TP0, TP1})
    member.positions = {TP0: 10, TP1: 5, TP2: 99}  # TP2 came from a partition no longer owned
    assert await member.commit()
    assert await member.commit()  # nothing moved: nothing sent
    member.positions[TP0] = 12
    fake.fail = KafkaError(ErrorCode.REBALANCE_IN_PROGRESS, "rebalancing")
    assert not await member.commit()  # a failed commit is counted, not recorded
    fake.fail = None
    fake._coordinator.generation = -1
    assert not await member.commit()  # fenced: no generation -1 commit
    assert fake.commits == [{TP0: 10, TP1: 5}]
    assert group.stats.commit_failures == {"REBALANCE_IN_PROGRESS": 1} and group.stats.commits == 1

    fake._coordinator.generation = 5
    await member.on_revoked({TP0, TP1})  # the eager rebalance: commit them, then forget them
    assert fake.commits[-1] == {TP0: 12} and TP0 not in member.positions
    member.positions = {TP1: 7}
    member.on_assigned({TP1})  # a new generation starts from the group's committed offsets
    assert member.positions == {} and group.stats.highest_generation == 5
    member.crash()  # as SIGKILL: abandoned, and nothing more recorded even if its task runs on
    assert fake.abandoned and member.crashed
    member.positions = {TP1: 9}
    assert not await member.commit() and len(fake.commits) == 2
    member._record([ConsumerRecord("t", 1, 9, 0, None, b"v")])
    group.ledger.close()
    rows = [(r.kind, r.generation, r.partition, r.offset) for r in read_consumer_ledger(tmp_path)]
    assert rows == [
        ("committed", 4, 0, 10),
        ("committed", 4, 1, 5),
        ("committed", 5, 0, 12),
        ("assigned", 5, 1, None),
    ]


async def test_the_group_crashes_the_picked_member_and_restarts_a_new_incarnation(tmp_path: Path):
    group = group_with(tmp_path, members=3)
    for index in range(3):  # members that never started: no tasks, fake consumers
        group.members[index] = member = Member(group, index, 0)
        member.consumer = FakeConsumer(set())
    group._incarnations = [1, 1, 1]
    assert await group.crash(4) == "c1-0" and group.members[0] and 1 not in group.members
    assert await group.crash(4) == "c2-0"  # member 1 is down: the next live one
    assert await group.restart("c1-0") == "c1-1"
    restarted = group.members[1]
    assert restarted.name == "c1-1" and restarted.task is not None
    restarted.task.cancel()
    await asyncio.gather(restarted.task, return_exceptions=True)
    assert (group.stats.crashes, group.stats.restarts) == (2, 1)


def test_chaos_run_refuses_the_consumer_fault_without_consumers(monkeypatch, tmp_path):
    from cli import chaos as chaos_cli
    from cli.main import build_cli

    seen = []

    def no_run(settings):  # stands in for the run: only the parsed settings matter here
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(chaos_cli, "_run_reporting_runner_errors", no_run)
    args = ["chaos", "run", "--report-dir", str(tmp_path), "--no-verify", "--faults", "kill,consumer"]
    refused = CliRunner().invoke(build_cli(), args)
    assert refused.exit_code == 2 and "add --consumers N" in refused.output and not seen
    assert CliRunner().invoke(build_cli(), [*args, "--consumers", "2"]).exit_code == 0
    assert seen[0].consumers == 2 and seen[0].faults == ("kill", "consumer")
    assert CliRunner().invoke(build_cli(), ["chaos", "run", "--report-dir", str(tmp_path)]).exit_code == 0
    assert seen[1].consumers == 0  # existing runs are unchanged
