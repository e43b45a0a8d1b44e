"""Topic deletion on real brokers (issue 22 item 4; Kafka's TopicDeletionManager and
LogManager.asyncDelete): ZooKeeper plus three broker processes with
``log.segment.delete.delay.ms`` (``file.delete.delay.ms``'s default) at 4 s.

A deletion while one replica's broker is down removes the live replicas (their directories
renamed ``*-delete``, removed after the delay) and stays pending in ZooKeeper; the controller
moves to another broker meanwhile; when the broker returns, the new controller completes the
deletion: znodes last, no directory left anywhere. A topic of the same name can then be created
and used. With ``delete.topic.enable=false`` the answer is Kafka's TOPIC_DELETION_DISABLED and
nothing changes. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client.admin import AdminClient
from client.consumer.consumer import Consumer
from client.producer.producer import Producer
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

DELAY_MS = 4000
LEFT: dict = {}  # what the last poll found of the deleted topic


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("deletion"),
        brokers=3,
        overrides={"log.segment.delete.delay.ms": str(DELAY_MS)},
    )
    yield c
    c.down()


def data_dir(cluster, broker: int) -> Path:
    return cluster.data_dir / f"broker-{broker}" / "data"


def topic_dirs(cluster, broker: int, topic: str) -> list[str]:
    """The broker's directories of ``topic``: live ones and renamed ``*-delete`` ones."""
    return sorted(p.name for p in data_dir(cluster, broker).iterdir() if p.name.startswith(f"{topic}-"))


async def produce(cluster, topic: str, count: int) -> None:
    producer = Producer(cluster.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for i in range(count):
            await (await producer.send(topic, b"v%d" % i))
    finally:
        await producer.close()


async def test_a_deletion_waits_for_a_down_broker_survives_a_controller_move_and_leaves_nothing(
    cluster, zk
) -> None:
    topic = "doomed"
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(topic, 2, 3)
        await produce(cluster, topic, 20)
        controller, _ = cluster.controller()
        down = next(b for b in (1, 2, 3) if b != controller)
        await asyncio.to_thread(cluster.stop, down)
        assert await admin.delete_topics([topic]) == {topic: None}

        live = [b for b in (1, 2, 3) if b != down]

        async def live_replicas_renamed() -> bool:
            return all(all(name.endswith("-delete") for name in topic_dirs(cluster, b, topic)) for b in live)

        await eventually(live_replicas_renamed, "the live brokers' replicas renamed *-delete")
        assert any(topic_dirs(cluster, b, topic) for b in live)  # within the delay: still on disk
        assert zk.exists(f"/admin/delete_topics/{topic}") and zk.exists(f"/brokers/topics/{topic}")
        assert topic_dirs(cluster, down, topic) == [f"{topic}-0", f"{topic}-1"]  # untouched while down

        # The controller moves (a new one must resume the deletion from ZooKeeper), the stopped
        # broker returns, then the old controller, which stopped within the delay: its renamed
        # directories are removed when it loads its logs.
        await asyncio.to_thread(cluster.stop, controller)
        await asyncio.to_thread(cluster.start, down)
        await asyncio.to_thread(cluster.start, controller)

        async def gone() -> bool:
            left = {
                "znodes": [
                    path
                    for path in (
                        f"/brokers/topics/{topic}",
                        f"/admin/delete_topics/{topic}",
                        f"/config/topics/{topic}",
                    )
                    if zk.exists(path)
                ],
                "dirs": {
                    b: topic_dirs(cluster, b, topic) for b in (1, 2, 3) if topic_dirs(cluster, b, topic)
                },
            }
            LEFT.update(left)
            return not left["znodes"] and not left["dirs"]

        try:
            await eventually(gone, "the topic gone", timeout=60)
        except AssertionError:
            raise AssertionError(f"not gone after 60 s: {LEFT}") from None


async def test_a_topic_of_the_same_name_can_be_created_again(cluster, zk) -> None:
    topic = "reborn"
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(topic, 1, 3)
        await produce(cluster, topic, 5)
        assert await admin.delete_topics([topic]) == {topic: None}

        async def deleted() -> bool:
            return zk.exists(f"/brokers/topics/{topic}") is None and topic not in await admin.list_topics()

        await eventually(deleted, "the first topic deleted")
        await admin.create_topic(topic, 1, 3)
        await produce(cluster, topic, 3)
        consumer = Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            values: list[bytes] = []

            async def read() -> bool:
                for record in await consumer.poll(timeout_ms=500):
                    values.append(record.value)
                return len(values) >= 3

            await eventually(read, "the new topic's three records")
        finally:
            await consumer.close()
        assert values == [b"v0", b"v1", b"v2"]  # the old topic's five records are gone


async def test_deletion_disabled_is_kafkas_error_and_changes_nothing(tmp_path: Path) -> None:
    single = start_cluster(tmp_path / "no-deletion", brokers=1, overrides={"delete.topic.enable": "false"})
    try:
        async with AdminClient(single.bootstrap_servers) as admin:
            await admin.create_topic("kept", 1, 1)
            errors = await admin.delete_topics(["kept"])
            assert errors["kept"] is not None and errors["kept"].code == ErrorCode.TOPIC_DELETION_DISABLED
            assert "Topic deletion is disabled." in errors["kept"].message
            assert "kept" in await admin.list_topics()
            assert topic_dirs(single, 1, "kept") == ["kept-0"]
    finally:
        single.down()
