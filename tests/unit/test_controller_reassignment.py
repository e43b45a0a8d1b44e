"""The controller's partition reassignment (controller/reassignment.py) step by step, and its
windows forced: a real KafkaController against a real ZooKeeper whose broker requests are
recorded (tests/unit/controller_harness.py), the leader's ISR expansion written by the test, and
ZooKeeper faults at exact calls (tests/bridge_faults.py).

* Phase 1 widens AR in ZooKeeper, bumps the leader epoch and tells every replica; nothing more
  happens until the state znode shows the targets in the ISR (the watch, not polling).
* Phase 2: a leader from the target, the old replicas out of the ISR, stopped and deleted, AR
  narrowed, the request gone.
* Window: step 8's, 10's or 11's write fails, or lands with its answer lost; the event's retry
  completes the move with the old replicas out of the ISR and the context equal to ZooKeeper.
* Window: the tool's write of /admin/reassign_partitions lands with its answer lost; the retry
  answers success, not REASSIGNMENT_IN_PROGRESS for its own request.
* A controller that takes over mid-move (failover step 12) finishes it.
* Bad requests change nothing in ZooKeeper.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from broker.reassignment_admin import request_reassignment
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller.controller import ControllerConfig, KafkaController
from tests.bridge_faults import FailingZk
from tests.unit.controller_harness import start
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import DeleteOp, SetDataOp, ZkBridge
from zk.client import get_partition_state, get_topic_assignment
from zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch, encode_partition_state, encode_reassignment
from zk.paths import REASSIGN_PARTITIONS_PATH, delete_topic_path, partition_state_path, topic_path

TP = TopicPartition("t", 0)
BROKERS = [1, 2, 3, 4, 5, 6]


async def request(zk: ZkBridge, target: list[int]) -> None:
    await zk.create(REASSIGN_PARTITIONS_PATH, encode_reassignment({TP: target}), makepath=True)


async def leader_expands_isr(zk: ZkBridge, isr: list[int]) -> None:
    """What the leader writes when followers caught up: the ISR, same leader and epoch."""
    got = await zk.get(partition_state_path("t", 0))
    assert got is not None
    current = json.loads(got[0])
    state = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(current["leader"], current["leader_epoch"], tuple(isr)), current["controller_epoch"]
    )
    await zk.set(partition_state_path("t", 0), encode_partition_state(state), got[1].version)


async def moved(zk: ZkBridge, controller: KafkaController, target: list[int]) -> None:
    """The request is gone from ZooKeeper and AR is the target (polled: the controller hears of
    the request through a watch, after the test wrote it)."""
    for _ in range(200):
        if (
            await zk.exists(REASSIGN_PARTITIONS_PATH) is None
            and (await get_topic_assignment(zk, "t"))[0] == target
        ):
            break
        await asyncio.sleep(0.05)
    await idle(controller)
    assert await zk.exists(REASSIGN_PARTITIONS_PATH) is None
    assert (await get_topic_assignment(zk, "t"))[0] == target
    assert controller.context.replicas(TP) == target
    assert TP not in controller.context.partitions_being_reassigned


async def test_phase_one_waits_for_the_isr_then_phase_two_completes(zk: ZkBridge) -> None:
    controller, calls = await start(zk, zk, BROKERS, {"t": {0: [1, 2, 3]}})
    try:
        calls.sent.clear()
        await request(zk, [4, 5, 6])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        assert (await get_topic_assignment(zk, "t"))[0] == [1, 2, 3, 4, 5, 6]  # step 1
        state = await get_partition_state(zk, TP)
        assert (state.leader_and_isr.leader, state.leader_and_isr.leader_epoch) == (1, 1)  # step 2
        for broker in BROKERS:  # every replica hears the widened AR
            (sent,) = calls.of(broker, ApiKey.LEADER_AND_ISR, TP)[-1:]
            entry = next(p for p in sent.body["partition_states"] if p["partition"] == 0)
            assert entry["replicas"] == [1, 2, 3, 4, 5, 6]
            # KIP-455's fields: the leader counts the partition as reassigning (KIP-352's gauge)
            assert (entry["adding_replicas"], entry["removing_replicas"]) == ([4, 5, 6], [1, 2, 3])
        assert not any(s.api_key is ApiKey.STOP_REPLICA for s in calls.sent)
        assert await zk.exists(REASSIGN_PARTITIONS_PATH) is not None

        await leader_expands_isr(zk, [1, 2, 3, 4])  # not all of the target yet
        await idle(controller)
        assert TP in controller.context.partitions_being_reassigned

        await leader_expands_isr(zk, [1, 2, 3, 4, 5, 6])
        await moved(zk, controller, [4, 5, 6])
        final = (await get_partition_state(zk, TP)).leader_and_isr
        assert (final.leader, final.isr) == (4, (4, 5, 6))
        for old in (1, 2, 3):
            assert calls.stop_replica_deletes(old, TP), f"no StopReplica(delete) to {old}"
        last = calls.of(4, ApiKey.LEADER_AND_ISR, TP)[-1]
        entry = next(p for p in last.body["partition_states"] if p["partition"] == 0)
        assert (entry["replicas"], entry["adding_replicas"], entry["removing_replicas"]) == (
            [4, 5, 6],
            [],
            [],
        )
        for new in (4, 5, 6):
            assert not calls.stop_replica_deletes(new, TP)
    finally:
        await controller.shutdown()


async def test_a_shrink_needs_no_catching_up_and_keeps_the_leader(zk: ZkBridge) -> None:
    controller, calls = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2, 3]}})
    try:
        await request(zk, [2, 1])
        await moved(zk, controller, [2, 1])
        final = (await get_partition_state(zk, TP)).leader_and_isr
        assert (final.leader, sorted(final.isr)) == (1, [1, 2])
        assert calls.stop_replica_deletes(3, TP)
    finally:
        await controller.shutdown()


def _narrowing(ops: object) -> bool:
    """Step 10's write: AR = RAR."""
    return any(
        isinstance(op, SetDataOp)
        and op.path == topic_path("t")
        and json.loads(op.value)["partitions"]["0"] == [4, 5, 6]
        for op in ops  # type: ignore[attr-defined]
    )


def _shrinking(ops: object) -> bool:
    """Step 8's write: the old replicas out of the ISR."""
    return any(
        isinstance(op, SetDataOp)
        and op.path == partition_state_path("t", 0)
        and json.loads(op.value)["isr"] == [4, 5, 6]
        for op in ops  # type: ignore[attr-defined]
    )


def _forgetting(ops: object) -> bool:
    """Step 11's write: the request leaves /admin/reassign_partitions (deleted: it was the only one)."""
    return any(isinstance(op, DeleteOp) and op.path == REASSIGN_PARTITIONS_PATH for op in ops)  # type: ignore[attr-defined]


@pytest.mark.parametrize("after_commit", [False, True], ids=["failed", "answer-lost"])
@pytest.mark.parametrize("step", [8, 10, 11])
async def test_a_failed_step_is_retried_to_the_same_end(zk: ZkBridge, step: int, after_commit: bool) -> None:
    failing = FailingZk(zk)
    controller, calls = await start(zk, failing, BROKERS, {"t": {0: [1, 2, 3]}})
    try:
        await request(zk, [4, 5, 6])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        match = {8: _shrinking, 10: _narrowing, 11: _forgetting}[step]
        failing.fail("multi", match=match, after_commit=after_commit)
        await leader_expands_isr(zk, [1, 2, 3, 4, 5, 6])
        await moved(zk, controller, [4, 5, 6])
        assert failing.injected, "the fault was never injected"
        final = (await get_partition_state(zk, TP)).leader_and_isr
        assert (final.leader, final.isr) == (4, (4, 5, 6))
        for old in (1, 2, 3):
            assert calls.stop_replica_deletes(old, TP)
    finally:
        await controller.shutdown()


async def test_a_new_controller_finishes_a_move_it_finds_in_zookeeper(zk: ZkBridge) -> None:
    first, _ = await start(zk, zk, BROKERS, {"t": {0: [1, 2, 3]}})
    await request(zk, [4, 5, 6])
    assert await eventually(lambda: TP in first.context.partitions_being_reassigned)
    await idle(first)
    await first.shutdown()  # resigns: /controller stays until its session ends, so remove it
    await zk.delete("/controller")
    config = ControllerConfig(auto_leader_rebalance_enable=False)
    second = KafkaController(2, zk, config, lambda: 0, random.Random(1), lambda r: None)
    second.batch._send = lambda *args: None
    try:
        await second.startup()
        assert second.is_active
        await idle(second)
        assert second.context.partitions_being_reassigned == {TP: [4, 5, 6]}  # failover step 12
        await leader_expands_isr(zk, [1, 2, 3, 4, 5, 6])
        await moved(zk, second, [4, 5, 6])
    finally:
        await second.shutdown()


async def test_the_tools_write_landing_with_its_answer_lost_is_success(zk: ZkBridge) -> None:
    controller, _ = await start(zk, zk, BROKERS, {"t": {0: [1, 2, 3]}})
    await controller.shutdown()  # only the tool's side here: nobody carries the move out
    failing = FailingZk(zk)
    failing.fail("create", path=REASSIGN_PARTITIONS_PATH, after_commit=True)
    outcomes = await request_reassignment(failing, {TP: [4, 5, 6]})  # type: ignore[arg-type]
    assert failing.injected
    assert outcomes == {TP: (ErrorCode.NONE, None)}
    again = await request_reassignment(zk, {TP: [4, 5, 6]})
    assert again[TP][0] == ErrorCode.REASSIGNMENT_IN_PROGRESS  # a second request is refused


async def test_bad_requests_change_nothing(zk: ZkBridge) -> None:
    controller, _ = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
    await controller.shutdown()
    cases = {
        "unknown broker": (
            {TP: [1, 2, 9]},
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "non-existent brokerIDs: 9",
        ),
        "duplicate": ({TP: [1, 1, 2]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate replica assignment"),
        "empty": ({TP: []}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "is empty"),
        "missing topic": (
            {TopicPartition("nosuch", 0): [1]},
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "does not exist",
        ),
        "missing partition": (
            {TopicPartition("t", 7): [1]},
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "does not exist",
        ),
    }
    for name, (wanted, code, text) in cases.items():
        mixed = {**wanted, TopicPartition("t", 1): [3, 2, 1]}  # one good partition alongside
        outcomes = await request_reassignment(zk, mixed)
        (bad,) = wanted
        assert outcomes[bad][0] == code and text in outcomes[bad][1], (name, outcomes)
        assert outcomes[TopicPartition("t", 1)][0] == ErrorCode.INVALID_REQUEST, name
        assert await zk.exists(REASSIGN_PARTITIONS_PATH) is None, name


async def test_deleting_a_topic_cancels_its_moves_and_deletes_every_replica(zk: ZkBridge) -> None:
    """The deadlock of ZooKeeper-mode Kafka that the simulator found (issue 35, seed 254): a move
    waits for its targets to join the ISR, which needs a leader; an election skips a topic queued
    for deletion; the deletion waited for the move. Now the deletion cancels the move: the request
    leaves /admin/reassign_partitions and every replica of OAR + RAR is told StopReplica(delete)."""
    controller, calls = await start(zk, zk, BROKERS, {"t": {0: [1, 2, 3]}})
    try:
        await request(zk, [4, 5, 6])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        calls.sent.clear()
        await zk.create(delete_topic_path("t"), makepath=True)  # the targets never caught up
        assert await eventually(lambda: TP not in controller.context.partitions_being_reassigned)
        await idle(controller)
        assert await zk.exists(REASSIGN_PARTITIONS_PATH) is None
        for broker in BROKERS:
            assert calls.stop_replica_deletes(broker, TP), f"no StopReplica(delete) to {broker}"
    finally:
        await controller.shutdown()
