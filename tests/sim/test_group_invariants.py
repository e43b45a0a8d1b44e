"""The consumer-group invariants (sim/group_invariants.py) can fail, and the simulator finds each
planted bug (issue 23; docs/guarantees.md "Consumer groups"), as tests/sim/test_invariants.py
does for the replication invariants: a rule of the coordinator or the member is broken on purpose
(monkeypatched within the test only), and a short run of seeded schedules with a consumer group,
checking only that invariant, reports it with a seed and the replay command. The seeds were
found by sweeping the planted code; the same schedules pass on the real code
(``test_group_sweep_finds_nothing``), so it is the plant that each one catches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from broker.coordinator.group_metadata import GroupMetadata, GroupState
from broker.coordinator.group_metadata_manager import GroupMetadataManager
from client.consumer.group_coordinator import ConsumerCoordinator
from client.types import TopicPartition
from sim.faults import parse_kinds
from sim.group_invariants import GROUP_COMMITS_KEPT, GROUP_LIVENESS, GROUP_OWNED_ONCE, GroupChecker, _Commit
from sim.group_workload import GroupWorkloadConfig
from sim.sweep import run_schedule, sweep
from tests.sim.test_invariants import CONFIG

GROUP_CONFIG = replace(
    CONFIG, duration_s=40.0, steps=0, group=GroupWorkloadConfig(members=3, crash_rate=0.03)
)

Plant = Callable[[pytest.MonkeyPatch], None]


def generations_never_advance(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator starts every rebalance's generation with the same id (no fencing)."""

    def init_next_generation(self: GroupMetadata, now_ms: int) -> None:
        self.generation_id = max(self.generation_id, 1)
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    monkeypatch.setattr(GroupMetadata, "init_next_generation", init_next_generation)


def loads_forget_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new coordinator loads the groups of its offsets partition without their offsets."""
    original = GroupMetadataManager._read_partition

    async def read_partition(self: GroupMetadataManager, tp):  # type: ignore[no-untyped-def]
        loaded = await original(self, tp)
        for group in loaded.groups.values():
            group.offsets.clear()
        return loaded

    monkeypatch.setattr(GroupMetadataManager, "_read_partition", read_partition)


def members_ignore_rebalances(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member takes no notice of a heartbeat saying a rebalance began or that it was fenced."""
    monkeypatch.setattr(ConsumerCoordinator, "_on_heartbeat", lambda self, code, sent: None)


CASES: dict[str, tuple[Plant, str, range]] = {
    "generations": (generations_never_advance, GROUP_OWNED_ONCE, range(0, 4)),
    "offsets": (loads_forget_offsets, GROUP_COMMITS_KEPT, range(0, 4)),
    "liveness": (members_ignore_rebalances, GROUP_LIVENESS, range(0, 4)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_group_bug_is_found_with_a_replayable_seed(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant, invariant, seeds = CASES[case]
    plant(monkeypatch)
    config = replace(GROUP_CONFIG, invariants=frozenset({invariant}))
    report = sweep(seeds, config, jobs=1)
    found = [r for r in report.results if r.invariant == invariant]
    assert found, "\n".join(r.report() for r in report.results)
    first = found[0]
    assert "--consumers 3" in first.replay
    again = run_schedule(first.seed, config)
    assert (again.invariant, again.trace_hash) == (invariant, first.trace_hash)


def test_group_sweep_finds_nothing() -> None:
    """The real coordinator and members over the seeds the plants are caught on, with crashes,
    pauses, partitions and ZooKeeper faults moving the coordinator."""
    report = sweep(range(0, 12), GROUP_CONFIG, jobs=2)
    assert not report.failed, "\n\n".join(r.report() for r in report.failed)


def test_the_checker_fires_on_a_partition_given_twice_and_a_lost_commit() -> None:
    failures: list[tuple[str, str]] = []
    checker = GroupChecker(
        lambda name, detail: failures.append((name, detail)), {GROUP_OWNED_ONCE, GROUP_COMMITS_KEPT}
    )

    class Coordinator:
        generation = 4

    tp = TopicPartition("t", 0)
    checker.assigned("a", Coordinator(), {tp})
    checker.assigned("a", Coordinator(), {tp})  # the same member again: fine
    assert not failures
    checker.assigned("b", Coordinator(), {tp})
    assert failures and failures[-1][0] == GROUP_OWNED_ONCE
    failures.clear()
    first = _Commit(1, 50)
    checker.sent[tp] = [first]
    checker.acked[tp] = [first]
    checker._check_fetch("c", tp, checker._floor(tp), 50)
    assert not failures
    checker._check_fetch("c", tp, checker._floor(tp), -1)
    assert failures and failures[-1][0] == GROUP_COMMITS_KEPT
    failures.clear()
    checker.sent[tp].append(_Commit(2, 40))  # a later commit of a smaller offset overwrote it
    checker._check_fetch("c", tp, checker._floor(tp), 40)
    assert not failures


def test_schedules_run_the_group_across_coordinator_failover() -> None:
    """Crashes only: the coordinator's broker dies, the members find the new one (which loaded the
    group from its ``__consumer_offsets`` replica), and every group invariant holds."""
    config = replace(GROUP_CONFIG, faults=parse_kinds("crash"), fault_rate=0.15)
    result = run_schedule(2, config)
    assert result.ok, result.report()
    assert result.coordinator_moves >= 1 and result.group_commits > 0, result.report()
