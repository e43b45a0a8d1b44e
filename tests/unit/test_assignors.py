"""Kafka's RangeAssignor and RoundRobinAssignor (client.consumer.assignors).

Oracles: seed 004's worked example, the examples in the javadoc of Kafka's RangeAssignor and
RoundRobinAssignor, and kafka-python's RangePartitionAssignor / RoundRobinPartitionAssignor
over a seeded random sweep (same member order, same partition order, same SyncGroup bytes).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRange
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as AioRoundRobin
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata as AioMetadata
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from client.consumer.assignors import (
    ASSIGNORS,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    assignor_for,
)
from client.protocol.consumer_protocol import Assignment, Subscription, encode_assignment
from client.types import TopicPartition

KAFKA_PYTHON = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
AIOKAFKA = {"range": AioRange, "roundrobin": AioRoundRobin}


def tps(*names: str) -> tuple[TopicPartition, ...]:
    """``tps("t0p1", "t1p0")`` -> TopicPartitions, in the javadoc's notation."""
    return tuple(TopicPartition(n.split("p")[0], int(n.split("p")[1])) for n in names)


def subs(**topics_by_member: tuple[str, ...]) -> dict[str, Subscription]:
    return {member: Subscription(topics=topics) for member, topics in topics_by_member.items()}


def partitions_of(result: Mapping[str, Assignment]) -> dict[str, tuple[TopicPartition, ...]]:
    return {member: asg.partitions for member, asg in result.items()}


# --- the oracles' inputs -------------------------------------------------------------------


@dataclass(frozen=True)
class FakeCluster:
    """What kafka-python's and aiokafka's assignors read of ClusterMetadata."""

    partitions_per_topic: Mapping[str, int]

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.partitions_per_topic.get(topic)
        return None if count is None else set(range(count))


@dataclass(frozen=True)
class FakeMetadata:
    topics: list[str]


@dataclass(frozen=True)
class FakeMember:
    """A JoinGroupResponse member as kafka-python's assignors read it (no static members)."""

    member_id: str
    metadata: FakeMetadata
    group_instance_id: None = None


Partitions = dict[str, tuple[tuple[str, int], ...]]


def kafka_python_run(
    name: str, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, Any]:
    """kafka-python's assignor ``name``: member id -> its ConsumerProtocolAssignment."""
    members = [FakeMember(m, FakeMetadata(list(s.topics))) for m, s in subscriptions.items()]
    return KAFKA_PYTHON[name].assign(FakeCluster(partitions_per_topic), members)


def kafka_python_assign(
    name: str, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> Partitions:
    result = kafka_python_run(name, partitions_per_topic, subscriptions)
    return {member: tuple(tuple(tp) for tp in asg.partitions()) for member, asg in result.items()}


def aiokafka_assign(
    name: str, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> Partitions:
    members = {m: AioMetadata(0, list(s.topics), b"") for m, s in subscriptions.items()}
    result = AIOKAFKA[name].assign(FakeCluster(partitions_per_topic), members)
    return {member: tuple(tuple(tp) for tp in asg.partitions()) for member, asg in result.items()}


def random_case(rng: random.Random) -> tuple[dict[str, int], dict[str, Subscription]]:
    """1-8 members with random ids (some prefixes of others), 1-5 topics of 1-12 partitions,
    random subscriptions; now and then a subscribed topic without metadata."""
    topics = {f"{rng.choice('abxyz')}{rng.randrange(20)}": rng.randint(1, 12) for _ in range(5)}
    topics = dict(list(topics.items())[: rng.randint(1, 5)])
    pool = [*topics, "no-metadata"] if rng.random() < 0.2 else list(topics)
    ids: set[str] = set()
    wanted = rng.randint(1, 8)
    while len(ids) < wanted:
        ids.add(f"{rng.choice(['C', 'consumer-', 'c'])}{rng.randrange(1, 120)}")
    members = sorted(ids)
    rng.shuffle(members)  # the coordinator's order is not the sort order
    subscriptions = {m: Subscription(tuple(rng.sample(pool, rng.randint(0, len(pool))))) for m in members}
    return topics, subscriptions


# --- seed 004 and Kafka's javadoc ----------------------------------------------------------


def test_seed_004_range_example() -> None:
    result = RangeAssignor().assign({"t": 10}, subs(**{"C2-1": ("t",), "C1-0": ("t",), "C2-0": ("t",)}))
    assert {m: [tp.partition for tp in a.partitions] for m, a in result.items()} == {
        "C1-0": [0, 1, 2, 3],
        "C2-0": [4, 5, 6],
        "C2-1": [7, 8, 9],
    }


def test_range_javadoc_example() -> None:
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs(C0=("t0", "t1"), C1=("t0", "t1")))
    assert partitions_of(result) == {
        "C0": tps("t0p0", "t0p1", "t1p0", "t1p1"),
        "C1": tps("t0p2", "t1p2"),
    }


def test_roundrobin_javadoc_example() -> None:
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs(C0=("t0", "t1"), C1=("t0", "t1")))
    assert partitions_of(result) == {
        "C0": tps("t0p0", "t0p2", "t1p1"),
        "C1": tps("t0p1", "t1p0", "t1p2"),
    }


def test_roundrobin_javadoc_example_with_unequal_subscriptions() -> None:
    result = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3}, subs(C0=("t0",), C1=("t0", "t1"), C2=("t0", "t1", "t2"))
    )
    assert partitions_of(result) == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


# --- kafka-python and aiokafka as the oracles ----------------------------------------------
#
# kafka-python 3.0.12's RoundRobinPartitionAssignor cannot serve when subscriptions differ: when
# it skips an unsubscribed member it rebinds member_id to the whole (group_instance_id,
# member_id) pair of its member list and looks that pair up in a dict keyed by member id, a
# KeyError. It is the oracle where subscriptions are identical (no skipping); aiokafka's copy
# of kafka-python's assignors (taken before that static-membership rewrite) is the oracle
# everywhere, for both assignors.


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_equal_to_aiokafka_over_a_random_sweep(name: str) -> None:
    rng = random.Random(4)
    for case in range(300):
        partitions_per_topic, subscriptions = random_case(rng)
        ours = assignor_for(name).assign(partitions_per_topic, subscriptions)
        assert partitions_of(ours) == aiokafka_assign(name, partitions_per_topic, subscriptions), case


def test_range_equal_to_kafka_python_over_a_random_sweep() -> None:
    rng = random.Random(4)
    for case in range(300):
        partitions_per_topic, subscriptions = random_case(rng)
        ours = RangeAssignor().assign(partitions_per_topic, subscriptions)
        assert partitions_of(ours) == kafka_python_assign("range", partitions_per_topic, subscriptions), case


def test_roundrobin_equal_to_kafka_python_with_identical_subscriptions() -> None:
    rng = random.Random(4)
    for case in range(300):
        partitions_per_topic, subscriptions = random_case(rng)
        topics = tuple(rng.sample(sorted(partitions_per_topic), rng.randint(1, len(partitions_per_topic))))
        same = {member: Subscription(topics) for member in subscriptions}
        ours = RoundRobinAssignor().assign(partitions_per_topic, same)
        assert partitions_of(ours) == kafka_python_assign("roundrobin", partitions_per_topic, same), case


def test_the_oracles_reproduce_the_javadoc_examples() -> None:
    equal = subs(C0=("t0", "t1"), C1=("t0", "t1"))
    unequal = subs(C0=("t0",), C1=("t0", "t1"), C2=("t0", "t1", "t2"))
    for oracle in (kafka_python_assign, aiokafka_assign):
        assert oracle("range", {"t0": 3, "t1": 3}, equal)["C1"] == tps("t0p2", "t1p2")
        assert oracle("roundrobin", {"t0": 3, "t1": 3}, equal)["C0"] == tps("t0p0", "t0p2", "t1p1")
    assert aiokafka_assign("roundrobin", {"t0": 1, "t1": 2, "t2": 3}, unequal) == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


def test_syncgroup_bytes_equal_kafka_pythons() -> None:
    rng = random.Random(40)
    for case in range(200):
        partitions_per_topic, subscriptions = random_case(rng)
        ours = RangeAssignor().assign(partitions_per_topic, subscriptions)
        theirs = kafka_python_run("range", partitions_per_topic, subscriptions)
        for member, asg in ours.items():
            # Two kafka-python departures from Kafka, undone here: its assignors send empty
            # user data where Kafka's send null, and its RangePartitionAssignor lists a topic
            # with no partitions for a member whose range is empty, where Kafka (grouping a
            # list of TopicPartitions by topic) lists no such topic.
            their = theirs[member]
            their.assigned_partitions = [tp for tp in their.assigned_partitions if tp[1]]
            assert encode_assignment(Assignment(asg.partitions, user_data=b"")) == their.encode(), case


# --- properties ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_every_partition_once_and_only_to_a_subscriber(name: str) -> None:
    rng = random.Random(400)
    for case in range(300):
        partitions_per_topic, subscriptions = random_case(rng)
        result = assignor_for(name).assign(partitions_per_topic, subscriptions)
        assert result.keys() == subscriptions.keys(), case
        subscribed = {t for s in subscriptions.values() for t in s.topics} & partitions_per_topic.keys()
        expected = Counter(TopicPartition(t, p) for t in subscribed for p in range(partitions_per_topic[t]))
        assert Counter(tp for a in result.values() for tp in a.partitions) == expected, case
        for member, asg in result.items():
            assert {tp.topic for tp in asg.partitions} <= set(subscriptions[member].topics), case


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_identical_subscriptions_balance(name: str) -> None:
    """RoundRobin: totals within one of each other. Range: per topic within one (only)."""
    rng = random.Random(4000)
    for case in range(300):
        partitions_per_topic, subscriptions = random_case(rng)
        topics = tuple(partitions_per_topic)
        same = {member: Subscription(topics) for member in subscriptions}
        result = assignor_for(name).assign(partitions_per_topic, same)
        sizes = [len(a.partitions) for a in result.values()]
        if name == "roundrobin":
            assert max(sizes) - min(sizes) <= 1, case
        for topic in topics:
            per_topic = [sum(tp.topic == topic for tp in a.partitions) for a in result.values()]
            assert max(per_topic) - min(per_topic) <= 1, case


def test_range_imbalance_across_topics_is_kafkas() -> None:
    """Range's known skew: the first member takes the extra partition of every topic."""
    result = RangeAssignor().assign({"a": 1, "b": 1, "c": 1}, subs(C0=("a", "b", "c"), C1=("a", "b", "c")))
    assert partitions_of(result) == {"C0": tps("ap0", "bp0", "cp0"), "C1": ()}


# --- edges ---------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_topic_without_metadata_is_skipped_and_every_member_present(assignor: PartitionAssignor) -> None:
    result = assignor.assign({"t": 2}, subs(A=("gone",), B=("t", "gone"), C=()))
    assert partitions_of(result) == {"A": (), "B": tps("tp0", "tp1"), "C": ()}
    assert all(a.user_data is None for a in result.values())


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_no_members_and_zero_partitions(assignor: PartitionAssignor) -> None:
    assert assignor.assign({"t": 3}, {}) == {}
    assert partitions_of(assignor.assign({"t": 0}, subs(A=("t",)))) == {"A": ()}


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_negative_partition_count_is_refused(assignor: PartitionAssignor) -> None:
    with pytest.raises(ValueError, match="negative partition count"):
        assignor.assign({"t": -1}, subs(A=("t",)))


def test_a_topic_listed_twice_counts_once() -> None:
    result = RangeAssignor().assign({"t": 2}, subs(A=("t", "t"), B=("t",)))
    assert partitions_of(result) == {"A": tps("tp0"), "B": tps("tp1")}


def test_member_ids_sort_as_java_strings() -> None:
    """Java's String.compareTo compares UTF-16 code units: U+FFFF sorts after U+10000 (whose
    first unit is the surrogate 0xD800), the reverse of Python's code point order."""
    bmp, astral = "\uffff", "\U00010000"
    result = RangeAssignor().assign({"t": 2}, {bmp: Subscription(("t",)), astral: Subscription(("t",))})
    assert partitions_of(result) == {astral: tps("tp0"), bmp: tps("tp1")}


def test_returned_partitions_are_topic_partitions() -> None:
    result = RoundRobinAssignor().assign({"t": 1}, subs(A=("t",)))
    assert isinstance(result["A"].partitions[0], TopicPartition)


# --- the registry --------------------------------------------------------------------------


def test_registry_names() -> None:
    assert dict(ASSIGNORS) == {"range": RangeAssignor, "roundrobin": RoundRobinAssignor}
    assert RangeAssignor.name == "range" and RoundRobinAssignor.name == "roundrobin"
    assert isinstance(assignor_for("range"), RangeAssignor)
    assert isinstance(assignor_for("roundrobin"), RoundRobinAssignor)


def test_unknown_assignor_name_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="unknown partition assignor 'sticky': known are range, roundrobin"):
        assignor_for("sticky")


def test_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        ASSIGNORS["mine"] = RangeAssignor  # type: ignore[index]
