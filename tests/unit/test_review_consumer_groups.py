"""Adversarial review: floodmark's group member (leaving, resubscribing, auto commit, fenced
replies) against Kafka 3.7's ConsumerCoordinator.onLeavePrepare (clients/.../internals/ConsumerCoordinator.java)
and AbstractCoordinator.close / maybeLeaveGroup / resetStateAndRejoin.

Real consumers against tests/unit/fake_group_cluster.py (the broker's own coordinator behind
fake sockets, on a clock only the test moves). Every wait is for a state, bounded only so a
broken build fails instead of hanging.
"""

# ruff: noqa: F811 - pytest fixtures imported by name
from __future__ import annotations

import asyncio

from broker.coordinator.group_metadata import GroupState
from client.protocol.api import ApiKey
from tests.unit.test_consumer_rebalance_commits import (  # noqa: F401 - the fixture
    GROUP,
    TP,
    CommitOnRevoke,
    Recorder,
    fake,
    member,
    poll_until,
    produce,
    until,
)


async def test_close_runs_the_revoke_callback_so_a_commit_there_is_kept(fake):
    """Interleaving: A (auto commit off, the documented commit-in-on_partitions_revoked
    pattern) owns t-0 and consumed 0..9 (position 10, nothing committed); A closes.
    Kafka: AbstractCoordinator.close(Timer) calls ConsumerCoordinator.onLeavePrepare() before
    maybeLeaveGroup: onPartitionsRevoked(t-0) runs while t-0 is still assigned, its commitSync
    commits 10, then LeaveGroup. floodmark's ConsumerCoordinator._close commits only with auto
    commit and leave_group() clears the assignment without any callback: 10 is never
    committed and the next owner re-reads 0..9 (duplicates)."""
    await produce(fake, 10)
    a = member(fake)
    await a.start()
    la = CommitOnRevoke(a)
    a.subscribe(["t"], listener=la)
    await poll_until(lambda: a.assignment() == {TP} and a._subscriptions.state(TP).position == 10, a)
    await a.close()
    assert [c[0] for c in la.calls] == ["assigned", "revoked"], la.calls
    assert fake.committed(TP, GROUP) == 10


async def test_unsubscribe_runs_the_revoke_callback(fake):
    """Interleaving: A owns t-0 at position 10 (auto commit off) and calls unsubscribe().
    Kafka: LegacyKafkaConsumer.unsubscribe calls coordinator.onLeavePrepare() (onPartitionsRevoked
    with t-0 still assigned) before maybeLeaveGroup. floodmark's Consumer.unsubscribe calls
    leave_group(), which clears the assignment with no callback: the commit the user makes on
    revoke never happens."""
    await produce(fake, 10)
    a = member(fake)
    await a.start()
    try:
        la = CommitOnRevoke(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: a.assignment() == {TP} and a._subscriptions.state(TP).position == 10, a)
        await a.unsubscribe()
        assert [c[0] for c in la.calls] == ["assigned", "revoked"], la.calls
        assert fake.committed(TP, GROUP) == 10
    finally:
        await a.close()


async def test_a_member_that_left_on_poll_timeout_reports_its_partitions_lost(fake):
    """Interleaving: A owns t-0 and stops polling (a long processing step) past
    max_poll_interval_ms (forced: its last poll is set far in the past); its heartbeat loop
    leaves the group. Then A polls again. Kafka: HeartbeatThread -> maybeLeaveGroup ->
    resetGenerationOnLeaveGroup -> resetStateAndRejoin (needsJoinPrepare = true), the
    assignment untouched; the next poll's onJoinPrepare sees NO_GENERATION and calls
    onPartitionsLost(t-0) while t-0 is still assigned. floodmark's heartbeat_loop calls
    leave_group(), which clears the assignment itself: on_partitions_lost never runs."""
    a = member(fake)
    await a.start()
    try:
        la = Recorder(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: a.assignment() == {TP}, a)
        a._coordinator.last_poll = -1e9  # max_poll_interval_ms is long gone
        await until(lambda: a.group_metadata().generation_id == -1)
        await poll_until(lambda: la.assignments() == 2, a)
        names = [c[0] for c in la.calls]
        assert names == ["assigned", "lost", "assigned"], la.calls
        assert la.calls[1] == ("lost", {TP}, {TP}), la.calls
    finally:
        await a.close()


async def test_an_illegal_generation_keeps_the_member_id_so_the_rejoin_is_not_held(fake):
    """Interleaving: A and B are Stable at generation g (its group record written). C joins,
    A and B rejoin, the join completes g+1, and the three SyncGroups are parked before the
    coordinator sees them. The coordinator fails over (the partition is unloaded and loaded
    again from the log, which holds only generation g's record: the g+1 assignment was never
    written). The parked SyncGroups reach the new coordinator: A and B are known members of
    generation g there, so they hear ILLEGAL_GENERATION. Kafka 3.7: SyncGroupResponseHandler ->
    resetStateOnResponseError(SYNC_GROUP, error, shouldResetMemberId = error !=
    ILLEGAL_GENERATION): A and B keep their member ids ("to avoid to wait for the old member id
    leaving group until rebalance timeout in next rebalance", resetStateAndGeneration) and
    rejoin as themselves, so the rebalance completes as soon as they do. floodmark's
    ConsumerCoordinator.reset_generation always clears the member id: A and B rejoin as new
    members and the group waits for their old ids until their sessions expire."""
    a, b = member(fake), member(fake)
    await a.start()
    await b.start()
    c = member(fake)
    await c.start()
    try:
        la, lb, lc = Recorder(a), Recorder(b), Recorder(c)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: la.assignments() == 1, a)
        b.subscribe(["t"], listener=lb)
        await poll_until(lambda: la.assignments() == 2 and lb.assignments() == 1, a, b)
        old_a, old_b = a.group_metadata().member_id, b.group_metadata().member_id
        stable_generation = fake.env.group().generation_id

        fake.hold[ApiKey.SYNC_GROUP] = 3
        c.subscribe(["t"], listener=lc)
        polls = [asyncio.create_task(_poll_forever(x)) for x in (a, b, c)]
        try:
            await asyncio.wait_for(fake.wait_held(3), 30)
            assert fake.env.group().generation_id == stable_generation + 1

            # the coordinator fails over before the g+1 assignment is written
            env = fake.env
            env.coordinator.on_groups_unloaded(env.manager.unload(0, 1))
            env.log.feed(env.append)
            await env.manager.load(0, 1, env.coordinator.on_groups_loaded)
            assert env.group().generation_id == stable_generation
            assert set(env.group().members) == {old_a, old_b}

            start = len(fake.requests)
            fake.release()

            def settled() -> bool:
                """The rebalance completed (a generation past g), or the coordinator holds three
                JoinGroups in PreparingRebalance (the rejoined members) and waits for the rest."""
                group = env.group()
                if group.state is GroupState.PREPARING_REBALANCE:
                    return sum(m.awaiting_join is not None for m in group.members.values()) >= 3
                return group.generation_id > stable_generation

            await until(settled)
            rejoined = {r.body["member_id"] for r in fake.requests[start:] if r.api_key is ApiKey.JOIN_GROUP}
            group = env.group()
            stuck = group.state is GroupState.PREPARING_REBALANCE
            waiting_for = [m.member_id for m in group.not_yet_rejoined()] if stuck else []
            assert {old_a, old_b} <= rejoined and not waiting_for, (
                f"A ({old_a}) and B ({old_b}) rejoined as {sorted(rejoined)}; the group is "
                f"{group.state.value} waiting for {waiting_for} until their sessions expire"
            )
        finally:
            for p in polls:
                p.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
    finally:
        for x in (c, b, a):
            x.abandon()


async def _poll_forever(c) -> None:
    while True:
        await c.poll(timeout_ms=20)


async def test_auto_commit_never_commits_records_the_application_has_not_come_back_for(fake):
    """Interleaving: A (auto commit on, auto_commit_interval_ms=20) polls and gets records 0..9;
    the application is still processing them (it does not call poll again) when the process
    dies. Kafka: auto commit runs inside poll() only (ConsumerCoordinator.poll ->
    maybeAutoCommitOffsetsAsync, before the fetch), so the positions committed are those of
    records returned by earlier polls: at least once, 0..9 are re-delivered to the next owner.
    floodmark's heartbeat.auto_commit_loop is a background task that commits the positions
    (10) every interval whatever the application did with the records: the crash loses 0..9
    (at most once). The wait is for a state: ten heartbeats of the same 20 ms interval."""
    await produce(fake, 10)
    a = member(fake, enable_auto_commit=True, auto_commit_interval_ms=20)
    await a.start()
    got: list = []

    async def until_ten() -> None:
        async with asyncio.timeout(30):
            while len(got) < 10:
                got.extend(await a.poll(timeout_ms=20))

    a.subscribe(["t"])
    await until_ten()
    assert [r.offset for r in got] == list(range(10))
    beats = len(fake.of(ApiKey.HEARTBEAT))
    await until(lambda: len(fake.of(ApiKey.HEARTBEAT)) >= beats + 10)  # still processing 0..9
    a.abandon()  # the process dies
    # an auto commit of an earlier poll may have committed the position it had then (0: nothing
    # returned yet), as Kafka's would; never one past a record the application was handed last
    assert fake.committed(TP, GROUP) <= 0, "records 0..9, never processed, are committed"


async def test_resubscribing_revokes_the_assigned_partitions_with_their_positions(fake):
    """Interleaving: A (auto commit off, commit in on_partitions_revoked) owns t-0 at position
    10 and subscribes again, to t and u (a topic added). Kafka: KafkaConsumer.subscribe only
    changes the subscription (SubscriptionState.subscribe; buffered data of topics no longer
    subscribed is dropped); the assignment stays until the next poll's onJoinPrepare calls
    onPartitionsRevoked(t-0) with t-0 still assigned, so the callback's commit commits 10.
    floodmark's Consumer.subscribe clears the assignment at once: the revoke callback hears
    an empty set, 10 is never committed and t-0's next owner re-reads 0..9."""
    fake.create("u", 1)
    await produce(fake, 10)
    a = member(fake)
    await a.start()
    try:
        la = CommitOnRevoke(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: a.assignment() == {TP} and a._subscriptions.state(TP).position == 10, a)
        a.subscribe(["t", "u"], listener=la)
        await poll_until(lambda: la.assignments() == 2, a)
        assert la.calls[1] == ("revoked", {TP}, {TP}), la.calls
        assert fake.committed(TP, GROUP) == 10
    finally:
        await a.close()


async def test_resubscribing_with_auto_commit_commits_the_consumed_positions_first(fake):
    """As above with auto commit on (its interval far away, so only onJoinPrepare commits).
    Kafka: ConsumerCoordinator.onJoinPrepare -> maybeAutoCommitOffsetsAsync commits the
    positions of the still-assigned t-0 (10) before revoking. floodmark: Consumer.subscribe
    already emptied the assignment, so _on_join_prepare's commit of _positions() commits
    nothing and 0..9 are consumed again after the rebalance."""
    fake.create("u", 1)
    await produce(fake, 10)
    a = member(fake, enable_auto_commit=True, auto_commit_interval_ms=3_600_000)
    await a.start()
    try:
        la = Recorder(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: a.assignment() == {TP} and a._subscriptions.state(TP).position == 10, a)
        a.subscribe(["t", "u"], listener=la)
        await poll_until(lambda: la.assignments() == 2, a)
        assert fake.committed(TP, GROUP) == 10
    finally:
        a.abandon()
