"""Adversarial review of KIP-227 fetch sessions on the leader (broker/replica/fetch_session.py,
broker/replica/replica_manager.py, broker/replica/delayed.py) against Kafka 3.7's
core/src/main/scala/kafka/server/FetchSession.scala and ReplicaManager.scala.

Driven on a real ReplicaManager with the fake clock and the in-memory ZooKeeper store of
tests/unit/test_isr_manager.py: broker 1 leads 20 partitions, replicas 1 and 2 in the ISR.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.replica.fetch_session import INITIAL_EPOCH
from client.protocol.errors import ErrorCode
from tests.unit.test_fetch_session import PARTITIONS, append, body, entry, fetch, lead_all, open_session
from tests.unit.test_fetch_session_lag import idle_fetches
from tests.unit.test_isr_manager import Harness

TP0 = ("t", 0)


@pytest.fixture
async def h(tmp_path):
    harness = Harness(tmp_path)
    await lead_all(harness, (1, 2))
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


def all_at(offset: int) -> dict:
    return {("t", p): entry(offset) for p in range(PARTITIONS)}


async def test_a_parked_full_fetch_of_an_abandoned_session_does_not_take_the_followers_credit(h):
    """Interleaving (a resend whose outcome is unknown): the follower's session S0 is open, every
    partition clean. Its connection drops; it reconnects and sends a full fetch F1 (epoch 0, id
    S0): the leader replaces S0 with S1, finds nothing new and parks F1 (replica.fetch.wait.max.ms).
    The connection drops again before F1 is answered; the follower, which never learnt S1's id,
    reconnects and sends F2 (epoch 0, id S0, unknown by now): the leader opens S2, which the
    follower uses from then on. (Any replica.fetch.backoff.ms below replica.fetch.wait.max.ms
    lets the second reconnect land while F1 is parked.) F1 then expires; its answer goes to a
    closed connection. The follower fetches idle through S2 every 5 s for 20 s, then the leader
    appends to t-0 and the isr-expiration check runs 1 ms later.

    Kafka 3.7: a read on a delayed fetch's completion never touches follower state
    (ReplicaManager.readFromLog with readFromPurgatory = true, Partition.fetchRecords
    ``updateFetchState = !readFromPurgatory``), and every fetch of S2 reads t-0 and moves
    lastCaughtUpTimeMs (Replica.updateFetchStateOrThrow): replica 2 was caught up 5 s ago and
    stays in the ISR. Floodmark: F1's completion re-reads its partitions, and mark_clean marks
    them clean in S1 (open, abandoned: only a replaced or evicted session is closed), so
    RemoteReplica.clean_in points at S1 and S2's later fetches credit nothing; the append's
    touch settles S1's credit, 20 s old, and replica 2 is shrunk out of the ISR though it
    fetched 5 s ago."""
    s0 = await open_session(h)
    h.clock.now += 100
    first = fetch(h, body(2, s0, INITIAL_EPOCH, all_at(0), wait_ms=50))  # F1: S0 -> S1, parked
    assert not first.done()
    h.clock.now += 100
    _, s2, error = await fetch(h, body(2, s0, INITIAL_EPOCH, all_at(0), wait_ms=0))  # F2: opens S2
    assert error == ErrorCode.NONE and s2 not in (0, s0)
    h.clock.now += 100
    _, s1, _ = await asyncio.wait_for(first, 5)  # F1 expires; nobody reads its answer
    assert s1 not in (0, s0, s2)
    await idle_fetches(h, s2, 1, count=4)  # S2 fetches every 5 s, 20 s in all
    last_fetch = h.clock.now
    append(h, 0)
    h.clock.now += 1
    replica = h.rm.get_partition(TP0).remote_replicas[2]
    shrunk = await h.shrink()
    assert shrunk == 0 and 2 in h.rm.get_partition(TP0).isr, (
        f"replica 2 fetched through S2 {h.clock.now - last_fetch} ms before the check, yet it was "
        f"shrunk: last_caught_up_time_ms is {h.clock.now - replica.last_caught_up_time_ms} ms old "
        "(the credit of the abandoned session S1, marked clean by F1's completion)"
    )


async def test_a_new_follower_session_does_not_evict_another_followers_recent_session(h):
    """Interleaving: max.incremental.fetch.session.cache.slots=1 (one slot, two followers).
    Replica 2 opens a session at T; 1 s later replica 3 sends a full fetch (epoch 0) naming the
    same 20 partitions; 1 s after that replica 2 sends its next incremental fetch.

    Kafka 3.7 (FetchSessionCache.maybeCreateSession / tryEvict): a follower's (privileged)
    session may evict only a stale one (idle for min.incremental.fetch.session.eviction.ms), a
    consumer's, or a privileged one created more than that long ago and holding fewer
    partitions; replica 2's session was created 1 s ago and is as large, so replica 3 gets no
    session (INVALID_SESSION_ID, it fetches sessionless) and replica 2's incremental fetch goes
    on. Floodmark (FetchSessionCache.create) evicts the least recently used session whatever it
    is: replica 2 gets FETCH_SESSION_ID_NOT_FOUND and a full fetch, which evicts replica 3's,
    and so on: two followers over one slot take turns failing every other fetch and every
    partition is read at every full fetch (the cost issue 25 sessions were made to remove)."""
    h.rm.fetch_sessions.slots = 1
    s2 = await open_session(h, 2)
    h.clock.now += 1_000
    results, s3, error = await fetch(h, body(3, 0, INITIAL_EPOCH, all_at(0), wait_ms=0))
    assert (s3, error, len(results)) == (0, ErrorCode.NONE, PARTITIONS), (
        "replica 3 is answered in full without a session (INVALID_SESSION_ID)"
    )
    h.clock.now += 1_000
    _, sid, error = await fetch(h, body(2, s2, 1, {}, wait_ms=0))
    assert error == ErrorCode.NONE and sid == s2, (
        f"replica 2's incremental fetch on its 2 s old session was answered {ErrorCode(error).name}: "
        "replica 3's new session evicted it (Kafka 3.7 creates no session for replica 3 instead)"
    )


async def test_a_parked_fetchs_completion_does_not_move_the_followers_leo_back(h):
    """Interleaving: replica 2 (ISR 1, 2) sends F1, sessionless, for t-0 at offset 0 with
    min.bytes 1 MiB: nothing to send, F1 parks. The leader appends one record; replica 2's next
    fetch F2 (a new connection, sessionless, max wait 0) asks for t-0 at offset 1: the leader
    records LEO 1 and the HW moves to 1, which completes F1, still at offset 0.

    Kafka 3.7 (DelayedFetch.onComplete -> ReplicaManager.readFromLog(readFromPurgatory = true),
    Partition.fetchRecords ``updateFetchState = false``): F1's completion reads without
    recording a fetch, so the leader still knows replica 2's LEO as 1. Floodmark recorded F1's
    old fetch offset again: the follower's LEO went back to 0 on the leader."""
    sessionless = {TP0: entry(0)}
    first = fetch(h, dict(body(2, 0, -1, sessionless, wait_ms=60_000), min_bytes=1 << 20))
    await asyncio.sleep(0)
    assert not first.done()
    append(h, 0)
    await asyncio.sleep(0)
    assert not first.done(), "one record is below F1's min.bytes"
    h.clock.now += 10
    await fetch(h, body(2, 0, -1, {TP0: entry(1)}, wait_ms=0))
    assert h.rm.get_log(TP0).high_watermark == 1
    results, _, _ = await asyncio.wait_for(first, 5)  # completed by the HW move
    assert results[TP0].records
    replica = h.rm.get_partition(TP0).remote_replicas[2]
    assert replica.log_end_offset == 1, (
        f"the leader records replica 2's LEO as {replica.log_end_offset} after F1's completion "
        "read at F1's old offset 0 (Kafka 3.7: a completion never updates follower fetch state)"
    )
