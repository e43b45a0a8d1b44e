"""KIP-455's adding and removing replicas in the topic znode (Kafka's ReplicaAssignment,
ControllerContext.scala, and TopicZNode, ZkData.scala), as the controller's partition
reassignment (controller/reassignment.py) writes, reads and resumes them; the codec as pure
logic, the controller with the harness of tests/unit/controller_harness.py (a real controller
against a real ZooKeeper, broker requests recorded).
"""

from __future__ import annotations

import json
import random

import pytest

from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller.topic_admin import add_partitions
from tests.unit.controller_harness import Calls, start
from tests.unit.test_controller_reassignment import TP, leader_expands_isr, moved, request
from tests.unit.test_controller_zk_faults import eventually, idle, write_state
from zk.bridge import ZkBridge
from zk.client import get_full_topic_assignment
from zk.data import (
    ReplicaAssignment,
    decode_full_topic_assignment,
    decode_topic_id,
    encode_full_topic_assignment,
    encode_topic_assignment,
)
from zk.paths import REASSIGN_PARTITIONS_PATH, topic_path

TOPIC_ID = "b1Sle8nHTmWcGCu-bBzMJw"

# -- the codec and reassignTo ----------------------------------------------------------------------


def test_reassign_to_adds_and_removes_as_kafka_does() -> None:
    """ReplicaAssignment.reassignTo: AR = OAR + RAR, adding RAR - OAR, removing OAR - RAR; a
    reordering (or the assignment as it is) adds and removes nothing; a move resumed from its
    own step 1 is the same move."""
    now = ReplicaAssignment((1, 2, 3))
    move = now.reassign_to([4, 5, 6])
    assert move == ReplicaAssignment((1, 2, 3, 4, 5, 6), (4, 5, 6), (1, 2, 3))
    assert move.is_being_reassigned and move.origin_replicas == [1, 2, 3]
    assert move.target_replicas == [4, 5, 6]
    assert move.reassign_to([4, 5, 6]) == move  # after a failover: the same move
    assert not now.reassign_to([2, 1, 3]).is_being_reassigned
    assert not now.reassign_to([1, 2, 3]).is_being_reassigned
    grow = ReplicaAssignment((1, 2)).reassign_to([1, 2, 3])
    assert grow == ReplicaAssignment((1, 2, 3), (3,), ())
    assert grow.reassign_to([1, 2, 3]) == grow  # AR equals the target, still being reassigned
    assert ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 2]) == ReplicaAssignment((1, 2, 3, 4), (4,), (1,))


def test_old_znodes_read_as_not_being_reassigned() -> None:
    """Version 1 (floodmark before KIP-455, Kafka before 2.4) and version 3 with empty maps."""
    old = b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}'
    assert decode_full_topic_assignment(old) == {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 3))}
    empty = encode_topic_assignment({0: [1, 2]}, TOPIC_ID)
    assert not decode_full_topic_assignment(empty)[0].is_being_reassigned


def test_kafkas_topic_znode_with_a_move_round_trips() -> None:
    """What Kafka 3.7 writes during a move (its key order is a hash map's) reads back, and
    floodmark writes it as Kafka's TopicZNode.encode does: only partitions being reassigned
    appear in adding_replicas / removing_replicas."""
    kafka = (
        b'{"removing_replicas":{"0":[1]},"partitions":{"0":[1,2,3],"1":[2,3]},'
        b'"topic_id":"%s","adding_replicas":{"0":[3]},"version":3}' % TOPIC_ID.encode()
    )
    full = decode_full_topic_assignment(kafka)
    assert full == {0: ReplicaAssignment((1, 2, 3), (3,), (1,)), 1: ReplicaAssignment((2, 3))}
    again = encode_full_topic_assignment(full, TOPIC_ID)
    assert json.loads(again) == {
        "version": 3,
        "partitions": {"0": [1, 2, 3], "1": [2, 3]},
        "adding_replicas": {"0": [3]},
        "removing_replicas": {"0": [1]},
        "topic_id": TOPIC_ID,
    }
    assert decode_full_topic_assignment(again) == full and decode_topic_id(again) == TOPIC_ID
    # without an id, a move still needs version 2 (Kafka 2.4's first with the two maps)
    assert json.loads(encode_full_topic_assignment(full, None))["version"] == 2


# -- the controller -------------------------------------------------------------------------------


def _entries_to(calls: Calls, broker: int) -> list[dict]:
    return [
        p
        for s in calls.of(broker, ApiKey.LEADER_AND_ISR, TP)
        for p in s.body["partition_states"]
        if (p["topic"], p["partition"]) == ("t", 0)
    ]


async def test_a_new_controller_resumes_from_adding_replicas_and_sends_is_new(zk: ZkBridge) -> None:
    """Interleaving: a controller ran step 1 of [1,2] -> [1,2,3] (the topic znode says AR
    [1,2,3], adding [3], as Kafka 3.7 writes it, without a topic id yet) and died before its
    batch, with the LeaderAndIsr(is_new) for 3, went out; the ISR is still [1,2]; a new
    controller takes over.

    Kafka 3.7: initializeControllerContext reads the move from adding_replicas
    (isBeingReassigned), and the resumed onPartitionReassignment's A1
    (updateLeaderEpochAndSendRequest) sends isNew = true to the adding replica 3; the move
    waits for 3 in the ISR, then completes. The topic-id write of the failover (setTopicIds)
    keeps the move in the znode."""
    body = b'{"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{"0":[3]},"removing_replicas":{}}'
    await zk.create(topic_path("t"), body, makepath=True)
    await write_state(zk, TP, 1, [1, 2], create=True)
    await request(zk, [1, 2, 3])
    controller, calls = await start(zk, zk, [1, 2, 3], {})
    try:
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        entries = _entries_to(calls, 3)
        assert any(e["is_new"] for e in entries), (
            "the new controller never told the adding replica 3 is_new: "
            f"{[(e['leader_epoch'], e['replicas'], e['is_new']) for e in entries]}"
        )
        full = (await get_full_topic_assignment(zk, "t"))[0]
        assert full == ReplicaAssignment((1, 2, 3), (3,), ()), f"the move left the topic znode: {full}"
        assert await zk.exists(REASSIGN_PARTITIONS_PATH) is not None

        await leader_expands_isr(zk, [1, 2, 3])
        await moved(zk, controller, [1, 2, 3])
        assert (await get_full_topic_assignment(zk, "t"))[0] == ReplicaAssignment((1, 2, 3))
    finally:
        await controller.shutdown()


async def test_a_move_whose_request_is_gone_resumes_from_the_topic_znode(zk: ZkBridge) -> None:
    """Interleaving: step 1 of [1,2,3] -> [2,3,4] is in the topic znode (adding [4], removing
    [1]) but /admin/reassign_partitions was deleted (an operator, or a Kafka controller's API
    move); a new controller takes over, then 4 joins the ISR.

    Kafka 3.7: the move is in the context from the topic znode (isBeingReassigned) and
    maybeResumeReassignments runs it: it completes at AR [2,3,4] with 1 deleted."""
    body = (
        b'{"version":2,"partitions":{"0":[1,2,3,4]},"adding_replicas":{"0":[4]},'
        b'"removing_replicas":{"0":[1]}}'
    )
    await zk.create(topic_path("t"), body, makepath=True)
    await write_state(zk, TP, 1, [1, 2, 3], create=True)
    controller, calls = await start(zk, zk, [1, 2, 3, 4], {})
    try:
        assert controller.context.partitions_being_reassigned.get(TP) == [2, 3, 4]
        assert not calls.stop_replica_deletes(1, TP)
        await leader_expands_isr(zk, [1, 2, 3, 4])
        assert await eventually(lambda: TP not in controller.context.partitions_being_reassigned)
        await idle(controller)
        assert (await get_full_topic_assignment(zk, "t"))[0] == ReplicaAssignment((2, 3, 4))
        assert calls.stop_replica_deletes(1, TP)
    finally:
        await controller.shutdown()


async def test_a_reordering_tells_no_broker_it_is_reassigning(zk: ZkBridge) -> None:
    """Interleaving: t-0 on [1,2,3], 3 out of the ISR (the leader's shrink); the operator asks
    for [2,1,3]. Kafka 3.7: no adding and no removing replicas, so every LeaderAndIsr carries
    empty adding_replicas / removing_replicas (the leader counts no reassigning partition,
    KIP-352's gauge), the topic znode never names the partition in them, and the move is done
    at once."""
    controller, calls = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2, 3]}})
    try:
        await leader_expands_isr(zk, [1, 2])
        calls.sent.clear()
        await request(zk, [2, 1, 3])
        await moved(zk, controller, [2, 1, 3])
        entries = [e for b in (1, 2, 3) for e in _entries_to(calls, b)]
        assert entries
        assert all((e["adding_replicas"], e["removing_replicas"]) == ([], []) for e in entries), [
            (e["replicas"], e["adding_replicas"], e["removing_replicas"]) for e in entries
        ]
        assert (await get_full_topic_assignment(zk, "t"))[0] == ReplicaAssignment((2, 1, 3))
    finally:
        await controller.shutdown()


async def test_create_partitions_of_the_topic_being_reassigned_is_refused(zk: ZkBridge) -> None:
    """Interleaving: t-0 moving [1,2] -> [1,2,3] (step 1 done, waiting for 3); the operator adds
    a partition to t. Kafka 3.7's ZkAdminManager.createPartitions: a partition of that topic
    isBeingReassigned, so REASSIGNMENT_IN_PROGRESS with "A partition reassignment is in
    progress for the topic 't'."; nothing written."""
    controller, _ = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2]}})
    try:
        await request(zk, [1, 2, 3])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        with pytest.raises(KafkaError) as refused:
            await add_partitions(zk, "t", 2, random.Random(0))
        assert refused.value.code == ErrorCode.REASSIGNMENT_IN_PROGRESS
        assert refused.value.message == "A partition reassignment is in progress for the topic 't'."
        assert set((await get_full_topic_assignment(zk, "t")).keys()) == {0}
        assert TopicPartition("t", 1) not in controller.context.partition_leadership
    finally:
        await controller.shutdown()
