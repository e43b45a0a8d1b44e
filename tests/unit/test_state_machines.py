"""The controller's partition and replica state machines (Kafka 2.4's PartitionStateMachine and
ReplicaStateMachine; SPEC 4): every legal and illegal transition.

The expected valid previous states are Kafka 2.4's, written out here independently:

    NewPartition            <- NonExistentPartition
    OnlinePartition         <- NewPartition, OnlinePartition, OfflinePartition
    OfflinePartition        <- NewPartition, OnlinePartition, OfflinePartition
    NonExistentPartition    <- OfflinePartition

    NewReplica                <- NonExistentReplica
    OnlineReplica             <- NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionIneligible
    OfflineReplica            <- NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionIneligible
    ReplicaDeletionStarted    <- OfflineReplica
    ReplicaDeletionSuccessful <- ReplicaDeletionStarted
    ReplicaDeletionIneligible <- OfflineReplica, ReplicaDeletionStarted
    NonExistentReplica        <- ReplicaDeletionSuccessful

Transitions to OnlinePartition write the state znode, so the partition machine runs against the
real ZooKeeper of the ``zk`` fixture. An illegal transition must leave the state, the znode and
the request batch untouched and record no state change.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from client.types import TopicPartition
from controller.channel import ControllerBrokerRequestBatch
from controller.context import ControllerContext
from controller.partition_state_machine import (
    VALID_PREVIOUS_STATES as PARTITION_VALID_PREVIOUS,
)
from controller.partition_state_machine import (
    ElectionStrategy,
    PartitionState,
    PartitionStateMachine,
)
from controller.replica_state_machine import VALID_PREVIOUS_STATES as REPLICA_VALID_PREVIOUS
from controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from zk.bridge import ZkBridge
from zk.client import get_partition_state
from zk.data import (
    BrokerInfo,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    encode_controller_epoch,
    encode_partition_state,
    encode_topic_assignment,
)
from zk.paths import CONTROLLER_EPOCH_PATH, partition_state_path, topic_path

P = PartitionState
R = ReplicaState

KAFKA_PARTITION_PREVIOUS = {
    P.NEW: {P.NON_EXISTENT},
    P.ONLINE: {P.NEW, P.ONLINE, P.OFFLINE},
    P.OFFLINE: {P.NEW, P.ONLINE, P.OFFLINE},
    P.NON_EXISTENT: {P.OFFLINE},
}

KAFKA_REPLICA_PREVIOUS = {
    R.NEW: {R.NON_EXISTENT},
    R.ONLINE: {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE},
    R.OFFLINE: {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE},
    R.DELETION_STARTED: {R.OFFLINE},
    R.DELETION_SUCCESSFUL: {R.DELETION_STARTED},
    R.DELETION_INELIGIBLE: {R.OFFLINE, R.DELETION_STARTED},
    R.NON_EXISTENT: {R.DELETION_SUCCESSFUL},
}

TP = TopicPartition("t", 0)
ASSIGNMENT = [1, 2]
CONTROLLER_EPOCH = 1


class Records:
    def __init__(self) -> None:
        self.entries: list[tuple[str, dict]] = []

    def __call__(self, decision: str, **fields: object) -> None:
        self.entries.append((decision, fields))

    def state_changes(self) -> list[dict]:
        return [f for d, f in self.entries if d.endswith("_state_change")]


def context_with(live: list[int]) -> ControllerContext:
    context = ControllerContext(epoch=CONTROLLER_EPOCH, epoch_zk_version=0)
    context.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in live}
    context.set_replicas(TP, ASSIGNMENT)
    return context


def batch_for(context: ControllerContext) -> ControllerBrokerRequestBatch:
    def never_sent(*args: Any) -> None:
        raise AssertionError("the state machines only fill the batch; the caller sends it")

    return ControllerBrokerRequestBatch(1, context, never_sent)


# -- the tables -----------------------------------------------------------------------------------


def test_partition_valid_previous_states_are_kafkas() -> None:
    assert set(PARTITION_VALID_PREVIOUS) == set(PartitionState)
    assert {s: set(v) for s, v in PARTITION_VALID_PREVIOUS.items()} == KAFKA_PARTITION_PREVIOUS


def test_replica_valid_previous_states_are_kafkas() -> None:
    assert set(REPLICA_VALID_PREVIOUS) == set(ReplicaState)
    assert {s: set(v) for s, v in REPLICA_VALID_PREVIOUS.items()} == KAFKA_REPLICA_PREVIOUS


# -- the partition state machine, every pair (from, to) -------------------------------------------


async def partition_machine(zk: ZkBridge, start: PartitionState) -> tuple[PartitionStateMachine, Records]:
    """Topic t, partition 0 on [1, 2], broker 1 dead, broker 2 live; a partition that has been
    online has a state znode led by 1 with ISR [1, 2]."""
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(CONTROLLER_EPOCH))
    await zk.create(topic_path("t"), encode_topic_assignment({0: ASSIGNMENT}))
    context = context_with(live=[2])
    if start in (P.ONLINE, P.OFFLINE):
        state = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 0, (1, 2)), CONTROLLER_EPOCH)
        await zk.create(partition_state_path("t", 0), encode_partition_state(state), makepath=True)
        context.partition_leadership[TP] = state
    records = Records()
    machine = PartitionStateMachine(context, zk, batch_for(context), records, False)
    if start is not P.NON_EXISTENT:
        machine.states[TP] = start
    return machine, records


@pytest.mark.parametrize(("start", "target"), list(itertools.product(PartitionState, PartitionState)))
async def test_partition_transition(zk: ZkBridge, start: PartitionState, target: PartitionState) -> None:
    machine, records = await partition_machine(zk, start)
    assert machine.state(TP) is start
    znode_before = await zk.get(partition_state_path("t", 0))

    failed = await machine.handle_state_changes([TP], target, ElectionStrategy.OFFLINE)

    znode_after = await zk.get(partition_state_path("t", 0))
    if start not in KAFKA_PARTITION_PREVIOUS[target]:
        assert TP in failed
        assert machine.state(TP) is start
        assert (znode_after is None) == (znode_before is None)
        if znode_before is not None:
            assert znode_after is not None and znode_after[1].version == znode_before[1].version
        assert machine.batch.is_empty()
        assert records.state_changes() == []
        return

    assert failed == {}
    assert machine.state(TP) is target
    assert records.state_changes()[-1]["from"] == start.value
    assert records.state_changes()[-1]["to"] == target.value
    if target is P.NON_EXISTENT:
        assert TP not in machine.states
    if target is P.ONLINE:
        state = await get_partition_state(zk, TP)
        assert state is not None
        lai = state.leader_and_isr
        # broker 1 is dead: broker 2, the only live replica, leads with itself as the ISR
        assert (lai.leader, list(lai.isr)) == (2, [2])
        # a new partition starts at leader epoch 0; an election bumps the epoch
        assert lai.leader_epoch == (0 if start is P.NEW else 1)
        assert 2 in machine.batch.leader_and_isr and TP in machine.batch.leader_and_isr[2]
    else:
        # New, Offline and NonExistent are bookkeeping: the state znode is not touched
        assert (znode_after is None) == (znode_before is None)
        if znode_before is not None:
            assert znode_after is not None and znode_after[1].version == znode_before[1].version


async def test_offline_partition_without_live_isr_member_stays_offline(zk: ZkBridge) -> None:
    machine, _ = await partition_machine(zk, P.OFFLINE)
    machine.context.live_brokers.clear()  # nobody live: unclean election is off and cannot help

    failed = await machine.handle_state_changes([TP], P.ONLINE, ElectionStrategy.OFFLINE)

    assert TP in failed
    assert machine.state(TP) is P.OFFLINE
    state = await get_partition_state(zk, TP)
    assert state is not None
    assert state.leader_and_isr.leader == -1
    assert list(state.leader_and_isr.isr) == [1, 2]


async def test_new_partition_without_live_replica_stays_new(zk: ZkBridge) -> None:
    machine, records = await partition_machine(zk, P.NEW)
    machine.context.live_brokers.clear()

    failed = await machine.handle_state_changes([TP], P.ONLINE)

    assert TP in failed
    assert machine.state(TP) is P.NEW
    assert await zk.get(partition_state_path("t", 0)) is None
    assert records.state_changes() == []


def test_partition_initialize_from_the_context() -> None:
    context = context_with(live=[2])
    led_by_live, led_by_dead, no_state = (TopicPartition("t", p) for p in range(3))
    for tp in (led_by_live, led_by_dead, no_state):
        context.set_replicas(tp, ASSIGNMENT)
    context.partition_leadership[led_by_live] = LeaderIsrAndControllerEpoch(LeaderAndIsr(2, 0, (2,)), 1)
    context.partition_leadership[led_by_dead] = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 0, (1,)), 1)
    machine = PartitionStateMachine(context, None, batch_for(context), Records(), False)  # type: ignore[arg-type]
    machine.initialize()
    assert machine.state(led_by_live) is P.ONLINE
    assert machine.state(led_by_dead) is P.OFFLINE
    assert machine.state(no_state) is P.NEW


# -- the replica state machine, every pair (from, to) ---------------------------------------------


def replica_machine(start: ReplicaState) -> tuple[ReplicaStateMachine, Records]:
    """Replica 2 of t-0 (on [1, 2]), both brokers live, no leadership known: no ZooKeeper needed."""
    context = context_with(live=[1, 2])
    batch = batch_for(context)
    records = Records()
    partitions = PartitionStateMachine(context, None, batch, records, False)  # type: ignore[arg-type]
    machine = ReplicaStateMachine(context, batch, partitions, records)
    if start is not R.NON_EXISTENT:
        machine.states[PartitionReplica(TP, 2)] = start
    return machine, records


@pytest.mark.parametrize(("start", "target"), list(itertools.product(ReplicaState, ReplicaState)))
async def test_replica_transition(start: ReplicaState, target: ReplicaState) -> None:
    machine, records = replica_machine(start)
    replica = PartitionReplica(TP, 2)
    assert machine.state(replica) is start

    await machine.handle_state_changes([replica], target)

    if start not in KAFKA_REPLICA_PREVIOUS[target]:
        assert machine.state(replica) is start
        assert machine.batch.is_empty()
        assert records.state_changes() == []
        assert machine.context.replicas(TP) == ASSIGNMENT
        return

    assert machine.state(replica) is target
    if start is not target:
        assert records.state_changes()[-1]["from"] == start.value
        assert records.state_changes()[-1]["to"] == target.value
    if target is R.NON_EXISTENT:
        assert replica not in machine.states
        assert machine.context.replicas(TP) == [1]  # the deleted replica leaves the assignment
    if target is R.OFFLINE:
        assert TP in machine.batch.stop_replica[(2, False)]  # StopReplica without delete
    if target is R.DELETION_STARTED:
        assert TP in machine.batch.stop_replica[(2, True)]  # StopReplica with delete


async def test_replica_batch_moves_legal_replicas_and_refuses_the_others() -> None:
    machine, _ = replica_machine(R.ONLINE)
    online, deleting = PartitionReplica(TP, 2), PartitionReplica(TP, 1)
    machine.states[deleting] = R.DELETION_STARTED

    await machine.handle_state_changes([online, deleting], R.OFFLINE)

    assert machine.state(online) is R.OFFLINE
    assert machine.state(deleting) is R.DELETION_STARTED
    assert (1, False) not in machine.batch.stop_replica


async def test_leader_replica_cannot_become_new() -> None:
    machine, records = replica_machine(R.NON_EXISTENT)
    machine.context.partition_leadership[TP] = LeaderIsrAndControllerEpoch(LeaderAndIsr(2, 0, (2,)), 1)
    await machine.handle_state_changes([PartitionReplica(TP, 2)], R.NEW)
    assert machine.state(PartitionReplica(TP, 2)) is R.NON_EXISTENT
    assert records.state_changes() == []


def test_replica_initialize_from_the_context() -> None:
    machine, _ = replica_machine(R.NON_EXISTENT)
    del machine.context.live_brokers[1]
    machine.initialize()
    assert machine.state(PartitionReplica(TP, 1)) is R.OFFLINE
    assert machine.state(PartitionReplica(TP, 2)) is R.ONLINE


async def test_follower_going_offline_leaves_the_isr(zk: ZkBridge) -> None:
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(CONTROLLER_EPOCH))
    state = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 3, (1, 2)), CONTROLLER_EPOCH)
    await zk.create(partition_state_path("t", 0), encode_partition_state(state), makepath=True)
    context = context_with(live=[1])
    context.partition_leadership[TP] = state
    batch = batch_for(context)
    records = Records()
    machine = ReplicaStateMachine(
        context, batch, PartitionStateMachine(context, zk, batch, records, False), records
    )
    machine.states[PartitionReplica(TP, 2)] = R.ONLINE

    await machine.handle_state_changes([PartitionReplica(TP, 2)], R.OFFLINE)

    assert machine.state(PartitionReplica(TP, 2)) is R.OFFLINE
    written = await get_partition_state(zk, TP)
    assert written is not None
    assert (written.leader_and_isr.leader, list(written.leader_and_isr.isr)) == (1, [1])
    assert written.leader_and_isr.leader_epoch == 4
    assert TP in batch.leader_and_isr[1]  # the leader learns its smaller ISR
