"""A re-created topic never serves a deleted topic's records (KIP-516 topic ids in ZooKeeper
mode; docs/design.md "Topic ids (KIP-516)"), on ZooKeeper and three real broker processes.

The sequence of the review's finding 9, forced step by step: a broker is stopped; a reassignment
moves the partition off it (the StopReplica meant for it is never delivered) and completes; the
topic is deleted (the broker is no replica, so nothing waits for it); the broker comes back; a
topic of the same name is created with the returned broker as its preferred leader. Before topic
ids the returned broker reused its old directory and led the new partition from the deleted
topic's 20 records, replicated below the HW to the new follower. Now its start-up's FULL
LeaderAndIsr makes the old directory a stray (its partition assigned nowhere here), deleted before
anything else; the new topic holds only its own records on every replica, each replica's
``partition.metadata`` names the new znode's id, and the renamed stray directory is removed.

The barrier that the returned broker has applied its start-up LeaderAndIsr: it is back in the ISR
of another topic's partition it hosts (it follows that partition only once it applied the
request, and the stray deletion runs first in it). Every wait polls ZooKeeper or the cluster with
a deadline; nothing is timed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from client.admin import AdminClient
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import (
    assert_replicas_identical,
    eventually,
    high_watermarks,
    produce_values,
    read_all,
)
from tests.integration.zk_state import REASSIGN, assigned, create_with_assignment, request_move
from tests.integration.zk_state import partition_state as state

pytestmark = pytest.mark.integration

TOPIC = "phoenix"
ANCHOR = "anchor"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("topic-ids"),
        brokers=3,
        overrides={"log.segment.delete.delay.ms": "1000", "auto.leader.rebalance.enable": "false"},
    )
    yield c
    c.down()


def data_dir(cluster, broker: int) -> Path:
    return cluster.data_dir / f"broker-{broker}" / "data"


def topic_dirs(cluster, broker: int, topic: str) -> list[str]:
    """The broker's directories of ``topic``: live ones and renamed ``*-delete`` ones."""
    return sorted(p.name for p in data_dir(cluster, broker).iterdir() if p.name.startswith(f"{topic}-"))


def recorded_id(cluster, broker: int, topic: str, partition: int) -> str | None:
    path = data_dir(cluster, broker) / f"{topic}-{partition}" / "partition.metadata"
    return path.read_text().split("\n")[1].removeprefix("topic_id: ") if path.exists() else None


def znode_id(zk, topic: str) -> str | None:
    return json.loads(zk.get(f"/brokers/topics/{topic}")[0]).get("topic_id")


async def wait_isr(zk, topic: str, isr: list[int], leader: int | None = None) -> None:
    async def probe() -> bool | None:
        try:
            current, _ = state(zk, topic, 0)
        except Exception:
            return None
        ok = sorted(current["isr"]) == sorted(isr) and current["leader"] != -1
        return True if ok and (leader is None or current["leader"] == leader) else None

    await eventually(probe, f"{topic}-0 led by {leader} with ISR {isr}", timeout=60)


async def test_a_recreated_topic_never_serves_the_deleted_topics_records(cluster, zk) -> None:
    controller, _ = cluster.controller()
    down = next(b for b in (3, 2, 1) if b != controller)
    others = [b for b in (1, 2, 3) if b != down]
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(ANCHOR, 1, 3)
        await admin.create_topic(TOPIC, 1, 3)
    old_values = [b"old%d" % i for i in range(20)]
    assert len(await produce_values(cluster, TOPIC, old_values, partition=0)) == 20
    await wait_isr(zk, TOPIC, [1, 2, 3])
    old_id, old_recorded = znode_id(zk, TOPIC), recorded_id(cluster, down, TOPIC, 0)

    # 1. the broker is down while a reassignment takes the partition off it
    await asyncio.to_thread(cluster.stop, down)
    await wait_isr(zk, ANCHOR, others)
    request_move(zk, {(TOPIC, 0): others})

    async def moved() -> bool:
        return zk.exists(REASSIGN) is None and assigned(zk, TOPIC, 0) == others

    await eventually(moved, f"{TOPIC}-0 moved to {others}", timeout=60)
    # 2. the topic is deleted: the down broker is no replica, nothing waits for it
    async with AdminClient(cluster.bootstrap_servers) as admin:
        assert await admin.delete_topics([TOPIC]) == {TOPIC: None}

    async def deleted() -> bool:
        return (
            zk.exists(f"/brokers/topics/{TOPIC}") is None
            and zk.exists(f"/admin/delete_topics/{TOPIC}") is None
        )

    await eventually(deleted, f"{TOPIC} deleted", timeout=60)
    assert topic_dirs(cluster, down, TOPIC) == [f"{TOPIC}-0"]  # the stray: untouched while down

    # 3. the broker returns; once it follows the anchor again it has applied its start-up request
    await asyncio.to_thread(cluster.start, down)
    await wait_isr(zk, ANCHOR, [1, 2, 3])
    left_at_return = [d for d in topic_dirs(cluster, down, TOPIC) if not d.endswith("-delete")]

    # 4. a topic of the same name, the returned broker its preferred leader (written as
    # kafka-topics.sh --replica-assignment does: version 1, no id; the controller gives it one)
    create_with_assignment(zk, TOPIC, {0: [down, others[0]]})
    await wait_isr(zk, TOPIC, [down, others[0]], leader=down)
    new_values = [b"new%d" % i for i in range(3)]
    assert len(await produce_values(cluster, TOPIC, new_values, partition=0)) == 3

    got = await read_all(cluster, TOPIC, 1)
    assert got[0] == list(enumerate(new_values)), f"the re-created {TOPIC}-0 holds {got[0]}"
    hw = await high_watermarks(cluster, TOPIC, 1)
    assert hw == {0: 3}
    assert_replicas_identical(cluster, TOPIC, hw)
    assert old_id and old_recorded == old_id  # the first incarnation's id, on the stray too
    new_id = znode_id(zk, TOPIC)
    assert new_id and new_id != old_id
    assert {b: recorded_id(cluster, b, TOPIC, 0) for b in (down, others[0])} == {
        down: new_id,
        others[0]: new_id,
    }

    async def described_id() -> str | None:
        async with AdminClient(cluster.bootstrap_servers) as admin:
            (description,) = await admin.describe_topics([TOPIC])
            return description.topic_id if description.topic_id == new_id else None

    await eventually(described_id, f"Metadata naming {TOPIC}'s new topic id")  # KIP-516 on the wire
    assert left_at_return == [], f"broker {down} kept the deleted topic's {left_at_return} after its return"

    async def stray_removed() -> bool:
        return topic_dirs(cluster, down, TOPIC) == [f"{TOPIC}-0"]

    await eventually(stray_removed, f"broker {down}'s renamed stray directory removed")
