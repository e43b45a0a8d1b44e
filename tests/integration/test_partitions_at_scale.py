"""Issue 25 at reduced scale on a real cluster (docs/design.md "The controller at scale (issue
25)"): 600 partitions with RF 3 on 3 brokers, LeaderAndIsr and UpdateMetadata split into requests
of 100 partitions (``controller.request.max.partitions``), then a SIGKILL of the controller. Every
partition has a leader on a survivor again within the session timeout + 5 s (the issue's goal,
here with room to spare: the full-scale figures are bench/partitions_at_scale.py's), ZooKeeper
and the brokers agree on it, and no broker's event loop was held anywhere near a session timeout
(``floodmark_event_loop_stall_max_seconds``).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kazoo.client import KazooClient

from client.admin import AdminClient
from tests.integration.cluster_fixtures import TEST_SETTINGS, scrape_metrics, start_cluster
from tests.integration.failover_helpers import eventually
from zk.data import decode_partition_state
from zk.paths import partition_state_path

pytestmark = pytest.mark.integration

TOPIC = "scale"
PARTITIONS = 600
SESSION_TIMEOUT_S = int(TEST_SETTINGS["zookeeper.session.timeout.ms"]) / 1000
GOAL_S = SESSION_TIMEOUT_S + 5
LEADERS = "kafka_server_replicamanager_leadercount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
STALL = "floodmark_event_loop_stall_max_seconds"


def leaders_in_zookeeper(connect: str) -> dict[int, int]:
    """Every partition's leader as its state znode names it (reads pipelined through kazoo)."""
    client = KazooClient(connect, timeout=10)
    client.start(10)
    try:
        pending = [client.get_async(partition_state_path(TOPIC, p)) for p in range(PARTITIONS)]
        return {
            p: decode_partition_state(*result.get(timeout=10)).leader_and_isr.leader
            for p, result in enumerate(pending)
        }
    finally:
        client.stop()
        client.close()


def total(addresses: dict[int, str | None], brokers: list[int], name: str) -> int:
    return sum(int(scrape_metrics(addresses[b])[name]) for b in brokers)


@pytest.fixture
def cluster(tmp_path):
    c = start_cluster(tmp_path / "cluster", brokers=3, overrides={"controller.request.max.partitions": "100"})
    yield c
    c.down()


async def test_600_partitions_are_led_again_within_the_session_timeout_plus_5s_after_the_controller_dies(
    cluster,
):
    addresses = cluster.metrics_addresses()
    async with AdminClient(cluster.bootstrap_servers, request_timeout_ms=60_000) as admin:
        await admin.create_topic(TOPIC, PARTITIONS, 3, timeout_ms=60_000)
    everyone = sorted(addresses)

    def settled() -> (
        bool
    ):  # all led, every ISR full: a partition led by the controller alone would stay offline
        return (
            total(addresses, everyone, LEADERS) == PARTITIONS
            and total(addresses, everyone, UNDER_REPLICATED) == 0
        )

    await eventually(lambda: asyncio.to_thread(settled), "all led with full ISRs", 60)
    controller, _ = cluster.controller()
    assert controller is not None
    survivors = [b for b in everyone if b != controller]

    killed_at = time.monotonic()
    cluster.kill(controller, "KILL")
    await eventually(
        lambda: asyncio.to_thread(lambda: total(addresses, survivors, LEADERS) == PARTITIONS),
        f"{PARTITIONS} partitions led by brokers {survivors}",
        GOAL_S + 30,  # bounded, and past the goal, so that a miss reports its time below
    )
    elapsed = time.monotonic() - killed_at
    assert elapsed <= GOAL_S, f"all led again {elapsed:.1f}s after the SIGKILL; the goal is {GOAL_S:g}s"

    leaders = await asyncio.to_thread(leaders_in_zookeeper, cluster.zookeeper_connect)
    assert set(leaders.values()) <= set(survivors), {p: b for p, b in leaders.items() if b not in survivors}
    for broker in survivors:
        stall = scrape_metrics(addresses[broker])[STALL]
        assert stall < SESSION_TIMEOUT_S / 2, f"broker {broker}'s event loop was held {stall:.2f}s"
