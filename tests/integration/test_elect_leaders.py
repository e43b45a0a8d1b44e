"""Leader elections on request and the auto-rebalance on real brokers (issue 22 item 2; Kafka's
ElectLeaders, KIP-460, ``kafka-leader-election.sh``, and checkAndTriggerAutoLeaderRebalance):
ZooKeeper plus three broker processes.

A bounced broker comes back as a follower; ``floodmark elect-leaders --election-type preferred``
moves the leadership back to it and prints Kafka's lines; asked again, it answers that a valid
replica is already elected; an unknown partition and a preferred replica that is down are each
a Kafka error line and exit 1, with the state znode untouched. An unclean election makes a live
replica outside the ISR the leader of an offline partition. With ``auto.leader.rebalance.enable``
and a 2 s check interval, the controller moves the leadership back by itself. Every wait polls
with a deadline.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from client.admin import AdminClient
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

TOPIC = "elect"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("elect-leaders"),
        brokers=3,
        overrides={"auto.leader.rebalance.enable": "false"},
    )
    yield c
    c.down()


def state(zk, topic: str, partition: int) -> dict:
    return json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def preferred(zk, topic: str, partition: int) -> int:
    return json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"][str(partition)][0]


def elect(cluster, *args: str):
    return CliRunner().invoke(
        build_cli(), ["elect-leaders", "--bootstrap-server", cluster.bootstrap_servers, *args]
    )


async def wait_state(zk, topic: str, partition: int, what: str, check) -> dict:
    async def probe() -> dict | None:
        current = state(zk, topic, partition)
        return current if check(current) else None

    return await eventually(probe, what, timeout=45)


async def create(cluster, topic: str, partitions: int, rf: int) -> None:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(topic, partitions, rf)


async def bounce(cluster, zk, broker: int, topic: str, partition: int) -> None:
    """Stop ``broker`` (its leaderships move), start it, wait until it is back in the ISR."""
    await asyncio.to_thread(cluster.stop, broker)
    await wait_state(
        zk, topic, partition, f"a leader other than {broker}", lambda s: s["leader"] not in (broker, -1)
    )
    await asyncio.to_thread(cluster.start, broker)
    await wait_state(zk, topic, partition, f"broker {broker} back in the ISR", lambda s: broker in s["isr"])


async def test_preferred_election_moves_leadership_back_and_prints_kafkas_lines(
    cluster, zk, tmp_path: Path
) -> None:
    await create(cluster, TOPIC, 3, 3)
    target = preferred(zk, TOPIC, 0)
    await bounce(cluster, zk, target, TOPIC, 0)
    assert state(zk, TOPIC, 0)["leader"] != target

    done = await asyncio.to_thread(
        elect, cluster, "--election-type", "preferred", "--topic", TOPIC, "--partition", "0"
    )
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-0"
    ]
    assert state(zk, TOPIC, 0)["leader"] == target

    again = await asyncio.to_thread(
        elect, cluster, "--election-type", "PREFERRED", "--topic", TOPIC, "--partition", "0"
    )
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines() == [f"Valid replica already elected for partitions {TOPIC}-0"]

    listed = tmp_path / "partitions.json"
    listed.write_text(
        json.dumps({"partitions": [{"topic": TOPIC, "partition": 1}, {"topic": "nosuch", "partition": 0}]})
    )
    mixed = await asyncio.to_thread(
        elect, cluster, "--election-type", "preferred", "--path-to-json-file", str(listed)
    )
    assert mixed.exit_code == 1
    assert mixed.stdout.splitlines() == [
        f"Valid replica already elected for partitions {TOPIC}-1",
        "Error completing leader election (PREFERRED) for partition: nosuch-0: UNKNOWN_TOPIC_OR_PARTITION: "
        "The partition nosuch-0 does not exist.",
    ]
    assert mixed.stderr.strip() == "Error: 1 replica(s) could not be elected"

    everything = await asyncio.to_thread(
        elect, cluster, "--election-type", "preferred", "--all-topic-partitions"
    )
    assert everything.exit_code == 0 and everything.stdout == "", everything.output


async def test_a_preferred_replica_that_is_down_is_an_error_and_changes_nothing(cluster, zk) -> None:
    topic = "elect-down"
    await create(cluster, topic, 1, 3)
    target = preferred(zk, topic, 0)
    await asyncio.to_thread(cluster.stop, target)
    try:
        before = await wait_state(zk, topic, 0, "another leader", lambda s: s["leader"] not in (target, -1))
        refused = await asyncio.to_thread(
            elect, cluster, "--election-type", "preferred", "--topic", topic, "--partition", "0"
        )
        assert refused.exit_code == 1
        assert refused.stdout.splitlines() == [
            f"Error completing leader election (PREFERRED) for partition: {topic}-0: PREFERRED_LEADER_NOT_AVAILABLE: "
            f"Failed to elect leader for partition {topic}-0 under strategy PreferredReplicaPartitionLeaderElectionStrategy"
        ]
        assert state(zk, topic, 0) == before
        unclean = await asyncio.to_thread(
            elect, cluster, "--election-type", "unclean", "--topic", topic, "--partition", "0"
        )
        assert unclean.exit_code == 0 and unclean.stdout.splitlines() == [
            f"Valid replica already elected for partitions {topic}-0"
        ]
        assert state(zk, topic, 0) == before
    finally:
        await asyncio.to_thread(cluster.start, target)


async def test_an_unclean_election_makes_a_live_replica_outside_the_isr_lead(cluster, zk) -> None:
    """Replicas (a, b): b stops, so the ISR is (a); a is killed, so the partition is offline with
    ISR (a); b comes back but, outside the ISR and with unclean elections off, cannot lead until
    the tool's unclean election."""
    topic = "elect-unclean"
    await create(cluster, topic, 1, 2)
    a, b = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]["0"]
    await wait_state(
        zk, topic, 0, f"leader {a}, ISR ({a}, {b})", lambda s: s["leader"] == a and len(s["isr"]) == 2
    )
    await asyncio.to_thread(cluster.stop, b)
    await wait_state(zk, topic, 0, f"ISR ({a})", lambda s: s["isr"] == [a])
    await asyncio.to_thread(cluster.kill, a)
    try:
        await wait_state(zk, topic, 0, "no leader", lambda s: s["leader"] == -1)
        await asyncio.to_thread(cluster.start, b)
        offline = state(zk, topic, 0)
        assert offline["leader"] == -1 and offline["isr"] == [a]
        done = await asyncio.to_thread(
            elect, cluster, "--election-type", "unclean", "--topic", topic, "--partition", "0"
        )
        assert done.exit_code == 0, done.output
        assert done.stdout.splitlines() == [
            f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0"
        ]
        elected = state(zk, topic, 0)
        assert (
            elected["leader"] == b
            and elected["isr"] == [b]
            and elected["leader_epoch"] > offline["leader_epoch"]
        )
    finally:
        await asyncio.to_thread(cluster.start, a)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--election-type", "preferred"], "give exactly one of --all-topic-partitions"),
        (["--election-type", "preferred", "--all-topic-partitions", "--topic", "t"], "give exactly one of"),
        (["--election-type", "preferred", "--topic", "t"], "--topic and --partition go together"),
        (["--election-type", "sideways", "--all-topic-partitions"], "'sideways' is not one of"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(cluster, args: list[str], message: str) -> None:
    result = elect(cluster, *args)
    assert result.exit_code == 2 and message in result.stderr, result.output


def test_a_malformed_json_file_is_named(cluster, tmp_path: Path) -> None:
    for text, why in [
        ("{not json", "JSONDecodeError"),
        ('{"partitions": [{"topic": "t"}]}', "KeyError"),
        ('{"partitions": []}', "no partitions listed"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        result = elect(cluster, "--election-type", "preferred", "--path-to-json-file", str(bad))
        assert result.exit_code == 2 and why in result.stderr and str(bad) in result.stderr, result.output


async def test_auto_rebalance_moves_leadership_back_within_the_interval(tmp_path: Path) -> None:
    rebalancing = start_cluster(
        tmp_path / "rebalance",
        brokers=3,
        overrides={"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "2"},
    )
    from kazoo.client import KazooClient

    zk = KazooClient(rebalancing.zookeeper_connect)
    zk.start(30)
    try:
        await create(rebalancing, "rebalanced", 3, 3)
        target = preferred(zk, "rebalanced", 0)
        await asyncio.to_thread(rebalancing.stop, target)
        await wait_state(zk, "rebalanced", 0, "another leader", lambda s: s["leader"] not in (target, -1))
        await asyncio.to_thread(rebalancing.start, target)
        # back in the ISR, then led by its preferred replica again without any tool: at most one
        # check interval (2 s) after it rejoined, plus the election itself
        await wait_state(zk, "rebalanced", 0, f"broker {target} in the ISR", lambda s: target in s["isr"])
        await wait_state(
            zk, "rebalanced", 0, f"broker {target} leading again", lambda s: s["leader"] == target
        )
    finally:
        zk.stop()
        zk.close()
        rebalancing.down()
