"""SPEC 5.1 bad-input rules against a live broker process: 10,000 random or malformed frames
(garbage, lengths over the limit, truncated bodies, wrong types, unknown API keys, half-open
connections), each answered as it must be (an error response under its correlation id, or the
connection closed: tests/fuzz_frames.py's statistics), after which the broker still serves
produce and fetch with no data lost."""

from __future__ import annotations

import random
import time

import pytest

from client.admin import AdminClient
from client.connection import BrokerConnection
from client.consumer import Consumer
from client.producer import Producer
from client.protocol.api import ApiKey
from client.types import TopicPartition
from tests.fuzz_frames import hammer, malformed_frames
from tests.integration.cluster_fixtures import start_cluster

pytestmark = pytest.mark.integration

MAX_FRAME = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("fuzz"), brokers=1, overrides={"socket.request.max.bytes": str(MAX_FRAME)}
    )
    yield c
    c.down()


async def produce(bootstrap, topic, values):
    producer = Producer(bootstrap, acks=1)
    await producer.start()
    futures = [await producer.send(topic, v, partition=0) for v in values]
    await producer.flush()
    offsets = [f.result().offset for f in futures]
    await producer.close()
    return offsets


async def consume_all(bootstrap, topic, expected):
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        got += await consumer.poll(timeout_ms=500)
    await consumer.close()
    return [r.value for r in got]


async def test_ten_thousand_malformed_frames_leave_the_broker_serving(cluster):
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    await admin.create_topic("fuzzed", 1, 1)
    await admin.close()
    before = [b"before-%d" % i for i in range(1000)]
    assert await produce(cluster.bootstrap_servers, "fuzzed", before) == list(range(1000))

    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    rng = random.Random(20261122)
    frames = list(malformed_frames(rng, 10_000, MAX_FRAME))
    stats = await hammer(host, int(port), frames, connections=16, timeout=90, rng=rng)
    assert not stats.timed_out and stats.frames_sent == 10_000, stats
    # Every "error" frame answered, in order, with its correlation id and Kafka's error code...
    assert stats.answered > 2000 and stats.unanswered == 0 and stats.wrong_answers == 0, stats
    # ...and every whole "close" frame (MUST_CLOSE) followed by the broker closing the connection.
    assert stats.closed > 2000 and stats.not_closed == 0, stats

    # A well-formed client on a fresh connection is served normally...
    conn = await BrokerConnection.open(host, int(port))
    versions = await conn.request(ApiKey.API_VERSIONS, {})
    assert versions["error_code"] == 0 and versions["api_keys"]
    conn.close()
    # ...and nothing was lost or added: exactly the records produced, before and after.
    after = [b"after-%d" % i for i in range(1000)]
    assert await produce(cluster.bootstrap_servers, "fuzzed", after) == list(range(1000, 2000))
    assert await consume_all(cluster.bootstrap_servers, "fuzzed", 2000) == before + after
