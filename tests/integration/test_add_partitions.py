"""Adding partitions on a real cluster (issue 22 item 3; Kafka's CreatePartitions, KIP-195, and
``kafka-topics.sh --alter --partitions``): ZooKeeper plus three broker processes.

The new partitions continue the topic's placement as Kafka's AdminUtils does (the preferred
replica of partition p is the sorted broker list's ``(p + start) % n``-th, where partition 0
fixes ``start``), get leaders, and a producer that is already running writes to them after its
next metadata refresh. A reduction, the same count, an unknown topic, an unknown broker, a
duplicate replica and a wrong count of assignments are each refused with Kafka's one-line
message and leave ZooKeeper's assignment as it was; ``validate_only`` writes nothing.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from client.admin import AdminClient
from client.producer.producer import Producer
from client.protocol.errors import ErrorCode
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

TOPIC = "grows"
FIXED = "five"  # 5 partitions, RF 2: the refused alterations must leave it so


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("add-partitions"), brokers=3)
    yield c
    c.down()


@pytest.fixture(scope="module")
def five(cluster) -> str:
    async def create() -> None:
        async with AdminClient(cluster.bootstrap_servers) as admin:
            await admin.create_topic(FIXED, 5, 2)

    asyncio.run(create())
    return FIXED


def assignment(zk, topic: str) -> dict[int, list[int]]:
    data = json.loads(zk.get(f"/brokers/topics/{topic}")[0])
    return {int(p): replicas for p, replicas in data["partitions"].items()}


async def test_new_partitions_continue_the_placement_and_a_running_producer_uses_them(cluster, zk) -> None:
    admin = AdminClient(cluster.bootstrap_servers)
    await admin.start()
    producer = Producer(cluster.bootstrap_servers, acks="all", metadata_max_age_ms=500, linger_ms=5)
    await producer.start()
    try:
        await admin.create_topic(TOPIC, 2, 2)
        for i in range(20):
            await producer.send_and_wait(TOPIC, b"before-%d" % i)
        result = await asyncio.to_thread(  # the command runs its own event loop
            CliRunner().invoke,
            build_cli(),
            [
                "topics",
                "alter",
                "--bootstrap-server",
                cluster.bootstrap_servers,
                "--topic",
                TOPIC,
                "--partitions",
                "5",
            ],
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[-1] == "Adding partitions succeeded!"

        layout = assignment(zk, TOPIC)
        brokers = sorted(cluster.state.brokers)
        start = brokers.index(layout[0][0])
        assert sorted(layout) == [0, 1, 2, 3, 4]
        assert [layout[p][0] for p in range(5)] == [brokers[(p + start) % 3] for p in range(5)]
        assert all(len(set(replicas)) == 2 for replicas in layout.values())
        (description,) = await admin.describe_topics([TOPIC])
        assert [p.partition for p in description.partitions] == [0, 1, 2, 3, 4]
        assert all(p.leader >= 0 for p in description.partitions)

        async def writes_reach_the_new_partitions() -> set[int]:
            sent = [await producer.send_and_wait(TOPIC, b"after") for _ in range(10)]
            used = {metadata.partition for metadata in sent}
            return used if used & {2, 3, 4} else set()

        used = await eventually(writes_reach_the_new_partitions, "a record in a new partition", timeout=30)
        assert used <= {0, 1, 2, 3, 4}
    finally:
        await producer.close()
        await admin.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partitions", "1"], "Topic currently has 5 partitions, which is higher than the requested 1."),
        (["--partitions", "5"], "Topic already has 5 partitions."),
        (
            ["--partitions", "6", "--replica-assignment", "1:2,2:3,3:1,1:2,2:3,9:1"],
            "Unknown broker(s) in replica assignment: 9.",
        ),
        (
            ["--partitions", "6", "--replica-assignment", "1:2,2:3,3:1,1:2,2:3,3:3"],
            "Duplicate replica assignment found: partition 5 -> [3, 3]",
        ),
        (
            ["--partitions", "6", "--replica-assignment", "1:2,2:3,3:1,1:2,2:3,3:1:2"],
            "Inconsistent replication factor between partitions, partition 0 has 2",
        ),
    ],
    ids=["reduction", "same-count", "unknown-broker", "duplicate-replica", "replication-factor"],
)
def test_bad_alterations_are_one_line_errors_and_change_nothing(cluster, zk, five, args, message) -> None:
    before = assignment(zk, five)
    assert len(before) == 5
    result = CliRunner().invoke(
        build_cli(),
        ["topics", "alter", "--bootstrap-server", cluster.bootstrap_servers, "--topic", five, *args],
    )
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: INVALID_") and line.endswith(message), line
    assert assignment(zk, five) == before


def test_the_tool_refuses_a_missing_topic_and_a_wrong_assignment_count(cluster, zk, five) -> None:
    cli, runner = build_cli(), CliRunner()
    base = ["topics", "alter", "--bootstrap-server", cluster.bootstrap_servers]
    missing = runner.invoke(cli, [*base, "--topic", "nosuch", "--partitions", "3"])
    assert missing.exit_code == 1
    assert missing.stderr.strip().endswith("Topic 'nosuch' does not exist."), missing.stderr
    assert not zk.exists("/brokers/topics/nosuch")
    short = runner.invoke(
        cli, [*base, "--topic", five, "--partitions", "7", "--replica-assignment", "1:2,2:3"]
    )
    assert short.exit_code == 2
    assert "--replica-assignment lists 2 partition(s) but --partitions is 7" in short.stderr
    garbled = runner.invoke(cli, [*base, "--topic", five, "--partitions", "7", "--replica-assignment", "1:x"])
    assert garbled.exit_code == 2 and "is not a list of broker ids" in garbled.stderr
    assert len(assignment(zk, five)) == 5


async def test_validate_only_and_an_explicit_assignment(cluster, zk) -> None:
    topic = "explicit"
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(topic, 5, 2)
        checked = await admin.create_partitions({topic: 7}, validate_only=True)
        assert checked == {topic: None}
        assert len(assignment(zk, topic)) == 5
        wrong = await admin.create_partitions({topic: 7}, {topic: [[1, 2]]})
        assert wrong[topic] is not None and wrong[topic].code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert "Increasing the number of partitions by 2 but 1 assignments provided." in wrong[topic].message
        assert len(assignment(zk, topic)) == 5
        done = await admin.create_partitions({topic: 7}, {topic: [[3, 1], [1, 3]]})
        assert done == {topic: None}
        layout = assignment(zk, topic)
        assert layout[5] == [3, 1] and layout[6] == [1, 3]
        (description,) = await admin.describe_topics([topic])
        assert {p.partition: p.leader for p in description.partitions if p.partition >= 5} == {5: 3, 6: 1}
