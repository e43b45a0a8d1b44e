"""The lag rules of a partition that leaves a follower's fetch session while clean (KIP-227;
broker/replica/fetch_session.py; docs/design.md "Fetch sessions (KIP-227)").

A clean partition is not read at each fetch of its session, yet each such fetch counts as one
that found its follower caught up (Kafka reads every partition of an incremental session at every
fetch). When the session stops covering the partition (the follower forgets it: a disk floor
pause, the throttle, an error backoff, a truncation; or the leader evicts the session, or the
follower's new session replaces it), Kafka's ``lastCaughtUpTimeMs`` keeps exactly what the
session's last fetch gave it and nothing more: only fetches that cover the partition move it.
So here too: the credit is settled at that moment, no later fetch adds to it, and none is lost.

Driven on a real ReplicaManager with the fake clock and ZooKeeper store of test_isr_manager;
broker 1 leads 20 partitions, replicas 1 and 2 in the ISR (replica 2's fetches move the HW).
"""

from __future__ import annotations

import pytest

from broker.replica.fetch_session import INITIAL_EPOCH
from client.protocol.errors import ErrorCode
from tests.unit.test_fetch_session import PARTITIONS, append, body, entry, fetch, lead_all, open_session
from tests.unit.test_isr_manager import LAG, Harness

TP0 = ("t", 0)
IDLE_MS = LAG // 2  # the follower fetches well within the lag time


@pytest.fixture
async def h(tmp_path):
    """Broker 1 leads 20 partitions, replicas 1 and 2 in the ISR (replica 3 outside it)."""
    harness = Harness(tmp_path)
    await lead_all(harness, (1, 2))
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


async def idle_fetches(h: Harness, session_id: int, epoch: int, count: int, replica: int = 2) -> int:
    """``count`` incremental fetches naming nothing, ``IDLE_MS`` apart; returns the next epoch."""
    for _ in range(count):
        h.clock.now += IDLE_MS
        results, _, error = await fetch(h, body(replica, session_id, epoch, {}, wait_ms=0))
        assert error == ErrorCode.NONE and results == {}
        epoch += 1
    return epoch


def in_isr(h: Harness, replica: int = 2) -> bool:
    return replica in h.rm.get_partition(TP0).isr


async def evict(h: Harness) -> None:
    """Another follower's new session takes the cache's last slot: replica 2's, unused for longer
    than the cache's eviction time (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, 50 ms
    here), is stale and evicted (FetchSessionCache.tryEvict)."""
    h.rm.fetch_sessions.slots = 1
    h.rm.fetch_sessions.eviction_ms = 50
    _, session_id, error = await fetch(h, body(3, 0, INITIAL_EPOCH, {}, wait_ms=0))
    assert error == ErrorCode.NONE and session_id > 0 and len(h.rm.fetch_sessions) == 1


async def replace(h: Harness, old_session: int) -> int:
    """The follower reconnects: a full fetch with its old id opens a new session, without t-0."""
    entries = {("t", p): entry(0) for p in range(1, PARTITIONS)}
    _, session_id, error = await fetch(h, body(2, old_session, INITIAL_EPOCH, entries, wait_ms=0))
    assert error == ErrorCode.NONE and session_id not in (0, old_session)
    return session_id


# -- 10(a): the credit the session earned is kept -------------------------------------------------


async def test_a_forgotten_clean_partition_keeps_the_credit_of_the_last_fetch_that_covered_it(h):
    """Interleaving: full fetch at T0 (every partition read, caught up, clean); idle incremental
    fetches at T0+5 s, +10 s, +15 s (the last to cover t-0); 100 ms later a fetch forgets t-0
    (the follower's log dir went below its floor); the leader appends to t-0; 1 ms later the
    isr-expiration check runs. Replica 2 was caught up 101 ms ago: it stays in the ISR."""
    session_id = await open_session(h)
    epoch = await idle_fetches(h, session_id, 1, count=3)
    h.clock.now += 100
    await fetch(h, body(2, session_id, epoch, {}, forgotten=[TP0], wait_ms=0))
    append(h, 0)
    h.clock.now += 1
    assert await h.shrink() == 0 and in_isr(h), (
        "replica 2 was caught up 101 ms ago, at the session's last fetch that covered t-0; "
        f"last_caught_up_time_ms is {h.clock.now - h.rm.get_partition(TP0).remote_replicas[2].last_caught_up_time_ms} ms old"
    )


async def test_an_evicted_session_keeps_the_credit_of_its_last_fetch(h):
    """Interleaving: full fetch at T0; idle fetches to T0+15 s; 100 ms later another follower's
    new session evicts replica 2's (the cache is full); the leader appends to t-0; 1 ms later the
    isr-expiration check runs. Replica 2 was caught up at its session's last fetch, 101 ms ago."""
    session_id = await open_session(h)
    await idle_fetches(h, session_id, 1, count=3)
    h.clock.now += 100
    await evict(h)
    append(h, 0)
    h.clock.now += 1
    assert await h.shrink() == 0 and in_isr(h), (
        "replica 2 was caught up at its evicted session's last fetch, 101 ms ago; "
        f"last_caught_up_time_ms is {h.clock.now - h.rm.get_partition(TP0).remote_replicas[2].last_caught_up_time_ms} ms old"
    )


async def test_a_replaced_session_keeps_the_credit_of_its_last_fetch(h):
    """Interleaving: full fetch at T0; idle fetches to T0+15 s; 100 ms later the follower
    reconnects and its new session (epoch 0, the old id) leaves t-0 out (paused); the leader
    appends to t-0; 1 ms later the isr-expiration check runs. Replica 2 was caught up at the old
    session's last fetch, 101 ms ago."""
    session_id = await open_session(h)
    await idle_fetches(h, session_id, 1, count=3)
    h.clock.now += 100
    await replace(h, session_id)
    append(h, 0)
    h.clock.now += 1
    assert await h.shrink() == 0 and in_isr(h), (
        "replica 2 was caught up at its replaced session's last fetch, 101 ms ago; "
        f"last_caught_up_time_ms is {h.clock.now - h.rm.get_partition(TP0).remote_replicas[2].last_caught_up_time_ms} ms old"
    )


# -- 10(b): no credit from fetches that did not cover the partition --------------------------------


async def test_fetches_after_a_partition_was_forgotten_give_it_no_credit(h):
    """Interleaving: full fetch at T0; an idle fetch at T0+5 s (the last to cover t-0); 100 ms
    later a fetch forgets t-0; the leader appends to t-0 (replica 2 is now behind); the session
    goes on with idle fetches every 5 s to past the lag time since T0+5 s; then the follower
    names t-0 again, at its old offset, and the isr-expiration check runs. Replica 2 has been
    behind for more than replica.lag.time.max.ms: it leaves the ISR (Kafka: the re-added fetch is
    caught up as of the previous fetch of t-0, at T0+5 s)."""
    session_id = await open_session(h)
    epoch = await idle_fetches(h, session_id, 1, count=1)
    covered_at = h.clock.now
    h.clock.now += 100
    await fetch(h, body(2, session_id, epoch, {}, forgotten=[TP0], wait_ms=0))
    h.clock.now += 100
    append(h, 0)
    epoch = await idle_fetches(h, session_id, epoch + 1, count=2)
    assert h.clock.now - covered_at > LAG
    results, _, _ = await fetch(h, body(2, session_id, epoch, {TP0: entry(0)}, wait_ms=0))
    assert results[TP0].records
    replica = h.rm.get_partition(TP0).remote_replicas[2]
    assert replica.last_caught_up_time_ms == covered_at, (
        f"replica 2 last covered t-0 at {covered_at}, but is credited with "
        f"{replica.last_caught_up_time_ms} (the session's fetches after it forgot t-0)"
    )
    assert await h.shrink() == 1 and not in_isr(h)


@pytest.mark.parametrize("how", ["evicted", "replaced"])
async def test_a_session_that_is_gone_gives_no_credit_after_its_last_fetch(h, how):
    """Interleaving: full fetch at T0; an idle fetch at T0+5 s (the last to cover t-0); 100 ms
    later the session is evicted (another follower's session takes the cache's last slot; the
    follower then opens a new one) or replaced (the follower reconnects); the new session leaves
    t-0 out (paused); the leader appends to t-0; the new session fetches idle to past the lag
    time since T0+5 s, then names t-0 at its old offset. Replica 2 was last caught up at T0+5 s:
    it leaves the ISR."""
    session_id = await open_session(h)
    await idle_fetches(h, session_id, 1, count=1)
    covered_at = h.clock.now
    h.clock.now += 100
    if how == "evicted":
        await evict(h)
        h.clock.now += 100
        results, _, error = await fetch(h, body(2, session_id, 2, {}, wait_ms=0))
        assert error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    new_session = await replace(h, session_id)
    append(h, 0)
    epoch = await idle_fetches(h, new_session, 1, count=2)
    assert h.clock.now - covered_at > LAG
    await fetch(h, body(2, new_session, epoch, {TP0: entry(0)}, wait_ms=0))
    replica = h.rm.get_partition(TP0).remote_replicas[2]
    assert replica.last_caught_up_time_ms == covered_at, (
        f"{how}: replica 2 last covered t-0 at {covered_at}, but is credited with "
        f"{replica.last_caught_up_time_ms}"
    )
    assert await h.shrink() == 1 and not in_isr(h)
