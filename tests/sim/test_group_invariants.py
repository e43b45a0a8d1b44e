"""The consumer-group invariants (sim/group_invariants.py) can fail, and the simulator finds each
planted bug (issue 23; docs/guarantees.md "Consumer groups"), as tests/sim/test_invariants.py
does for the replication invariants: a rule of the coordinator or the member is broken on purpose
(monkeypatched within the test only), and a short run of seeded schedules with a consumer group,
checking only that invariant, reports it with a seed and the replay command. The seeds were
found by sweeping the planted code; the same schedules pass on the real code
(``test_group_sweep_finds_nothing``), so it is the plant that each one catches.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from broker.coordinator import group_offsets
from broker.coordinator.group_metadata import GroupMetadata, GroupState
from broker.coordinator.group_metadata_manager import GroupMetadataManager, LoadedPartition
from broker.log import Log
from client.consumer import rebalance_listener
from client.consumer.group_coordinator import ConsumerCoordinator
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import decode_batches
from client.types import TopicPartition
from sim.commit_fencing import GROUP_COMMIT_FENCED
from sim.consumer_visibility import CONSUMER_VISIBILITY
from sim.coordinator_load import GROUP_LOAD_BOUND
from sim.fault_kinds import parse_kinds
from sim.group_invariants import GROUP_COMMITS_KEPT, GROUP_LIVENESS, GROUP_OWNED_ONCE, GroupChecker, _Commit
from sim.rebalance_callbacks import GROUP_CALLBACKS
from sim.sweep import run_schedule
from tests.sim.test_invariants import CONFIG

#: Every default schedule has the group (3 members, sim/group_workload.py): the group's plants
#: are caught in the bounded sweep's own schedules.
GROUP_CONFIG = CONFIG

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


def commits_ignore_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator stores a commit whatever its member and generation (Kafka's
    doCommitOffsets checks gone): a zombie's late commit rolls the next owner's offset back."""

    def commit_error(group: GroupMetadata, body: dict) -> int | None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE if group.is_(GroupState.DEAD) else None

    monkeypatch.setattr(group_offsets, "commit_error", commit_error)


def consumer_fetches_read_to_the_leo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer's fetch reads up to the leader's log end offset, not its HW (the fetch path's
    isolation bound gone): consumers are given records the next leader may truncate."""
    read = Log.read

    def unbounded(
        self: Log, start: int, max_bytes: int, max_offset: int | None = None, **kw: object
    ) -> object:
        caller = sys._getframe(1).f_code
        if caller.co_name == "read" and caller.co_filename.endswith("replica_manager.py"):
            max_offset = None
        return read(self, start, max_bytes, max_offset, **kw)

    monkeypatch.setattr(Log, "read", unbounded)


def loads_advance_by_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33's first window: the loader moves its position by the records it decodes, not by
    each batch's next offset, so a batch the cleaner emptied (every record superseded) stops it
    at that offset; each retry meets it again and the partition never loads."""

    async def read_partition(self: GroupMetadataManager, tp):  # type: ignore[no-untyped-def]
        offsets: dict = {}
        values: dict = {}
        position = self._log_start_offset(tp)
        while True:
            data = self._read_log(tp, position, 1 << 20)
            if not data:
                break
            start = position
            for _header, records in decode_batches(data):
                for record in records:
                    self._apply_record(record.key, record.value, record.offset, offsets, values)
                    position = max(position, record.offset + 1)
            if position == start:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE, f"the read of {tp} at {start} ends at or below it"
                )
            await asyncio.sleep(0)
        return LoadedPartition({}, set())

    original = GroupMetadataManager._read_partition

    async def planted(self: GroupMetadataManager, tp):  # type: ignore[no-untyped-def]
        await read_partition(self, tp)  # raises where the cleaner left an empty batch
        return await original(self, tp)

    monkeypatch.setattr(GroupMetadataManager, "_read_partition", planted)


def revoke_after_the_assignment_is_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33's fourth window: a rejoining member clears its assignment first and calls
    ``on_partitions_revoked`` after, so a commit in the callback commits nothing."""

    async def on_join_prepare(self: ConsumerCoordinator, generation: int, member_id: str) -> None:
        owned = self._subscriptions.assigned()
        self._subscriptions.assign([])
        await rebalance_listener.invoke_partitions_revoked(self.listener, owned)

    monkeypatch.setattr(ConsumerCoordinator, "_on_join_prepare", on_join_prepare)


CASES: dict[str, tuple[Plant, str, range]] = {
    "generations": (generations_never_advance, GROUP_OWNED_ONCE, range(0, 32)),
    "offsets": (loads_forget_offsets, GROUP_COMMITS_KEPT, range(0, 32)),
    "liveness": (members_ignore_rebalances, GROUP_LIVENESS, range(0, 32)),
    "fencing": (commits_ignore_the_generation, GROUP_COMMIT_FENCED, range(5, 32)),
    "visibility": (consumer_fetches_read_to_the_leo, CONSUMER_VISIBILITY, range(0, 32)),
    "load": (loads_advance_by_record, GROUP_LOAD_BOUND, range(0, 160)),
    "callbacks": (revoke_after_the_assignment_is_cleared, GROUP_CALLBACKS, range(0, 32)),
}


@pytest.mark.timeout(900)  # a plant its seeds catch late runs up to its range's end
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_group_bug_is_found_with_a_replayable_seed(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant, invariant, seeds = CASES[case]
    plant(monkeypatch)
    config = replace(GROUP_CONFIG, invariants=frozenset({invariant}))
    first = next((r for r in (run_schedule(seed, config) for seed in seeds) if not r.ok), None)
    assert first is not None, f"{plant.__name__} was not caught by seeds {seeds.start}..{seeds.stop - 1}"
    assert first.invariant == invariant, first.report()
    assert "--consumers 3" in first.replay
    again = run_schedule(first.seed, config)
    assert (again.invariant, again.trace_hash) == (invariant, first.trace_hash)


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
