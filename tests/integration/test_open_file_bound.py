"""Open files bounded by a setting, not by partitions (issue 25, the first "must show"; docs/design.md
"Open files at scale (issue 25)").

Three real broker processes started under an open-file limit the test sets (``prlimit
--nofile=400:400``, so raising the soft limit to the hard one gives 400): each reserves 100
descriptors and gives its segment file cache the other 300. A topic of 500 partitions with
replication factor 3 puts 500 replicas on every broker: more than the limit would allow even with
one file per replica (Kafka holds one per segment, and this broker held three before issue 25).
Every partition is produced to (acks=all) and read back; the brokers' segment file caches stay
within their bound and their processes within the limit, with no EMFILE met, no log dir offline and
no broker halted. Then the controller is SIGKILLed: every partition gets a leader on the two
survivors and takes writes and reads again.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from client.admin import AdminClient
from client.consumer import Consumer
from client.producer import Producer
from client.types import TopicPartition
from devcluster.cluster import LocalCluster
from devcluster.ports import free_port_block
from devcluster.processes import default_broker_command
from tests.integration.cluster_fixtures import TEST_SETTINGS, scrape_metrics
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

LIMIT = 400
RESERVE = 100  # broker/file_budget.py: a quarter of the limit
PARTITIONS = 500  # RF 3 on 3 brokers: 500 replicas on every broker, more than LIMIT
TOPIC = "wide"
EMFILE_LINE = "Too many open files"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    base = free_port_block(3)
    command = ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", *default_broker_command()]
    cluster = LocalCluster(tmp_path_factory.mktemp("open-file-bound"), broker_command=command)
    cluster.up(3, zookeeper_port=base - 1, base_port=base, overrides=TEST_SETTINGS, timeout=60)
    yield cluster
    cluster.down(timeout=60)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def live_pids(cluster: LocalCluster) -> dict[int, int]:
    assert cluster.state is not None
    return {b.id: b.pid for b in cluster.state.brokers.values() if b.pid and os.path.exists(f"/proc/{b.pid}")}


def assert_no_broker_suffered(cluster: LocalCluster, broker_ids) -> None:  # noqa: ANN001
    assert cluster.state is not None
    for broker_id in broker_ids:
        text = Path(cluster.state.brokers[broker_id].out).read_text(errors="replace")
        assert EMFILE_LINE not in text, f"broker {broker_id} met EMFILE"
        assert "is now offline" not in text, f"broker {broker_id} took a log dir offline"
        assert "Shutdown broker because" not in text, f"broker {broker_id} halted"


async def round_trip(cluster: LocalCluster, value: bytes) -> None:
    """One acks=all record to every partition, every one read back."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=5) as producer:
        sent = [await producer.send(TOPIC, value, partition=p) for p in range(PARTITIONS)]
        await producer.flush()
    failed = [(p, f.exception()) for p, f in enumerate(sent) if f.exception() is not None]
    assert not failed, failed[:5]
    async with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen: set[int] = set()
        while len(seen) < PARTITIONS:
            seen |= {r.partition for r in await consumer.poll(timeout_ms=500) if r.value == value}


async def all_led(cluster: LocalCluster, without: int | None = None) -> bool:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        (description,) = await admin.describe_topics([TOPIC])
    leaders = [p.leader for p in description.partitions]
    return len(leaders) == PARTITIONS and all(leader not in (-1, None, without) for leader in leaders)


async def test_brokers_host_more_replicas_than_their_open_file_limit_and_survive_a_controller_kill(
    cluster: LocalCluster,
) -> None:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(TOPIC, PARTITIONS, 3)
    await eventually(lambda: all_led(cluster), f"leaders for all {PARTITIONS} partitions", 60)
    await asyncio.wait_for(round_trip(cluster, b"first"), 60)

    addresses = cluster.metrics_addresses()
    for broker_id, pid in live_pids(cluster).items():
        metrics = scrape_metrics(addresses[broker_id])
        assert metrics["kafka_server_replicamanager_partitioncount"] == PARTITIONS > LIMIT
        assert metrics["kafka_server_filebudget_openfileslimit"] == LIMIT
        assert metrics["kafka_server_filebudget_reserve"] == RESERVE
        assert metrics["kafka_log_segmentfilecache_max"] == LIMIT - RESERVE
        assert metrics["kafka_log_segmentfilecache_openfiles"] <= LIMIT - RESERVE
        assert metrics["kafka_log_segmentfilecache_opens_total"] >= PARTITIONS
        assert metrics["kafka_server_filebudget_openfiles"] < LIMIT
        assert open_fds(pid) < LIMIT
    assert_no_broker_suffered(cluster, (1, 2, 3))

    controller, _ = cluster.controller()
    assert controller is not None
    cluster.kill(controller)
    survivors = [b for b in (1, 2, 3) if b != controller]
    await eventually(lambda: all_led(cluster, without=controller), "a leader for every partition", 60)
    await asyncio.wait_for(round_trip(cluster, b"second"), 60)
    for broker_id, pid in live_pids(cluster).items():
        assert open_fds(pid) < LIMIT, f"broker {broker_id} holds {open_fds(pid)} descriptors"
    assert_no_broker_suffered(cluster, survivors)
