"""The group coordinator's rebalances against Kafka 2.x's GroupCoordinator semantics: the leader,
the protocol vote, KIP-134's initial delay, rebalance and session timeouts, and the windows of the
assignment write (broker/coordinator/group_coordinator.py). The state table and the fencing errors
are in tests/unit/test_group_coordinator.py; the harness is tests/unit/group_harness.py. Oracle:
Kafka's GroupCoordinator.scala, GroupMetadata.scala and DelayedJoin.scala (2.4-2.8), and the cases
of its GroupCoordinatorTest.
"""

from __future__ import annotations

import pytest

from broker.coordinator.group_responses import NEW_MEMBER_JOIN_TIMEOUT_MS
from client.protocol.errors import ErrorCode
from tests.unit.group_harness import COMPLETING, EMPTY, PREPARING, STABLE, E, GroupEnv


@pytest.fixture
def env() -> GroupEnv:
    return GroupEnv()


# -- leader, metadata, protocols ---------------------------------------------------------------------


def test_the_leader_gets_every_members_metadata_and_followers_none(env: GroupEnv) -> None:
    joins = [env.join(client_id=f"c{i}", group_instance_id="s1" if i == 1 else None) for i in range(3)]
    env.until_answered(*joins)
    leader, *followers = (j.value for j in joins)
    ids = [j["member_id"] for j in (leader, *followers)]
    assert leader["leader"] == ids[0]
    assert leader["members"] == [
        {"member_id": ids[0], "group_instance_id": None, "metadata": b"sub-c0"},
        {"member_id": ids[1], "group_instance_id": "s1", "metadata": b"sub-c1"},
        {"member_id": ids[2], "group_instance_id": None, "metadata": b"sub-c2"},
    ]
    for follower in followers:
        assert follower["members"] == [] and follower["leader"] == ids[0]
        assert follower["generation_id"] == leader["generation_id"] == 1


def test_the_next_member_leads_when_the_leader_leaves(env: GroupEnv) -> None:
    (a, b, c), gen = env.stable_group(3)
    env.leave(a)
    assert env.group().leader_id == b
    jc, jb = env.join(member_id=c, client_id="c2"), env.join(member_id=b, client_id="c1")
    assert jc.value["leader"] == jb.value["leader"] == b
    assert [m["member_id"] for m in jb.value["members"]] == [b, c] and jc.value["members"] == []


def test_the_protocol_with_most_votes_among_the_common_ones_wins(env: GroupEnv) -> None:
    joins = [
        env.join(client_id="c0", protocols=[("range", b"r0"), ("roundrobin", b"o0"), ("only-a", b"")]),
        env.join(client_id="c1", protocols=[("roundrobin", b"o1"), ("range", b"r1")]),
        env.join(client_id="c2", protocols=[("only-c", b""), ("roundrobin", b"o2"), ("range", b"r2")]),
    ]
    env.until_answered(*joins)
    assert {j.value["protocol_name"] for j in joins} == {"roundrobin"}
    # the leader's list carries each member's metadata for the chosen protocol
    assert [m["metadata"] for m in joins[0].value["members"]] == [b"o0", b"o1", b"o2"]


def test_a_member_must_share_a_protocol_with_everyone(env: GroupEnv) -> None:
    env.join(client_id="c0", protocols=[("range", b""), ("roundrobin", b"")])
    env.join(client_id="c1", protocols=[("roundrobin", b"")])
    # range is no longer common to all: a member offering only range is refused
    assert env.join(client_id="c2", protocols=[("range", b"")]).error == E.INCONSISTENT_GROUP_PROTOCOL


def test_a_group_everyone_left_mid_rebalance_takes_any_protocol_of_its_type(env: GroupEnv) -> None:
    """Kafka's supportsProtocols counts, per protocol, the members supporting it: with no members
    left, every protocol of the group's type is supported by all of them."""
    first = env.join(client_id="c0", protocols=[("range", b"")])
    (first_id,) = env.group().members
    env.leave(first_id)
    assert first.error == E.UNKNOWN_MEMBER_ID
    assert env.group().state is PREPARING and not env.group().members  # the initial delay still runs
    assert env.join(client_id="c1", protocol_type="connect").error == E.INCONSISTENT_GROUP_PROTOCOL
    second = env.join(client_id="c1", protocols=[("roundrobin", b"")])
    env.until_answered(second)
    assert second.error == E.NONE and second.value["protocol_name"] == "roundrobin"


# -- KIP-134's initial delay and the rebalance timeout -------------------------------------------


def test_the_initial_delay_extends_while_members_arrive(env: GroupEnv) -> None:
    first = env.join(client_id="c0")
    env.timers.advance(2000)
    second = env.join(client_id="c1")
    env.timers.advance(1000)  # t=3000: a member came during the delay: wait another 3000
    assert not first.answered and not second.answered
    env.timers.advance(2999)
    assert not first.answered
    env.timers.advance(1)  # t=6000: nobody new since 3000
    assert first.value["generation_id"] == second.value["generation_id"] == 1
    assert len(first.value["members"]) == 2


def test_the_initial_delay_waits_even_when_everyone_joined(env: GroupEnv) -> None:
    join = env.join()
    env.timers.advance(2999)
    assert not join.answered


def test_the_initial_delay_is_capped_by_the_rebalance_timeout(env: GroupEnv) -> None:
    t0 = env.timers.now_ms
    joins = [env.join(client_id="c0", rebalance_timeout_ms=7000)]
    for t in (1000, 2000, 4000, 5000, 6500):  # members keep arriving
        env.timers.advance(t0 + t - env.timers.now_ms)
        joins.append(env.join(client_id=f"c{t}", rebalance_timeout_ms=7000))
    env.timers.advance(t0 + 6999 - env.timers.now_ms)
    assert not joins[0].answered
    env.timers.advance(1)  # t=7000: 3000 + 3000 + 1000, the rebalance timeout
    assert all(j.value["generation_id"] == 1 for j in joins)
    assert len(joins[0].value["members"]) == 6


def test_only_a_brand_new_group_extends_its_initial_delay(env: GroupEnv) -> None:
    """Kafka sets newMemberAdded only while generationId == 0: a group that emptied later waits
    one initial delay and no more."""
    (a,), gen = env.stable_group(1)
    env.leave(a)
    assert env.group().state is EMPTY and env.group().generation_id == gen + 1
    start = env.timers.now_ms
    first = env.join(client_id="c0")
    env.timers.advance(2000)
    second = env.join(client_id="c1")
    env.timers.advance(1000)
    assert env.timers.now_ms - start == 3000
    assert first.value["generation_id"] == second.value["generation_id"] == gen + 2


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2, rebalance_timeout_ms=5000, session_timeout_ms=10_000)
    rejoin = env.join(member_id=a, client_id="c0", rebalance_timeout_ms=5000, session_timeout_ms=10_000)
    env.timers.advance(4999)
    assert not rejoin.answered
    env.timers.advance(1)
    assert rejoin.value["generation_id"] == gen + 1
    assert [m["member_id"] for m in rejoin.value["members"]] == [a]
    assert not env.group().has(b)
    assert env.heartbeat(b, gen).error == E.UNKNOWN_MEMBER_ID


def test_a_new_member_waiting_too_long_in_a_rebalance_is_dropped(env: GroupEnv) -> None:
    """Kafka's NewMemberJoinTimeoutMs: a new member whose JoinGroup sits in a rebalance that does
    not finish is removed (its client has likely given up and will come back)."""
    (a,), gen = env.stable_group(1, rebalance_timeout_ms=600_000, session_timeout_ms=10_000)
    newcomer = env.join(client_id="new", rebalance_timeout_ms=600_000)
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5000):
        env.timers.advance(5000)
        if newcomer.answered:
            break
        env.heartbeat(a, gen)  # a stays alive, but does not rejoin
    assert newcomer.error == E.UNKNOWN_MEMBER_ID
    assert env.timers.now_ms - 1_000_000 - 3000 == NEW_MEMBER_JOIN_TIMEOUT_MS
    assert env.group().state is PREPARING and list(env.group().members) == [a]


def test_session_timeout_expels_a_silent_member_and_heartbeats_keep_one(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2, session_timeout_ms=10_000)
    for _ in range(6):  # 30 s of b heartbeating every 5 s; a is silent after 10 s
        env.timers.advance(5000)
        code = env.heartbeat(b, gen).error
        if env.group().state is STABLE:
            assert code == E.NONE
    assert not env.group().has(a) and env.group().has(b)
    assert env.group().state is PREPARING
    assert env.heartbeat(b, gen).error == E.REBALANCE_IN_PROGRESS
    rejoin = env.join(member_id=b, client_id="c1")
    assert rejoin.value["leader"] == b and rejoin.value["generation_id"] == gen + 1


def test_a_member_expires_exactly_at_its_session_timeout(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2, session_timeout_ms=10_000)
    env.timers.advance(6000)
    env.heartbeat(a, gen)
    env.heartbeat(b, gen)
    env.timers.advance(9999)
    assert env.group().state is STABLE
    env.heartbeat(b, gen)
    env.timers.advance(1)
    assert not env.group().has(a) and env.group().has(b)


def test_a_member_waiting_for_its_assignment_is_not_expired(env: GroupEnv) -> None:
    env.append.auto = False
    a_join, b_join = env.join(client_id="c0"), env.join(client_id="c1")
    env.until_answered(a_join, b_join)
    a, b = a_join.value["member_id"], b_join.value["member_id"]
    sync_b = env.sync(b, 1)
    sync_a = env.sync(a, 1, assignments={a: b"x", b: b"y"})
    env.timers.advance(60_000)  # the write is slow; both wait in SyncGroup
    assert env.group().has(a) and env.group().has(b)
    env.append.complete_all()
    assert sync_a.value["assignment"] == b"x" and sync_b.value["assignment"] == b"y"


# -- the assignment write's windows ---------------------------------------------------------------


def _completing(env: GroupEnv) -> tuple[str, str]:
    a_join, b_join = env.join(client_id="c0"), env.join(client_id="c1")
    env.until_answered(a_join, b_join)
    return a_join.value["member_id"], b_join.value["member_id"]


def test_an_assignment_write_landing_after_a_new_member_joined_is_not_applied(env: GroupEnv) -> None:
    env.append.auto = False
    a, b = _completing(env)
    follower = env.sync(b, 1)
    leader = env.sync(a, 1, assignments={a: b"stale-a", b: b"stale-b"})
    write = env.append.last()
    env.join(client_id="c2")  # back to PreparingRebalance before the write is acknowledged
    assert leader.error == E.REBALANCE_IN_PROGRESS and follower.error == E.REBALANCE_IN_PROGRESS
    env.append.complete(write)
    group = env.group()
    assert group.state is PREPARING
    assert all(m.assignment == b"" for m in group.members.values())
    assert len(leader.answers) == 1 and len(follower.answers) == 1


def test_an_assignment_write_landing_in_a_newer_generation_is_not_applied(env: GroupEnv) -> None:
    env.append.auto = False
    a, b = _completing(env)
    env.sync(a, 1, assignments={a: b"stale-a", b: b"stale-b"})
    stale = env.append.last()
    c = env.join(client_id="c2")
    env.join(member_id=a, client_id="c0")
    env.join(member_id=b, client_id="c1")
    group = env.group()
    assert group.state is COMPLETING and group.generation_id == 2
    waiting = env.sync(b, 2)
    env.append.complete(stale)
    assert group.state is COMPLETING and not waiting.answered
    assert all(m.assignment == b"" for m in group.members.values())
    env.sync(a, 2, assignments={a: b"a2", b: b"b2", c.value["member_id"]: b"c2"})
    env.append.complete(env.append.last())
    assert waiting.value["assignment"] == b"b2" and group.state is STABLE


@pytest.mark.parametrize(
    ("append_error", "heard"),
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
        (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
        (E.REQUEST_TIMED_OUT, E.REBALANCE_IN_PROGRESS),
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
        (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    ],
)
def test_a_failed_assignment_write_answers_the_mapped_error_and_rebalances(
    env: GroupEnv, append_error: ErrorCode, heard: ErrorCode
) -> None:
    env.append.auto = False
    a, b = _completing(env)
    follower = env.sync(b, 1)
    leader = env.sync(a, 1, assignments={a: b"x", b: b"y"})
    env.append.complete(env.append.last(), append_error)
    for sync in (leader, follower):
        assert sync.error == heard
        assert sync.value["assignment"] == b"" and sync.value["protocol_name"] is None
    group = env.group()
    assert group.state is PREPARING and all(m.assignment == b"" for m in group.members.values())
    ra, rb = env.join(member_id=a, client_id="c0"), env.join(member_id=b, client_id="c1")
    assert ra.value["generation_id"] == rb.value["generation_id"] == 2


def test_a_follower_waits_for_the_leaders_assignment(env: GroupEnv) -> None:
    a, b = _completing(env)
    follower = env.sync(b, 1)
    assert not follower.answered
    env.sync(a, 1, assignments={a: b"x"})  # b left out: it gets an empty assignment
    assert follower.error == E.NONE and follower.value["assignment"] == b""
    assert env.sync(b, 1).value["assignment"] == b""  # Stable: handed out again


def test_a_superseded_join_of_the_same_member_hears_rebalance_in_progress(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    first = env.join(member_id=a, client_id="c0")
    second = env.join(member_id=a, client_id="c0")
    assert first.error == E.REBALANCE_IN_PROGRESS and not second.answered
    env.join(member_id=b, client_id="c1")
    assert second.value["generation_id"] == gen + 1


def test_leave_group_by_member_list(env: GroupEnv) -> None:
    (a, b, c), gen = env.stable_group(3)
    leave = env.leave(members=[(a, None), ("ghost", None), (b, None)])
    assert leave.value["error_code"] == E.NONE
    assert [(m["member_id"], m["error_code"]) for m in leave.value["members"]] == [
        (a, E.NONE),
        ("ghost", E.UNKNOWN_MEMBER_ID),
        (b, E.NONE),
    ]
    assert list(env.group().members) == [c]


def test_a_member_leaving_while_waiting_in_join_is_answered(env: GroupEnv) -> None:
    (a, b), gen = env.stable_group(2)
    waiting = env.join(member_id=a, client_id="c0")
    env.leave(a)
    assert waiting.error == E.UNKNOWN_MEMBER_ID and waiting.value["member_id"] == ""
