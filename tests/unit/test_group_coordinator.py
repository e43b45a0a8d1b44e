"""The group coordinator's membership protocol against Kafka 2.x's GroupCoordinator semantics
(broker/coordinator/group_coordinator.py, group_metadata.py).

Driven through tests/unit/group_harness.py: virtual time (no sleeps), the offsets-topic writes
acknowledged when the test says, request bodies validated as the broker validates them. Oracle:
Kafka's GroupCoordinator.scala, GroupMetadata.scala and DelayedJoin.scala (2.4-2.8), and the
cases of its GroupCoordinatorTest.
"""

from __future__ import annotations

import itertools

import pytest

from broker.coordinator.group_metadata import (
    GroupMetadata,
    GroupState,
    IllegalStateTransition,
)
from broker.coordinator.group_records import read_group_value, read_key
from client.types import TopicPartition
from tests.unit.group_harness import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, E, GroupEnv, env_with


@pytest.fixture
def env() -> GroupEnv:
    return GroupEnv()


# -- the state table -----------------------------------------------------------------------------

#: Kafka's GroupState.validPreviousStates, written out again here as the oracle.
KAFKA_PREVIOUS = {
    PREPARING: {STABLE, COMPLETING, EMPTY},
    COMPLETING: {PREPARING},
    STABLE: {COMPLETING},
    EMPTY: {PREPARING},
    DEAD: {STABLE, PREPARING, COMPLETING, EMPTY, DEAD},
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(GroupState, GroupState)))
def test_every_transition_is_legal_exactly_when_kafka_allows_it(
    source: GroupState, target: GroupState
) -> None:
    group = GroupMetadata("g", state=source)
    if source in KAFKA_PREVIOUS[target]:
        group.transition_to(target, 5)
        assert group.state is target and group.state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 5)
        assert group.state is source


def test_first_join_goes_empty_preparing_completing_stable(env: GroupEnv) -> None:
    join = env.join()
    group = env.group()
    assert group.state is PREPARING and not join.answered  # KIP-134: the initial delay runs
    env.timers.advance(2999)
    assert not join.answered
    env.timers.advance(1)
    answer = join.value
    assert answer["error_code"] == E.NONE and answer["generation_id"] == 1
    assert answer["leader"] == answer["member_id"] and answer["protocol_name"] == "range"
    assert group.state is COMPLETING

    env.append.auto = False
    sync = env.sync(answer["member_id"], 1, assignments={answer["member_id"]: b"a0"})
    assert not sync.answered and group.state is COMPLETING  # the assignment is written first
    write = env.append.last()
    assert [read_key(k).group_id for k, _ in write.records] == ["g"]
    env.append.complete(write)
    assert sync.error == E.NONE and sync.value["assignment"] == b"a0"
    assert sync.value["protocol_type"] == "consumer" and sync.value["protocol_name"] == "range"
    assert group.state is STABLE


def test_a_new_member_in_stable_rebalances_and_everyone_rejoins(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    c = env.join(client_id="c9")
    assert env.group().state is PREPARING and not c.answered
    assert env.heartbeat(a, gen).error == E.REBALANCE_IN_PROGRESS
    ra = env.join(member_id=a, client_id="c0")
    assert not ra.answered
    rb = env.join(member_id=b, client_id="c1")
    # everybody known rejoined: the DelayedJoin completes at once
    assert {r.value["generation_id"] for r in (ra, rb, c)} == {gen + 1}
    assert env.group().state is COMPLETING


def test_a_leave_in_stable_rebalances_without_the_member(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    leave = env.leave(b)
    assert leave.error == E.NONE and leave.value["members"][0]["error_code"] == E.NONE
    assert env.group().state is PREPARING and not env.group().has(b)
    rejoin = env.join(member_id=a, client_id="c0")
    assert rejoin.value["generation_id"] == gen + 1
    assert [m["member_id"] for m in rejoin.value["members"]] == [a]


def test_the_leader_rejoining_in_stable_rebalances_but_an_unchanged_follower_does_not(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    follower = env.join(member_id=b, client_id="c1")  # same metadata: the current generation
    assert follower.value["generation_id"] == gen and follower.value["members"] == []
    assert follower.value["leader"] == a and env.group().state is STABLE
    leader = env.join(member_id=a, client_id="c0")
    assert env.group().state is PREPARING and not leader.answered


def test_a_changed_subscription_in_stable_rebalances(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    changed = env.join(member_id=b, protocols=[("range", b"new-topics")], client_id="c1")
    assert env.group().state is PREPARING and not changed.answered
    env.join(member_id=a, client_id="c0")
    assert changed.value["generation_id"] == gen + 1


def test_a_join_in_completing_rebalance_sends_sync_waiters_back_to_rejoin(env: GroupEnv) -> None:
    a_join, b_join = env.join(client_id="c0"), env.join(client_id="c1")
    env.until_answered(a_join, b_join)
    a, b = a_join.value["member_id"], b_join.value["member_id"]
    follower_sync = env.sync(b, 1)
    assert not follower_sync.answered and env.group().state is COMPLETING
    env.join(client_id="c2")
    assert follower_sync.error == E.REBALANCE_IN_PROGRESS
    assert follower_sync.value["assignment"] == b""
    assert env.group().state is PREPARING
    # the leader's late SyncGroup for the old round is refused too
    assert env.sync(a, 1, assignments={a: b"x"}).error == E.REBALANCE_IN_PROGRESS


def test_a_known_member_joining_again_in_completing_rebalance_gets_the_same_generation(env: GroupEnv) -> None:
    a_join, b_join = env.join(client_id="c0"), env.join(client_id="c1")
    env.until_answered(a_join, b_join)
    a, b = a_join.value["member_id"], b_join.value["member_id"]
    again = env.join(member_id=a, client_id="c0")
    assert again.value["generation_id"] == 1 and {m["member_id"] for m in again.value["members"]} == {a, b}
    assert env.group().state is COMPLETING


def test_everybody_leaving_empties_the_group_and_writes_it_empty(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    env.leave(a)
    env.leave(b)
    group = env.group()
    assert group.state is EMPTY and group.generation_id == gen + 1 and not group.members
    assert group.protocol_name is None and group.leader_id is None
    key, value = env.append.last().records[0]
    assert read_key(key).group_id == "g"
    assert value is not None
    stored = read_group_value(value)
    assert stored.members == () and stored.generation_id == gen + 1


def test_unloading_kills_the_group_and_answers_waiters_not_coordinator(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    join_a = env.join(member_id=a, client_id="c0")  # PreparingRebalance, A waits
    group = env.group()
    partition = env.manager.partition_for("g")
    env.coordinator.on_groups_unloaded(env.manager.unload(partition, 0))
    assert join_a.error == E.NOT_COORDINATOR
    assert group.state is DEAD and "g" not in env.manager.groups
    assert env.heartbeat(b, gen).error == E.NOT_COORDINATOR
    assert env.join().error == E.NOT_COORDINATOR
    env.timers.advance(10 * 60_000)  # the DelayedJoin and the heartbeats of a dead group do nothing
    assert group.state is DEAD and join_a.answers == [join_a.value]


def test_unloading_answers_sync_waiters_not_coordinator(env: GroupEnv) -> None:
    env.append.auto = False
    a_join, b_join = env.join(client_id="c0"), env.join(client_id="c1")
    env.until_answered(a_join, b_join)
    a, b = a_join.value["member_id"], b_join.value["member_id"]
    leader_sync, follower_sync = env.sync(a, 1, assignments={a: b"x", b: b"y"}), env.sync(b, 1)
    env.coordinator.on_groups_unloaded(env.manager.unload(env.manager.partition_for("g"), 0))
    assert leader_sync.error == E.NOT_COORDINATOR and follower_sync.error == E.NOT_COORDINATOR
    env.append.complete_all()  # the write lands after the unload: nobody hears twice
    assert len(leader_sync.answers) == 1 and len(follower_sync.answers) == 1


def test_a_stopped_coordinator_answers_coordinator_not_available(env: GroupEnv) -> None:
    (a, _), gen = env.stable_group(2)
    env.coordinator.active = False
    assert env.join().error == E.COORDINATOR_NOT_AVAILABLE
    assert env.heartbeat(a, gen).error == E.COORDINATOR_NOT_AVAILABLE
    assert env.sync(a, gen).error == E.COORDINATOR_NOT_AVAILABLE
    assert env.leave(a).error == E.COORDINATOR_NOT_AVAILABLE


# -- fencing errors, by name ----------------------------------------------------------------------


def test_invalid_group_id(env: GroupEnv) -> None:
    assert env.join(group_id="").error == E.INVALID_GROUP_ID
    assert env.sync("m", 1, group_id="").error == E.INVALID_GROUP_ID
    assert env.heartbeat("m", 1, group_id="").error == E.INVALID_GROUP_ID
    assert env.leave("m", group_id="").error == E.INVALID_GROUP_ID


def test_not_coordinator_for_a_partition_led_elsewhere(env: GroupEnv) -> None:
    del env.manager.owned[env.manager.partition_for("g")]
    assert env.join().error == E.NOT_COORDINATOR
    assert env.sync("m", 1).error == E.NOT_COORDINATOR
    assert env.heartbeat("m", 1).error == E.NOT_COORDINATOR
    assert env.leave("m").error == E.NOT_COORDINATOR
    assert "g" not in env.manager.groups


def test_a_loading_partition(env: GroupEnv) -> None:
    (a, _), gen = env.stable_group(2)
    env.manager.loading.add(env.manager.partition_for("g"))
    assert env.join().error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert env.leave(a).error == E.COORDINATOR_LOAD_IN_PROGRESS
    # Kafka: a SyncGroup hears REBALANCE_IN_PROGRESS (rejoin without rediscovery; old clients do
    # not know the loading error), a heartbeat is answered blindly
    assert env.sync(a, gen).error == E.REBALANCE_IN_PROGRESS
    assert env.heartbeat(a, gen).error == E.NONE


@pytest.mark.parametrize("session_ms", [5999, 1_800_001])
def test_invalid_session_timeout(env: GroupEnv, session_ms: int) -> None:
    assert env.join(session_timeout_ms=session_ms).error == E.INVALID_SESSION_TIMEOUT
    assert "g" not in env.manager.groups


@pytest.mark.parametrize("session_ms", [6000, 1_800_000])
def test_session_timeout_bounds_are_inclusive(env: GroupEnv, session_ms: int) -> None:
    join = env.join(session_timeout_ms=session_ms)
    env.timers.advance(3000)
    assert join.error == E.NONE


def test_unknown_member_id(env: GroupEnv) -> None:
    assert env.join(member_id="nobody").error == E.UNKNOWN_MEMBER_ID  # no group: none created
    assert "g" not in env.manager.groups
    assert env.sync("nobody", 0).error == E.UNKNOWN_MEMBER_ID
    assert env.heartbeat("nobody", 0).error == E.UNKNOWN_MEMBER_ID
    absent = env.leave("nobody")
    assert absent.error == E.UNKNOWN_MEMBER_ID
    (a, _), gen = env.stable_group(2)
    assert env.join(member_id="nobody").error == E.UNKNOWN_MEMBER_ID
    assert env.sync("nobody", gen).error == E.UNKNOWN_MEMBER_ID
    assert env.heartbeat("nobody", gen).error == E.UNKNOWN_MEMBER_ID
    assert env.leave("nobody").error == E.UNKNOWN_MEMBER_ID
    assert env.group().state is STABLE


def test_unknown_member_id_in_an_empty_group(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    env.leave(a)
    env.leave(b)
    assert env.group().state is EMPTY
    assert env.heartbeat(a, gen + 1).error == E.UNKNOWN_MEMBER_ID
    assert env.sync(a, gen + 1).error == E.UNKNOWN_MEMBER_ID


def test_illegal_generation(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    assert env.sync(b, gen - 1).error == E.ILLEGAL_GENERATION
    assert env.heartbeat(b, gen + 1).error == E.ILLEGAL_GENERATION
    assert env.heartbeat(b, gen).error == E.NONE


def test_rebalance_in_progress_for_sync_and_heartbeat_while_preparing(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    env.join(member_id=a, client_id="c0")
    assert env.group().state is PREPARING
    assert env.sync(b, gen).error == E.REBALANCE_IN_PROGRESS
    assert env.heartbeat(b, gen).error == E.REBALANCE_IN_PROGRESS


def test_a_heartbeat_in_completing_rebalance_is_a_normal_heartbeat(env: GroupEnv) -> None:
    """Kafka 2.7+ (KAFKA-10461): a member may heartbeat between its JoinGroup and SyncGroup."""
    a_join, b_join = env.join(client_id="c0"), env.join(client_id="c1")
    env.until_answered(a_join, b_join)
    assert env.heartbeat(b_join.value["member_id"], 1).error == E.NONE


def test_no_protocols_is_an_inconsistent_group_protocol(env: GroupEnv) -> None:
    reply = env.join(protocols=[])
    assert reply.error == E.INCONSISTENT_GROUP_PROTOCOL and reply.value["member_id"] == ""
    assert "g" not in env.manager.groups  # a first join that failed leaves no group behind
    assert env.join(protocol_type="").error == E.INCONSISTENT_GROUP_PROTOCOL


def test_a_protocol_type_or_name_the_group_does_not_support(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    assert env.join(protocol_type="connect").error == E.INCONSISTENT_GROUP_PROTOCOL
    assert env.join(protocols=[("sticky", b"")]).error == E.INCONSISTENT_GROUP_PROTOCOL
    known = env.join(member_id=b, protocols=[("sticky", b"")], client_id="c1")
    assert known.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert env.group().state is STABLE and env.group().members[b].protocols == [("range", b"sub-c1")]
    # one protocol in common is enough
    newcomer = env.join(protocols=[("sticky", b""), ("range", b"r")], client_id="c7")
    assert not newcomer.answered and env.group().state is PREPARING


def test_sync_with_another_protocol_is_inconsistent(env: GroupEnv) -> None:
    """KIP-559 (Kafka 2.5+): a SyncGroup naming a protocol type or name the group did not pick."""
    (a, b), gen = env.stable_group(2)
    assert env.sync(b, gen, protocol_type="connect").error == E.INCONSISTENT_GROUP_PROTOCOL
    assert env.sync(b, gen, protocol_name="roundrobin").error == E.INCONSISTENT_GROUP_PROTOCOL
    ok = env.sync(b, gen, protocol_type="consumer", protocol_name="range")
    assert ok.error == E.NONE and ok.value["assignment"] == b.encode()


def test_member_id_required_then_a_join_with_that_id(env: GroupEnv) -> None:
    first = env.join(require_known_member_id=True)
    assert first.error == E.MEMBER_ID_REQUIRED
    member = first.value["member_id"]
    assert member and env.group().pending_members == {member} and env.group().state is EMPTY
    second = env.join(member_id=member, require_known_member_id=True)
    env.timers.advance(3000)
    assert second.error == E.NONE and second.value["member_id"] == member
    assert second.value["leader"] == member and env.group().pending_members == set()


def test_a_pending_member_that_never_comes_back_expires_and_stops_blocking_the_rebalance(
    env: GroupEnv,
) -> None:
    (a,), gen = env.stable_group(1)
    pending = env.join(require_known_member_id=True, session_timeout_ms=20_000).value["member_id"]
    assert env.group().state is STABLE  # an id handed out is not a member yet
    rejoin = env.join(member_id=a, client_id="c0", session_timeout_ms=30_000)
    assert env.group().state is PREPARING
    env.timers.advance(19_999)
    assert not rejoin.answered  # the pending member may still come: Kafka's hasAllMembersJoined
    env.timers.advance(1)
    assert rejoin.value["generation_id"] == gen + 1
    assert [m["member_id"] for m in rejoin.value["members"]] == [a]
    assert env.join(member_id=pending).error == E.UNKNOWN_MEMBER_ID


def test_a_pending_member_leaving_lets_the_rebalance_complete(env: GroupEnv) -> None:
    (a,), gen = env.stable_group(1)
    pending = env.join(require_known_member_id=True).value["member_id"]
    rejoin = env.join(member_id=a, client_id="c0")
    assert not rejoin.answered
    assert env.leave(pending).error == E.NONE
    assert rejoin.value["generation_id"] == gen + 1


def test_group_max_size_reached() -> None:
    env = env_with(max_size=2)
    env.stable_group(2)
    full = env.join(client_id="c3")
    assert full.error == E.GROUP_MAX_SIZE_REACHED and full.value["member_id"] == ""
    assert env.join(client_id="c3", require_known_member_id=True).error == E.GROUP_MAX_SIZE_REACHED
    assert len(env.group().members) == 2 and env.group().state is STABLE


def test_group_max_size_counts_pending_members() -> None:
    env = env_with(max_size=1)
    assert env.join(require_known_member_id=True).error == E.MEMBER_ID_REQUIRED
    assert env.join(require_known_member_id=True).error == E.GROUP_MAX_SIZE_REACHED


def test_a_second_incarnation_of_a_static_member_fences_the_first(env: GroupEnv) -> None:
    a_join, old_join = env.join(client_id="c0"), env.join(client_id="old", group_instance_id="i")
    env.until_answered(a_join, old_join)
    a, old = a_join.value["member_id"], old_join.value["member_id"]
    env.sync(a, 1, assignments={a: b"a", old: b"o"})
    assert env.group().state is STABLE

    new_join = env.join(client_id="new", group_instance_id="i")
    assert env.heartbeat(old, 1, group_instance_id="i").error == E.FENCED_INSTANCE_ID
    assert env.sync(old, 1, group_instance_id="i").error == E.FENCED_INSTANCE_ID
    assert env.join(member_id=old, group_instance_id="i", client_id="old").error == E.FENCED_INSTANCE_ID
    leave = env.leave(members=[(old, "i")])
    assert leave.value["members"][0]["error_code"] == E.FENCED_INSTANCE_ID
    commit = env.commit({TopicPartition("t", 0): 1}, member_id=old, generation_id=1, group_instance_id="i")
    assert commit.value == {TopicPartition("t", 0): E.FENCED_INSTANCE_ID}
    # the new incarnation is the member now; the old one is out of the next generation
    rejoin = env.join(member_id=a, client_id="c0")
    new = new_join.value["member_id"]
    assert new != old and new_join.value["generation_id"] == 2
    assert [m["member_id"] for m in rejoin.value["members"]] == [a, new]
    assert env.group().static_members == {"i": new}


def test_a_second_incarnation_answers_the_first_ones_waiting_join_fenced(env: GroupEnv) -> None:
    (a,), gen = env.stable_group(1)
    old_join = env.join(client_id="old", group_instance_id="i")
    env.join(member_id=a, client_id="c0")
    old = old_join.value["member_id"]
    env.sync(a, gen + 1, assignments={a: b"a", old: b"o"})
    assert env.group().state is STABLE
    waiting = env.join(member_id=old, client_id="old", group_instance_id="i", protocols=[("range", b"v2")])
    assert not waiting.answered and env.group().state is PREPARING  # a has not rejoined yet
    second = env.join(client_id="new", group_instance_id="i")
    assert waiting.error == E.FENCED_INSTANCE_ID
    env.join(member_id=a, client_id="c0")
    new = second.value["member_id"]
    assert second.value["generation_id"] == gen + 2 and new != old
    assert list(env.group().members) == [a, new]


def test_a_static_member_is_never_asked_for_a_member_id(env: GroupEnv) -> None:
    """KafkaApis requires a known member id only of dynamic members (KIP-394 with KIP-345)."""
    join = env.join(group_instance_id="i", require_known_member_id=True)
    env.timers.advance(3000)
    assert join.error == E.NONE and env.group().static_members == {"i": join.value["member_id"]}


def test_a_static_member_can_be_removed_by_its_instance_id_alone(env: GroupEnv) -> None:
    a_join, s_join = env.join(client_id="c0"), env.join(client_id="s", group_instance_id="i")
    env.until_answered(a_join, s_join)
    leave = env.leave(members=[("", "i"), ("", "unknown-instance")])
    assert [m["error_code"] for m in leave.value["members"]] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert list(env.group().members) == [a_join.value["member_id"]] and env.group().static_members == {}
