"""Replica placement (Kafka's AdminUtils.assignReplicasToBrokersRackUnaware; seed 004 "创建topic时").

The main expectation is Kafka's own documented example (5 brokers, 10 partitions, replication
factor 3, start index and nextReplicaShift 0), transcribed from the AdminUtils scaladoc table and
cross-checked against the literal map of Kafka's AdminUtilsTest.testReplicaAssignment.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from client.protocol.errors import ErrorCode, KafkaError
from controller.placement import assign_replicas, start_index_for_new_partitions

# AdminUtils scaladoc: column = broker, each row one replica rank for the partitions it names.
DOCUMENTED_TABLE = """
* broker-0  broker-1  broker-2  broker-3  broker-4
* p0        p1        p2        p3        p4       (1st replica)
* p5        p6        p7        p8        p9       (1st replica)
* p4        p0        p1        p2        p3       (2nd replica)
* p8        p9        p5        p6        p7       (2nd replica)
* p3        p4        p0        p1        p2       (3nd replica)
* p7        p8        p9        p5        p6       (3nd replica)
"""

# Kafka's AdminUtilsTest.testReplicaAssignment, assignReplicasToBrokers(brokers 0..4, 10, 3, 0)
ADMIN_UTILS_TEST_EXPECTED = {
    0: [0, 1, 2],
    1: [1, 2, 3],
    2: [2, 3, 4],
    3: [3, 4, 0],
    4: [4, 0, 1],
    5: [0, 2, 3],
    6: [1, 3, 4],
    7: [2, 4, 0],
    8: [3, 0, 1],
    9: [4, 1, 2],
}

RANKS = {"1st": 0, "2nd": 1, "3nd": 2}


def parse_documented_table(table: str) -> dict[int, list[int]]:
    lines = [line.lstrip("* ").split() for line in table.strip().splitlines()]
    brokers = [int(name.removeprefix("broker-")) for name in lines[0]]
    placed: dict[int, dict[int, int]] = {}
    for row in lines[1:]:
        rank = RANKS[row[-2].strip("(")]
        for broker, cell in zip(brokers, row[: len(brokers)], strict=True):
            placed.setdefault(int(cell.removeprefix("p")), {})[rank] = broker
    return {p: [ranks[r] for r in sorted(ranks)] for p, ranks in sorted(placed.items())}


class NoRandomness(random.Random):
    """Fails the test if the placement draws a random number although the start is fixed."""

    def random(self) -> float:
        raise AssertionError("randomness used despite a fixed start index")

    def randrange(self, *args: object, **kwargs: object) -> int:
        raise AssertionError("randomness used despite a fixed start index")

    def randint(self, *args: object, **kwargs: object) -> int:
        raise AssertionError("randomness used despite a fixed start index")


class Scripted(random.Random):
    """randrange(n) returns the scripted values in turn (start index, then nextReplicaShift)."""

    def __init__(self, *values: int) -> None:
        super().__init__(0)
        self.values = list(values)
        self.bounds: list[int] = []

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:  # type: ignore[override]
        assert stop is None and step == 1, "expected randrange(number of brokers)"
        self.bounds.append(start)
        return self.values.pop(0)

    def randint(self, a: int, b: int) -> int:
        return self.randrange(b - a + 1) + a

    def random(self) -> float:
        raise AssertionError("unexpected random()")


def test_the_documented_table_and_kafkas_test_agree() -> None:
    assert parse_documented_table(DOCUMENTED_TABLE) == ADMIN_UTILS_TEST_EXPECTED


def test_documented_example_5_brokers_10_partitions_rf3() -> None:
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, NoRandomness(), fixed_start_index=0)
    assert got == parse_documented_table(DOCUMENTED_TABLE)


def test_documented_example_with_brokers_given_unsorted_and_renumbered() -> None:
    # placement works on the sorted broker list: renaming broker-i to 100+i maps the table over
    got = assign_replicas([104, 100, 103, 101, 102], 10, 3, NoRandomness(), fixed_start_index=0)
    expected = {p: [100 + b for b in rs] for p, rs in ADMIN_UTILS_TEST_EXPECTED.items()}
    assert got == expected


def test_random_start_index_and_shift_come_from_the_injected_rng() -> None:
    # start index 2, nextReplicaShift 0: the documented table rotated by two brokers
    rng = Scripted(2, 0)
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, rng)
    assert rng.bounds == [5, 5]  # both drawn from the broker count
    expected = {p: [(b + 2) % 5 for b in rs] for p, rs in ADMIN_UTILS_TEST_EXPECTED.items()}
    assert got == expected


def test_random_shift_changes_only_the_followers() -> None:
    # shift 1: the first round of partitions is placed as the documented second round was
    # (followers at distance 2, 3), the second round at distance 3, 4.
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, Scripted(0, 1))
    for p in range(10):
        first = p % 5
        shift = 1 + p // 5
        assert got[p] == [first, (first + 1 + shift % 4) % 5, (first + 1 + (shift + 1) % 4) % 5]
    assert [got[p][0] for p in range(10)] == [p % 5 for p in range(10)]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("brokers", "partitions", "rf"), [(5, 10, 3), (3, 7, 2), (4, 4, 4), (6, 18, 1)])
def test_any_seed_spreads_leaders_evenly_and_never_repeats_a_broker(
    seed: int, brokers: int, partitions: int, rf: int
) -> None:
    got = assign_replicas(list(range(brokers)), partitions, rf, random.Random(seed))
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(range(brokers))
    # consecutive partitions have their first replica on consecutive brokers
    firsts = [got[p][0] for p in range(partitions)]
    assert all((firsts[p + 1] - firsts[p]) % brokers == 1 for p in range(partitions - 1))
    leaders = Counter(firsts)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(brokers)) <= 1


def test_partitions_multiple_of_brokers_give_every_broker_the_same_load() -> None:
    got = assign_replicas(list(range(5)), 10, 3, random.Random(7))
    load = Counter(b for replicas in got.values() for b in replicas)
    assert load == {b: 6 for b in range(5)}


def test_replication_factor_equal_to_broker_count_places_a_replica_on_every_broker() -> None:
    got = assign_replicas([1, 2, 3], 6, 3, random.Random(3))
    assert all(sorted(r) == [1, 2, 3] for r in got.values())


def test_single_broker_rf1() -> None:
    assert assign_replicas([9], 3, 1, random.Random(0)) == {0: [9], 1: [9], 2: [9]}


# -- adding partitions (seed 004: partitions can be added, never removed) ------------------------------


def test_added_partitions_continue_the_leader_rotation() -> None:
    existing = assign_replicas(list(range(5)), 3, 3, NoRandomness(), fixed_start_index=2)
    start = start_index_for_new_partitions(list(range(5)), existing[0])
    assert start == 2
    added = assign_replicas(
        list(range(5)), 4, 3, NoRandomness(), fixed_start_index=start, start_partition_id=3
    )
    assert sorted(added) == [3, 4, 5, 6]  # the new ids follow the existing ones
    # partition p's first replica is broker (p + start) % 5, as if created together
    assert [added[p][0] for p in range(3, 7)] == [(p + 2) % 5 for p in range(3, 7)]
    assert all(len(set(r)) == 3 for r in added.values())


def test_start_index_for_new_partitions_is_position_in_sorted_brokers() -> None:
    assert start_index_for_new_partitions([30, 10, 20], [20, 30]) == 1
    assert start_index_for_new_partitions([30, 10, 20], [10, 30]) == 0


def test_start_index_for_new_partitions_random_when_broker_gone() -> None:
    assert start_index_for_new_partitions([1, 2, 3], [4, 1]) == -1
    assert start_index_for_new_partitions([1, 2, 3], []) == -1


# -- errors -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("brokers", "rf"), [([0, 1, 2, 3, 4], 6), ([0, 1], 3), ([], 1)])
def test_replication_factor_above_broker_count(brokers: list[int], rf: int) -> None:
    with pytest.raises(KafkaError) as err:
        assign_replicas(brokers, 10, rf, random.Random(0))
    assert err.value.code == ErrorCode.INVALID_REPLICATION_FACTOR == 38


@pytest.mark.parametrize("rf", [0, -1])
def test_replication_factor_not_positive(rf: int) -> None:
    with pytest.raises(KafkaError) as err:
        assign_replicas([0, 1, 2], 10, rf, random.Random(0))
    assert err.value.code == ErrorCode.INVALID_REPLICATION_FACTOR == 38


@pytest.mark.parametrize("partitions", [0, -3])
def test_partitions_not_positive(partitions: int) -> None:
    with pytest.raises(KafkaError) as err:
        assign_replicas([0, 1, 2], partitions, 1, random.Random(0))
    assert err.value.code == ErrorCode.INVALID_PARTITIONS == 37


def test_partition_count_is_checked_before_replication_factor() -> None:
    # Kafka checks nPartitions first, then replicationFactor <= 0, then > broker count
    with pytest.raises(KafkaError) as err:
        assign_replicas([0], 0, 5, random.Random(0))
    assert err.value.code == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KafkaError) as err:
        assign_replicas([], 1, 0, random.Random(0))
    assert err.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
