"""One controller epoch fences every controller request a broker receives (SPEC 4, 5.2; Kafka's
``ReplicaManager.controllerEpoch``, checked and raised by LeaderAndIsr, StopReplica and
UpdateMetadata alike). A deposed controller's request is refused with STALE_CONTROLLER_EPOCH
once any request from its successor has arrived, whichever kind came first (issue 10 finding 10).

Real KafkaApis, ReplicaManager and MetadataCache; the request is a stand-in that records its answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.apis import KafkaApis
from broker.config import BrokerConfig
from broker.log import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.replica_manager import ReplicaManager
from client.protocol.api import ApiKey, validate_request
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition as ControllerTopicPartition
from controller.channel import ControllerBrokerRequestBatch
from controller.context import ControllerContext
from tests.unit.test_controller_zk_faults import start_controller
from zk.bridge import ZkBridge
from zk.data import BrokerInfo, LeaderAndIsr, LeaderIsrAndControllerEpoch
from zk.paths import broker_id_path


@dataclass
class FakeRequest:
    api_key: ApiKey
    body: dict
    answers: list[dict] = field(default_factory=list)

    def respond(self, body: dict) -> None:
        self.answers.append(body)


class Broker:
    def __init__(self, tmp_path: Path) -> None:
        cfg = BrokerConfig(
            {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path / "logs")}
        )

        async def topic_config(topic: str) -> dict[str, str]:
            return {}

        self.cache = MetadataCache(1)
        self.state_changes: list[dict] = []
        self.rm = ReplicaManager(
            cfg,
            LogManager(cfg.log_dirs, cfg.log_config(), lambda: 0),
            self.cache,
            lambda: 0,
            self.state_changes.append,
            topic_config,
        )
        self.apis = KafkaApis(cfg, self.rm, self.cache, None, None, lambda: "c", random.Random(0))  # type: ignore[arg-type]

    async def send(self, api_key: ApiKey, body: dict) -> dict:
        request = FakeRequest(api_key, body)
        await self.apis.handle(request)  # type: ignore[arg-type]
        assert len(request.answers) == 1
        return request.answers[0]


def partition_state(controller_epoch: int, leader: int, leader_epoch: int) -> dict:
    return {
        "topic": "t",
        "partition": 0,
        "controller_epoch": controller_epoch,
        "leader": leader,
        "leader_epoch": leader_epoch,
        "isr": [1, 2],
        "zk_version": leader_epoch,
        "replicas": [1, 2],
    }


def leader_and_isr(controller_epoch: int, leader_epoch: int) -> dict:
    return {
        "controller_id": controller_epoch,
        "controller_epoch": controller_epoch,
        "partition_states": [partition_state(controller_epoch, 1, leader_epoch)],
        "live_leaders": [],
    }


def update_metadata(controller_epoch: int, leader: int, leader_epoch: int) -> dict:
    return {
        "controller_id": controller_epoch,
        "controller_epoch": controller_epoch,
        "partition_states": [partition_state(controller_epoch, leader, leader_epoch)],
        "live_brokers": [{"id": 1, "host": "h1", "port": 1}, {"id": 2, "host": "h2", "port": 2}],
    }


def stop_replica(controller_epoch: int) -> dict:
    return {
        "controller_id": controller_epoch,
        "controller_epoch": controller_epoch,
        "delete_partitions": False,
        "partitions": [{"topic": "t", "partition": 0}],
    }


async def test_update_metadata_from_deposed_controller_refused_after_successors_leader_and_isr(
    tmp_path: Path,
) -> None:
    broker = Broker(tmp_path)
    answer = await broker.send(ApiKey.LEADER_AND_ISR, leader_and_isr(controller_epoch=2, leader_epoch=5))
    assert answer["partitions"][0]["error_code"] == ErrorCode.NONE

    before = (
        broker.cache.controller_id,
        dict(broker.cache.brokers),
        {t: dict(p) for t, p in broker.cache.partitions.items()},
    )
    answer = await broker.send(
        ApiKey.UPDATE_METADATA, update_metadata(controller_epoch=1, leader=2, leader_epoch=4)
    )

    assert answer["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    after = (
        broker.cache.controller_id,
        dict(broker.cache.brokers),
        {t: dict(p) for t, p in broker.cache.partitions.items()},
    )
    assert after == before
    assert broker.rm.controller_epoch == 2


async def test_leader_and_isr_and_stop_replica_from_deposed_controller_refused_after_successors_update_metadata(
    tmp_path: Path,
) -> None:
    broker = Broker(tmp_path)
    answer = await broker.send(
        ApiKey.UPDATE_METADATA, update_metadata(controller_epoch=2, leader=1, leader_epoch=5)
    )
    assert answer["error_code"] == ErrorCode.NONE

    answer = await broker.send(ApiKey.LEADER_AND_ISR, leader_and_isr(controller_epoch=1, leader_epoch=4))
    assert answer["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    assert answer["partitions"][0]["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    assert ("t", 0) not in broker.rm.partitions

    answer = await broker.send(ApiKey.STOP_REPLICA, stop_replica(controller_epoch=1))
    assert answer["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    assert answer["partitions"][0]["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH


async def test_successor_requests_accepted_and_same_epoch_repeats_accepted(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    assert (await broker.send(ApiKey.UPDATE_METADATA, update_metadata(1, 1, 0)))[
        "error_code"
    ] == ErrorCode.NONE
    answer = await broker.send(ApiKey.LEADER_AND_ISR, leader_and_isr(controller_epoch=1, leader_epoch=1))
    assert answer["partitions"][0]["error_code"] == ErrorCode.NONE
    assert (await broker.send(ApiKey.UPDATE_METADATA, update_metadata(1, 1, 1)))[
        "error_code"
    ] == ErrorCode.NONE
    answer = await broker.send(ApiKey.LEADER_AND_ISR, leader_and_isr(controller_epoch=3, leader_epoch=2))
    assert answer["partitions"][0]["error_code"] == ErrorCode.NONE
    assert (await broker.send(ApiKey.UPDATE_METADATA, update_metadata(3, 1, 2)))[
        "error_code"
    ] == ErrorCode.NONE
    assert broker.cache.partition("t", 0).leader_epoch == 2
    assert (await broker.send(ApiKey.STOP_REPLICA, stop_replica(3)))["error_code"] == ErrorCode.NONE
    assert broker.rm.controller_epoch == 3


# -- KIP-380: broker epochs -------------------------------------------------------------------------


async def test_requests_addressed_to_a_previous_incarnation_are_refused(tmp_path: Path) -> None:
    """The broker restarted (or re-registered) and its registration's czxid moved from 100 to 200;
    requests the controller queued for epoch 100 arrive now. Old code: no broker epoch was
    checked, the LeaderAndIsr made broker 1 leader of t-0 and the StopReplica was applied."""
    broker = Broker(tmp_path)
    broker.rm.broker_epoch = 200
    cache_before = {t: dict(p) for t, p in broker.cache.partitions.items()}

    answer = await broker.send(ApiKey.LEADER_AND_ISR, dict(leader_and_isr(1, 1), broker_epoch=100))
    assert answer["error_code"] == ErrorCode.STALE_BROKER_EPOCH == 77
    assert answer["partitions"][0]["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert ("t", 0) not in broker.rm.partitions
    answer = await broker.send(ApiKey.UPDATE_METADATA, dict(update_metadata(1, 1, 1), broker_epoch=100))
    assert answer["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert {t: dict(p) for t, p in broker.cache.partitions.items()} == cache_before
    answer = await broker.send(ApiKey.STOP_REPLICA, dict(stop_replica(1), broker_epoch=100))
    assert answer["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert broker.rm.controller_epoch == -1, "a refused request must not raise the controller epoch"
    assert [c["reason"] for c in broker.state_changes if c["event"].endswith("Rejected")] == [
        "stale broker epoch"
    ] * 3


async def test_current_newer_and_unknown_broker_epochs_are_accepted(tmp_path: Path) -> None:
    """Kafka's isBrokerEpochStale: -1 is "unknown" (not checked), and a newer epoch is possible
    when the controller reads the registration before the broker learns its own czxid."""
    broker = Broker(tmp_path)
    broker.rm.broker_epoch = 200
    for epoch, leader_epoch in ((200, 1), (300, 2), (-1, 3)):
        answer = await broker.send(
            ApiKey.LEADER_AND_ISR, dict(leader_and_isr(1, leader_epoch), broker_epoch=epoch)
        )
        assert answer["partitions"][0]["error_code"] == ErrorCode.NONE, epoch
        answer = await broker.send(
            ApiKey.UPDATE_METADATA, dict(update_metadata(1, 1, leader_epoch), broker_epoch=epoch)
        )
        assert answer["error_code"] == ErrorCode.NONE, epoch
    assert broker.cache.partition("t", 0).leader_epoch == 3


def test_controller_requests_carry_the_addressees_broker_epoch() -> None:
    """KIP-380: each request names the czxid of its addressee's registration as the controller
    read it (-1 for a broker it does not know). Old code: no broker_epoch field at all."""
    context = ControllerContext()
    context.live_brokers[1] = BrokerInfo(1, "h1", 1, epoch=111)
    context.live_brokers[2] = BrokerInfo(2, "h2", 2, epoch=222)
    context.assignments["t"] = {0: [1, 2]}
    tp = ControllerTopicPartition("t", 0)
    context.partition_leadership[tp] = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 3, (1, 2)), 5)
    sent: list[tuple[int, ApiKey, dict]] = []
    batch = ControllerBrokerRequestBatch(9, context, lambda b, k, body, _cb: sent.append((b, k, body)))

    batch.add_leader_and_isr([1, 2], tp, context.partition_leadership[tp], [1, 2])
    batch.add_stop_replica([2, 7], tp, delete_partition=False)
    batch.send(controller_epoch=5)

    epochs = {(b, k): body["broker_epoch"] for b, k, body in sent}
    assert epochs == {
        (1, ApiKey.LEADER_AND_ISR): 111,
        (2, ApiKey.LEADER_AND_ISR): 222,
        (1, ApiKey.UPDATE_METADATA): 111,
        (2, ApiKey.UPDATE_METADATA): 222,
        (2, ApiKey.STOP_REPLICA): 222,
        (7, ApiKey.STOP_REPLICA): -1,
    }
    for _, key, body in sent:
        assert validate_request(key, 0, body)["broker_epoch"] == body["broker_epoch"]


async def test_controlled_shutdown_of_a_previous_incarnation_is_refused(zk: ZkBridge) -> None:
    """KIP-380 on the controller: a ControlledShutdown whose broker epoch is older than the
    registration the controller knows is STALE_BROKER_EPOCH, and nothing moves; the current
    epoch (and -1, unknown) is served."""
    controller, _recorded = await start_controller(zk, zk, [1, 2])
    try:
        epoch = (await zk.exists(broker_id_path(2))).czxid
        assert controller.context.live_brokers[2].epoch == epoch
        with pytest.raises(KafkaError) as refused:
            await controller.controlled_shutdown(2, broker_epoch=epoch - 1)
        assert refused.value.code == ErrorCode.STALE_BROKER_EPOCH
        assert 2 not in controller.context.shutting_down_broker_ids
        assert await controller.controlled_shutdown(2, broker_epoch=epoch) == []
        assert 2 in controller.context.shutting_down_broker_ids
    finally:
        await controller.shutdown()
