"""Committed offsets and the group tools at the coordinator against Kafka 2.x
(broker/coordinator/group_offsets.py, group_admin.py).

Oracle: Kafka's GroupCoordinator.handleCommitOffsets / handleFetchOffsets / handleDeleteGroups /
handleListGroups / handleDescribeGroup, GroupMetadataManager.storeOffsets and
GroupMetadata.removeExpiredOffsets (KIP-211), 2.4-2.8. Virtual time, writes acknowledged when the
test says (tests/unit/group_harness.py).
"""

from __future__ import annotations

import pytest

from broker.coordinator.coordinator_config import GroupConfig
from broker.coordinator.group_admin import list_groups
from broker.coordinator.group_metadata import GroupState
from broker.coordinator.group_offsets import expire_offsets
from broker.coordinator.group_records import GroupKey, OffsetKey, read_key
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from tests.unit.group_harness import GroupEnv

E = ErrorCode
T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


@pytest.fixture
def env() -> GroupEnv:
    return GroupEnv()


def env_with(**config: int) -> GroupEnv:
    return GroupEnv(
        config=GroupConfig(
            **{"initial_rebalance_delay_ms": 3000, "offsets_topic_num_partitions": 4, **config}
        )
    )


def all_ok(reply_value: dict, *tps: TopicPartition) -> bool:
    return reply_value == dict.fromkeys(tps, E.NONE)


# -- OffsetCommit ---------------------------------------------------------------------------------


def test_a_member_of_the_current_generation_commits(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    reply = env.commit({T0: 5, T1: (7, "meta")}, member_id=a, generation_id=gen)
    assert all_ok(reply.value, T0, T1)
    assert env.fetch() == (E.NONE, {T0: 5, T1: 7})
    committed = env.group().offsets[T1]
    assert committed.metadata == "meta" and committed.commit_timestamp_ms == env.timers.now_ms
    keys = [read_key(k) for k, _ in env.append.last().records]
    assert keys == [OffsetKey("g", T0), OffsetKey("g", T1)]


def test_generation_minus_one_commits_to_an_absent_group_and_creates_it_empty(env: GroupEnv) -> None:
    reply = env.commit({T0: 3})
    assert all_ok(reply.value, T0)
    group = env.group()
    assert group.state is GroupState.EMPTY and group.protocol_type is None and not group.members
    assert env.fetch() == (E.NONE, {T0: 3})


def test_generation_minus_one_commits_to_an_emptied_group(env: GroupEnv) -> None:
    (a,), gen = env.stable_group(1)
    env.leave(a)
    assert env.group().state is GroupState.EMPTY
    assert all_ok(env.commit({T0: 11}).value, T0)


def test_a_generation_the_coordinator_never_saw_is_illegal(env: GroupEnv) -> None:
    assert env.commit({T0: 3}, member_id="m", generation_id=4).value == {T0: E.ILLEGAL_GENERATION}
    assert "g" not in env.manager.groups


def test_fencing_of_commits_in_a_stable_group(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    assert env.commit({T0: 1}, member_id="ghost", generation_id=gen).value == {T0: E.UNKNOWN_MEMBER_ID}
    assert env.commit({T0: 1}).value == {T0: E.UNKNOWN_MEMBER_ID}  # -1 only works on an Empty group
    assert env.commit({T0: 1}, member_id=a, generation_id=gen - 1).value == {T0: E.ILLEGAL_GENERATION}
    assert env.fetch() == (E.NONE, {})
    assert not any(isinstance(read_key(k), OffsetKey) for w in env.append.writes for k, _ in w.records)


def test_commits_while_completing_rebalance(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    env.join(member_id=a, client_id="c0")
    env.join(member_id=b, client_id="c1")
    assert env.group().state is GroupState.COMPLETING_REBALANCE
    assert env.commit({T0: 1}, member_id=b, generation_id=gen + 1).value == {T0: E.REBALANCE_IN_PROGRESS}
    # Kafka checks membership and generation before the state
    assert env.commit({T0: 1}, member_id="ghost", generation_id=gen + 1).value == {T0: E.UNKNOWN_MEMBER_ID}
    assert env.commit({T0: 1}, member_id=b, generation_id=gen).value == {T0: E.ILLEGAL_GENERATION}


def test_a_member_may_commit_while_the_group_prepares_a_rebalance(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    env.join(member_id=a, client_id="c0")
    assert env.group().state is GroupState.PREPARING_REBALANCE
    assert all_ok(env.commit({T0: 9}, member_id=b, generation_id=gen).value, T0)


def test_a_commit_counts_as_a_heartbeat(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2, session_timeout_ms=10_000)
    for offset in range(6):
        env.timers.advance(5000)
        env.heartbeat(b, gen)
        env.commit({T0: offset}, member_id=a, generation_id=gen)
    assert env.group().state is GroupState.STABLE and env.group().has(a)


def test_commit_errors_of_the_coordinator(env: GroupEnv) -> None:
    # Kafka's isValidGroupId lets OffsetCommit and OffsetFetch use the empty group id
    assert env.commit({T0: 1}, group_id="").value == {T0: E.NONE}
    assert env.fetch(group_id="") == (E.NONE, {T0: 1})
    env.manager.loading.add(env.manager.partition_for("g"))
    assert env.commit({T0: 1}).value == {T0: E.COORDINATOR_LOAD_IN_PROGRESS}
    assert env.fetch()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    del env.manager.owned[env.manager.partition_for("g")]
    env.manager.loading.clear()
    assert env.commit({T0: 1}).value == {T0: E.NOT_COORDINATOR}
    assert env.fetch()[0] == E.NOT_COORDINATOR


def test_offset_metadata_too_large_per_partition_while_the_others_commit() -> None:
    env = env_with(max_metadata_size=4)
    reply = env.commit({T0: (1, "abcd"), T1: (2, "abcde"), T2: (3, None)})
    assert reply.value == {T0: E.NONE, T1: E.OFFSET_METADATA_TOO_LARGE, T2: E.NONE}
    assert env.fetch() == (E.NONE, {T0: 1, T2: 3})
    assert [read_key(k) for k, _ in env.append.last().records] == [OffsetKey("g", T0), OffsetKey("g", T2)]


def test_nothing_is_written_when_every_metadata_is_too_large() -> None:
    env = env_with(max_metadata_size=1)
    writes = len(env.append.writes)
    assert env.commit({T0: (1, "ab")}).value == {T0: E.OFFSET_METADATA_TOO_LARGE}
    assert len(env.append.writes) == writes


def test_offsets_are_visible_only_once_the_write_is_acknowledged(env: GroupEnv) -> None:
    env.append.auto = False
    reply = env.commit({T0: 42})
    assert not reply.answered
    assert env.fetch() == (E.NONE, {})
    assert env.fetch(partitions=[T0]) == (E.NONE, {T0: -1})
    env.append.complete(env.append.last())
    assert all_ok(reply.value, T0)
    assert env.fetch(partitions=[T0]) == (E.NONE, {T0: 42})


@pytest.mark.parametrize(
    ("append_error", "heard"),
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
        (E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
        (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.INVALID_FETCH_SIZE, E.INVALID_COMMIT_OFFSET_SIZE),
    ],
)
def test_a_failed_write_leaves_the_old_offset(
    env: GroupEnv, append_error: ErrorCode, heard: ErrorCode
) -> None:
    assert all_ok(env.commit({T0: 5}).value, T0)
    env.append.auto = False
    reply = env.commit({T0: 9, T1: 1})
    env.append.complete(env.append.last(), append_error)
    assert reply.value == {T0: heard, T1: heard}
    assert env.fetch() == (E.NONE, {T0: 5})
    assert not env.group().pending_offset_commits


def test_two_commits_completing_out_of_order_keep_the_later_record(env: GroupEnv) -> None:
    env.append.auto = False
    first, second = env.commit({T0: 10, T1: 1}), env.commit({T0: 20})
    w1, w2 = env.append.writes[-2:]
    assert w1.base_offset < w2.base_offset
    env.append.complete(w2)
    assert env.fetch() == (E.NONE, {T0: 20})
    env.append.complete(w1)  # the older record's acknowledgement arrives last
    assert env.fetch() == (E.NONE, {T0: 20, T1: 1})
    assert all_ok(first.value, T0, T1) and all_ok(second.value, T0)


def test_two_commits_completing_in_order_keep_the_later_record(env: GroupEnv) -> None:
    env.append.auto = False
    env.commit({T0: 10})
    env.commit({T0: 20})
    env.append.complete_all()
    assert env.fetch() == (E.NONE, {T0: 20})


# -- OffsetFetch ----------------------------------------------------------------------------------


def test_fetch_all_some_and_of_an_unknown_group(env: GroupEnv) -> None:
    env.commit({T0: 1, T1: 2, T2: 3})
    assert env.fetch() == (E.NONE, {T0: 1, T1: 2, T2: 3})
    assert env.fetch(partitions=[T1, TopicPartition("t", 9)]) == (E.NONE, {T1: 2, TopicPartition("t", 9): -1})
    assert env.fetch(group_id="nobody") == (E.NONE, {})
    assert env.fetch(group_id="nobody", partitions=[T0]) == (E.NONE, {T0: -1})


# -- expiration (KIP-211) ---------------------------------------------------------------------------


def test_an_empty_groups_offsets_expire_after_the_retention_and_the_group_goes() -> None:
    env = env_with(offsets_retention_ms=60_000)
    env.commit({T0: 1, T1: 2})
    env.timers.advance(59_999)
    assert expire_offsets(env.coordinator) == 0 and env.fetch()[1] == {T0: 1, T1: 2}
    env.timers.advance(1)
    writes = len(env.append.writes)
    assert expire_offsets(env.coordinator) == 2
    assert "g" not in env.manager.groups and env.fetch() == (E.NONE, {})
    tombstones = [(read_key(k), v) for w in env.append.writes[writes:] for k, v in w.records]
    assert (OffsetKey("g", T0), None) in tombstones and (OffsetKey("g", T1), None) in tombstones
    assert (GroupKey("g"), None) in tombstones


def test_retention_counts_from_when_the_group_emptied() -> None:
    env = env_with(offsets_retention_ms=60_000)
    (a,), gen = env.stable_group(1, session_timeout_ms=1_800_000)
    env.commit({T0: 4}, member_id=a, generation_id=gen)
    env.timers.advance(120_000)  # long past the commit, but the group is not empty
    assert expire_offsets(env.coordinator) == 0
    env.leave(a)
    env.timers.advance(59_999)
    assert expire_offsets(env.coordinator) == 0
    env.timers.advance(1)
    assert expire_offsets(env.coordinator) == 1 and "g" not in env.manager.groups


def test_an_explicit_retention_of_the_commit_wins() -> None:
    env = env_with(offsets_retention_ms=60_000)
    env.commit({T0: 1}, retention_time_ms=10_000)
    env.commit({T1: 1})
    env.timers.advance(10_000)
    assert expire_offsets(env.coordinator) == 1
    assert env.fetch() == (E.NONE, {T1: 1}) and "g" in env.manager.groups


def test_a_pending_commit_holds_off_expiration() -> None:
    env = env_with(offsets_retention_ms=60_000)
    env.commit({T0: 1})
    env.timers.advance(60_000)
    env.append.auto = False
    env.commit({T1: 1})
    assert expire_offsets(env.coordinator) == 0 and "g" in env.manager.groups


def test_expiration_skips_partitions_that_are_not_ours_or_loading() -> None:
    env = env_with(offsets_retention_ms=60_000)
    env.commit({T0: 1})
    env.timers.advance(60_000)
    env.manager.loading.add(env.manager.partition_for("g"))
    assert expire_offsets(env.coordinator) == 0


# -- DeleteGroups -----------------------------------------------------------------------------------


def test_delete_groups_answers_per_group(env: GroupEnv) -> None:
    env.stable_group(1, group_id="busy")
    env.commit({T0: 1}, group_id="idle")
    reply = env.delete_groups("busy", "idle", "absent", "")
    assert reply.value == {
        "busy": E.NON_EMPTY_GROUP,
        "idle": E.NONE,
        "absent": E.GROUP_ID_NOT_FOUND,
        "": E.GROUP_ID_NOT_FOUND,  # Kafka lets DeleteGroups name the empty group id
    }
    assert "idle" not in env.manager.groups and "busy" in env.manager.groups


def test_a_group_named_twice_is_deleted_once(env: GroupEnv) -> None:
    env.commit({T0: 1}, group_id="idle")
    reply = env.delete_groups("idle", "idle")
    assert reply.value == {"idle": E.NONE}
    assert "idle" not in env.manager.groups


def test_delete_waits_for_its_tombstones(env: GroupEnv) -> None:
    env.commit({T0: 1, T1: 2})
    env.append.auto = False
    group = env.group()
    reply = env.delete_groups("g")
    assert not reply.answered and group.state is GroupState.DEAD and "g" not in env.manager.groups
    write = env.append.last()
    assert {(read_key(k), v) for k, v in write.records} == {
        (OffsetKey("g", T0), None),
        (OffsetKey("g", T1), None),
        (GroupKey("g"), None),
    }
    env.append.complete(write)
    assert reply.value == {"g": E.NONE}
    assert env.fetch() == (E.NONE, {})


def test_a_failed_delete_restores_the_group(env: GroupEnv) -> None:
    env.commit({T0: 1})
    env.append.auto = False
    reply = env.delete_groups("g")
    env.append.complete(env.append.last(), E.NOT_ENOUGH_REPLICAS)
    assert reply.value == {"g": E.COORDINATOR_NOT_AVAILABLE}
    assert env.group().state is GroupState.EMPTY
    assert env.fetch() == (E.NONE, {T0: 1})


def test_delete_groups_on_a_partition_led_elsewhere(env: GroupEnv) -> None:
    env.commit({T0: 1})
    del env.manager.owned[env.manager.partition_for("g")]
    assert env.delete_groups("g").value == {"g": E.NOT_COORDINATOR}


# -- ListGroups and DescribeGroups ------------------------------------------------------------------


def test_list_groups(env: GroupEnv) -> None:
    env.stable_group(1, group_id="stable")
    env.commit({T0: 1}, group_id="standalone")
    env.join(group_id="joining")
    assert list_groups(env.coordinator, []) == (
        E.NONE,
        [
            {"group_id": "joining", "protocol_type": "consumer", "group_state": "PreparingRebalance"},
            {"group_id": "stable", "protocol_type": "consumer", "group_state": "Stable"},
            {"group_id": "standalone", "protocol_type": "", "group_state": "Empty"},
        ],
    )
    assert [g["group_id"] for g in list_groups(env.coordinator, ["Stable", "Empty"])[1]] == [
        "stable",
        "standalone",
    ]


def test_list_groups_while_a_partition_loads_or_the_coordinator_stopped(env: GroupEnv) -> None:
    env.commit({T0: 1}, group_id="g")
    env.manager.loading.add((env.manager.partition_for("g") + 1) % 4)
    error, groups = list_groups(env.coordinator, [])
    assert error == E.COORDINATOR_LOAD_IN_PROGRESS and [g["group_id"] for g in groups] == ["g"]
    env.coordinator.active = False
    assert list_groups(env.coordinator, []) == (E.COORDINATOR_NOT_AVAILABLE, [])


def test_describe_a_stable_group(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    answer = env.describe()
    assert answer["error_code"] == E.NONE and answer["group_state"] == "Stable"
    assert answer["protocol_type"] == "consumer" and answer["protocol_data"] == "range"
    assert [
        (m["member_id"], m["client_id"], m["client_host"], m["member_metadata"], m["member_assignment"])
        for m in answer["members"]
    ] == [
        (a, "c0", "/127.0.0.1", b"sub-c0", a.encode()),
        (b, "c1", "/127.0.0.1", b"sub-c1", b.encode()),
    ]


def test_describe_a_rebalancing_group_shows_no_metadata(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    env.join(member_id=a, client_id="c0")
    answer = env.describe()
    assert answer["group_state"] == "PreparingRebalance" and answer["protocol_data"] == ""
    assert [(m["member_metadata"], m["member_assignment"]) for m in answer["members"]] == [(b"", b"")] * 2


def test_describe_an_unknown_group_and_errors(env: GroupEnv) -> None:
    assert env.describe("nobody") == {
        "error_code": E.NONE,
        "group_id": "nobody",
        "group_state": "Dead",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
    del env.manager.owned[env.manager.partition_for("g")]
    answer = env.describe("g")
    assert answer["error_code"] == E.NOT_COORDINATOR and answer["group_state"] == ""
