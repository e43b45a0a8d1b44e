"""A deleted topic's committed offsets leave every group (Kafka's
GroupCoordinator.handleDeletedPartitions; issue 33: group ``gx`` kept offset 10 of a deleted
topic ``x``, and the re-created ``x`` was read from 10, ten records skipped without a word)."""

from __future__ import annotations

from broker.coordinator.group_offsets import handle_deleted_partitions
from broker.coordinator.group_records import GroupKey, OffsetKey, read_key
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from tests.unit.group_harness import GroupEnv

E = ErrorCode
X0, X1, Y0 = TopicPartition("x", 0), TopicPartition("x", 1), TopicPartition("y", 0)


def tombstones(env: GroupEnv, since: int) -> list:
    return [(read_key(k), v) for w in env.append.writes[since:] for k, v in w.records if v is None]


def test_a_deleted_topics_offsets_leave_the_group_with_tombstones() -> None:
    env = GroupEnv()
    env.commit({X0: 10, X1: 4, Y0: 7})
    writes = len(env.append.writes)
    assert handle_deleted_partitions(env.coordinator, [X0, X1]) == 2
    assert env.fetch() == (E.NONE, {Y0: 7})
    gone = tombstones(env, writes)
    assert (OffsetKey("g", X0), None) in gone and (OffsetKey("g", X1), None) in gone
    assert (GroupKey("g"), None) not in gone  # the group keeps its other offsets


def test_an_empty_group_left_with_nothing_is_deleted() -> None:
    env = GroupEnv()
    env.commit({X0: 10})
    writes = len(env.append.writes)
    assert handle_deleted_partitions(env.coordinator, [X0]) == 1
    assert "g" not in env.manager.groups and env.fetch() == (E.NONE, {})
    assert (GroupKey("g"), None) in tombstones(env, writes)


def test_a_stable_groups_offsets_go_but_the_group_stays() -> None:
    env = GroupEnv()
    (a,), gen = env.stable_group(1)
    env.commit({X0: 3}, member_id=a, generation_id=gen)
    assert handle_deleted_partitions(env.coordinator, [X0]) == 1
    assert "g" in env.manager.groups and env.fetch() == (E.NONE, {})


def test_a_commit_in_flight_when_its_topic_is_deleted_keeps_nothing() -> None:
    """The interleaving: a commit of x-0 is being written when x's deletion arrives; its write
    then lands. Kafka's removeOffsets drops the pending commit, so the completion keeps nothing
    (before: the deleted topic's offset came back once the write completed)."""
    env = GroupEnv(auto_ack=False)
    env.commit({Y0: 7})
    env.append.complete_all()
    env.commit({X0: 10})
    (write,) = env.append.pending()
    handle_deleted_partitions(env.coordinator, [X0])
    env.append.complete(write)
    assert env.fetch() == (E.NONE, {Y0: 7})
