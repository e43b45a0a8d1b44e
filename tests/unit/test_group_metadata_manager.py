"""The offsets topic as the coordinator uses it (broker/coordinator/group_metadata_manager.py):
where a group lives, and loading a partition's groups when this broker becomes its leader.

Oracles: Java's String.hashCode (the constants below were printed by a JVM, not computed with the
code under test) with Kafka's Utils.abs, and Kafka's GroupMetadataManager.loadGroupsAndOffsets
(2.4-2.8): the last record per key wins, a tombstone deletes, a group with offsets but no
metadata loads Empty. Loads read a fake log (tests/unit/group_harness.py) whose reads can
resign the partition mid-load, and interleave with other loads as asyncio tasks.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator import group_metadata_manager as gmm
from broker.coordinator.coordinator_config import GroupConfig
from broker.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState
from broker.coordinator.group_metadata_manager import (
    GROUP_METADATA_TOPIC,
    java_string_hash,
    partition_for,
)
from broker.coordinator.group_records import group_key, group_value, offset_key, offset_value
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from tests.unit.group_harness import GroupEnv

E = ErrorCode
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
P0 = TopicPartition(GROUP_METADATA_TOPIC, 0)

# (text, String.hashCode(), abs-mod-50, abs-mod-7), as a JVM printed them
JAVA = [
    ("", 0, 0, 0),
    ("a", 97, 47, 6),
    ("hello", 99162322, 22, 0),
    ("polygenelubricants", -2147483648, 0, 0),  # Integer.MIN_VALUE: Utils.abs maps it to 0
    ("GydZG_", -2147483648, 0, 0),
    ("my-group", -1906497762, 12, 1),
    ("consumer-group-1", 147483020, 20, 6),
    ("\u00e9t\u00e9", 227742, 42, 4),
    ("\U0001f600", 1772899, 49, 2),  # astral: two UTF-16 code units
    ("g\U0001f600x", 58028462, 12, 2),
    ("Aa", 2112, 12, 5),
    ("BB", 2112, 12, 5),
    ("grupp\u00e9-\u4e2d\u6587", -591054904, 4, 6),
]


@pytest.mark.parametrize(("text", "java_hash", "mod50", "mod7"), JAVA)
def test_partition_for_matches_java_string_hash_code(
    text: str, java_hash: int, mod50: int, mod7: int
) -> None:
    assert java_string_hash(text) == java_hash
    assert partition_for(text, 50) == mod50
    assert partition_for(text, 7) == mod7


def test_a_lone_surrogate_hashes_as_its_code_unit() -> None:
    assert java_string_hash("\ud800") == 0xD800  # Java strings may hold one; so may a Python str


def test_the_manager_places_groups_by_its_partition_count() -> None:
    env = GroupEnv(config=GroupConfig(offsets_topic_num_partitions=50))
    assert env.manager.topic_partition_for("hello") == TopicPartition(GROUP_METADATA_TOPIC, 22)


# -- loading ---------------------------------------------------------------------------------------


def one_partition_env() -> GroupEnv:
    return GroupEnv(
        config=GroupConfig(initial_rebalance_delay_ms=3000, offsets_topic_num_partitions=1), own_all=False
    )


def committed(offset: int, ts: int = 0) -> bytes:
    return offset_value(CommittedOffset(offset, -1, "", ts))


def empty_group_value(group_id: str, generation: int) -> bytes:
    return group_value(GroupMetadata(group_id, generation_id=generation, protocol_type="consumer"), {})


async def test_a_load_rebuilds_groups_and_offsets_last_record_wins_tombstones_delete() -> None:
    env = one_partition_env()
    log = env.log
    log.append(P0, [(offset_key("g", T0), committed(1)), (offset_key("g", T1), committed(5))])
    log.append(P0, [(offset_key("g", T0), committed(2)), (offset_key("g", T1), None)])
    log.append(P0, [(group_key("gone"), empty_group_value("gone", 3)), (group_key("gone"), None)])
    log.append(P0, [(group_key("offsets-only"), empty_group_value("offsets-only", 4))])
    log.append(P0, [(offset_key("offsets-only", T0), committed(7)), (group_key("offsets-only"), None)])
    log.append(P0, [(offset_key("standalone", T1), committed(9))])
    log.append(P0, [(group_key("back"), None), (group_key("back"), empty_group_value("back", 6))])
    loaded: list[list[GroupMetadata]] = []
    await env.manager.load(0, 1, loaded.append)

    assert sorted(g.group_id for g in loaded[0]) == ["back", "g", "offsets-only", "standalone"]
    assert set(env.manager.groups) == {"back", "g", "offsets-only", "standalone"}
    assert env.fetch("g") == (E.NONE, {T0: 2})
    assert env.fetch("offsets-only") == (E.NONE, {T0: 7})
    assert env.fetch("standalone") == (E.NONE, {T1: 9})
    assert env.group("offsets-only").state is GroupState.EMPTY
    assert env.group("back").generation_id == 6 and env.group("back").state is GroupState.EMPTY
    assert env.group("g").offsets[T0].record_offset == 2  # where its record lies in the log
    assert not env.manager.loading and env.manager.owned == {0: 1}


async def test_a_coordinators_own_writes_load_back_as_it_left_them() -> None:
    """Coordinator A's acknowledged writes, loaded by coordinator B after a failover."""
    a = one_partition_env()
    a.manager.owned[0] = 0
    (m1, m2), gen = a.stable_group(2, session_timeout_ms=10_000)
    a.commit({T0: 11}, member_id=m1, generation_id=gen)
    a.commit({T0: 12, T1: 3}, member_id=m2, generation_id=gen)
    a.commit({T0: 1}, group_id="standalone")
    a.append.auto = False
    a.commit({T1: 99}, member_id=m1, generation_id=gen)  # never acknowledged: not in the log
    a.append.complete(a.append.last(), E.NOT_ENOUGH_REPLICAS)

    b = one_partition_env()
    b.log.feed(a.append)
    await b.manager.load(0, 1, b.coordinator.on_groups_loaded)
    group, before = b.group(), a.group()
    assert group.state is GroupState.STABLE and group.generation_id == gen == before.generation_id
    assert list(group.members) == [m1, m2] and group.leader_id == m1
    assert group.protocol_type == "consumer" and group.protocol_name == "range"
    assert {m: x.assignment for m, x in group.members.items()} == {m1: m1.encode(), m2: m2.encode()}
    assert group.members[m2].metadata("range") == b"sub-c1"
    assert b.fetch() == (E.NONE, {T0: 12, T1: 3})
    assert b.fetch("standalone") == (E.NONE, {T0: 1})
    # the loaded members' sessions start now: heartbeats keep one, the silent one is expelled
    assert b.heartbeat(m1, gen).error == E.NONE
    b.timers.advance(6000)
    b.heartbeat(m1, gen)
    b.timers.advance(4000)
    assert list(group.members) == [m1] and group.state is GroupState.PREPARING_REBALANCE


async def test_a_load_reads_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gmm, "LOAD_CHUNK_BYTES", 1)
    env = one_partition_env()
    for offset in range(5):
        env.log.append(P0, [(offset_key("g", T0), committed(offset))])
    await env.manager.load(0, 1, lambda groups: None)
    assert [offset for _, offset in env.log.reads] == [0, 1, 2, 3, 4, 5]
    assert env.fetch() == (E.NONE, {T0: 4})


async def test_a_record_that_does_not_parse_is_skipped() -> None:
    env = one_partition_env()
    env.log.append(
        P0,
        [(b"\x00\x07junk", b"x"), (offset_key("g", T0), b"\x00\x09bad"), (offset_key("g", T1), committed(3))],
    )
    await env.manager.load(0, 1, lambda groups: None)
    assert env.fetch() == (E.NONE, {T1: 3})


async def test_groups_of_other_partitions_are_left_alone() -> None:
    env = GroupEnv(own_all=False)  # 4 partitions: "g" lives in 3, "h" in 0
    assert (env.manager.partition_for("g"), env.manager.partition_for("h")) == (3, 0)
    tp3 = TopicPartition(GROUP_METADATA_TOPIC, 3)
    env.log.append(tp3, [(offset_key("g", T0), committed(1))])
    await env.manager.load(0, 1, lambda groups: None)
    assert env.manager.groups == {} and env.fetch("g")[0] == E.NOT_COORDINATOR
    await env.manager.load(3, 1, lambda groups: None)
    assert env.fetch("g") == (E.NONE, {T0: 1})


async def test_the_partition_answers_load_in_progress_until_the_load_is_done() -> None:
    env = one_partition_env()
    env.log.append(P0, [(offset_key("g", T0), committed(1))])
    seen: list[tuple] = []

    def during_read(tp: TopicPartition, offset: int) -> None:
        if not seen:
            seen.append(
                (
                    env.join().error,
                    env.commit({T0: 5}).value,
                    env.fetch()[0],
                    env.leave("m").error,
                    env.heartbeat("m", 1).error,  # Kafka answers a heartbeat blindly while loading
                    env.sync("m", 1).error,  # and a SyncGroup with REBALANCE_IN_PROGRESS
                )
            )

    env.log.on_read = during_read
    await env.manager.load(0, 1, env.coordinator.on_groups_loaded)
    assert seen == [
        (
            E.COORDINATOR_LOAD_IN_PROGRESS,
            {T0: E.COORDINATOR_LOAD_IN_PROGRESS},
            E.COORDINATOR_LOAD_IN_PROGRESS,
            E.COORDINATOR_LOAD_IN_PROGRESS,
            E.NONE,
            E.REBALANCE_IN_PROGRESS,
        )
    ]
    assert env.fetch() == (E.NONE, {T0: 1})
    join = env.join()
    env.timers.advance(3000)
    assert join.error == E.NONE


async def test_a_resignation_during_the_load_discards_it() -> None:
    env = one_partition_env()
    env.log.append(P0, [(offset_key("g", T0), committed(1))])

    def resign(tp: TopicPartition, offset: int) -> None:
        env.coordinator.on_groups_unloaded(env.manager.unload(0, 1))

    env.log.on_read = resign
    loaded: list = []
    await env.manager.load(0, 1, loaded.append)
    assert loaded == [] and env.manager.groups == {}
    assert env.manager.owned == {} and env.manager.loading == set()
    assert env.fetch()[0] == E.NOT_COORDINATOR


async def test_a_newer_election_during_the_load_discards_the_older_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gmm, "LOAD_CHUNK_BYTES", 1)
    env = one_partition_env()
    for offset in range(3):
        env.log.append(P0, [(offset_key("g", T0), committed(offset))])
    old_loaded: list = []
    old = asyncio.create_task(env.manager.load(0, 1, old_loaded.append))
    await asyncio.sleep(0)  # the old load read its first chunk and yields
    assert env.log.reads and not old.done()
    # meanwhile a newer leader wrote more, and this broker is elected again at a newer epoch
    env.log.append(P0, [(offset_key("g", T1), committed(50))])
    new_loaded: list = []
    await env.manager.load(0, 2, new_loaded.append)
    await old
    assert old_loaded == [] and len(new_loaded) == 1
    assert env.fetch() == (E.NONE, {T0: 2, T1: 50})
    assert env.manager.owned == {0: 2} and not env.manager.loading


async def test_a_resignation_and_reelection_at_the_same_epoch_discards_the_first_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gmm, "LOAD_CHUNK_BYTES", 1)
    env = one_partition_env()
    for offset in range(3):
        env.log.append(P0, [(offset_key("g", T0), committed(offset))])
    first_loaded: list = []
    first = asyncio.create_task(env.manager.load(0, 1, first_loaded.append))
    await asyncio.sleep(0)
    env.coordinator.on_groups_unloaded(env.manager.unload(0, 1))
    second_loaded: list = []
    second = asyncio.create_task(env.manager.load(0, 1, second_loaded.append))
    await asyncio.gather(first, second)
    assert first_loaded == [] and len(second_loaded) == 1
    assert env.manager.owned == {0: 1} and not env.manager.loading


async def test_an_older_election_or_resignation_is_ignored() -> None:
    env = one_partition_env()
    env.manager.owned[0] = 5
    await env.manager.load(0, 3, lambda groups: None)
    assert env.log.reads == [] and env.manager.owned == {0: 5}
    env.commit({T0: 1})
    assert env.manager.unload(0, 4) == [] and env.manager.owned == {0: 5}
    assert env.fetch() == (E.NONE, {T0: 1})
    assert [g.group_id for g in env.manager.unload(0, 5)] == ["g"] and env.manager.owned == {}


async def test_an_explicit_retention_survives_a_failover() -> None:
    a = one_partition_env()
    a.manager.owned[0] = 0
    a.commit({T0: 1}, retention_time_ms=10_000)
    expires = a.group().offsets[T0].expire_timestamp_ms
    b = one_partition_env()
    b.log.feed(a.append)
    await b.manager.load(0, 1, b.coordinator.on_groups_loaded)
    assert b.group().offsets[T0].expire_timestamp_ms == expires == a.timers.now_ms + 10_000
