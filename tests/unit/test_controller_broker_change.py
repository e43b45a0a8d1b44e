"""Broker change handling against a real ZooKeeper (SPEC 4; seed 000 "Broker Failover" and
"Broker启动过程"; Kafka's KafkaController.processBrokerChange, onBrokerFailure, onBrokerStartup and
its state machines, which send each step's requests as their own batch). Faults are injected by
:class:`~tests.bridge_faults.FailingZk`; the controller's requests are recorded
in send order instead of going to brokers.
"""

from __future__ import annotations

from client.protocol.api import ApiKey
from client.types import TopicPartition
from controller.event_manager import BrokerChange
from tests.bridge_faults import FailingZk
from tests.unit.test_controller_zk_faults import (
    Recorded,
    eventually,
    idle,
    start_controller_with,
)
from zk.bridge import ZkBridge
from zk.client import get_partition_state, register_broker
from zk.data import EndPoint
from zk.paths import BROKER_IDS_PATH, broker_id_path, partition_state_path

P0, P1, P2 = (TopicPartition("t", p) for p in range(3))


def partitions_of(api_key: ApiKey, body: dict) -> set[TopicPartition]:
    entries = (
        body.get("partition_states", []) if api_key is ApiKey.LEADER_AND_ISR else body.get("partitions", [])
    )
    return {TopicPartition(p["topic"], p["partition"]) for p in entries}


def last_request_about(recorded: Recorded, broker_id: int, tp: TopicPartition) -> ApiKey | None:
    """The last LeaderAndIsr or StopReplica sent to ``broker_id`` that names ``tp``."""
    last = None
    for to, api_key, body in recorded.sent:
        relevant = api_key in (ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA)
        if to == broker_id and relevant and tp in partitions_of(api_key, body):
            last = api_key
    return last


# -- finding 1: a quickly restarted broker keeps its replicas -------------------------------------


async def test_bounced_broker_gets_leader_and_isr_after_stop_replica(zk: ZkBridge, zk_connect: str) -> None:
    failing = FailingZk(zk)
    partitions = {P0: [2, 1], P1: [1, 2], P2: [2]}
    controller, recorded = await start_controller_with(zk, failing, [1, 2], partitions)
    second_session = ZkBridge(zk_connect, session_timeout_ms=6000)
    await second_session.start()
    try:
        old_epoch = controller.context.live_brokers[2].epoch

        async def broker_2_restarts() -> None:  # before the controller reads /brokers/ids
            await zk.delete(broker_id_path(2))
            await register_broker(second_session, 2, [EndPoint("PLAINTEXT", "127.0.0.1", 2)], 0)

        failing.before("get_children", broker_2_restarts, path=BROKER_IDS_PATH)
        recorded.sent.clear()
        controller.events.put(BrokerChange())
        assert await eventually(
            lambda: (
                controller.context.live_brokers.get(2, None) is not None
                and controller.context.live_brokers[2].epoch != old_epoch
            )
        )
        await idle(controller)

        for tp in partitions:
            assert last_request_about(recorded, 2, tp) is ApiKey.LEADER_AND_ISR, [
                (to, k.name, sorted(partitions_of(k, b))) for to, k, b in recorded.sent
            ]
        state = await get_partition_state(zk, P2)
        assert state is not None and state.leader_and_isr.leader == 2  # its only replica leads it again
    finally:
        await controller.shutdown()
        await second_session.close()


# -- finding 2: an exception half way through a broker failure loses nothing ------------------------


async def test_broker_failure_interrupted_by_connection_loss_is_retried(zk: ZkBridge) -> None:
    failing = FailingZk(zk)
    partitions = {P0: [2, 3], P1: [3, 2]}
    controller, recorded = await start_controller_with(zk, failing, [1, 2, 3], partitions)
    try:
        recorded.sent.clear()
        # P0's new leader is written first; then removing 2 from P1's ISR fails on its read.
        failing.fail("get", nth=1, path=partition_state_path("t", 1))
        await zk.delete(broker_id_path(2))

        assert await eventually(lambda: bool(failing.failed))
        assert failing.failed == [("get", partition_state_path("t", 1))]

        async def settled() -> bool:
            for tp in partitions:
                state = await get_partition_state(zk, tp)
                if state is None or state.leader_and_isr.leader != 3 or list(state.leader_and_isr.isr) != [3]:
                    return False
            return True

        assert await eventually(settled), [await get_partition_state(zk, tp) for tp in partitions]

        def told_leader() -> bool:
            return any(
                to == 3
                and key is ApiKey.LEADER_AND_ISR
                and any(
                    (p["partition"], p["leader"]) == (0, 3) and p["leader_epoch"] >= 1
                    for p in body["partition_states"]
                )
                for to, key, body in recorded.sent
            )

        assert await eventually(told_leader), [(to, k.name) for to, k, _ in recorded.sent]
        assert await eventually(lambda: 2 not in controller.context.live_brokers)

        def everyone_told_2_is_gone() -> bool:
            told = {
                to
                for to, key, body in recorded.sent
                if key is ApiKey.UPDATE_METADATA and all(b["id"] != 2 for b in body["live_brokers"])
            }
            return {1, 3} <= told

        assert await eventually(everyone_told_2_is_gone), [(to, k.name) for to, k, _ in recorded.sent]
    finally:
        await controller.shutdown()
