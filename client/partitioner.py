"""Choosing a record's partition, compatible with Kafka's Java client (its
DefaultPartitioner and KIP-480's sticky partitioner).

* Keyed records: ``toPositive(murmur2(key)) % numPartitions`` - the same partition the Java
  client (and kafka-python) would pick, so keys keep their partitions across clients.
* Null keys: :class:`StickyPartitioner` (KIP-480, Kafka 2.4+: stay on one partition until
  the producer starts a new batch for it, then move to another random one) or
  :class:`RoundRobinPartitioner` (one record per partition in turn). Both prefer the
  *available* partitions (those with a leader) and fall back to all of them.

Randomness is injected (``rng``) so tests are deterministic; nothing here does I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2, seed 0x9747b28c, as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    m = _M
    mask = _MASK
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Null-key records stick to one partition per topic until :meth:`on_new_batch` says the
    producer is about to open a new batch for it; then another partition is chosen at random
    (KIP-480). This fills batches quickly at low linger and spreads load over time."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, partitions: Sequence[int], available: Sequence[int] = ()) -> int:
        current = self._sticky.get(topic)
        if current is None or current not in partitions:
            current = self._choose(topic, partitions, available, previous=None)
        return current

    def on_new_batch(
        self, topic: str, partitions: Sequence[int], available: Sequence[int], previous: int
    ) -> int:
        """The partition ``previous`` needs a new batch: move on (if it is still the sticky one)."""
        current = self._sticky.get(topic)
        if current is None or current == previous:
            return self._choose(topic, partitions, available, previous)
        return current

    def _choose(
        self, topic: str, partitions: Sequence[int], available: Sequence[int], previous: int | None
    ) -> int:
        pool = list(available) or list(partitions)
        if not pool:
            raise ValueError(f"topic {topic!r} has no partitions")
        if len(pool) > 1 and previous is not None:
            pool = [p for p in pool if p != previous] or pool
        choice = pool[self._rng.randrange(len(pool))]
        self._sticky[topic] = choice
        return choice


class RoundRobinPartitioner:
    """Null-key records go to each available partition in turn (Kafka's RoundRobinPartitioner).
    Unlike Java's, :meth:`on_new_batch` does not advance the counter, so no partition is skipped."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._counters: dict[str, int] = {}

    def partition(self, topic: str, partitions: Sequence[int], available: Sequence[int] = ()) -> int:
        pool = available or partitions
        if not pool:
            raise ValueError(f"topic {topic!r} has no partitions")
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        return pool[n % len(pool)]

    def on_new_batch(
        self, topic: str, partitions: Sequence[int], available: Sequence[int], previous: int
    ) -> int:
        return previous


def make_partitioner(
    name: str, rng: random.Random | None = None
) -> StickyPartitioner | RoundRobinPartitioner:
    if name == "sticky":
        return StickyPartitioner(rng)
    if name == "round_robin":
        return RoundRobinPartitioner(rng)
    raise ValueError(f"unknown partitioner {name!r}; use 'sticky' or 'round_robin'")
