"""InitProducerId's KIP-360 epoch bump on a real broker (issue 18 window 10): ZooKeeper + one
broker process, requests built by hand through :class:`client.connection.BrokerConnection`.

An older client (no producer id in the request) gets a new id at epoch 0; a request carrying the
caller's id and epoch gets the same id at the next epoch, and the leader then refuses the older
epoch with INVALID_PRODUCER_EPOCH; an exhausted epoch (Short.MaxValue) gets a new id; an
impossible pair is INVALID_REQUEST.
"""

from __future__ import annotations

import time

import pytest

from broker.producer_id_manager import MAX_PRODUCER_EPOCH
from client.admin import AdminClient
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch
from tests.integration.cluster_fixtures import start_cluster

pytestmark = pytest.mark.integration

TOPIC = "bump"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("epoch-bump"), brokers=1)
    yield c
    c.down()


async def init_producer_id(conn: BrokerConnection, **ids: int) -> dict:
    body = {"transactional_id": None, "transaction_timeout_ms": 60000, **ids}
    return await conn.request(ApiKey.INIT_PRODUCER_ID, body, timeout=15)


async def produce(conn: BrokerConnection, pid: int, epoch: int, seq: int, value: bytes) -> int:
    records = [(None, value, int(time.time() * 1000), [])]
    batch = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    body = {
        "acks": -1,
        "timeout_ms": 10000,
        "transactional_id": None,
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "records": batch}]}],
    }
    response = await conn.request(ApiKey.PRODUCE, body, timeout=15)
    return response["topics"][0]["partitions"][0]["error_code"]


async def test_the_same_id_at_the_next_epoch_fences_the_older_one(cluster):
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topic(TOPIC, 1, 1, {})
    finally:
        await admin.close()
    port = cluster.state.brokers[1].port
    conn = await BrokerConnection.open("127.0.0.1", port, "epoch-bump-test")
    try:
        first = await init_producer_id(conn)  # an older client's request: no id, no epoch
        pid = first["producer_id"]
        assert (first["error_code"], first["producer_epoch"]) == (ErrorCode.NONE, 0) and pid >= 0
        assert await produce(conn, pid, 0, 0, b"a0") == ErrorCode.NONE

        bumped = await init_producer_id(conn, producer_id=pid, producer_epoch=0)
        assert (bumped["error_code"], bumped["producer_id"], bumped["producer_epoch"]) == (0, pid, 1)
        assert await produce(conn, pid, 1, 0, b"b0") == ErrorCode.NONE
        assert await produce(conn, pid, 0, 1, b"late a1") == ErrorCode.INVALID_PRODUCER_EPOCH

        again = await init_producer_id(conn, producer_id=pid, producer_epoch=0)  # a retried bump
        assert (again["producer_id"], again["producer_epoch"]) == (pid, 1)
        exhausted = await init_producer_id(conn, producer_id=pid, producer_epoch=MAX_PRODUCER_EPOCH)
        assert exhausted["producer_id"] not in (pid, -1) and exhausted["producer_epoch"] == 0

        with pytest.raises(KafkaError) as refused:
            await init_producer_id(conn, producer_id=pid, producer_epoch=-1)
        assert refused.value.name == "INVALID_REQUEST"
    finally:
        conn.close()
