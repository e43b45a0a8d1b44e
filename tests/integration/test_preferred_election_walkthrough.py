"""Seed 000's "Preferred Replica Leader Election Tool" walkthrough ("用法"), step by step, on
eight real broker processes (ids 1 to 8) with ``auto.leader.rebalance.enable=false``, so only the
tool moves a leadership back (the article's last paragraph: the auto-rebalance is what would do
it otherwise). Source: /work/shared/seeds/000_4d85629a6530a482.txt.

The article's steps, and what each checks here (leaders, replicas and ISR from the state znodes
/brokers/topics/topic1/partitions/<p>/state; after every step ``floodmark topics describe``, the
article's ``kafka-topics.sh --describe``, must show the same):

1. ``topic1``: 8 brokers, 8 partitions, replication factor 3. "Kafka spread every replica evenly
   over the cluster, and the leaders evenly too": every broker holds 3 replicas and leads exactly
   one partition, its preferred replica (the first of its AR), with the ISR the whole AR.
2. Brokers 1, 2 and 4 stopped: "the leader of partition 0 went from 1 to 3, of partition 1 from
   2 to 5, of partition 2 from 3 to 6, of partition 3 from 4 to 7".
3. Broker 1 started again: "1 is in the ISR of partitions 0 and 5, yet leads none; brokers 5, 6
   and 7 lead 2 partitions each": at most 2 partitions per broker, at least 0.
4. The tool: "every partition but 1 and 3 (whose preferred replicas, brokers 2 and 4, are still
   down) is led by its preferred replica; at most 2 partitions per broker, at least 1".
5. Brokers 2 and 4 started: "the leaders did not change".
6. The tool again: "every partition is led by its preferred replica: each broker leads one".

The assignment. The article shows its AR only in screenshots the seed does not hold, so it is
rebuilt and written to ZooKeeper as kafka-topics.sh --replica-assignment would (see
zk_state.create_with_assignment): Kafka 0.8's assignReplicasToBrokers gives partition p
the replicas (p + s, p + s + a, p + s + a + 1) of the broker list [1..8] (0-based, mod 8) for a
random start s and shift a in 1..7. The article's original leaders (partition p led by broker
p + 1) fix s = 0; "partition 0 failed over to 3" needs 3 in {1 + a, 2 + a} and "partition 1 to
5" needs 5 in {2 + a, 3 + a}, so a = 2: partition p has the replicas p + 1, p + 3, p + 4 (in
1..8), the only placement of that algorithm the article's text allows.

Where floodmark does not reproduce the article, and why (asserted as floodmark does it):

* Step 2, partition 2: the article moves its leader from 3 to 6, but broker 3 never stops (step 4
  has it leading partition 2 again as its preferred replica). A partition whose leader stays
  alive keeps it, in Kafka and in floodmark, and the article gives no cause; partition 2 stays
  on broker 3.
* Step 2, partition 3 (AR 4, 6, 7): the article's new leader is 7; floodmark's is 6. Kafka 0.8's
  OfflinePartitionLeaderSelector and ControlledShutdownLeaderSelector take the head of the live
  ISR in ISR order, and an ISR grows by appending, so in a cluster that has run a while 7 can be
  listed before 6. Floodmark follows Kafka 2.x's PartitionLeaderElectionAlgorithms (controller/
  partition_leader_election.py): the first live ISR member in assignment order, so 6.
* Step 3: with those two leaders the brokers leading two partitions are 3, 5 and 6, not the
  article's 5, 6 and 7; the article's bounds (at most 2, broker 1 none) hold. Broker 1 is also
  in partition 6's AR (7, 1, 2) and rejoins its ISR too; the article names only 0 and 5 (its
  screenshot was taken before broker 1 caught up there, or its placement differed).
* Steps 4 and 6: the article runs Kafka 0.8's kafka-preferred-replica-election.sh, which only
  writes /admin/preferred_replica_election and prints nothing per partition. ``floodmark
  elect-leaders --election-type preferred --all-topic-partitions`` is Kafka 2.x's
  kafka-leader-election.sh: it prints the partitions it moved and one error line for each whose
  preferred replica is down (PREFERRED_LEADER_NOT_AVAILABLE; exit 1 in step 4). Those lines are
  asserted too.

The stops are SIGTERM (a controlled shutdown), one broker at a time; the resulting leaders are
the same as after a crash, since both take the first live ISR member in assignment order. Every
wait polls ZooKeeper (or the brokers' metadata) with a 60 s deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result
from kazoo.client import KazooClient

from cli.main import build_cli
from client.admin import AdminClient
from devcluster.cluster import LocalCluster
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import eventually
from tests.integration.zk_state import create_with_assignment

pytestmark = pytest.mark.integration

#: Stands for the topic's id, which the controller assigns (22 characters of url-safe base64).
TOPIC_ID = "<id>"
TOPIC = "topic1"
BROKERS = range(1, 9)
WAIT_S = 60.0
# Kafka 0.8's placement with start 0 and shift 2 (see the module doc): p -> p+1, p+3, p+4 in 1..8
ASSIGNMENT: dict[int, list[int]] = {p: [p % 8 + 1, (p + 2) % 8 + 1, (p + 3) % 8 + 1] for p in range(8)}
States = dict[int, dict]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(
        tmp_path_factory.mktemp("preferred-walkthrough"),
        brokers=8,
        overrides={"auto.leader.rebalance.enable": "false"},
    )
    yield c
    c.down()


# -- reading the state ---------------------------------------------------------------------------


def read_states(zk: KazooClient) -> States:
    return {p: json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")[0]) for p in ASSIGNMENT}


def leaders(states: States) -> dict[int, int]:
    return {p: s["leader"] for p, s in states.items()}


def leader_counts(states: States, brokers: set[int] | None = None) -> dict[int, int]:
    """Partitions led per broker, zeros included, over ``brokers`` (default: all eight)."""
    led = Counter(s["leader"] for s in states.values())
    return {b: led[b] for b in sorted(brokers or set(BROKERS))}


def isr_sets(states: States) -> dict[int, set[int]]:
    return {p: set(s["isr"]) for p, s in states.items()}


async def wait_states(zk: KazooClient, what: str, check: Callable[[States], bool]) -> States:
    async def probe() -> States | None:
        current = read_states(zk)
        return current if check(current) else None

    return await eventually(probe, what, timeout=WAIT_S)


def run_cli(cluster: LocalCluster, *args: str) -> Result:
    return CliRunner().invoke(build_cli(), [*args, "--bootstrap-server", cluster.bootstrap_servers])


async def run_tool(cluster: LocalCluster) -> Result:
    return await asyncio.to_thread(
        run_cli, cluster, "elect-leaders", "--election-type", "preferred", "--all-topic-partitions"
    )


def ids(brokers: list[int]) -> str:
    return ",".join(map(str, brokers))


def describe_lines(states: States) -> list[str]:
    """``topics describe --topic topic1`` as it must read for these state znodes."""
    return [
        f"Topic: {TOPIC}\tTopicId: {TOPIC_ID}\tPartitionCount: 8\tReplicationFactor: 3\tConfigs: ",
        *(
            f"\tTopic: {TOPIC}\tPartition: {p}\tLeader: {s['leader']}\t"
            f"Replicas: {ids(ASSIGNMENT[p])}\tIsr: {ids(s['isr'])}"
            for p, s in sorted(states.items())
        ),
    ]


async def describe_agrees(cluster: LocalCluster, states: States) -> None:
    """The article reads every step from kafka-topics.sh --describe: the brokers' metadata (which
    follows ZooKeeper by an UpdateMetadata) must come to show exactly the state znodes."""
    expected = describe_lines(states)

    async def probe() -> bool | None:
        result = await asyncio.to_thread(run_cli, cluster, "topics", "describe", "--topic", TOPIC)
        # the controller gives the topic (created here by a znode without one) an id (KIP-516)
        lines = [
            re.sub(r"TopicId: [A-Za-z0-9_-]{22}", f"TopicId: {TOPIC_ID}", x)
            for x in result.stdout.splitlines()
        ]
        return result.exit_code == 0 and lines == expected or None

    await eventually(probe, f"topics describe showing {expected}", timeout=WAIT_S)


# -- the article's steps -------------------------------------------------------------------------


async def step1_create(cluster: LocalCluster, zk: KazooClient) -> States:
    """Replicas and leaders evenly spread: 3 replicas and 1 leadership per broker."""
    create_with_assignment(zk, TOPIC, ASSIGNMENT)
    states = await wait_states(
        zk,
        "topic1 led by its preferred replicas with full ISRs",
        lambda s: all(s[p]["leader"] == ar[0] and s[p]["isr"] == ar for p, ar in ASSIGNMENT.items()),
    )
    assert Counter(b for ar in ASSIGNMENT.values() for b in ar) == {b: 3 for b in BROKERS}
    assert leaders(states) == {0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: 8}
    assert leader_counts(states) == {b: 1 for b in BROKERS}
    await describe_agrees(cluster, states)
    return states


async def step2_stop_1_2_4(cluster: LocalCluster, zk: KazooClient) -> States:
    """The article: partition 0 1 -> 3, 1 2 -> 5 (as here); 2 3 -> 6 and 3 4 -> 7 (here 3 and 6:
    broker 3 never stops, and floodmark takes the first live ISR member in AR order)."""
    down = {1, 2, 4}
    for broker in sorted(down):
        exited = await asyncio.to_thread(cluster.stop, broker)
        assert exited, f"broker {broker} needed SIGKILL: its controlled shutdown did not finish"
    states = await wait_states(
        zk,
        "no leadership nor ISR membership on brokers 1, 2, 4",
        lambda s: all(x["leader"] not in down and not down & set(x["isr"]) for x in s.values()),
    )
    got = leaders(states)
    assert (got[0], got[1]) == (3, 5)  # the article's "0: 1 -> 3, 1: 2 -> 5"
    assert got[2] == 3  # the article says 6; broker 3 is alive and keeps it
    assert got[3] == 6  # the article says 7; AR (4, 6, 7): 6 is the first live ISR member
    assert got == {0: 3, 1: 5, 2: 3, 3: 6, 4: 5, 5: 6, 6: 7, 7: 8}
    # ISR: the AR without the stopped brokers, in AR order
    assert {p: s["isr"] for p, s in states.items()} == {
        p: [b for b in ar if b not in down] for p, ar in ASSIGNMENT.items()
    }
    await describe_agrees(cluster, states)
    return states


async def step3_start_1(cluster: LocalCluster, zk: KazooClient, before: States) -> States:
    """Broker 1 back: in the ISR of partitions 0 and 5 (and 6), leading nothing."""
    await asyncio.to_thread(cluster.start, 1)
    holding = [p for p, ar in ASSIGNMENT.items() if 1 in ar]
    assert holding == [0, 5, 6]
    states = await wait_states(
        zk, "broker 1 back in the ISR of partitions 0, 5, 6", lambda s: all(1 in s[p]["isr"] for p in holding)
    )
    assert 1 in states[0]["isr"] and 1 in states[5]["isr"]  # the article's two
    assert leaders(states) == leaders(before)  # it came back as a follower everywhere
    counts = leader_counts(states)
    assert counts[1] == 0 and max(counts.values()) == 2 and min(counts.values()) == 0  # the article's bounds
    # the article's "5, 6 and 7 lead two each" follows from its step 2; here 3, 5 and 6 do
    assert {b for b, n in counts.items() if n == 2} == {3, 5, 6}
    assert counts == {1: 0, 2: 0, 3: 2, 4: 0, 5: 2, 6: 2, 7: 1, 8: 1}
    assert isr_sets(states) == {p: set(ar) - {2, 4} for p, ar in ASSIGNMENT.items()}
    await describe_agrees(cluster, states)
    return states


async def step4_tool_with_2_and_4_down(cluster: LocalCluster, zk: KazooClient) -> States:
    """All but partitions 1 and 3 led by their preferred replica; 1 to 2 leaderships per live broker."""
    result = await run_tool(cluster)
    strategy = "PreferredReplicaPartitionLeaderElectionStrategy"
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-0",
        *(
            f"Error completing leader election (PREFERRED) for partition: {TOPIC}-{p}: "
            f"PREFERRED_LEADER_NOT_AVAILABLE: Failed to elect leader for partition {TOPIC}-{p} "
            f"under strategy {strategy}"
            for p in (1, 3)
        ),
    ]
    assert result.stderr.strip() == "Error: 2 replica(s) could not be elected"
    states = read_states(zk)
    not_preferred = {p for p, s in states.items() if s["leader"] != ASSIGNMENT[p][0]}
    assert not_preferred == {1, 3}  # the article: brokers 2 and 4 are still down
    assert leaders(states) == {0: 1, 1: 5, 2: 3, 3: 6, 4: 5, 5: 6, 6: 7, 7: 8}
    counts = leader_counts(states, {1, 3, 5, 6, 7, 8})
    assert (max(counts.values()), min(counts.values())) == (2, 1)  # the article's "at most 2, at least 1"
    await describe_agrees(cluster, states)
    return states


async def step5_start_2_and_4(cluster: LocalCluster, zk: KazooClient, before: States) -> States:
    """Brokers 2 and 4 back: the leaders do not change."""
    for broker in (2, 4):
        await asyncio.to_thread(cluster.start, broker)
    states = await wait_states(
        zk,
        "every ISR the whole AR again",
        lambda s: isr_sets(s) == {p: set(ar) for p, ar in ASSIGNMENT.items()},
    )
    assert leaders(states) == leaders(before)  # the article: "与上一步相比并未变化"
    await describe_agrees(cluster, states)
    return states


async def step6_tool_again(cluster: LocalCluster, zk: KazooClient) -> States:
    """Every partition led by its preferred replica: one leadership per broker."""
    result = await run_tool(cluster)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-1, {TOPIC}-3"
    ]
    states = read_states(zk)
    assert leaders(states) == {p: ar[0] for p, ar in ASSIGNMENT.items()}
    assert leader_counts(states) == {b: 1 for b in BROKERS}
    assert isr_sets(states) == {p: set(ar) for p, ar in ASSIGNMENT.items()}
    await describe_agrees(cluster, states)
    return states


async def admin_agrees(cluster: LocalCluster, states: States) -> None:
    """AdminClient.describe_topics, the other reader of the brokers' metadata, agrees as well."""
    async with AdminClient(cluster.bootstrap_servers) as admin:
        (description,) = await admin.describe_topics([TOPIC])
    seen = {
        p.partition: (p.leader, list(p.replicas), sorted(p.isr), list(p.offline_replicas))
        for p in description.partitions
    }
    assert seen == {p: (s["leader"], ASSIGNMENT[p], sorted(s["isr"]), []) for p, s in states.items()}


async def test_seed_000_preferred_replica_election_walkthrough(
    cluster: LocalCluster, zk: KazooClient
) -> None:
    await step1_create(cluster, zk)
    after_stop = await step2_stop_1_2_4(cluster, zk)
    await step3_start_1(cluster, zk, after_stop)
    after_tool = await step4_tool_with_2_and_4_down(cluster, zk)
    await step5_start_2_and_4(cluster, zk, after_tool)
    final = await step6_tool_again(cluster, zk)
    await admin_agrees(cluster, final)
