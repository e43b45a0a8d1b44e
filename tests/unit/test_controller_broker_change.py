"""Broker change handling against a real ZooKeeper (SPEC 4; seed 000 "Broker Failover" and
"Broker启动过程"; Kafka's KafkaController.processBrokerChange, onBrokerFailure, onBrokerStartup and
its state machines, which send each step's requests as their own batch). Faults are injected by
:class:`~tests.bridge_faults.FailingZk`; the controller's requests are recorded in send order
instead of going to brokers, or, for the bounce, received through the real channel by fake
broker connections.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from client.protocol.api import ApiKey
from client.types import TopicPartition
from controller import channel as channel_module
from controller.controller import ControllerConfig, KafkaController
from controller.event_manager import BrokerChange
from tests.bridge_faults import FailingZk
from tests.unit.test_controller_zk_faults import eventually, idle, start_controller_with, write_state
from zk.bridge import ZkBridge
from zk.client import get_partition_state, register_broker
from zk.data import EndPoint, encode_topic_assignment
from zk.paths import BROKER_IDS_PATH, broker_id_path, partition_state_path, topic_path

P0, P1, P2 = (TopicPartition("t", p) for p in range(3))


def partitions_of(api_key: ApiKey, body: dict) -> set[TopicPartition]:
    entries = (
        body.get("partition_states", []) if api_key is ApiKey.LEADER_AND_ISR else body.get("partitions", [])
    )
    return {TopicPartition(p["topic"], p["partition"]) for p in entries}


# -- finding 1: a quickly restarted broker keeps its replicas -------------------------------------


class ReceivingBroker:
    """A broker's end of the controller's channel (monkeypatched in for BrokerConnection):
    records what each broker receives, in order, and answers every partition with NONE."""

    received: list[tuple[int, ApiKey, dict]] = []

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.is_open = True

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout: float) -> ReceivingBroker:
        return cls(port)  # the tests register broker n at port n

    async def request(self, api_key: ApiKey, body: dict, timeout: float) -> dict:
        self.received.append((self.broker_id, api_key, body))
        entries = body.get("partition_states", body.get("partitions", []))
        return {
            "error_code": 0,
            "partitions": [
                {"topic": p["topic"], "partition": p["partition"], "error_code": 0} for p in entries
            ],
        }

    def close(self) -> None:
        self.is_open = False


async def receiving_controller(
    zk: ZkBridge,
    failing: FailingZk,
    live: tuple[int, ...],
    partitions: dict[TopicPartition, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> KafkaController:
    """Brokers ``live`` registered, topic t with ``partitions`` (each led by its first replica,
    every replica in its ISR), and controller 1 started over the real channel to
    :class:`ReceivingBroker` connections."""
    monkeypatch.setattr(ReceivingBroker, "received", [])
    monkeypatch.setattr(channel_module, "BrokerConnection", ReceivingBroker)
    for broker_id in live:
        await register_broker(zk, broker_id, [EndPoint("PLAINTEXT", "127.0.0.1", broker_id)], 0)
    await zk.create(
        topic_path("t"), encode_topic_assignment({tp.partition: r for tp, r in partitions.items()})
    )
    for tp, replicas in partitions.items():
        await write_state(zk, tp, replicas[0], replicas, create=True)
    config = ControllerConfig(auto_leader_rebalance_enable=False)
    controller = KafkaController(1, failing, config, lambda: 0, random.Random(0), lambda r: None)  # type: ignore[arg-type]
    await controller.startup()
    return controller


async def test_bounced_broker_gets_leader_and_isr_after_stop_replica(
    zk: ZkBridge, zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the restarted broker receives through the real channel: LeaderAndIsr for every replica
    it keeps, addressed to its new epoch, and no StopReplica (the failure step's StopReplica is
    dropped: the bounced broker's sender is removed before it is built)."""
    failing = FailingZk(zk)
    partitions = {P0: [2, 1], P1: [1, 2], P2: [2]}
    controller = await receiving_controller(zk, failing, (1, 2), partitions, monkeypatch)
    second_session = ZkBridge(zk_connect, session_timeout_ms=6000)
    await second_session.start()
    try:
        await idle(controller)
        old_epoch = controller.context.live_brokers[2].epoch

        async def broker_2_restarts() -> None:  # before the controller reads /brokers/ids
            await zk.delete(broker_id_path(2))
            await register_broker(second_session, 2, [EndPoint("PLAINTEXT", "127.0.0.1", 2)], 0)

        failing.before("get_children", broker_2_restarts, path=BROKER_IDS_PATH)
        ReceivingBroker.received.clear()
        controller.events.put(BrokerChange())
        assert await eventually(
            lambda: (
                controller.context.live_brokers.get(2) is not None
                and controller.context.live_brokers[2].epoch != old_epoch
            )
        )
        new_epoch = controller.context.live_brokers[2].epoch

        def received_by_2() -> list[tuple[ApiKey, set[TopicPartition], int]]:
            return [
                (key, partitions_of(key, body), body["broker_epoch"])
                for to, key, body in ReceivingBroker.received
                if to == 2 and key in (ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA)
            ]

        def has_every_leadership() -> bool:
            told = [ps for key, ps, _ in received_by_2() if key is ApiKey.LEADER_AND_ISR]
            return set(partitions) <= set().union(*told)

        assert await eventually(has_every_leadership), received_by_2()
        # one sender per broker, in order: anything sent to it before those LeaderAndIsr has arrived
        assert {k for k, _, _ in received_by_2()} == {ApiKey.LEADER_AND_ISR}, received_by_2()
        assert {epoch for _, _, epoch in received_by_2()} == {new_epoch}
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


# -- issue 25: after a failover, partitions without a leader get one before ISRs are cleaned ------


async def test_a_new_controller_elects_the_leaderless_before_it_cleans_the_isrs_of_the_dead(
    zk: ZkBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broker 2 died with the old controller: P0 (led by 2) has no leader, P1 and P2 (led by 1 and
    3) still list 2 in their ISRs. The new controller tells the live replicas their leadership,
    elects P0's leader and sends that, and only then removes 2 from the other ISRs: at scale those
    writes and their LeaderAndIsr are thousands, and the leaderless partitions must wait for
    neither. The ISR write of P1 is held until broker 3 has been told P0's new leader (or 5 s)."""
    partitions = {P0: [2, 1, 3], P1: [1, 2, 3], P2: [3, 2, 1]}
    failing = FailingZk(zk)
    p1_state = partition_state_path("t", 1)

    def told_to_3() -> list[tuple[int, int, int]]:
        """(partition, leader, leader epoch) as broker 3 was told them, in order."""
        return [
            (p["partition"], p["leader"], p["leader_epoch"])
            for to, key, body in ReceivingBroker.received
            if to == 3 and key is ApiKey.LEADER_AND_ISR
            for p in body["partition_states"]
        ]

    seen_at_the_isr_write: list[list[tuple[int, int, int]]] = []

    async def hold_the_isr_write() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not any(p == 0 and leader in (1, 3) for p, leader, _ in told_to_3()) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        seen_at_the_isr_write.append(told_to_3())

    failing.before(
        "multi",
        hold_the_isr_write,
        match=lambda ops: any(getattr(op, "path", None) == p1_state for op in ops),
    )
    controller = await receiving_controller(zk, failing, (1, 3), partitions, monkeypatch)
    try:

        async def isrs_cleaned() -> bool:
            states = [await get_partition_state(zk, tp) for tp in partitions]
            return all(s is not None and 2 not in s.leader_and_isr.isr for s in states)

        assert await eventually(isrs_cleaned)
        state = await get_partition_state(zk, P0)
        assert state is not None and state.leader_and_isr.leader == 1
        # when P1's ISR was written, broker 3 had been told P0's new leader already
        assert len(seen_at_the_isr_write) == 1
        assert any(p == 0 and leader == 1 for p, leader, _ in seen_at_the_isr_write[0]), seen_at_the_isr_write
        told = told_to_3()
        p0_led = min(i for i, (p, leader, _) in enumerate(told) if p == 0 and leader in (1, 3))
        p1_cleaned = told.index((1, 1, 1))
        assert p0_led < p1_cleaned, told
    finally:
        await controller.shutdown()
