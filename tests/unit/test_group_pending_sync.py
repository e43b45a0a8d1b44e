"""Pending-sync expiry in the group coordinator (Kafka's DelayedSync, KAFKA-12890, Kafka 3.x;
broker/coordinator/group_coordinator.py, group_metadata.py).

When a join completes every member of the new generation is pending sync (Kafka's
``pendingSyncMembers``); its SyncGroup, in CompletingRebalance or in Stable, takes it out. A
DelayedSync of the group's rebalance timeout, tied to the generation, expels whoever is still
pending when it fires in CompletingRebalance or Stable and rebalances; a newer rebalance voids it.
Without it a leader that heartbeats but never sends SyncGroup holds every follower's SyncGroup
for ever.

Driven through tests/unit/group_harness.py (virtual time, writes acknowledged at once). Oracle:
Kafka 3.7's GroupCoordinator.scala (onCompleteJoin, schedulePendingSync, tryCompletePendingSync,
onExpirePendingSync, removePendingSyncMember, removeSyncExpiration) and GroupMetadata.scala
(pendingSyncMembers), and the pending-sync cases of its GroupCoordinatorTest.
"""

from __future__ import annotations

import pytest

from tests.unit.group_harness import COMPLETING, DEAD, PREPARING, STABLE, E, GroupEnv

SESSION_MS = 10_000
REBALANCE_MS = 30_000
HEARTBEAT_MS = 3_000


@pytest.fixture
def env() -> GroupEnv:
    return GroupEnv()


def _join(env: GroupEnv, n: int, **join: object) -> tuple[list[str], int, int]:
    """n members join one generation (past the initial delay), nobody syncs yet: (member ids in
    join order, generation, the time the join completed)."""
    replies = [
        env.join(
            client_id=f"c{i}",
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            **join,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]
    env.until_answered(*replies)
    group = env.group()
    assert group.state is COMPLETING
    return [r.value["member_id"] for r in replies], group.generation_id, group.state_timestamp_ms


def _heartbeat_until(env: GroupEnv, deadline_ms: int, members: list[str], generation: int) -> None:
    """Every member heartbeats every HEARTBEAT_MS (well within its session) until ``deadline_ms``."""
    while env.timers.now_ms + HEARTBEAT_MS <= deadline_ms:
        env.timers.advance(HEARTBEAT_MS)
        for member in members:
            if env.group().has(member):
                env.heartbeat(member, generation)
    env.timers.advance(deadline_ms - env.timers.now_ms)


def test_a_leader_that_heartbeats_but_never_syncs_is_expelled_at_the_rebalance_timeout(
    env: GroupEnv,
) -> None:
    """Interleaving: a (the leader) and b join generation 1 at t0; b sends SyncGroup at once and
    waits for the leader's assignment; a heartbeats every 3 s, so its 10 s session never expires,
    but never sends SyncGroup (its assignor hangs). At t0 + rebalance.timeout.ms the DelayedSync
    fires: a is removed, the group goes back to PreparingRebalance and b's SyncGroup hears
    REBALANCE_IN_PROGRESS (Kafka's prepareRebalance -> resetAndPropagateAssignmentError); b
    rejoins and leads generation 2 alone."""
    (a, b), gen, t0 = _join(env, 2)
    assert env.group().leader_id == a
    follower = env.sync(b, gen)
    _heartbeat_until(env, t0 + REBALANCE_MS - 1, [a], gen)
    assert not follower.answered, "the follower's SyncGroup was answered before the rebalance timeout"
    assert env.heartbeat(a, gen).error == E.NONE  # the leader is alive and in the group
    env.timers.advance(1)  # t0 + rebalance.timeout.ms
    assert follower.answers, "the follower's SyncGroup is still unanswered at the rebalance timeout"
    assert follower.error == E.REBALANCE_IN_PROGRESS
    assert follower.value["assignment"] == b"" and follower.value["protocol_name"] is None
    group = env.group()
    assert not group.has(a), "the leader that never sent SyncGroup is still a member"
    assert group.state is PREPARING and group.leader_id == b
    assert env.heartbeat(a, gen).error == E.UNKNOWN_MEMBER_ID
    rejoin = env.join(member_id=b, client_id="c1", session_timeout_ms=SESSION_MS)
    assert rejoin.value["generation_id"] == gen + 1 and rejoin.value["leader"] == b
    assert [m["member_id"] for m in rejoin.value["members"]] == [b]


def test_a_follower_that_never_syncs_in_stable_is_expelled_at_the_rebalance_timeout(env: GroupEnv) -> None:
    """Interleaving: a (the leader) and b join generation 1 at t0; a syncs at once with the
    assignment and the group turns Stable (the leader's sync takes only a out of the pending set);
    b keeps heartbeating but never sends SyncGroup. At t0 + rebalance.timeout.ms Kafka's
    onExpirePendingSync, in Stable too, removes b and rebalances: a's next heartbeat hears
    REBALANCE_IN_PROGRESS and a leads generation 2 alone."""
    (a, b), gen, t0 = _join(env, 2)
    leader = env.sync(a, gen, assignments={a: b"pa", b: b"pb"})
    assert leader.error == E.NONE and env.group().state is STABLE
    _heartbeat_until(env, t0 + REBALANCE_MS - 1, [a, b], gen)
    assert env.group().state is STABLE and env.group().has(b)
    env.timers.advance(1)
    group = env.group()
    assert not group.has(b), "the follower that never sent SyncGroup is still a member in Stable"
    assert group.state is PREPARING
    assert env.heartbeat(a, gen).error == E.REBALANCE_IN_PROGRESS
    assert env.heartbeat(b, gen).error == E.UNKNOWN_MEMBER_ID
    rejoin = env.join(member_id=a, client_id="c0", session_timeout_ms=SESSION_MS)
    assert rejoin.value["generation_id"] == gen + 1
    assert [m["member_id"] for m in rejoin.value["members"]] == [a]


def test_a_follower_that_syncs_in_stable_after_the_leader_is_kept(env: GroupEnv) -> None:
    """Interleaving: the leader syncs at t0 (Stable), b's SyncGroup arrives at t0 + 20 s, in
    Stable: Kafka's doSyncGroup takes it out of the pending set there too, so the DelayedSync
    at t0 + 30 s finds nobody pending and the group stays Stable in generation 1."""
    (a, b), gen, t0 = _join(env, 2)
    env.sync(a, gen, assignments={a: b"pa", b: b"pb"})
    _heartbeat_until(env, t0 + 20_000, [a, b], gen)
    assert env.sync(b, gen).value["assignment"] == b"pb"
    _heartbeat_until(env, t0 + 2 * REBALANCE_MS, [a, b], gen)
    group = env.group()
    assert group.state is STABLE and group.generation_id == gen and list(group.members) == [a, b]


def test_when_everyone_synced_the_delayed_sync_does_nothing(env: GroupEnv) -> None:
    """Kafka's tryCompletePendingSync: with every member synced the DelayedSync completes at
    once; the group stays Stable through its deadline however slow the members were."""
    (a, b), gen, t0 = _join(env, 2)
    _heartbeat_until(env, t0 + REBALANCE_MS - 5000, [a, b], gen)
    follower = env.sync(b, gen)
    env.sync(a, gen, assignments={a: b"pa", b: b"pb"})
    assert follower.value["assignment"] == b"pb"
    _heartbeat_until(env, t0 + 2 * REBALANCE_MS, [a, b], gen)
    assert env.group().state is STABLE and env.group().generation_id == gen


def test_a_delayed_sync_of_an_older_generation_does_nothing(env: GroupEnv) -> None:
    """Interleaving: a and b join generation 1 at t0 (its DelayedSync due at t0 + 30 s); at
    t0 + 10 s, before anyone synced, c joins: PreparingRebalance, then a and b rejoin and
    generation 2 completes at once (its DelayedSync due at t0 + 40 s). At t0 + 30 s generation
    1's DelayedSync falls due while a, b and c are all pending sync in generation 2: it must do
    nothing (Kafka's DelayedSync carries its generation, and prepareRebalance completes it). They
    all sync at t0 + 35 s and the group stays Stable past t0 + 40 s."""
    (a, b), gen, t0 = _join(env, 2)
    _heartbeat_until(env, t0 + 10_000, [a, b], gen)
    c_join = env.join(client_id="c2", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)
    rejoins = [
        env.join(
            member_id=m, client_id=f"c{i}", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS
        )
        for i, m in enumerate((a, b))
    ]
    group = env.group()
    assert group.state is COMPLETING and group.generation_id == gen + 1
    assert all(r.value["generation_id"] == gen + 1 for r in (c_join, *rejoins))
    c = c_join.value["member_id"]
    _heartbeat_until(env, t0 + REBALANCE_MS + 1, [a, b, c], gen + 1)
    assert list(group.members) == [a, b, c], "generation 1's DelayedSync expelled generation 2's members"
    assert group.state is COMPLETING and group.generation_id == gen + 1
    _heartbeat_until(env, t0 + 35_000, [a, b, c], gen + 1)
    syncs = [
        env.sync(b, gen + 1),
        env.sync(c, gen + 1),
        env.sync(a, gen + 1, assignments={a: b"1", b: b"2", c: b"3"}),
    ]
    assert [s.value["assignment"] for s in syncs] == [b"2", b"3", b"1"]
    _heartbeat_until(env, t0 + 10_000 + 2 * REBALANCE_MS, [a, b, c], gen + 1)
    assert group.state is STABLE and group.generation_id == gen + 1 and list(group.members) == [a, b, c]


def test_generation_twos_delayed_sync_expels_who_did_not_sync_in_generation_two(env: GroupEnv) -> None:
    """Interleaving: generation 1 at t0, generation 2 at t0 + 10 s (c joined, a and b rejoined);
    a (the leader) and b sync in generation 2, c never does. Generation 1's deadline (t0 + 30 s)
    passes quietly; generation 2's (t0 + 40 s) removes c and rebalances."""
    (a, b), gen, t0 = _join(env, 2)
    _heartbeat_until(env, t0 + 10_000, [a, b], gen)
    c = env.join(client_id="c2", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)
    for i, m in enumerate((a, b)):
        env.join(
            member_id=m, client_id=f"c{i}", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS
        )
    c_id = c.value["member_id"]
    env.sync(b, gen + 1)
    env.sync(a, gen + 1, assignments={a: b"1", b: b"2", c_id: b"3"})
    group = env.group()
    assert group.state is STABLE
    _heartbeat_until(env, t0 + 40_000 - 1, [a, b, c_id], gen + 1)
    assert group.state is STABLE and list(group.members) == [a, b, c_id]
    env.timers.advance(1)
    assert group.state is PREPARING and list(group.members) == [a, b]


def test_a_member_that_leaves_while_pending_sync_rebalances_at_once(env: GroupEnv) -> None:
    """Interleaving: a, b, c join generation 1 at t0; b syncs and waits; c sends LeaveGroup while
    pending sync. Kafka's removeMemberAndUpdateGroup takes c out (of the pending set too) and
    prepareRebalance answers b REBALANCE_IN_PROGRESS at once and voids generation 1's DelayedSync.
    a and b form generation 2 and sync; neither deadline disturbs it afterwards."""
    (a, b, c), gen, t0 = _join(env, 3)
    waiting = env.sync(b, gen)
    env.timers.advance(5000)
    assert env.leave(c).error == E.NONE
    assert waiting.error == E.REBALANCE_IN_PROGRESS
    group = env.group()
    assert group.state is PREPARING and c not in group.members
    assert not group.pending_sync_members
    rejoins = [
        env.join(
            member_id=m, client_id=f"c{i}", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS
        )
        for i, m in enumerate((a, b))
    ]
    assert all(r.value["generation_id"] == gen + 1 for r in rejoins)
    assert group.pending_sync_members == {a, b}
    follower = env.sync(b, gen + 1)
    env.sync(a, gen + 1, assignments={a: b"1", b: b"2"})
    assert follower.value["assignment"] == b"2" and not group.pending_sync_members
    _heartbeat_until(env, t0 + 5000 + 2 * REBALANCE_MS, [a, b], gen + 1)
    assert group.state is STABLE and group.generation_id == gen + 1 and list(group.members) == [a, b]


def test_a_static_member_replaced_while_pending_sync_voids_the_delayed_sync(env: GroupEnv) -> None:
    """Interleaving: a and the static member "i" (b) join generation 1 at t0; a syncs (Stable), b
    is pending sync; at t0 + 5 s a new incarnation of "i" joins: b is fenced and removed and the
    group rebalances (this coordinator always rebalances on a static rejoin), which voids
    generation 1's DelayedSync. a and the new incarnation form generation 2 and sync before its
    deadline: nobody is expelled."""
    timeouts = {"session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS}
    a_join = env.join(client_id="c0", **timeouts)
    b_join = env.join(client_id="old", group_instance_id="i", **timeouts)
    env.until_answered(a_join, b_join)
    a, b = a_join.value["member_id"], b_join.value["member_id"]
    group = env.group()
    gen, t0 = group.generation_id, group.state_timestamp_ms
    assert group.state is COMPLETING and group.pending_sync_members == {a, b}
    env.sync(a, gen, assignments={a: b"1", b: b"2"})
    assert group.state is STABLE and group.pending_sync_members == {b}
    _heartbeat_until(env, t0 + 5000, [a], gen)
    new = env.join(client_id="new", group_instance_id="i", **timeouts)
    assert b not in group.members and group.state is PREPARING and not group.pending_sync_members
    env.join(member_id=a, client_id="c0", **timeouts)
    n = new.value["member_id"]
    assert new.value["generation_id"] == gen + 1
    _heartbeat_until(env, t0 + REBALANCE_MS + 1, [a, n], gen + 1)  # generation 1's deadline passes
    assert list(group.members) == [a, n] and group.state is COMPLETING
    env.sync(n, gen + 1, group_instance_id="i")
    env.sync(a, gen + 1, assignments={a: b"1", n: b"2"})
    _heartbeat_until(env, t0 + 5000 + 2 * REBALANCE_MS, [a, n], gen + 1)
    assert group.state is STABLE and list(group.members) == [a, n]


def test_a_delayed_sync_of_an_unloaded_group_does_nothing(env: GroupEnv) -> None:
    """Interleaving: a and b join generation 1, nobody syncs; the coordinator resigns the offsets
    partition (Kafka's onGroupUnloaded: Dead, removeSyncExpiration). The deadline passes on a Dead
    group without a transition (Dead -> PreparingRebalance would be illegal)."""
    (a, b), gen, t0 = _join(env, 2)
    group = env.group()
    env.coordinator.on_groups_unloaded(env.manager.unload(env.manager.partition_for("g"), 0))
    assert group.state is DEAD and not group.pending_sync_members
    env.timers.advance(2 * REBALANCE_MS)
    assert group.state is DEAD and list(group.members) == [a, b]


def test_the_delayed_sync_waits_the_largest_rebalance_timeout(env: GroupEnv) -> None:
    """Kafka schedules DelayedSync with group.rebalanceTimeoutMs, the members' largest: b's
    60 s, not a's 30 s. a (leader) heartbeats and never syncs; b's SyncGroup waits until 60 s."""
    a_join = env.join(client_id="c0", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)
    b_join = env.join(client_id="c1", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=2 * REBALANCE_MS)
    env.until_answered(a_join, b_join)
    a, b = a_join.value["member_id"], b_join.value["member_id"]
    t0, gen = env.group().state_timestamp_ms, env.group().generation_id
    follower = env.sync(b, gen)
    _heartbeat_until(env, t0 + 2 * REBALANCE_MS - 1, [a], gen)
    assert not follower.answered and env.group().has(a)
    env.timers.advance(1)
    assert follower.error == E.REBALANCE_IN_PROGRESS and not env.group().has(a)
