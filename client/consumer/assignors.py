"""The partition assignors a consumer group's leader runs (Kafka's ``AbstractPartitionAssignor``
family: ``RangeAssignor`` and ``RoundRobinAssignor`` as in Kafka 2.x; seed 004;
docs/design.md "Consumer groups").

Every member sends its :class:`~client.protocol.consumer_protocol.Subscription` in JoinGroup;
the coordinator picks a leader and hands it all of them; the leader calls
:meth:`PartitionAssignor.assign` with the partition count of each subscribed topic it found in
its metadata, and sends the result back in SyncGroup. Assignors are pure functions of those
two maps: no clock, no randomness, no state between rebalances.

* ``range`` (Kafka's ``RangeAssignor``): per topic, the members subscribed to it in member id
  order split partitions ``0..n-1`` into consecutive ranges; the first ``n % m`` get one more.
  Seed 004's example: 10 partitions, members C1-0, C2-0, C2-1 -> 0-3, 4-6, 7-9.
* ``roundrobin`` (Kafka's ``RoundRobinAssignor``): all partitions of all subscribed topics in
  (topic, partition) order are dealt to all members in member id order, a member not
  subscribed to a partition's topic being skipped (Kafka's ``CircularIterator``). With equal
  subscriptions the counts differ by at most one.

As in Kafka, a subscribed topic missing from ``partitions_per_topic`` (no metadata yet) is
skipped, every member appears in the result (possibly with nothing), and ids and topics sort
as Java's ``String.compareTo`` does (UTF-16 code units, which differs from Python's code
point order only beyond the Basic Multilingual Plane). Kafka 2.3's static members
(``group.instance.id``, KIP-345) are not modelled: members sort by member id, as before 2.3.
A member's topics are a set: a topic listed twice counts once. Each member's partitions are
returned sorted by (topic, partition), so the SyncGroup bytes are deterministic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from client.protocol.consumer_protocol import Assignment, Subscription
from client.types import TopicPartition


def _java_order(value: str) -> bytes:
    """A sort key ordering strings as Java's ``String.compareTo`` (UTF-16 code units)."""
    return value.encode("utf-16-be", "surrogatepass")


def _partition_order(tp: TopicPartition) -> tuple[bytes, int]:
    return _java_order(tp.topic), tp.partition


class PartitionAssignor(ABC):
    """One assignment strategy; ``name`` is what members advertise in JoinGroup."""

    name: str

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Member id -> that member's assignment, for every member of ``subscriptions``."""
        for topic, count in partitions_per_topic.items():
            if count < 0:
                raise ValueError(f"topic {topic!r} has a negative partition count {count}")
        topics = {member: frozenset(sub.topics) for member, sub in subscriptions.items()}
        by_member = self._assign(partitions_per_topic, topics)
        return {
            member: Assignment(partitions=tuple(sorted(by_member[member], key=_partition_order)))
            for member in subscriptions
        }

    @abstractmethod
    def _assign(
        self, partitions_per_topic: Mapping[str, int], topics: Mapping[str, frozenset[str]]
    ) -> dict[str, list[TopicPartition]]:
        """Member id -> partitions (any order), given each member's subscribed topics."""


class RangeAssignor(PartitionAssignor):
    """Kafka's ``RangeAssignor``: consecutive ranges per topic, extras to the first members."""

    name = "range"

    def _assign(
        self, partitions_per_topic: Mapping[str, int], topics: Mapping[str, frozenset[str]]
    ) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {member: [] for member in topics}
        for topic, members in _members_per_topic(topics).items():
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            for member, (start, end) in zip(members, _ranges(count, len(members)), strict=True):
                assignment[member].extend(TopicPartition(topic, p) for p in range(start, end))
        return assignment


class RoundRobinAssignor(PartitionAssignor):
    """Kafka's ``RoundRobinAssignor``: all partitions dealt in turn to the members, skipping
    a member not subscribed to the partition's topic."""

    name = "roundrobin"

    def _assign(
        self, partitions_per_topic: Mapping[str, int], topics: Mapping[str, frozenset[str]]
    ) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {member: [] for member in topics}
        members = sorted(topics, key=_java_order)
        turn = 0  # index into members of the next one to consider (the CircularIterator)
        for tp in _all_partitions_sorted(partitions_per_topic, topics.values()):
            # Some member subscribes to tp.topic (that is where it came from): this ends.
            while tp.topic not in topics[members[turn]]:
                turn = (turn + 1) % len(members)
            assignment[members[turn]].append(tp)
            turn = (turn + 1) % len(members)
        return assignment


def _members_per_topic(topics: Mapping[str, frozenset[str]]) -> dict[str, list[str]]:
    """Topic -> the members subscribed to it, in member id order."""
    result: dict[str, list[str]] = {}
    for member, subscribed in topics.items():
        for topic in subscribed:
            result.setdefault(topic, []).append(member)
    return {topic: sorted(members, key=_java_order) for topic, members in result.items()}


def _ranges(partitions: int, members: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each of ``members`` consecutive ranges over ``partitions``."""
    per_member, with_extra = divmod(partitions, members)
    ranges = []
    for i in range(members):
        start = per_member * i + min(i, with_extra)
        ranges.append((start, start + per_member + (1 if i < with_extra else 0)))
    return ranges


def _all_partitions_sorted(
    partitions_per_topic: Mapping[str, int], subscribed: Iterable[frozenset[str]]
) -> list[TopicPartition]:
    """Every partition of every subscribed topic that has metadata, by (topic, partition)."""
    topics = sorted(set().union(*subscribed), key=_java_order)
    return [
        TopicPartition(topic, p)
        for topic in topics
        if topic in partitions_per_topic
        for p in range(partitions_per_topic[topic])
    ]


# Read-only: the registry is no global mutable state.
ASSIGNORS: Mapping[str, type[PartitionAssignor]] = MappingProxyType(
    {RangeAssignor.name: RangeAssignor, RoundRobinAssignor.name: RoundRobinAssignor}
)


def assignor_for(name: str) -> PartitionAssignor:
    """A new assignor for its JoinGroup protocol name (Kafka's ``partition.assignment.strategy``)."""
    try:
        return ASSIGNORS[name]()
    except KeyError:
        known = ", ".join(sorted(ASSIGNORS))
        raise ValueError(f"unknown partition assignor {name!r}: known are {known}") from None
