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

from broker.apis import KafkaApis
from broker.config import BrokerConfig
from broker.log import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.replica_manager import ReplicaManager
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode


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
