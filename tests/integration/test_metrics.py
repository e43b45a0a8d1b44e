"""SPEC 9 on a real cluster: every broker serves Prometheus /metrics with Kafka's headline
metrics, and they follow what happens (a controller, leaders, a paused follower)."""

from __future__ import annotations

import re
import urllib.request

import pytest

from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import create_topic, eventually, produce_values

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path):
    c = start_cluster(
        tmp_path / "cluster", overrides={"metrics.port": "0", "replica.lag.time.max.ms": "3000"}
    )
    yield c
    c.down()


def metrics_url(cluster, broker_id: int) -> str:
    out = (cluster.data_dir / f"broker-{broker_id}" / "broker.out").read_text()
    return re.findall(r"metrics on (http://\S+/metrics)", out)[-1]


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


async def test_every_broker_serves_kafkas_headline_metrics(cluster):
    await create_topic(cluster, "m", 6, 3, {"min.insync.replicas": "2"})
    assert len(await produce_values(cluster, "m", [b"v%d" % i for i in range(600)])) == 600
    scraped = {b: scrape(metrics_url(cluster, b)) for b in (1, 2, 3)}

    assert sum(m["kafka_controller_kafkacontroller_activecontrollercount"] for m in scraped.values()) == 1
    assert sum(m["kafka_server_replicamanager_leadercount"] for m in scraped.values()) == 6
    assert all(m["kafka_server_replicamanager_partitioncount"] == 6 for m in scraped.values())
    assert all(m["kafka_server_replicamanager_underreplicatedpartitions"] == 0 for m in scraped.values())
    assert (
        sum(
            m.get('kafka_network_requestmetrics_requests_total{request="PRODUCE"}', 0)
            for m in scraped.values()
        )
        >= 1
    )
    assert sum(m["kafka_server_brokertopicmetrics_bytesin_total"] for m in scraped.values()) > 600
    assert any(k.startswith("kafka_network_requestmetrics_totaltimems_seconds_bucket") for k in scraped[1])

    # A paused follower: the leaders shrink their ISRs and report under-replicated partitions.
    cluster.kill(3, "STOP")
    try:
        await produce_values(cluster, "m", [b"w%d" % i for i in range(60)], request_timeout_ms=4000)

        async def under_replicated():
            total = sum(
                scrape(metrics_url(cluster, b))["kafka_server_replicamanager_underreplicatedpartitions"]
                for b in (1, 2)
            )
            shrinks = sum(
                scrape(metrics_url(cluster, b))["kafka_server_replicamanager_isrshrinks_total"]
                for b in (1, 2)
            )
            return total > 0 and shrinks > 0

        await eventually(under_replicated, "under-replicated partitions on the live leaders")
    finally:
        cluster.kill(3, "CONT")


async def test_preferred_replica_imbalance_count_follows_leadership(cluster):
    """Kafka's PreferredReplicaImbalanceCount, reported by the controller: 0 on a fresh topic, the
    partitions a bounced broker no longer leads once it is back, 0 again after a preferred election."""
    import asyncio

    from client.admin import AdminClient

    def imbalance() -> float:
        return sum(
            scrape(metrics_url(cluster, b))["kafka_controller_kafkacontroller_preferredreplicaimbalancecount"]
            for b in (1, 2, 3)
        )

    await create_topic(cluster, "balanced", 3, 3)
    assert imbalance() == 0
    controller, _ = cluster.controller()
    bounced = next(b for b in (1, 2, 3) if b != controller)
    await asyncio.to_thread(cluster.stop, bounced)
    await asyncio.to_thread(cluster.start, bounced)
    led_before = await eventually(
        lambda: asyncio.sleep(0, imbalance() or None), "an imbalance after the bounce", timeout=30
    )
    assert led_before >= 1
    async with AdminClient(cluster.bootstrap_servers) as admin:

        async def in_isr() -> bool:
            (description,) = await admin.describe_topics(["balanced"])
            return all(bounced in p.isr for p in description.partitions)

        await eventually(in_isr, f"broker {bounced} back in every ISR")
        results = await admin.elect_leaders("preferred")
        assert all(error is None or error.name == "ELECTION_NOT_NEEDED" for error in results.values()), (
            results
        )
    assert await eventually(lambda: asyncio.sleep(0, imbalance() == 0), "no imbalance after the election")
