"""A real KafkaController against a real ZooKeeper whose broker requests are recorded with their
callbacks instead of sent, so a test answers each request itself, when it chooses, with the
body it chooses (the channel calls the same callbacks with the brokers' answers). Faults are
injected with :class:`~tests.bridge_faults.FailingZk` or :func:`failing_hook`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar

from kazoo.exceptions import ConnectionLoss

from client.protocol.api import ApiKey
from client.types import TopicPartition
from controller.controller import ControllerConfig, KafkaController
from tests.unit.test_controller_zk_faults import idle, write_state
from zk.bridge import ZkBridge
from zk.client import register_broker
from zk.data import EndPoint, encode_topic_assignment
from zk.paths import topic_path


class Sent(NamedTuple):
    to: int
    api_key: ApiKey
    body: dict
    callback: Any

    def partitions(self) -> set[TopicPartition]:
        entries = self.body.get("partition_states", self.body.get("partitions", []))
        return {TopicPartition(p["topic"], p["partition"]) for p in entries}


R = TypeVar("R", bound=Callable[..., None])


class Calls:
    """What the controller's request batch sent, in order, with each request's callback."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def __call__(self, broker_id: int, api_key: ApiKey, body: dict, callback: Any) -> None:
        self.sent.append(Sent(broker_id, api_key, body, callback))

    def of(self, to: int, api_key: ApiKey, tp: TopicPartition | None = None) -> list[Sent]:
        return [
            s
            for s in self.sent
            if s.to == to and s.api_key is api_key and (tp is None or tp in s.partitions())
        ]

    def stop_replica_deletes(self, to: int, tp: TopicPartition) -> list[Sent]:
        return [s for s in self.of(to, ApiKey.STOP_REPLICA, tp) if s.body["delete_partitions"]]


async def start(
    zk: ZkBridge, zk_for_controller: object, brokers: list[int], topics: dict[str, dict[int, list[int]]]
) -> tuple[KafkaController, Calls]:
    """``brokers`` registered, broker 1 the controller; each topic's partitions led by their first
    replica with every replica in the ISR."""
    return await start_recording(zk, zk_for_controller, brokers, topics, Calls())


async def start_recording(
    zk: ZkBridge,
    zk_for_controller: object,
    brokers: list[int],
    topics: dict[str, dict[int, list[int]]],
    recorder: R,
) -> tuple[KafkaController, R]:
    """:func:`start`, with ``recorder`` taking the controller's requests (called as the batch's
    ``_send``: broker id, api key, body, callback)."""
    for broker_id in brokers:
        await register_broker(zk, broker_id, [EndPoint("PLAINTEXT", "127.0.0.1", broker_id)], 0)
    for topic, assignment in topics.items():
        await zk.create(topic_path(topic), encode_topic_assignment(assignment))
        for p, replicas in assignment.items():
            await write_state(zk, TopicPartition(topic, p), replicas[0], replicas, create=True)
    controller = KafkaController(
        1,
        zk_for_controller,  # type: ignore[arg-type]
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 0,
        random.Random(0),
        lambda r: None,
    )
    controller.batch._send = recorder
    await controller.startup()
    assert controller.is_active
    await idle(controller)
    return controller, recorder


def failing_hook(then: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A :meth:`FailingZk.before` hook that runs ``then`` and fails the call it precedes with
    ConnectionLoss (as the bridge does once it gave up), so ``then`` happens while the handler
    of the failing event is still running."""

    async def hook() -> None:
        await then()
        raise ConnectionLoss()

    return hook
