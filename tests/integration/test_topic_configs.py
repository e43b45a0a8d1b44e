"""Dynamic topic configs on a real cluster (KIP-133 DescribeConfigs/AlterConfigs, Kafka's
DynamicConfigManager): ZooKeeper plus three broker processes. An override changed by AlterConfigs
reaches the leader's log without a restart (min.insync.replicas=4 on an RF 3 topic, bounded by
the RF to 3 as Kafka 3.7 does, refuses acks=all once one follower is out of the ISR;
max.message.bytes refuses a large batch); describe names each config's source; a
refused alter, validate_only and an unknown topic change nothing; ``floodmark configs`` prints
kafka-configs.sh's lines. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from client.admin import AdminClient
from client.connection import BrokerConnection
from client.protocol.api import ApiKey, ConfigResourceType, ConfigSource
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch
from client.types import ConfigResource
from devcluster.ports import HOST
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

TOPIC = "dynamic-configs"
RESOURCE = ConfigResource(ConfigResourceType.TOPIC, TOPIC)
#: set in every broker's server.properties: retention.ms's source is STATIC_BROKER_CONFIG
STATIC_RETENTION_MS = "86400000"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    overrides = {
        "log.retention.ms": STATIC_RETENTION_MS,
        # a SIGSTOPped follower leaves the ISR in seconds, and keeps its ZooKeeper session meanwhile
        "replica.lag.time.max.ms": "3000",
        "zookeeper.session.timeout.ms": "30000",
    }
    c = start_cluster(tmp_path_factory.mktemp("configs"), brokers=3, overrides=overrides)
    yield c
    c.down()


async def produce(conn: BrokerConnection, value: bytes) -> dict:
    body = {
        "acks": -1,
        "timeout_ms": 5_000,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {"partition": 0, "records": build_batch([(None, value, int(time.time() * 1000), [])])}
                ],
            }
        ],
    }
    response = await conn.request(ApiKey.PRODUCE, body, timeout=15)
    return response["topics"][0]["partitions"][0]


def stored(zk) -> dict:
    return json.loads(zk.get(f"/config/topics/{TOPIC}")[0])


async def test_overrides_reach_the_leader_and_describe_names_their_source(cluster, zk) -> None:
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topic(TOPIC, 1, 3)
        (description,) = await admin.describe_topics([TOPIC])
        leader = description.partitions[0].leader
        await eventually(
            lambda: _full_isr(admin), "a full ISR", timeout=10
        )  # acks=all with min.insync.replicas=1 works first
        conn = await BrokerConnection.open(HOST, cluster.state.brokers[leader].port, "test-configs")
        try:
            assert (await produce(conn, b"before"))["error_code"] == ErrorCode.NONE

            await admin.alter_configs({RESOURCE: {"min.insync.replicas": "4"}})
            assert stored(zk) == {"version": 1, "config": {"min.insync.replicas": "4"}}
            assert any(c.startswith("config_change_") for c in zk.get_children("/config/changes"))
            # Kafka 3.7 (KAFKA-15583) bounds it by the RF: 3, which the full ISR satisfies; with a
            # follower stopped and out of the ISR, acks=all is refused (under the default of 1 it
            # would not be), so the override reached the leader
            follower = next(r for r in description.partitions[0].replicas if r != leader)
            cluster.kill(follower, "STOP")
            try:
                refused = await eventually(
                    lambda: _error_is(conn, ErrorCode.NOT_ENOUGH_REPLICAS), "NOT_ENOUGH_REPLICAS", timeout=30
                )
            finally:
                cluster.kill(follower, "CONT")
            assert "min.insync.replicas=4 (bounded by the replication factor to 3)" in (
                refused["error_message"] or ""
            )
            await eventually(lambda: _full_isr(admin), "the follower back in the ISR", timeout=30)

            configs = (await admin.describe_configs([RESOURCE], include_synonyms=True))[RESOURCE]
            isr = configs.get("min.insync.replicas")
            assert (isr.value, isr.source) == ("4", ConfigSource.DYNAMIC_TOPIC_CONFIG)
            assert [(s.source, s.value) for s in isr.synonyms] == [
                (ConfigSource.DYNAMIC_TOPIC_CONFIG, "4"),
                (ConfigSource.DEFAULT_CONFIG, "1"),
            ]
            retention = configs.get("retention.ms")
            assert (retention.value, retention.source) == (
                STATIC_RETENTION_MS,
                ConfigSource.STATIC_BROKER_CONFIG,
            )
            assert configs.get("segment.bytes").source == ConfigSource.DEFAULT_CONFIG

            # the override deleted (AlterConfigs replaces the set): acks=all is accepted again;
            # max.message.bytes reaches the log itself (LogConfig), not only the replica manager
            await admin.alter_configs({RESOURCE: {"max.message.bytes": "200"}})
            assert stored(zk)["config"] == {"max.message.bytes": "200"}
            await eventually(lambda: _error_is(conn, ErrorCode.NONE), "acks=all accepted again", timeout=10)
            big = await eventually(
                lambda: _error_is(conn, ErrorCode.MESSAGE_TOO_LARGE, b"x" * 1000),
                "MESSAGE_TOO_LARGE",
                timeout=10,
            )
            assert big["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
            await admin.alter_configs({RESOURCE: {}})
            await eventually(
                lambda: _error_is(conn, ErrorCode.NONE, b"x" * 1000), "a large batch accepted", timeout=10
            )
            configs = (await admin.describe_configs([RESOURCE]))[RESOURCE]
            assert configs.values(ConfigSource.DYNAMIC_TOPIC_CONFIG) == {}
            assert configs.get("min.insync.replicas").source == ConfigSource.DEFAULT_CONFIG
        finally:
            conn.close()
    finally:
        await admin.close()


async def _full_isr(admin: AdminClient) -> bool:
    (description,) = await admin.describe_topics([TOPIC])
    return len(description.partitions[0].isr) == 3


async def _error_is(conn: BrokerConnection, code: int, value: bytes = b"v") -> dict | None:
    answer = await produce(conn, value)
    return answer if answer["error_code"] == code else None


async def test_refused_validate_only_and_unknown_topic_change_nothing(cluster, zk) -> None:
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.alter_configs({RESOURCE: {"retention.ms": "60000"}})
        before = stored(zk)
        for bad, message in (
            ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
            ({"min.insync.replicas": "many"}, "min.insync.replicas"),
        ):
            with pytest.raises(KafkaError) as refused:
                await admin.alter_configs({RESOURCE: bad})
            assert refused.value.code == ErrorCode.INVALID_CONFIG and message in refused.value.message
        await admin.alter_configs({RESOURCE: {"retention.ms": "1000"}}, validate_only=True)
        assert stored(zk) == before
        described = (await admin.describe_configs([RESOURCE]))[RESOURCE]
        assert described.values(ConfigSource.DYNAMIC_TOPIC_CONFIG) == {"retention.ms": "60000"}

        unknown = ConfigResource(ConfigResourceType.TOPIC, "no-such-topic")
        for call in (
            admin.describe_configs([unknown]),
            admin.alter_configs({unknown: {"retention.ms": "1"}}),
        ):
            with pytest.raises(KafkaError) as missing:
                await call
            assert missing.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert "Topic 'no-such-topic' does not exist." in missing.value.message

        # each broker describes its own static config; another id is refused
        (broker,) = (await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "2")])).values()
        assert broker.get("broker.id").value == "2" and broker.get("broker.id").is_read_only
        assert broker.get("log.retention.ms").source == ConfigSource.STATIC_BROKER_CONFIG
    finally:
        await admin.close()


def test_the_configs_and_topics_commands(cluster) -> None:
    cli, runner = build_cli(), CliRunner()
    base = ["--bootstrap-server", cluster.bootstrap_servers]
    entity = ["configs", *base, "--entity-type", "topics", "--entity-name", TOPIC]
    added = runner.invoke(cli, [*entity, "--alter", "--add-config", "retention.ms=60000"])
    assert added.exit_code == 0, added.output
    altered = runner.invoke(
        cli, [*entity, "--alter", "--add-config", "min.insync.replicas=2", "--delete-config", "retention.ms"]
    )
    assert altered.exit_code == 0, altered.output
    assert altered.stdout == f"Completed updating config for topic {TOPIC}.\n"
    described = runner.invoke(cli, [*entity, "--describe"])
    assert described.exit_code == 0, described.output
    assert described.stdout.splitlines() == [
        f"Dynamic configs for topic {TOPIC} are:",
        "  min.insync.replicas=2 sensitive=false synonyms="
        "{DYNAMIC_TOPIC_CONFIG:min.insync.replicas=2, DEFAULT_CONFIG:min.insync.replicas=1}",
    ]
    topics = runner.invoke(cli, ["topics", "describe", *base, "--topic", TOPIC])
    assert topics.exit_code == 0, topics.output
    assert topics.stdout.splitlines()[0].endswith("\tConfigs: min.insync.replicas=2")
    refused = runner.invoke(cli, [*entity, "--alter", "--add-config", "no.such=1"])
    assert refused.exit_code == 1
    assert refused.stderr.strip() == (
        f"Error: INVALID_CONFIG: alter configs of topic '{TOPIC}' failed: Unknown topic config name: no.such"
    )


async def test_a_restarted_broker_applies_the_overrides_to_the_logs_it_loads(cluster) -> None:
    """Logs loaded from disk at start-up get their topic's overrides (the listener's start-up
    pass), not only logs created by LeaderAndIsr: an RF 1 topic with max.message.bytes=200
    refuses a large batch after its broker restarts."""
    topic = "dynamic-configs-restart"
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topic(topic, 1, 1)
        await admin.alter_configs({resource: {"max.message.bytes": "200"}})
        (description,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    broker = description.partitions[0].replicas[0]
    await asyncio.to_thread(cluster.stop, broker, 20.0)
    deadline = time.monotonic() + 10
    while True:  # a gracefully stopped broker's port is free at once; allow the kernel a moment
        try:
            await asyncio.to_thread(cluster.start, broker, 30.0)
            break
        except Exception:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.1)

    async def answer() -> dict | None:
        try:
            conn = await BrokerConnection.open(HOST, cluster.state.brokers[broker].port, "test-configs")
        except KafkaError:
            return None
        try:
            body = {
                "acks": 1,
                "timeout_ms": 5_000,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "records": build_batch([(None, b"x" * 1000, int(time.time() * 1000), [])]),
                            }
                        ],
                    }
                ],
            }
            part = (await conn.request(ApiKey.PRODUCE, body, timeout=10))["topics"][0]["partitions"][0]
        finally:
            conn.close()
        # NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION until the controller has elected it again
        return (
            part
            if part["error_code"]
            not in (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.LEADER_NOT_AVAILABLE,
            )
            else None
        )

    refused = await eventually(answer, "the restarted broker's answer as leader", timeout=20)
    assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE, refused
