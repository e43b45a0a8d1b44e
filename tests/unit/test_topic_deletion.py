"""Topic deletion (Kafka's TopicDeletionManager) against a real ZooKeeper, each StopReplica(delete)
answered by the test when it chooses (tests/unit/controller_harness.py): an answer settles only
the partitions its request asked for (docs/design.md "Applying StopReplica answers per
partition"), and a deletion whose last step failed is resumed by the retry.
"""

from __future__ import annotations

from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller.channel import error_response
from controller.replica_state_machine import ReplicaState
from tests.bridge_faults import FailingZk
from tests.unit.controller_harness import Calls, Sent, start
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import ZkBridge
from zk.data import PartitionReplica
from zk.paths import delete_topic_path, topic_partitions_path, topic_path

A0, B0 = TopicPartition("a", 0), TopicPartition("b", 0)


def answer(tp: TopicPartition, code: int = ErrorCode.NONE) -> dict:
    return {
        "error_code": 0,
        "partitions": [{"topic": tp.topic, "partition": tp.partition, "error_code": code}],
    }


async def _gone(zk: ZkBridge, path: str) -> bool:
    return await zk.exists(path) is None


async def delete(zk: ZkBridge, controller: object, calls: Calls, tp: TopicPartition) -> Sent:
    """Mark ``tp``'s topic for deletion; the StopReplica(delete) its handling sends to broker 1."""
    await zk.create(delete_topic_path(tp.topic))
    assert await eventually(lambda: bool(calls.stop_replica_deletes(1, tp)))
    await idle(controller)  # type: ignore[arg-type]
    [request] = calls.stop_replica_deletes(1, tp)
    assert request.partitions() == {tp}, "separate events: separate requests"
    return request


async def test_an_answer_for_one_topic_does_not_complete_another_topics_deletion(zk: ZkBridge) -> None:
    controller, calls = await start(zk, zk, [1], {"a": {0: [1]}, "b": {0: [1]}})
    rsm = controller.replica_state_machine
    try:
        for_a = await delete(zk, controller, calls, A0)
        for_b = await delete(zk, controller, calls, B0)

        for_a.callback(1, answer(A0))  # broker 1 deleted a; it has not answered for b yet
        assert await eventually(lambda: _gone(zk, topic_path("a")))
        await idle(controller)
        assert await zk.exists(topic_path("b")) is not None, "b's znodes went before broker 1 deleted b"
        assert rsm.state(PartitionReplica(B0, 1)) is ReplicaState.DELETION_STARTED

        for_b.callback(1, answer(B0, ErrorCode.KAFKA_STORAGE_ERROR))  # and b's log cannot be deleted
        assert await eventually(
            lambda: rsm.state(PartitionReplica(B0, 1)) is ReplicaState.DELETION_INELIGIBLE
        )
        assert controller.context.topics_ineligible_for_deletion == {"b"}
        assert await zk.exists(topic_path("b")) is not None, "b waits for broker 1 to come back"
    finally:
        await controller.shutdown()


async def test_a_request_level_error_for_one_topic_leaves_another_topics_deletion_alone(zk: ZkBridge) -> None:
    controller, calls = await start(zk, zk, [1], {"a": {0: [1]}, "b": {0: [1]}})
    rsm = controller.replica_state_machine
    try:
        for_a = await delete(zk, controller, calls, A0)
        for_b = await delete(zk, controller, calls, B0)

        for_a.callback(1, error_response(ErrorCode.NETWORK_EXCEPTION))  # a's request got no answer
        assert await eventually(
            lambda: rsm.state(PartitionReplica(A0, 1)) is ReplicaState.DELETION_INELIGIBLE
        )
        await idle(controller)
        assert rsm.state(PartitionReplica(B0, 1)) is ReplicaState.DELETION_STARTED
        assert controller.context.topics_ineligible_for_deletion == {"a"}

        for_b.callback(1, answer(B0))
        assert await eventually(lambda: _gone(zk, topic_path("b"))), "b's deletion never completed"
        assert await zk.exists(topic_path("a")) is not None
    finally:
        await controller.shutdown()


async def test_a_deletion_whose_znode_deletes_failed_is_resumed_by_the_retry(zk: ZkBridge) -> None:
    failing = FailingZk(zk)
    controller, calls = await start(zk, failing, [1], {"a": {0: [1]}})
    try:
        for_a = await delete(zk, controller, calls, A0)
        # the replicas are NonExistent by then; the first read of the deletion's znodes fails
        failing.fail("get_children", path=topic_partitions_path("a"))
        for_a.callback(1, answer(A0))
        assert await eventually(lambda: bool(failing.failed))
        assert await eventually(lambda: _gone(zk, topic_path("a"))), "the deletion of a hangs"
        assert await eventually(lambda: _gone(zk, delete_topic_path("a")))
        await idle(controller)
        assert "a" not in controller.context.assignments
    finally:
        await controller.shutdown()
