"""KIP-227 fetch sessions between brokers (broker/replica/fetch_session.py; docs/design.md "Fetch
sessions (KIP-227)"), on a real ReplicaManager and real logs, with the fake clock and ZooKeeper
store of test_isr_manager: a full fetch opens a session and answers everything; an incremental
fetch reads only the partitions touched since (never an idle one), answers only what changed,
parks until something is touched, and the lag rules count the fetches that did not read a clean
partition, so an idle follower stays in the ISR and a silent one still leaves it. Session errors
are Kafka's. The follower's side (FetchSessionHandler) names only what changed."""

from __future__ import annotations

import asyncio

import pytest

from broker.log import Log
from broker.replica.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    FetchSessionHandler,
    by_topic,
)
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch
from client.types import TopicPartition
from tests.unit.test_isr_manager import LAG, Harness, leader_and_isr_request, partition_state_entry
from zk.data import LeaderAndIsr

PARTITIONS = 20


async def lead_all(h: Harness, isr: tuple[int, ...]) -> None:
    for p in range(PARTITIONS):
        h.store.states[TopicPartition("t", p)] = LeaderAndIsr(1, 0, isr, 0)
    entries = [partition_state_entry("t", 0, leader=1, isr=isr, partition=p) for p in range(PARTITIONS)]
    answer = await h.rm.become_leader_or_follower(leader_and_isr_request(*entries))
    assert {p["error_code"] for p in answer["partitions"]} == {ErrorCode.NONE}


@pytest.fixture
async def h(tmp_path):
    """Broker 1 leads 20 partitions, replicas 1, 2 and 3 in the ISR."""
    harness = Harness(tmp_path)
    await lead_all(harness, (1, 2, 3))
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


@pytest.fixture
async def h2(tmp_path):
    """The same with replicas 1 and 2 in the ISR: replica 2's fetches move the HW."""
    harness = Harness(tmp_path)
    await lead_all(harness, (1, 2))
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


def entry(offset: int, epoch: int = 0) -> dict:
    return {
        "fetch_offset": offset,
        "current_leader_epoch": epoch,
        "log_start_offset": 0,
        "partition_max_bytes": 1 << 20,
    }


def body(replica: int, session_id: int, epoch: int, entries: dict, forgotten=(), wait_ms: int = 500) -> dict:
    return {
        "replica_id": replica,
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 10 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": by_topic((tp[0], dict(e, partition=tp[1])) for tp, e in entries.items()),
        "forgotten_topics": by_topic(forgotten),
    }


def fetch(h: Harness, request: dict) -> asyncio.Future:
    answer: asyncio.Future = asyncio.get_running_loop().create_future()
    h.rm.fetch_messages(request, lambda results, sid, error: answer.set_result((results, sid, error)))
    return answer


def append(h: Harness, p: int) -> None:
    h.rm.get_log(("t", p)).append_as_leader(build_batch([(None, b"v", 0, [])]), 0)
    h.rm.fetch_ready(("t", p))


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, int]]:
    made: list[tuple[str, int]] = []
    real = Log.read

    def counting(self, *args, **kwargs):  # noqa: ANN202
        made.append((self.topic, self.partition))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Log, "read", counting)
    return made


async def open_session(h: Harness, replica: int = 2) -> int:
    results, session_id, error = await fetch(
        h, body(replica, 0, INITIAL_EPOCH, {("t", p): entry(0) for p in range(PARTITIONS)}, wait_ms=0)
    )
    assert error == ErrorCode.NONE and session_id > 0 and len(results) == PARTITIONS
    return session_id


async def test_an_idle_incremental_fetch_reads_nothing_and_a_touch_answers_only_that_partition(h2, reads):
    h = h2
    session_id = await open_session(h)
    reads.clear()
    parked = fetch(h, body(2, session_id, 1, {}))
    await asyncio.sleep(0)
    assert not parked.done() and reads == [], "every partition is clean: nothing read, the fetch parks"
    append(h, 7)
    results, sid, error = await asyncio.wait_for(parked, 1)
    assert (sid, error) == (session_id, ErrorCode.NONE)
    assert list(results) == [("t", 7)] and results[("t", 7)].records
    assert set(reads) == {("t", 7)}
    # the follower asks for partition 7 at its new offset: the HW moves, and that is news
    reads.clear()
    results, _, _ = await fetch(h, body(2, session_id, 2, {("t", 7): entry(1)}))
    assert list(results) == [("t", 7)] and not results[("t", 7)].records
    assert set(reads) == {("t", 7)}


async def test_a_clean_follower_stays_in_the_isr_and_a_silent_one_leaves_it(h):
    """The lag rules count the session's fetches that found a partition clean and did not read
    it: an append after a long idle time finds both followers caught up at their last fetch; once
    one stops fetching, it lags as it would without a session."""
    s2 = await open_session(h, 2)
    s3 = await open_session(h, 3)
    epoch = 1
    for _ in range(3):  # idle fetches, each within the lag time of the previous one
        h.clock.now += LAG // 2
        for replica, sid in ((2, s2), (3, s3)):
            results, _, error = await fetch(h, body(replica, sid, epoch, {}, wait_ms=0))
            assert error == ErrorCode.NONE and results == {}
        epoch += 1
    append(h, 0)  # 1.5 lag times since either read partition 0
    assert await h.shrink() == 0, "both were caught up at their last fetch"
    h.clock.now += LAG + 1  # replica 3 stops fetching; replica 2 fetches the new record
    results, _, _ = await fetch(h, body(2, s2, epoch, {}, wait_ms=0))
    assert list(results) == [("t", 0)] and results[("t", 0)].records
    await fetch(h, body(2, s2, epoch + 1, {("t", 0): entry(1)}, wait_ms=0))
    assert await h.shrink() == 1
    assert sorted(h.rm.get_partition(("t", 0)).isr) == [1, 2]
    assert all(sorted(h.rm.get_partition(("t", p)).isr) == [1, 2, 3] for p in range(1, PARTITIONS))


async def test_a_parked_fetch_of_a_replaced_session_reads_and_marks_nothing(h2, reads):
    """The follower reconnected and opened a new session (epoch 0, the old id) while a fetch of
    the old one was parked: when it expires it must not read the old session's entries (older than
    the follower's log, they would move its state back) nor mark anything clean in a dead session.
    Replica 3 is outside the ISR here, so none of its partitions is ever clean: each fetch reads
    them all, and with nothing new to say parks on them."""
    h = h2
    old = await open_session(h, 3)
    reads.clear()
    parked = fetch(h, body(3, old, 1, {}, wait_ms=50))
    await asyncio.sleep(0)
    assert not parked.done() and len(reads) == PARTITIONS
    _, new, _ = await fetch(
        h, body(3, old, INITIAL_EPOCH, {("t", p): entry(0) for p in range(PARTITIONS)}, wait_ms=0)
    )
    assert new != old
    reads.clear()
    results, _, _ = await asyncio.wait_for(parked, 1)
    assert results == {} and reads == [], "the replaced session's parked fetch read nothing"


async def test_session_errors_are_kafkas_and_epoch_minus_one_is_sessionless(h):
    session_id = await open_session(h)
    assert (await fetch(h, body(2, session_id + 99, 1, {}, wait_ms=0)))[
        2
    ] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert (await fetch(h, body(3, session_id, 1, {}, wait_ms=0)))[2] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert (await fetch(h, body(2, session_id, 5, {}, wait_ms=0)))[2] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert (await fetch(h, body(2, session_id, 1, {}, wait_ms=0)))[
        2
    ] == ErrorCode.NONE  # a refusal changes nothing
    results, sid, error = await fetch(h, body(2, session_id, FINAL_EPOCH, {("t", 0): entry(0)}, wait_ms=0))
    assert (sid, error, list(results)) == (0, ErrorCode.NONE, [("t", 0)])
    assert (await fetch(h, body(2, session_id, 2, {}, wait_ms=0)))[2] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # a consumer never gets a session
    consumer = dict(body(-1, 0, INITIAL_EPOCH, {("t", 0): entry(0)}, wait_ms=0), replica_id=-1)
    assert (await fetch(h, consumer))[1] == 0


async def test_forgotten_partitions_leave_the_session_and_a_leadership_change_is_answered(h):
    session_id = await open_session(h)
    await fetch(h, body(2, session_id, 1, {}, forgotten=[("t", 3)], wait_ms=0))
    append(h, 3)
    results, _, _ = await fetch(h, body(2, session_id, 2, {}, wait_ms=0))
    assert results == {}, "a forgotten partition is not answered"
    # this broker becomes a follower of partition 5 (epoch 1): the session answers at once
    await h.rm.become_leader_or_follower(
        leader_and_isr_request(partition_state_entry("t", 1, leader=2, partition=5))
    )
    results, _, _ = await fetch(h, body(2, session_id, 3, {}))
    assert list(results) == [("t", 5)] and results[("t", 5)].error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_the_cache_evicts_only_as_kafkas_try_evict_does_and_tracks_holders():
    """Kafka's FetchSessionCache.maybeCreateSession / tryEvict / touch (eviction time 1 s here):
    a full cache evicts its least recently used session if stale; else the least valuable
    evictable one, if the new one is worth more (privileged first, then size; a follower's
    session is evictable by another follower's only once created more than the eviction time
    before its last use); else the new fetch gets no session and nothing is evicted."""
    cache = FetchSessionCache(slots=2, eviction_ms=1000)
    a = cache.create(2, now_ms=0, size=1)
    b = cache.create(3, now_ms=10, size=2)
    cache.update(a, {("t", 0): entry(0)}, ())
    cache.update(b, {("t", 0): entry(0), ("t", 1): entry(0)}, ())
    assert {s.id for s in cache.holding(("t", 0))} == {a.id, b.id}
    cache.use(a, now_ms=20)  # a is now the most recently used
    assert cache.create(4, now_ms=30, size=5) is None, "two recent follower sessions: none evicted"
    assert cache.get(a.id, 2) is a and cache.get(b.id, 3) is b
    c = cache.create(4, now_ms=1011, size=5)  # b, unused for more than 1 s, is stale
    assert c is not None and cache.get(b.id, 3) is None and cache.get(a.id, 2) is a
    assert {s.id for s in cache.holding(("t", 0))} == {a.id} and list(cache.holding(("t", 1))) == []
    cache.use(a, now_ms=1200)  # a was created over 1 s before this use: evictable, with 1 partition
    assert cache.create(5, now_ms=1300, size=1) is None, "as large as a: not worth more"
    d = cache.create(5, now_ms=1300, size=2)
    assert d is not None and cache.get(a.id, 2) is None and len(cache) == 2
    # a consumer's (unprivileged) session gives way to a follower's at once, never the reverse
    mixed = FetchSessionCache(slots=1, eviction_ms=1000)
    consumer = mixed.create(-1, now_ms=0, size=100, privileged=False)
    follower = mixed.create(2, now_ms=1, size=1)
    assert follower is not None and mixed.get(consumer.id, -1) is None
    assert mixed.create(-1, now_ms=2, size=1000, privileged=False) is None
    assert FetchSessionCache(slots=0).create(2, 0) is None


def test_the_follower_names_only_changed_entries_and_starts_over_on_any_doubt():
    handler = FetchSessionHandler()
    wanted = {("t", 0): entry(0), ("t", 1): entry(0)}
    assert handler.build(wanted) == (wanted, []) and handler.epoch == INITIAL_EPOCH
    assert handler.handle_response(7, ErrorCode.NONE, wanted, [])
    assert (handler.id, handler.epoch) == (7, 1)
    assert handler.build(wanted) == ({}, [])
    moved = {("t", 0): entry(5), ("t", 2): entry(0)}
    changed, forgotten = handler.build(moved)
    assert changed == moved and forgotten == [("t", 1)]
    assert handler.handle_response(7, ErrorCode.NONE, changed, forgotten)
    assert handler.sent == moved and handler.epoch == 2
    assert not handler.handle_response(7, ErrorCode.INVALID_FETCH_SESSION_EPOCH, {}, [])
    assert (handler.id, handler.epoch, handler.build(moved)) == (7, INITIAL_EPOCH, (moved, []))
    handler.handle_response(8, ErrorCode.NONE, moved, [])
    assert not handler.handle_response(8, ErrorCode.FETCH_SESSION_ID_NOT_FOUND, {}, [])
    assert (handler.id, handler.epoch) == (0, INITIAL_EPOCH)
    handler.handle_response(0, ErrorCode.NONE, moved, [])  # the leader keeps no session: full again
    assert handler.epoch == INITIAL_EPOCH
