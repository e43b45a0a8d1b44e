"""A broker SIGKILLed and restarted at once, ten times, under acks=all writes (SPEC 4, seed 000
"Broker Failover" and "Broker启动过程"; Kafka's KafkaController.processBrokerChange, whose
"bounced brokers" are failed and started in one event). So that the controller sees a bounce
(the broker's registration replaced by a newer one between two reads of /brokers/ids) and not a
death then a birth, the controller is paused (SIGSTOP) from the kill until the broker has
registered again, and the dead session's registration is deleted instead of waiting for its
expiry. After each restart the broker must take its replicas back: every partition led, every
replica in the ISR, no acknowledged write lost, every replica byte-identical below the HW. A
StopReplica addressed to the broker's previous incarnation (KIP-380 broker epoch) is refused."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from devcluster.cluster import LocalCluster
from devcluster.ports import PortInUse
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import (
    assert_replicas_identical,
    create_topic,
    describe,
    eventually,
    high_watermarks,
    read_all,
)
from tests.integration.test_disk_faults import Writer

pytestmark = pytest.mark.integration

TOPIC = "bounce"
PARTITIONS = 6
BOUNCES = 10


@pytest.fixture
def cluster(tmp_path):
    # a longer session, so that the paused controller keeps its own
    overrides = {"replica.lag.time.max.ms": "4000", "zookeeper.session.timeout.ms": "15000"}
    c = start_cluster(tmp_path / "cluster", brokers=3, overrides=overrides)
    yield c
    c.down()


async def test_broker_killed_and_restarted_at_once_keeps_its_replicas(cluster) -> None:
    await create_topic(cluster, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    writer = Writer(cluster, TOPIC)
    writer.start()
    zk = KazooClient(cluster.zookeeper_connect)
    zk.start(10)
    try:
        await writer.acked_more_than(200)
        for round_ in range(BOUNCES):
            controller = json.loads(zk.get("/controller")[0])["brokerid"]
            victim = [b for b in (1, 2, 3) if b != controller][round_ % 2]
            previous_epoch = zk.exists(f"/brokers/ids/{victim}").czxid
            cluster.kill(victim, "KILL")
            cluster.kill(controller, "STOP")
            try:
                zk.delete(f"/brokers/ids/{victim}")  # as if its session had expired at once
                restart_at_once(cluster, victim)
            finally:
                cluster.kill(controller, "CONT")
            await eventually(lambda: _healthy(cluster), f"every replica in the ISR after bounce {round_ + 1}")
            await writer.acked_more_than(len(writer.acked))
            assert await _stop_replica_answer(zk, victim, previous_epoch) == ErrorCode.STALE_BROKER_EPOCH
    finally:
        zk.stop()
        await writer.stop()

    description = await eventually(lambda: _healthy(cluster), "every partition led, every replica in the ISR")
    assert len(description.partitions) == PARTITIONS
    logs = await read_all(cluster, TOPIC, PARTITIONS)
    stored = {(p, offset): value for p, records in logs.items() for offset, value in records}
    lost = [(p, o, v) for p, o, v in writer.acked if stored.get((p, o)) != v]
    assert not lost, f"{len(lost)} of {len(writer.acked)} acknowledged records lost, e.g. {lost[:3]}"
    assert_replicas_identical(cluster, TOPIC, await high_watermarks(cluster, TOPIC, PARTITIONS))


async def _stop_replica_answer(zk: KazooClient, broker_id: int, broker_epoch: int) -> int:
    """KIP-380: a StopReplica (with delete) of every partition, addressed to the broker's previous
    incarnation and sent with the current controller epoch, must be refused, not applied."""
    registration = json.loads(zk.get(f"/brokers/ids/{broker_id}")[0])
    controller_epoch = int(zk.get("/controller_epoch")[0])
    connection = await BrokerConnection.open(registration["host"], registration["port"], "bounce-test", 5.0)
    try:
        response = await connection.request(
            ApiKey.STOP_REPLICA,
            {
                "controller_id": json.loads(zk.get("/controller")[0])["brokerid"],
                "controller_epoch": controller_epoch,
                "broker_epoch": broker_epoch,
                "delete_partitions": True,
                "partitions": [{"topic": TOPIC, "partition": p} for p in range(PARTITIONS)],
            },
            timeout=5.0,
        )
    finally:
        connection.close()
    return response["error_code"]


def restart_at_once(cluster: LocalCluster, broker_id: int) -> None:
    """Start the killed broker again as soon as the kernel has released its port."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            cluster.start(broker_id)
            return
        except PortInUse:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


async def _healthy(cluster):
    description = await describe(cluster, TOPIC)
    for p in description.partitions:
        if p.leader not in p.replicas or sorted(p.isr) != sorted(p.replicas):
            return None
    return description
