"""Issue 22: the ``reassign`` chaos fault without a cluster: its place among the fault kinds, the
seeded draw of its target replicas, and the injector's bookkeeping (a move watched to completion, a
refusal recorded and not failed, a move that never completes reported as a failed heal) over a
fake :class:`chaos.reassign.PartitionMover`. The run on a real cluster is test_chaos_reassign.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from chaos.injector import FaultInjector
from chaos.reassign import Attempt, Move, choose_target, move_state
from chaos.schedule import (
    ALL_FAULT_KINDS,
    FAULT_KINDS,
    REASSIGN_FAULT_KINDS,
    Fault,
    make_schedule,
    parse_fault_kinds,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.types import PartitionReassignment, TopicPartition

TOPIC = "chaos"


def test_reassign_is_a_kind_asked_by_name_whose_pick_leaves_old_seeds_alone():
    assert "reassign" in ALL_FAULT_KINDS and not set(REASSIGN_FAULT_KINDS) & set(FAULT_KINDS)
    assert parse_fault_kinds("reassign,kill") == ("reassign", "kill")
    # the pick is drawn for reassign faults only, so a schedule without them is what it was
    assert all(f.pick == 0 for f in make_schedule(7, 300, FAULT_KINDS, 6, pause_s=9))
    assert "pick" not in make_schedule(7, 60, FAULT_KINDS, 6, pause_s=9)[0].as_dict()
    schedule = make_schedule(11, 120, ("reassign", "kill"), 6, pause_s=9)
    assert schedule == make_schedule(11, 120, ("reassign", "kill"), 6, pause_s=9)
    moves = [f for f in schedule if f.kind == "reassign"]
    assert (
        moves and len({f.pick for f in moves}) == len(moves) and moves[0].as_dict()["pick"] == moves[0].pick
    )
    assert Fault(1, "reassign", 3, 5).describe() == (
        "t+1.0s: move partition 3 to random live brokers (reassignment) for 5.0s"
    )


@pytest.mark.parametrize("pick", range(50))
def test_the_target_keeps_the_replication_factor_and_moves_a_replica_when_it_can(pick):
    target = choose_target([1, 2, 3], [1, 2, 3, 4, 5], pick)
    assert target is not None and len(set(target)) == 3 and set(target) <= {1, 2, 3, 4, 5}
    assert set(target) != {1, 2, 3}
    assert target == choose_target([1, 2, 3], [5, 4, 3, 2, 1], pick)  # seeded, whatever the order
    reordered = choose_target([1, 2, 3], [1, 2, 3], pick)  # no spare broker: a new order
    assert reordered is not None and sorted(reordered) == [1, 2, 3] and reordered != (1, 2, 3)


def test_no_target_when_fewer_brokers_are_live_than_the_partition_has_replicas():
    assert choose_target([1, 2, 3], [1, 2], 7) is None


def test_a_move_completes_when_it_is_not_listed_and_has_its_target():
    move = Move("reassign-1", TOPIC, 2, (1, 2, 3), (4, 2, 3))
    tp = TopicPartition(TOPIC, 2)
    listed = {tp: PartitionReassignment([1, 2, 3, 4], [4], [1])}
    assert move_state(move, listed, {tp: [1, 2, 3, 4]}) == "moving"
    assert move_state(move, {}, {tp: [4, 2, 3]}) == "completed"
    assert move_state(move, {}, {tp: [1, 2, 3]}) == "ended"


class FakeMover:
    """A PartitionMover answering from a script: ``refuse`` for the partitions it refuses, a
    move completing after ``polls_to_complete`` reads of the state (never with None)."""

    def __init__(self, refuse: dict[int, ErrorCode] | None = None, polls_to_complete: int | None = 1) -> None:
        self.refuse = refuse or {}
        self.polls_to_complete = polls_to_complete
        self.current = {p: [1, 2, 3] for p in range(6)}
        self.moving: dict[TopicPartition, tuple[list[int], int]] = {}  # target, reads left

    async def start(self, partition: int, pick: int, move_id: str) -> Attempt:
        target = choose_target(self.current[partition], [1, 2, 3, 4], pick)
        move = Move(move_id, TOPIC, partition, tuple(self.current[partition]), target)
        if partition in self.refuse:
            return Attempt(move, KafkaError(self.refuse[partition], "refused by the script"))
        self.moving[move.tp] = (list(target), self.polls_to_complete)
        return Attempt(move, None)

    async def state(self):
        for tp, (target, left) in list(self.moving.items()):
            if left is not None and left <= 0:
                del self.moving[tp]
                self.current[tp.partition] = target
            else:
                self.moving[tp] = (target, None if left is None else left - 1)
        listed = {
            tp: PartitionReassignment(self.current[tp.partition] + t, [], [])
            for tp, (t, _) in self.moving.items()
        }
        return listed, {TopicPartition(TOPIC, p): list(r) for p, r in self.current.items()}

    async def wait_idle(self, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while True:
            moving, replicas = await self.state()
            if not moving or time.monotonic() >= deadline:
                return moving, replicas
            await asyncio.sleep(0.01)


def injector_with(mover: FakeMover, events: list, said: list, timeout_s: float = 1.0) -> FaultInjector:
    return FaultInjector(
        None,  # no broker is faulted: a reassign targets none
        None,
        None,
        lambda kind, detail: events.append((kind, detail)),
        said.append,
        mover=mover,
        moves_timeout_s=timeout_s,
    )


async def test_a_move_is_recorded_watched_to_completion_and_healed():
    events, said = [], []
    injector = injector_with(FakeMover(), events, said)
    await injector.run([Fault(0, "reassign", 2, 3.0, pick=5)], time.monotonic())
    await injector.heal_all()
    (fault, fault_detail), (heal, heal_detail) = events
    assert (fault, heal) == ("fault", "heal") and fault_detail["id"] == heal_detail["id"] == "reassign-1"
    assert fault_detail["target"] == f"partition {TOPIC}-2" and fault_detail["replicas_before"] == [1, 2, 3]
    assert heal_detail["completed"] and heal_detail["replicas"] == fault_detail["replicas_target"]
    assert [m.partition for m in injector.completed_moves] == [2]
    assert injector.unhealed() == [] and injector.heal_failures == []


async def test_a_refused_move_is_recorded_as_refused_and_is_no_failure():
    events, said = [], []
    mover = FakeMover(refuse={1: ErrorCode.REASSIGNMENT_IN_PROGRESS, 4: ErrorCode.INVALID_REPLICA_ASSIGNMENT})
    injector = injector_with(mover, events, said)
    await injector.run(
        [Fault(0, "reassign", 1, 0.01, pick=1), Fault(0, "reassign", 4, 0.01)], time.monotonic()
    )
    await injector.heal_all()
    assert [k for k, _ in events] == ["fault", "heal", "fault", "heal"]
    assert [d["refused"] for k, d in events if k == "fault"] == [
        "REASSIGNMENT_IN_PROGRESS",
        "INVALID_REPLICA_ASSIGNMENT",
    ]
    assert not any(d.get("completed") for _, d in events)
    assert len(injector.refused_moves) == 2 and injector.heal_failures == [] and injector.unhealed() == []


async def test_a_move_that_never_completes_is_a_failed_heal_naming_its_partition():
    events, said = [], []
    injector = injector_with(FakeMover(polls_to_complete=None), events, said, timeout_s=0.2)
    await injector.run([Fault(0, "reassign", 3, 0.01, pick=2)], time.monotonic())
    assert injector.unhealed() == [f"partition {TOPIC}-3 (moving)"]
    await injector.heal_all()
    (failure,) = injector.heal_failures
    assert failure["kind"] == "reassign" and failure["target"] == f"partition {TOPIC}-3"
    assert "did not complete" in failure["error"] and "still in progress" in failure["error"]
    assert [k for k, _ in events] == ["fault", "heal_failed"]
    assert injector.unhealed() == [f"partition {TOPIC}-3 (moving)"]
    assert any(s.startswith(f"HEAL FAILED: partition {TOPIC}-3 (reassign)") for s in said)


async def test_without_a_mover_the_fault_is_skipped_and_the_heal_waits_for_nothing():
    said = []
    injector = FaultInjector(None, None, None, lambda *_: None, said.append)
    await injector.run([Fault(0, "reassign", 0, 0.01)], time.monotonic())
    await injector.heal_all()
    assert "this runner moves no partitions" in said[0] and injector.unhealed() == []
