"""Our partitioner against the oracles: kafka-python's murmur2 and Kafka's Java test values."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as oracle_murmur2

from client.partitioner import (
    RoundRobinPartitioner,
    StickyPartitioner,
    make_partitioner,
    murmur2,
    partition_for_key,
)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_agrees_with_kafka_python(key):
    ours = murmur2(key)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == oracle_murmur2(key)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_agrees_with_kafka_python_default_partitioner(key, n):
    # kafka-python's DefaultPartitioner: idx = murmur2(key) & 0x7fffffff; idx %= len(all_partitions)
    assert partition_for_key(key, n) == (oracle_murmur2(key) & 0x7FFFFFFF) % n


# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (Java client)
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2.items())
def test_murmur2_java_reference_values(key, expected):
    assert murmur2(key) == expected


def test_partition_uses_to_positive_not_abs():
    # murmur2(b"21") is negative: toPositive clears the sign bit instead of negating.
    assert partition_for_key(b"21", 1000) == (-973932308 & 0x7FFFFFFF) % 1000
    assert partition_for_key(b"21", 1000) != abs(-973932308) % 1000


def test_partition_for_key_rejects_no_partitions():
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_stays_until_a_new_batch_then_moves():
    sticky = StickyPartitioner(random.Random(7))
    parts = [0, 1, 2, 3]
    first = sticky.partition("t", parts, parts)
    assert all(sticky.partition("t", parts, parts) == first for _ in range(50))
    second = sticky.on_new_batch("t", parts, parts, previous=first)
    assert second != first
    assert sticky.partition("t", parts, parts) == second
    # a stale notification (for a partition that is no longer sticky) changes nothing
    assert sticky.on_new_batch("t", parts, parts, previous=first) == second


def test_sticky_prefers_available_partitions_and_is_per_topic():
    sticky = StickyPartitioner(random.Random(1))
    for _ in range(20):
        chosen = sticky.on_new_batch(
            "a", [0, 1, 2, 3], [2, 3], previous=sticky.partition("a", [0, 1, 2, 3], [2, 3])
        )
        assert chosen in (2, 3)
    assert sticky.partition("b", [0], []) == 0  # no available partition: fall back to all
    assert sticky.on_new_batch("b", [0], [], previous=0) == 0  # only one: it stays


def test_sticky_spreads_over_partitions_over_time():
    sticky = StickyPartitioner(random.Random(3))
    parts = list(range(6))
    seen = set()
    current = sticky.partition("t", parts, parts)
    for _ in range(200):
        current = sticky.on_new_batch("t", parts, parts, current)
        seen.add(current)
    assert seen == set(parts)


def test_round_robin_cycles_available_partitions():
    rr = RoundRobinPartitioner()
    assert [rr.partition("t", [0, 1, 2]) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [rr.partition("u", [0, 1, 2, 3], [1, 3]) for _ in range(4)] == [1, 3, 1, 3]
    assert rr.on_new_batch("t", [0, 1, 2], [0, 1, 2], previous=1) == 1


def test_make_partitioner():
    assert isinstance(make_partitioner("sticky"), StickyPartitioner)
    assert isinstance(make_partitioner("round_robin"), RoundRobinPartitioner)
    with pytest.raises(ValueError, match="random"):
        make_partitioner("random")
