"""Adversarial review of the controller's partition reassignment (controller/reassignment.py)
against Kafka 3.7's KafkaController (onPartitionReassignment, isReassignmentComplete,
ReplicaAssignment.isBeingReassigned). Each test forces its interleaving with the existing
harness (tests/unit/controller_harness.py: a real controller against a real ZooKeeper, broker
requests recorded) and fails on today's code for the reason its docstring names.
"""

from __future__ import annotations

from tests.unit.controller_harness import start
from tests.unit.test_controller_reassignment import TP, leader_expands_isr, request
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import ZkBridge
from zk.client import get_partition_state, get_topic_assignment
from zk.paths import REASSIGN_PARTITIONS_PATH


async def _acted(zk: ZkBridge, epoch_before: int) -> bool:
    """The controller has handled the request: phase 1 (step 2) and phase 2 (step 7) both bump
    the leader epoch, so a bump means the phase was decided and carried out."""
    state = await get_partition_state(zk, TP)
    return state is not None and state.leader_and_isr.leader_epoch > epoch_before


async def test_a_reordering_completes_although_a_replica_is_out_of_the_isr(zk: ZkBridge) -> None:
    """Interleaving: t-0 on [1,2,3] led by 1; the leader has taken 3 out of the ISR (it lags:
    a slow disk, a throttle, a broker that just died); the operator reorders the replicas to
    [2,1,3] (a preferred-leader change, the most common reassignment that copies nothing).

    Kafka 3.7: ReplicaAssignment.reassignTo([2,1,3]) from [1,2,3] has no adding and no removing
    replicas, so isBeingReassigned is false and KafkaController.isReassignmentComplete answers
    true without reading the ISR; onPartitionReassignment runs B1-B8 at once: AR becomes
    [2,1,3], the request leaves /admin/reassign_partitions.

    floodmark: is_reassignment_complete (controller/reassignment.py) requires every target in
    the ZooKeeper ISR, so the reorder waits in phase 1 until 3 is back in the ISR, possibly
    forever. While it waits the partition shows "still in progress" to --verify, a second
    request for it is refused with REASSIGNMENT_IN_PROGRESS, and every CreatePartitions in the
    cluster is refused (controller/topic_admin.py add_partitions refuses while the znode exists).
    """
    controller, _ = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2, 3]}})
    try:
        await leader_expands_isr(zk, [1, 2])  # the leader's shrink: 3 lags
        epoch = (await get_partition_state(zk, TP)).leader_and_isr.leader_epoch
        await request(zk, [2, 1, 3])
        assert await eventually(lambda: _acted(zk, epoch))
        await idle(controller)
        assert await zk.exists(REASSIGN_PARTITIONS_PATH) is None, (
            "a pure reordering is still in /admin/reassign_partitions: AR "
            f"{(await get_topic_assignment(zk, 't'))[0]}, ISR "
            f"{(await get_partition_state(zk, TP)).leader_and_isr.isr}, moving "
            f"{controller.context.partitions_being_reassigned}"
        )
        assert (await get_topic_assignment(zk, "t"))[0] == [2, 1, 3]
    finally:
        await controller.shutdown()


def _leader_and_isr_entries(calls, broker: int) -> list[dict]:  # type: ignore[no-untyped-def]
    from client.protocol.api import ApiKey

    return [
        p
        for s in calls.of(broker, ApiKey.LEADER_AND_ISR, TP)
        for p in s.body["partition_states"]
        if (p["topic"], p["partition"]) == ("t", 0)
    ]


async def test_a_new_replica_whose_broker_was_down_is_started_as_new_when_it_returns(zk: ZkBridge) -> None:
    """Interleaving: the move [1,2] -> [1,2,3] is asked for while broker 3 is up (the tool
    checks it is live); broker 3 dies before the controller acts on the request (the
    BrokerChange is handled first), so step 3's LeaderAndIsr(is_new) to 3 goes nowhere; then
    broker 3 comes back (onBrokerStartup resumes the move).

    Kafka 3.7: onBrokerStartup -> maybeResumeReassignments -> onPartitionReassignment, whose
    A1 (KafkaController.updateLeaderEpochAndSendRequest) sends LeaderAndIsr with isNew = true
    to assignment.addingReplicas every time the move is (re)run, so broker 3 creates the log in
    any good log dir. floodmark: the replica went NewReplica -> OfflineReplica while 3 was down
    and OnlineReplica on its return, and the resumed phase 1 (update_leader_epoch_and_send)
    never sets is_new; every LeaderAndIsr broker 3 gets for t-0 says is_new = False, so a broker
    with an offline log dir (KIP-112) refuses to create the replica with KAFKA_STORAGE_ERROR
    (broker/log/log_manager.py _creation_refusal) and the move waits for ever. The same holds for
    a new controller resuming a move whose first controller died before its batch went out
    (failover: _start_new_replicas starts only NonExistentReplica targets).
    """
    from zk.client import register_broker
    from zk.data import EndPoint
    from zk.paths import broker_id_path

    controller, calls = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2]}})
    try:
        await zk.delete(broker_id_path(3))  # broker 3's session ends
        assert await eventually(lambda: 3 not in controller.context.live_brokers)
        await idle(controller)
        await request(zk, [1, 2, 3])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        calls.sent.clear()  # what broker 3 gets from here on is all it ever gets

        await register_broker(zk, 3, [EndPoint("PLAINTEXT", "127.0.0.1", 3)], 0)
        assert await eventually(lambda: 3 in controller.context.live_brokers)
        await idle(controller)
        entries = _leader_and_isr_entries(calls, 3)
        assert entries, "broker 3 heard nothing of t-0 on its return"
        assert any(e["is_new"] for e in entries), (
            "no LeaderAndIsr to the returning target replica 3 says is_new: "
            f"{[(e['leader_epoch'], e['replicas'], e['is_new']) for e in entries]}"
        )
    finally:
        await controller.shutdown()


async def test_create_partitions_of_another_topic_is_not_refused_during_a_move(zk: ZkBridge) -> None:
    """Interleaving: t-0 is moving [1,2] -> [1,2,3] (waiting for 3 to join the ISR); the operator
    adds a partition to an unrelated topic u.

    Kafka 3.7: ZkAdminManager.createPartitions refuses with ReassignmentInProgressException only
    when a partition of *that* topic isBeingReassigned ("A partition reassignment is in progress
    for the topic 'u'."); u grows. floodmark: controller/topic_admin.py add_partitions refuses
    every topic while /admin/reassign_partitions exists, so a move that waits (for a lagging
    replica, a dead broker: see the reordering test above) blocks CreatePartitions cluster-wide.
    """
    import random

    from client.protocol.errors import KafkaError
    from controller.topic_admin import add_partitions

    controller, _ = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2]}, "u": {0: [1, 2]}})
    try:
        await request(zk, [1, 2, 3])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await idle(controller)
        try:
            added = await add_partitions(zk, "u", 2, random.Random(0))
        except KafkaError as exc:
            raise AssertionError(
                f"CreatePartitions of u refused while t-0 moves: {exc.code!r} {exc}"
            ) from None
        assert 1 in added
    finally:
        await controller.shutdown()
