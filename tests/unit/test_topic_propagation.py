"""A created topic is in every broker's metadata when the create returns (client/topic_propagation.py;
docs/design.md "A created topic is in every broker's metadata when the create returns").

Over real sockets against tests/unit/fake_cluster.py, whose ``unseen`` makes a broker answer
Metadata without a new topic for its next few requests, as a broker does before the controller's
UpdateMetadata reaches it. The oracle is a Metadata request sent straight to each broker right
after the create returns: before this module, the admin waited for one broker's answer (the
controller's, whose cache is written first) and a describe sent to a lagging broker got
UNKNOWN_TOPIC_OR_PARTITION (a CI run of tests/integration/test_file_budget.py met it).
"""

from __future__ import annotations

import asyncio

import pytest

from client import AdminClient, topic_propagation
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from tests.unit.fake_cluster import FakeCluster


@pytest.fixture
async def fake():
    cluster = await FakeCluster().start()
    yield cluster
    await cluster.stop()


async def known_by(fake: FakeCluster, node: int, topic: str) -> list[int]:
    """The partitions broker ``node`` itself reports for ``topic`` (empty: it does not know it)."""
    conn = await BrokerConnection.open("127.0.0.1", fake.ports[node], timeout=5)
    try:
        body = await conn.request(ApiKey.METADATA, {"topics": [topic], "allow_auto_topic_creation": False})
    finally:
        conn.close()
    (entry,) = body["topics"]
    if entry["error_code"] != ErrorCode.NONE:
        return []
    return sorted(p["partition"] for p in entry["partitions"] if p["leader"] >= 0)


async def test_create_returns_once_every_broker_knows_the_new_topic(fake) -> None:
    fake.unseen[2, "new"] = 3
    fake.unseen[3, "new"] = 5
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        await admin.create_topic("new", num_partitions=4, replication_factor=2)
        for node in (1, 2, 3):
            assert await known_by(fake, node, "new") == [0, 1, 2, 3], f"broker {node} does not know it"
        (described,) = await admin.describe_topics(["new"])
        assert described.error_code == ErrorCode.NONE and len(described.partitions) == 4


async def test_added_partitions_are_awaited_on_every_broker(fake) -> None:
    fake.create("grows", 2)
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        fake.unseen[3, "grows"] = 4  # broker 3 still answers without the topic at all
        assert await admin.create_partitions({"grows": 5}) == {"grows": None}
        assert await known_by(fake, 3, "grows") == [0, 1, 2, 3, 4]


async def test_a_broker_that_does_not_answer_is_not_waited_for(fake) -> None:
    fake.servers[3].close()  # still in metadata, but refuses connections
    await fake.servers[3].wait_closed()
    fake.unseen[2, "new"] = 2
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        await asyncio.wait_for(admin.create_topic("new", num_partitions=2, replication_factor=2), 10)
        assert await known_by(fake, 2, "new") == [0, 1]


async def test_a_stopped_broker_delays_the_create_by_one_answer_timeout_at_most(fake, monkeypatch) -> None:
    monkeypatch.setattr(topic_propagation, "BROKER_ANSWER_TIMEOUT_S", 0.5)
    fake.stalled.add(3)  # connects, reads, never answers
    async with AdminClient(fake.bootstrap, retry_backoff_ms=10) as admin:
        await asyncio.wait_for(admin.create_topic("new", num_partitions=2, replication_factor=2), 10)
        assert await known_by(fake, 1, "new") == [0, 1]
