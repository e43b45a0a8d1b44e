"""Incremental fetch sessions between brokers (KIP-227; Kafka's FetchSession, FetchSessionCache
and FetchContext), sans-IO: docs/design.md "Fetch sessions (KIP-227)".

Without a session, a follower's FETCH names every partition it follows from the leader, and the
leader reads every one of them, at least twice a second even when nothing moves (the long poll
expires every ``replica.fetch.wait.max.ms``). With 10,000 idle partitions that was most of a
broker's CPU (issue 25). With a session:

* the first FETCH (session id 0 or the old id, epoch 0) is full: the leader caches each
  partition's request entry in a new :class:`FetchSession` and answers every partition, with the
  session's id;
* every later FETCH (that id, the next epoch) names only the partitions whose entry changed (a new
  fetch offset, epoch or log start offset) and those to forget; the leader answers only the
  partitions with something to say: records, an error, a new high watermark or log start offset;
* beyond Kafka, which still reads every partition of a session at each fetch, the leader reads only
  the session's *dirty* partitions: those whose entry changed and those the replica manager touched
  since (an append, a high watermark move, a leadership change: whatever wakes a parked fetch). A
  partition is *clean* once a read found the follower caught up to the leader's LEO, in the ISR
  with no ISR change pending and no error; it then needs no read until it is touched. The follower
  was caught up at every fetch of the session meanwhile (Kafka reads every partition of an
  incremental session at each fetch, so each one moves the follower's ``lastCaughtUpTimeMs``).
  The session settles that credit (its :class:`~broker.replica.partition.RemoteReplica` records
  the session's last fetch as a fetch of its own: ``clean_in``, ``settle_session``) whenever the
  session stops covering the partition clean, at the last fetch that did cover it: when the
  partition is touched (before the leader's LEO moves), when its entry changes, when the
  follower forgets it, and when the session is evicted, replaced or closed. So the lag rules
  (``replica.lag.time.max.ms``) see what they would have seen had every fetch read it: no
  credit is lost, and no fetch that did not cover the partition gives it any.

A wrong session id is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH; the
follower then starts a new session with a full fetch. Epoch -1 (Kafka's FINAL_EPOCH) is a
sessionless fetch (and closes the named session): consumers fetch that way, and only followers get
sessions here. The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's
name and default, 1,000). A full fetch finding it full may evict one session, as Kafka's
``FetchSessionCache.maybeCreateSession`` / ``tryEvict`` / ``touch`` do (KIP-227): the least
recently used one if it is stale (unused for more than ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``,
two minutes: in Kafka a constant of KafkaServer, not a config); else the least valuable evictable
one, ordered by (privileged, partitions, id), if it is worth less than the new one: a consumer's
(unprivileged) session is evictable by a follower's at any time, a session created more than
two minutes before its last use by anyone's, and a new session evicts an evictable one only if it
is privileged and that one is not, or holds more partitions. Otherwise the fetch gets no session
(INVALID_SESSION_ID: it is answered in full, sessionless) and every existing session carries on,
so two followers over one slot never take turns evicting each other. Session ids count up from 1
(deterministic for the simulator); a stale id is harmless: it must name a session of the same
replica at the expected epoch.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from broker.replica.partition import Partition, RemoteReplica
from client.protocol.errors import ErrorCode
from client.types import TopicPartition

FINAL_EPOCH = -1  # sessionless (and closes the named session)
INITIAL_EPOCH = 0  # a full fetch that opens a session
INVALID_SESSION_ID = 0
MAX_EPOCH = 2**31 - 1
DEFAULT_SLOTS = 1000
#: Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (KIP-227 named the config
#: min.incremental.fetch.session.eviction.ms; Kafka 3.7 has only this constant)
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ... wrapping to 1."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class Result(Protocol):
    """A read result (:class:`~broker.replica.replica_manager.ReadResult`)."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    log_end_offset: int  # the leader's LEO when it was read


@dataclass
class CachedPartition:
    """One partition of a session: the follower's last request entry and what was last answered."""

    fetch: dict  # fetch_offset, current_leader_epoch, log_start_offset, partition_max_bytes
    sent_high_watermark: int = -2  # -2: nothing answered yet
    sent_log_start_offset: int = -2


class FetchSession:
    """A follower's session (Kafka's FetchSession)."""

    def __init__(
        self, session_id: int, replica_id: int, now_ms: int, privileged: bool = True, size: int = 0
    ) -> None:
        self.id = session_id
        self.replica_id = replica_id
        #: a follower's session (Kafka's ``privileged``): evicted by another follower's only when
        #: stale, or created long ago and smaller than the new one
        self.privileged = privileged
        self.creation_ms = now_ms
        #: Kafka's cachedSize and evictable trees, as of the session's last use (FetchSessionCache.touch)
        self.cached_size = size
        self.evictable_by_privileged = not privileged
        self.evictable_by_all = False
        self.epoch = next_epoch(INITIAL_EPOCH)  # what the next incremental FETCH must carry
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        #: to read at the next fetch; a dict used as an insertion-ordered set, so a fetch reads
        #: (and answers) its partitions in an order that does not depend on str hashing
        self.dirty: dict[TopicPartition, None] = {}
        #: the followers' replicas clean in this session (RemoteReplica.clean_in is this session)
        self.clean: dict[TopicPartition, RemoteReplica] = {}
        self.last_fetch_ms = now_ms  # RemoteReplica.settle_session reads it
        self.last_used_ms = now_ms
        #: evicted, or replaced by the follower's new session: a fetch of it still parked (its
        #: connection is gone) reads nothing and marks nothing clean when it completes
        self.closed = False

    @property
    def key(self) -> Hashable:
        """The fetch purgatory key a parked FETCH of this session waits on."""
        return ("fetch-session", self.id)

    def settle(self, tp: TopicPartition) -> None:
        """``tp`` is no longer clean in this session (touched, its entry changed or forgotten, or
        the session gone): its follower was caught up at the session's last fetch, which did not
        read it; record that fetch as read (RemoteReplica.settle_session). Called before the
        session's fetch time moves on, so no later fetch counts."""
        replica = self.clean.pop(tp, None)
        if replica is not None and replica.clean_in is self:
            replica.settle_session()

    def to_read(self) -> dict[TopicPartition, dict]:
        """The request entries of the dirty partitions: what this fetch reads (nothing once closed:
        a parked fetch of an evicted or replaced session answers a connection the follower has
        left, and its entries may be older than what the follower has)."""
        if self.closed:
            return {}
        return {tp: self.partitions[tp].fetch for tp in self.dirty if tp in self.partitions}

    def _news(self, tp: TopicPartition, result: Result) -> bool:
        cached = self.partitions[tp]
        return bool(
            result.records
            or result.error_code != ErrorCode.NONE
            or result.high_watermark != cached.sent_high_watermark
            or result.log_start_offset != cached.sent_log_start_offset
        )

    def answer_due(self, results: dict[TopicPartition, Result]) -> bool:
        """Whether an incremental fetch has anything to say: records, an error, or a high watermark
        or log start offset the follower has not been sent."""
        return any(tp in self.partitions and self._news(tp, r) for tp, r in results.items())

    def answer(self, results: dict[TopicPartition, Result], full: bool) -> dict[TopicPartition, Result]:
        """What to send: every partition of a full fetch, those with news of an incremental one."""
        sent = {}
        for tp, result in results.items():
            if tp in self.partitions and (full or self._news(tp, result)):
                cached = self.partitions[tp]
                cached.sent_high_watermark = result.high_watermark
                cached.sent_log_start_offset = result.log_start_offset
                sent[tp] = result
        return sent


class FetchSessionCache:
    """Every session of this leader (Kafka's FetchSessionCache), and which hold a partition."""

    def __init__(
        self, slots: int = DEFAULT_SLOTS, eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
    ) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms  # Kafka's evictionMs
        self._sessions: dict[int, FetchSession] = {}  # least recently used first
        self._holding: dict[TopicPartition, dict[int, FetchSession]] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int, replica_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        return session if session is not None and session.replica_id == replica_id else None

    def create(
        self, replica_id: int, now_ms: int, size: int = 0, privileged: bool = True
    ) -> FetchSession | None:
        """Kafka's maybeCreateSession: a new session of ``size`` partitions when there is a free
        slot or :meth:`_try_evict` frees one, else None (the fetch goes sessionless; a slot count
        of 0 turns sessions off)."""
        if len(self._sessions) >= self.slots and not self._try_evict(privileged, size, now_ms):
            return None
        session_id = self._next_id
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = 1 if session_id >= MAX_EPOCH else session_id + 1
        self._next_id = 1 if session_id >= MAX_EPOCH else session_id + 1
        session = FetchSession(session_id, replica_id, now_ms, privileged, size)
        self._sessions[session_id] = session
        self._touch(session, now_ms, size)
        return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict: remove the least recently used session if it is stale; else the least
        valuable session evictable by the new one, if the new one is worth at least as much by
        (privileged, size, id), the new id counting as 0, so an equal size never evicts. A scan:
        it runs only for a full fetch finding the cache full, over sessions that are few here
        (followers only)."""
        lru = next(iter(self._sessions.values()), None)
        if lru is None:
            return False
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru)
            return True
        evictable = [
            s
            for s in self._sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not evictable:
            return False
        victim = min(evictable, key=lambda s: (s.privileged, s.cached_size, s.id))
        if (privileged, size, 0) < (victim.privileged, victim.cached_size, victim.id):
            return False
        self.remove(victim)
        return True

    def _touch(self, session: FetchSession, now_ms: int, size: int) -> None:
        """Kafka's FetchSessionCache.touch: ``session`` becomes the most recently used, and its
        size (``size`` partitions) and evictability are taken as of now."""
        self._sessions.pop(session.id, None)
        self._sessions[session.id] = session
        session.last_used_ms = now_ms
        session.cached_size = size
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = old or not session.privileged
        session.evictable_by_all = old

    def remove(self, session: FetchSession) -> None:
        """Evicted, replaced or closed: its clean partitions are settled as of its last fetch."""
        if self._sessions.pop(session.id, None) is None:
            return
        session.closed = True
        for tp in list(session.clean):
            session.settle(tp)
        for tp in session.partitions:
            self._release(session, tp)

    def _release(self, session: FetchSession, tp: TopicPartition) -> None:
        """``session`` no longer holds ``tp``."""
        holders = self._holding.get(tp)
        if holders is not None:
            holders.pop(session.id, None)
            if not holders:
                del self._holding[tp]

    def use(self, session: FetchSession, now_ms: int) -> None:
        """A fetch of ``session`` arrived: it becomes the most recently used, its epoch moves on, and
        its clean partitions count as caught up at ``now_ms``."""
        self._touch(session, now_ms, len(session.partitions))
        session.epoch = next_epoch(session.epoch)
        session.last_fetch_ms = now_ms

    def update(
        self,
        session: FetchSession,
        requested: dict[TopicPartition, dict],
        forgotten: Iterable[TopicPartition],
    ) -> None:
        """Apply a request's entries and forgotten partitions, before :meth:`use` (so a clean one
        is settled as of the session's previous fetch, the last that covered it); every entry
        that is new or changed becomes dirty."""
        for tp in forgotten:
            if session.partitions.pop(tp, None) is not None:
                session.settle(tp)
                session.dirty.pop(tp, None)
                self._release(session, tp)
        for tp, fetch in requested.items():
            cached = session.partitions.get(tp)
            if cached is None:
                session.partitions[tp] = CachedPartition(fetch)
                self._holding.setdefault(tp, {})[session.id] = session
            elif cached.fetch != fetch:
                cached.fetch = fetch
            else:
                continue
            session.settle(tp)
            session.dirty[tp] = None

    def holding(self, tp: TopicPartition) -> Iterable[FetchSession]:
        """The sessions that hold ``tp``."""
        holders = self._holding.get(tp)
        return list(holders.values()) if holders else ()


@dataclass
class FetchContext:
    """One FETCH and its session, if any (Kafka's FetchContext: sessionless, full or incremental)."""

    requested: dict[TopicPartition, dict]
    session: FetchSession | None = None
    full: bool = True
    error_code: int = ErrorCode.NONE

    @property
    def session_id(self) -> int:
        return INVALID_SESSION_ID if self.session is None else self.session.id

    @property
    def incremental(self) -> bool:
        return self.session is not None and not self.full

    def to_read(self) -> dict[TopicPartition, dict]:
        """What this fetch reads: a session's dirty partitions, else every partition asked for."""
        return self.requested if self.session is None else self.session.to_read()

    def answer(self, results: dict[TopicPartition, Result]) -> dict[TopicPartition, Result]:
        return results if self.session is None else self.session.answer(results, self.full)


def fetch_context(cache: FetchSessionCache, body: dict, now_ms: int) -> FetchContext:
    """Kafka's FetchManager.newContext. A clean partition whose entry changed or that is
    forgotten, and every clean partition of a session this fetch replaces or closes, is settled
    (:meth:`FetchSession.settle`) before the session's fetch time moves to ``now_ms``."""
    replica_id = body["replica_id"]
    session_id, epoch = body.get("session_id", INVALID_SESSION_ID), body.get("session_epoch", FINAL_EPOCH)
    requested = {(t["topic"], p["partition"]): p for t in body["topics"] for p in t["partitions"]}
    old = cache.get(session_id, replica_id) if session_id != INVALID_SESSION_ID else None
    if epoch in (FINAL_EPOCH, INITIAL_EPOCH) and old is not None:
        cache.remove(old)  # a new session, or none, replaces it
    if epoch == FINAL_EPOCH or replica_id < 0:
        return FetchContext(requested)  # consumers fetch without a session here
    if epoch == INITIAL_EPOCH:
        session = cache.create(replica_id, now_ms, size=len(requested))
        if session is not None:
            cache.update(session, requested, ())
        return FetchContext(requested, session)  # without a session: answered in full, id 0
    if old is None:
        return FetchContext({}, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if epoch != old.epoch:
        return FetchContext({}, error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    forgotten = [(t["topic"], p) for t in body.get("forgotten_topics", ()) for p in t["partitions"]]
    cache.update(old, requested, forgotten)
    cache.use(old, now_ms)
    return FetchContext(requested, old, full=False)


def mark_clean(
    context: FetchContext,
    results: dict[TopicPartition, Result],
    partitions: Mapping[TopicPartition, Partition],
) -> None:
    """Each partition a session read that found its follower caught up to the LEO, in the ISR with
    no ISR change pending, and without error is clean: the session reads it again only once
    touched (ReplicaManager.fetch_ready, and every applied ISR change). Only for the read at a
    fetch's arrival, the one that recorded the follower's fetch state: the read of a parked
    fetch's completion moves no follower state (Kafka's ``readFromPurgatory``), so it proves
    nothing about this session; marking there let a session the follower had abandoned take
    the follower's credit (``RemoteReplica.clean_in``) from the session it fetches with."""
    session = context.session
    if session is None or session.closed:
        return
    for tp, result in results.items():
        if result.error_code != ErrorCode.NONE or tp not in session.partitions:
            continue
        partition = partitions.get(tp)
        if (
            partition is None
            or not partition.is_leader
            or session.replica_id not in partition.isr
            or partition.pending_isr_change is not None  # whose end would not be touched: read on
        ):
            continue
        replica = partition.remote_replicas.get(session.replica_id)
        if replica is None or replica.log_end_offset < result.log_end_offset:
            continue
        session.dirty.pop(tp, None)
        session.clean[tp] = replica
        replica.clean_in = session


def touch(cache: FetchSessionCache, tp: TopicPartition) -> list[Hashable]:
    """Something a fetch of ``tp`` answers changed: each session holding it reads it at its next
    fetch (settled first if it was clean). Returns the sessions' purgatory keys, whose parked
    fetches may now complete."""
    keys = []
    for session in cache.holding(tp):
        if tp not in session.dirty:
            session.dirty[tp] = None
            session.settle(tp)
        keys.append(session.key)
    return keys


class FetchSessionHandler:
    """A follower's side of its fetch session with one leader (Kafka's FetchSessionHandler): what
    the leader's session holds, so each FETCH names only what changed. Any doubt (a connection
    dropped, a request that timed out, the leader's session error) starts over with a full fetch."""

    def __init__(self) -> None:
        self.id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict[TopicPartition, dict] = {}  # the entries the leader's session holds

    def build(
        self, wanted: dict[TopicPartition, dict]
    ) -> tuple[dict[TopicPartition, dict], list[TopicPartition]]:
        """The entries and forgotten partitions of the next FETCH for the ``wanted`` entries."""
        if self.epoch == INITIAL_EPOCH:
            return wanted, []
        changed = {tp: entry for tp, entry in wanted.items() if self.sent.get(tp) != entry}
        return changed, [tp for tp in self.sent if tp not in wanted]

    def handle_response(
        self,
        session_id: int,
        error_code: int,
        entries: dict[TopicPartition, dict],
        forgotten: list[TopicPartition],
    ) -> bool:
        """Record what the leader's session now holds; False (and a full fetch next) when the leader
        refused the session."""
        if error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.id = INVALID_SESSION_ID
            self.reset()
            return False
        if self.epoch == INITIAL_EPOCH:
            self.id, self.sent = session_id, dict(entries)
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else next_epoch(INITIAL_EPOCH)
            return True
        self.sent.update(entries)
        for tp in forgotten:
            self.sent.pop(tp, None)
        self.epoch = next_epoch(self.epoch)
        return True

    def reset(self) -> None:
        """The next FETCH is full (keeping the id, so the leader closes that session)."""
        self.epoch = INITIAL_EPOCH
        self.sent = {}


def by_topic(pairs: Iterable[tuple[str, Any]]) -> list[dict]:
    """Kafka's nesting, ``[{topic, partitions: [...]}]``, of (topic, partition entry) pairs."""
    topics: dict[str, list] = {}
    for topic, entry in pairs:
        topics.setdefault(topic, []).append(entry)
    return [{"topic": t, "partitions": ps} for t, ps in topics.items()]
