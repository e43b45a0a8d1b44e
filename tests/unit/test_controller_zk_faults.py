"""Controller correctness under ZooKeeper faults and deposed controllers, against a real ZooKeeper
(SPEC 3 "every controller write is fenced", SPEC 4; Kafka's KafkaController, KafkaZkClient and
ControllerChannelManager). Faults are injected at exact calls by :class:`FailingZk`, a thin
wrapper around the real :class:`~zk.bridge.ZkBridge` (tests/bridge_faults.py); broker connections are fakes that
record what the controller sends.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from client.protocol.api import ApiKey, validate_response
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller import channel as channel_module
from controller.channel import ControllerBrokerRequestBatch
from controller.context import ControllerContext, StateChangeRecorder
from controller.controller import ControllerConfig, KafkaController
from controller.partition_state_machine import PartitionState, PartitionStateMachine
from controller.replica_state_machine import ReplicaState
from tests.bridge_faults import FailingZk
from zk.bridge import ZkBridge
from zk.client import ControllerMovedError, get_partition_state, propagate_isr_change, register_broker
from zk.data import (
    BrokerInfo,
    EndPoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    encode_controller_epoch,
    encode_partition_state,
    encode_topic_assignment,
)
from zk.paths import (
    CONTROLLER_EPOCH_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    broker_id_path,
    delete_topic_path,
    partition_state_path,
    topic_path,
)

TP = TopicPartition("t", 0)


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result or loop.time() >= deadline:
            return result
        await asyncio.sleep(0.02)


# -- finding 5: a deposed controller's partition-state create leaves nothing behind -----------------


async def test_stale_controller_creates_nothing_under_a_deleted_topic(zk: ZkBridge) -> None:
    # /controller_epoch moved on (version 1) after this controller won with version 0.
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(1))
    await zk.set(CONTROLLER_EPOCH_PATH, encode_controller_epoch(2), 0)
    # The stale controller still has topic t in its context, which the new controller deleted.
    context = ControllerContext()
    context.epoch, context.epoch_zk_version = 1, 0
    context.live_brokers[1] = BrokerInfo(1, "127.0.0.1", 1)
    context.assignments["t"] = {0: [1]}
    psm = PartitionStateMachine(
        context,
        zk,
        ControllerBrokerRequestBatch(1, context, lambda *a: None),
        StateChangeRecorder(1, context, lambda: 0, lambda r: None),
        unclean_leader_election_enable=False,
    )
    psm.initialize()
    assert psm.state(TP) is PartitionState.NEW

    with pytest.raises(ControllerMovedError):
        await psm.handle_state_changes([TP], PartitionState.ONLINE)

    assert await zk.exists(topic_path("t")) is None, await zk.get_children("/brokers/topics")


async def test_live_controller_still_creates_missing_parents(zk: ZkBridge) -> None:
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(1))
    await zk.create(topic_path("t"), encode_topic_assignment({0: [1], 1: [1]}))
    context = ControllerContext()
    context.epoch, context.epoch_zk_version = 1, 0
    context.live_brokers[1] = BrokerInfo(1, "127.0.0.1", 1)
    context.assignments["t"] = {0: [1], 1: [1]}
    psm = PartitionStateMachine(
        context,
        zk,
        ControllerBrokerRequestBatch(1, context, lambda *a: None),
        StateChangeRecorder(1, context, lambda: 0, lambda r: None),
        unclean_leader_election_enable=False,
    )
    psm.initialize()
    failed = await psm.handle_state_changes(context.all_partitions(), PartitionState.ONLINE)
    assert failed == {}
    for p in (0, 1):
        state = await get_partition_state(zk, TopicPartition("t", p))
        assert state is not None and state.leader_and_isr.leader == 1


# -- a real KafkaController over the wrapped bridge, its requests recorded -------------------------


class Recorded:
    def __init__(self) -> None:
        self.sent: list[tuple[int, ApiKey, dict]] = []

    def __call__(self, broker_id: int, api_key: ApiKey, body: dict, callback: Any) -> None:
        self.sent.append((broker_id, api_key, body))

    def isr_announced(self, tp: TopicPartition, isr: list[int]) -> bool:
        return any(
            key is ApiKey.UPDATE_METADATA
            and any(
                (p["topic"], p["partition"], p["isr"]) == (tp.topic, tp.partition, isr)
                for p in body["partition_states"]
            )
            for _, key, body in self.sent
        )


async def write_state(
    zk: ZkBridge, tp: TopicPartition, leader: int, isr: list[int], create: bool = False
) -> None:
    data = encode_partition_state(LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, 0, tuple(isr)), 0))
    if create:
        await zk.create(partition_state_path(tp.topic, tp.partition), data, makepath=True)
    else:
        got = await zk.get(partition_state_path(tp.topic, tp.partition))
        assert got is not None
        await zk.set(partition_state_path(tp.topic, tp.partition), data, got[1].version)


async def start_controller(
    bridge: ZkBridge, zk: Any, replicas: list[int]
) -> tuple[KafkaController, Recorded]:
    """``replicas`` live, broker 1 the controller; topic t, one partition on ``replicas``, led by 1, all in the ISR."""
    return await start_controller_with(bridge, zk, replicas, {TP: replicas})


async def start_controller_with(
    bridge: ZkBridge,
    zk_for_controller: object,
    brokers: list[int],
    partitions: dict[TopicPartition, list[int]],
) -> tuple[KafkaController, Recorded]:
    """``brokers`` live, broker 1 the controller; topic t with ``partitions``' replicas, each led
    by its first replica with every replica in the ISR."""
    from tests.unit.controller_harness import start_recording  # it builds on this module's helpers

    topic = {tp.partition: replicas for tp, replicas in partitions.items()}
    return await start_recording(bridge, zk_for_controller, brokers, {"t": topic}, Recorded())


async def idle(controller: KafkaController) -> None:
    assert await eventually(lambda: controller.events.queue_size == 0 and controller.events.current is None)


# -- finding 7: ISR change notifications are not lost --------------------------------------------


async def test_isr_notification_survives_a_failed_state_read_and_is_propagated_on_retry(zk: ZkBridge) -> None:
    failing = FailingZk(zk)
    controller, recorded = await start_controller(zk, failing, [1, 2])
    try:
        recorded.sent.clear()
        await write_state(zk, TP, 1, [1])  # the leader shrank the ISR ...
        failing.fail(
            "get", nth=1, path=partition_state_path("t", 0)
        )  # ... and the controller's read of it fails
        await propagate_isr_change(zk, [TP])  # ... and announced it

        assert await eventually(lambda: bool(failing.failed))
        assert failing.failed == [("get", partition_state_path("t", 0))]
        assert await eventually(lambda: recorded.isr_announced(TP, [1])), recorded.sent
        assert await eventually(lambda: _no_children(zk, ISR_CHANGE_NOTIFICATION_PATH)), (
            "the notification is deleted once propagated"
        )
        assert controller.context.partition_leadership[TP].leader_and_isr.isr == (1,)
    finally:
        await controller.shutdown()


async def test_isr_notification_written_during_failover_is_not_lost(zk: ZkBridge) -> None:
    failing = FailingZk(zk)

    async def leader_shrinks_isr() -> None:  # at the moment failover lists /isr_change_notification
        await write_state(zk, TP, 1, [1])
        await propagate_isr_change(zk, [TP])

    failing.before("get_children", leader_shrinks_isr, path=ISR_CHANGE_NOTIFICATION_PATH)
    controller, recorded = await start_controller(zk, failing, [1, 2])
    try:
        assert controller.context.partition_leadership[TP].leader_and_isr.isr == (1,)
        assert recorded.isr_announced(TP, [1]), recorded.sent
    finally:
        await controller.shutdown()


async def _no_children(zk: ZkBridge, path: str) -> bool:
    return not (await zk.get_children(path) or [])


# -- finding 9: a StopReplica(delete) that gets no good answer still ends the deletion attempt ---------


class FakeBrokerConnection:
    """A broker as the controller's channel sees it: it answers LeaderAndIsr, UpdateMetadata and
    StopReplica(delete=false); StopReplica(delete=true) gets ``fault`` (raised after validating
    the body, as :meth:`client.connection.BrokerConnection.request` does)."""

    fault: Callable[[], dict] = staticmethod(lambda: {})
    requests: list[tuple[ApiKey, dict]] = []

    def __init__(self) -> None:
        self.is_open = True

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout: float) -> FakeBrokerConnection:
        return cls()

    async def request(self, api_key: ApiKey, body: dict, timeout: float) -> dict:
        self.requests.append((api_key, body))
        if api_key is ApiKey.STOP_REPLICA and body["delete_partitions"]:
            return validate_response(api_key, self.fault())
        if api_key is ApiKey.UPDATE_METADATA:
            return {"error_code": 0}
        partitions = body.get("partition_states", body.get("partitions", []))
        return {
            "error_code": 0,
            "partitions": [
                {"topic": p["topic"], "partition": p["partition"], "error_code": 0} for p in partitions
            ],
        }

    def close(self) -> None:
        self.is_open = False


def _refuse() -> dict:
    raise KafkaError(ErrorCode.INVALID_REQUEST, "unexpected")


def _undecodable() -> dict:
    return {"error_code": "zero", "partitions": "none"}


def _socket_error() -> dict:
    raise ConnectionResetError("reset by peer")


def _bug() -> dict:
    raise RuntimeError("boom")


@pytest.mark.parametrize("fault", [_refuse, _undecodable, _socket_error, _bug], ids=lambda f: f.__name__[1:])
async def test_stop_replica_delete_without_a_good_answer_makes_replicas_ineligible(
    zk: ZkBridge, monkeypatch: pytest.MonkeyPatch, fault: Callable[[], dict]
) -> None:
    monkeypatch.setattr(FakeBrokerConnection, "fault", staticmethod(fault))
    monkeypatch.setattr(FakeBrokerConnection, "requests", [])
    monkeypatch.setattr(channel_module, "BrokerConnection", FakeBrokerConnection)
    await register_broker(zk, 1, [EndPoint("PLAINTEXT", "127.0.0.1", 1)], 0)
    await zk.create(topic_path("t"), encode_topic_assignment({0: [1]}))
    await write_state(zk, TP, 1, [1], create=True)
    controller = KafkaController(
        1,
        zk,
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 0,
        random.Random(0),
        lambda r: None,
    )
    await controller.startup()
    try:
        assert controller.is_active
        replica = PartitionReplica(TP, 1)
        await zk.create(delete_topic_path("t"))

        def ineligible() -> bool:
            rsm = controller.replica_state_machine
            return rsm.state(replica) is ReplicaState.DELETION_INELIGIBLE

        assert await eventually(ineligible), controller.replica_state_machine.state(replica)
        assert "t" in controller.context.topics_ineligible_for_deletion
        assert any(
            k is ApiKey.STOP_REPLICA and b["delete_partitions"] for k, b in FakeBrokerConnection.requests
        )
        assert await zk.exists(topic_path("t")) is not None  # not deleted: waits for the broker to come back

        # The broker comes back (a new registration) and answers this time, for the partition it
        # was asked to delete (an answer settles only the partitions it names): the deletion completes.
        deleted = {"error_code": 0, "partitions": [{"topic": "t", "partition": 0, "error_code": 0}]}
        monkeypatch.setattr(FakeBrokerConnection, "fault", staticmethod(lambda: deleted))
        await zk.delete(broker_id_path(1))
        assert await eventually(lambda: 1 not in controller.context.live_brokers)
        await register_broker(zk, 1, [EndPoint("PLAINTEXT", "127.0.0.1", 1)], 0)
        assert await eventually(lambda: _gone(zk, topic_path("t"))), controller.replica_state_machine.state(
            replica
        )
    finally:
        await controller.shutdown()


async def _gone(zk: ZkBridge, path: str) -> bool:
    return await zk.exists(path) is None
