"""Replication throttling during a reassignment on real brokers (issue 22 item 1; Kafka's KIP-73
ReplicationQuotaManager, the ``*.replication.throttled.rate`` dynamic broker configs and the
``*.replication.throttled.replicas`` topic configs): ZooKeeper plus four broker processes, the
burst of ``replication.quota.window.num`` = 2 windows of 1 s, and fetches that may
carry 4 MB every 100 ms (a throttle cannot be finer than that: Kafka's cannot either).

A partition holding about 100 MB on brokers 1 and 2 is moved to add broker 3, with the leader
(1) and the new follower (3) throttled to 8 MB/s. The copy's steady rate, read from the size of
broker 3's directory of the partition between 30 % and 95 % of the way (past the bucket's 16 MB burst), as a least-squares slope, is within 20 % of the
throttle, and the whole move takes at least as long as the throttle allows for what is left
after the first windows' burst. Meanwhile an in-sync follower of another partition led by the
same broker keeps up: acks=all writes to it succeed and its ISR never shrinks. After the move the
throttle is removed and the new replica holds the same batches. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path

import pytest

from client.admin import AdminClient
from client.producer.producer import Producer
from client.protocol.api import ConfigResourceType
from client.types import ConfigResource
from tests.integration.cluster_fixtures import scrape_metrics, start_cluster
from tests.integration.failover_helpers import assert_replicas_identical, eventually, high_watermarks
from tests.integration.zk_state import REASSIGN, create_with_assignment, partition_state

pytestmark = pytest.mark.integration

RATE = 8 * 1024 * 1024
RECORD = b"x" * (100 * 1024)
RECORDS = 1000  # about 100 MB


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("throttle"),
        brokers=4,
        overrides={
            "replication.quota.window.num": "2",
            "auto.leader.rebalance.enable": "false",
            "message.max.bytes": str(2 * 1024 * 1024),
            # a throttle is only as fine as what one fetch may carry per long-poll wait (Kafka's
            # too): 4 MB per 100 ms is far above the 8 MB/s throttle
            "replica.fetch.max.bytes": str(4 * 1024 * 1024),
            "replica.fetch.wait.max.ms": "100",
        },
    )
    yield c
    c.down()


def scrape(cluster, broker: int) -> dict[str, float]:
    """The broker's /metrics (on by default in the local runner)."""
    return scrape_metrics(cluster.metrics_addresses()[broker])


def dir_bytes(cluster, broker: int, name: str) -> int:
    path: Path = cluster.data_dir / f"broker-{broker}" / "data" / name
    return sum(f.stat().st_size for f in path.glob("*.log")) if path.is_dir() else 0


async def fill(cluster, topic: str) -> None:
    async with Producer(cluster.bootstrap_servers, acks="1", linger_ms=5, batch_size=1024 * 1024) as producer:
        futures = [await producer.send(topic, RECORD, partition=0) for _ in range(RECORDS)]
        await producer.flush()
    assert all(f.exception() is None for f in futures)


async def throttle(admin: AdminClient, rate: int | None) -> None:
    rates = (
        {}
        if rate is None
        else {
            k: str(rate) for k in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
        }
    )
    replicas = (
        {}
        if rate is None
        else {
            "leader.replication.throttled.replicas": "0:1,0:2",
            "follower.replication.throttled.replicas": "0:3",
        }
    )
    await admin.alter_configs({ConfigResource(ConfigResourceType.TOPIC, "big"): replicas})
    for broker in (1, 2, 3):
        await admin.alter_configs({ConfigResource(ConfigResourceType.BROKER, str(broker)): rates})


async def busy_writer(cluster, stop: asyncio.Event) -> int:
    """acks=all writes to the other partition until ``stop``; returns how many succeeded."""
    done = 0
    async with Producer(cluster.bootstrap_servers, acks="all", request_timeout_ms=5000) as producer:
        while not stop.is_set():
            await (await producer.send("busy", b"b%d" % done, partition=0))
            done += 1
            await asyncio.sleep(0.02)
    return done


async def test_a_throttled_move_runs_at_the_throttle_and_in_sync_followers_keep_up(cluster, zk) -> None:
    create_with_assignment(zk, "big", {0: [1, 2]})
    create_with_assignment(zk, "busy", {0: [1, 4]})
    await eventually(
        lambda: asyncio.sleep(0, partition_state(zk, "busy", 0)[0]["isr"] == [1, 4] or None), "busy led", 45
    )
    await fill(cluster, "big")
    size = dir_bytes(cluster, 1, "big-0")
    assert size >= 90 * 1024 * 1024
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await throttle(admin, RATE)
        await asyncio.sleep(1)  # the config change notifications reach every broker
        stop = asyncio.Event()
        writer = asyncio.create_task(busy_writer(cluster, stop))
        isrs: list[list[int]] = []
        samples: list[tuple[float, int]] = []
        started = time.monotonic()
        zk.create(
            REASSIGN,
            json.dumps(
                {"version": 1, "partitions": [{"topic": "big", "partition": 0, "replicas": [1, 2, 3]}]}
            ).encode(),
        )
        deadline = started + 3 * size / RATE + 30
        gauges: list[tuple[dict[str, float], dict[str, float]]] = []
        while zk.exists(REASSIGN) is not None:
            assert time.monotonic() < deadline, (
                f"the move did not finish: {dir_bytes(cluster, 3, 'big-0')} of {size}"
            )
            samples.append((time.monotonic(), dir_bytes(cluster, 3, "big-0")))
            isrs.append(partition_state(zk, "busy", 0)[0]["isr"])
            if len(samples) % 10 == 5:
                scraped = await asyncio.gather(
                    asyncio.to_thread(scrape, cluster, 1), asyncio.to_thread(scrape, cluster, 3)
                )
                gauges.append((scraped[0], scraped[1]))
            await asyncio.sleep(0.2)
        elapsed = time.monotonic() - started
        stop.set()
        written = await writer
        await throttle(admin, None)
    # the copy advances in steps of a few fetches each: a least-squares slope over the samples,
    # not two end points, which land on step edges (one step is ~8 % of the size)
    window = [(t, b) for t, b in samples if 0.3 * size <= b <= 0.95 * size]
    mean_t = statistics.fmean(t for t, _ in window)
    mean_b = statistics.fmean(b for _, b in window)
    steady = sum((t - mean_t) * (b - mean_b) for t, b in window) / sum((t - mean_t) ** 2 for t, _ in window)
    assert 0.8 * RATE <= steady <= 1.2 * RATE, (
        f"steady copy rate {steady / 2**20:.1f} MB/s, throttle {RATE / 2**20} MB/s"
    )
    burst = 2 * RATE  # the token bucket's burst: the bound times 2 windows of 1 s
    assert elapsed >= 0.8 * (size - burst) / RATE, f"the move took {elapsed:.1f} s"
    assert written > 0 and all(isr == [1, 4] for isr in isrs), (
        f"busy-0's ISR changed: {sorted(map(tuple, isrs))[-1]}"
    )
    assert sorted(partition_state(zk, "big", 0)[0]["isr"]) == [1, 2, 3]
    # the gauges while it ran: the leader counts the partition as reassigning (KIP-352), and both
    # throttled byte rates (KIP-73) stayed near the throttle
    leader_rates = [g["kafka_server_leaderreplication_byte_rate"] for g, _ in gauges]
    follower_rates = [g["kafka_server_followerreplication_byte_rate"] for _, g in gauges]
    assert gauges and all(g["kafka_server_replicamanager_reassigningpartitions"] == 1 for g, _ in gauges)
    assert max(leader_rates) > 0 and max(follower_rates) > 0
    # (the first scrape still sees the bucket's initial burst; a rate sampled over 2 one-second
    # windows aliases with the copy's ~8 MB steps, reading from half to one and a half times the
    # throttle in full runs: the gauges show the throttled traffic, the copy rate above measures it)
    for rates in (leader_rates[1:], follower_rates[1:]):
        assert 0.5 * RATE <= statistics.median(rates) <= 1.6 * RATE, (leader_rates, follower_rates)
    after = await asyncio.to_thread(scrape, cluster, 1)
    assert after["kafka_server_replicamanager_reassigningpartitions"] == 0
    assert_replicas_identical(cluster, "big", await high_watermarks(cluster, "big", 1))
