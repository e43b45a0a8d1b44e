"""A group member's commits around a rebalance (client/consumer/group_coordinator.py,
offset_commits.py; Kafka's ConsumerCoordinator.onJoinPrepare and sendOffsetCommitRequest;
docs/design.md "Consumer groups").

Real consumers against tests/unit/fake_group_cluster.py: the broker's own group coordinator
behind the fake cluster's sockets, on a clock only the test moves, so a member's session
expires exactly when the test says (``fake.advance``) and never by accident. Every wait is for a
state (a member fenced, a rebalance completed), bounded only so a broken build cannot hang.

* the eager revoke callback runs while the partitions are still assigned: a commit in it commits
  their positions, ``position()`` answers;
* a fenced member (a zombie) refuses its own commits locally with CommitFailedError and sends
  nothing, so the next owner's committed offset stands;
* a fenced member's partitions are reported lost (``on_partitions_lost``, by default
  ``on_partitions_revoked``) before they are taken away;
* a commit answered after its generation was replaced ends nothing of the new generation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from client import Consumer, Producer, TopicPartition
from client.consumer.errors import CommitFailedError
from client.consumer.rebalance_listener import ConsumerRebalanceListener
from client.protocol.api import ApiKey
from client.protocol.errors import KafkaError
from tests.unit.fake_group_cluster import FakeGroupCluster

GROUP = "g"
SESSION_MS = 6000
TP = TopicPartition("t", 0)
BOUND_S = 30  # only so a broken build fails instead of hanging; nothing waits for it


@pytest.fixture
async def fake():
    cluster = await FakeGroupCluster().start()
    cluster.create("t", 1)
    yield cluster
    await cluster.stop()


def member(fake: FakeGroupCluster, **overrides) -> Consumer:
    return Consumer(
        fake.bootstrap,
        **{
            "group_id": GROUP,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "session_timeout_ms": SESSION_MS,
            "heartbeat_interval_ms": 20,
            "fetch_max_wait_ms": 20,
            "retry_backoff_ms": 10,
            **overrides,
        },
    )


async def produce(fake: FakeGroupCluster, n: int) -> None:
    async with Producer(fake.bootstrap, linger_ms=1) as p:
        await asyncio.gather(*[await p.send("t", b"v%d" % i, partition=0) for i in range(n)])


async def poll_until(done: Callable[[], bool], *consumers: Consumer) -> None:
    """Poll every consumer (their poll loops) until ``done()``."""

    async def loop(c: Consumer) -> None:
        while not done():
            await c.poll(timeout_ms=20)

    async with asyncio.timeout(BOUND_S):
        await asyncio.gather(*(loop(c) for c in consumers))


async def until(done: Callable[[], bool]) -> None:
    """Wait for a state the background tasks (heartbeats) reach, without polling."""
    async with asyncio.timeout(BOUND_S):
        while not done():
            await asyncio.sleep(0.005)


def generation(c: Consumer) -> int:
    return c.group_metadata().generation_id


async def fence(fake: FakeGroupCluster, c: Consumer) -> None:
    """Expire ``c``'s session at the coordinator; its next heartbeat is answered
    UNKNOWN_MEMBER_ID and resets its generation. ``c`` does not poll meanwhile (a long
    processing step, as a zombie's)."""
    fake.advance(SESSION_MS + 1)
    await until(lambda: generation(c) == -1)


class Recorder(ConsumerRebalanceListener):
    """Every callback with its partitions and the consumer's assignment at that moment."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.calls: list[tuple[str, set[TopicPartition], set[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", set(revoked), self.consumer.assignment()))

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", set(lost), self.consumer.assignment()))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", set(assigned), self.consumer.assignment()))

    def assignments(self) -> int:
        return sum(1 for name, _, _ in self.calls if name == "assigned")


# -- item 4: the revoke callback runs before the assignment is cleared ---------------------------


class CommitOnRevoke(Recorder):
    """The documented place to commit by hand (auto commit off)."""

    def __init__(self, consumer: Consumer) -> None:
        super().__init__(consumer)
        self.positions: dict[TopicPartition, int] = {}
        self.errors: list[str] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await super().on_partitions_revoked(revoked)
        for tp in revoked:
            try:
                self.positions[tp] = await self.consumer.position(tp)
            except Exception as exc:  # noqa: BLE001 - the test reports whatever the callback met
                self.errors.append(f"position({tp}): {exc!r}")
        try:
            await self.consumer.commit()
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"commit(): {exc!r}")


async def test_a_commit_in_the_revoke_callback_commits_the_revoked_positions(fake):
    """Interleaving: A owns t-0 and has consumed offsets 0..9 (position 10, nothing committed,
    auto commit off); B joins; A's heartbeat is answered REBALANCE_IN_PROGRESS; A's poll runs
    the eager onJoinPrepare: the revoke callback, whose ``position()`` and ``commit()`` must
    still see t-0, then the assignment is cleared and A rejoins. The next owner of t-0 (A again:
    Range gives it to the first member id) starts at the committed 10, not at 0."""
    await produce(fake, 10)
    a, b = member(fake), member(fake)
    await a.start()
    await b.start()
    try:
        la, lb = CommitOnRevoke(a), Recorder(b)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: a.assignment() == {TP} and a._subscriptions.state(TP).position == 10, a)
        b.subscribe(["t"], listener=lb)
        await poll_until(lambda: la.assignments() == 2 and lb.assignments() == 1, a, b)

        assert la.calls[1] == ("revoked", {TP}, {TP}), la.calls
        assert la.errors == []
        assert la.positions == {TP: 10}
        assert fake.committed(TP, GROUP) == 10
        owner = a if TP in a.assignment() else b
        assert await owner.position(TP) == 10
    finally:
        await b.close()
        await a.close()


# -- item 5: a fenced member's commit is refused locally -------------------------------------------


async def test_a_zombies_commit_is_refused_and_the_next_owners_offset_stands(fake):
    """Interleaving: A owns t-0 and commits 10; A's session expires (the group is now Empty)
    and its heartbeat is answered UNKNOWN_MEMBER_ID, which resets its generation; A is busy and
    does not poll. B joins, gets t-0 at 10, commits 100 and leaves (the group is Empty again).
    Then A's loop commits what it processed (10): an Empty group accepts a commit with
    generation -1 and no member id (a standalone consumer's), so that commit must never be
    sent. Kafka: commit only with generationIfStable(), else CommitFailedException."""
    await produce(fake, 10)
    a, b = member(fake), member(fake)
    await a.start()
    try:
        a.subscribe(["t"])
        await poll_until(lambda: a.assignment() == {TP}, a)
        await a.commit({TP: 10})
        assert fake.committed(TP, GROUP) == 10
        await fence(fake, a)

        await b.start()
        b.subscribe(["t"])
        await poll_until(lambda: b.assignment() == {TP}, b)
        assert await b.position(TP) == 10
        await b.commit({TP: 100})
        await b.close()  # LeaveGroup: the group is Empty
        assert fake.committed(TP, GROUP) == 100

        sent = len(fake.of(ApiKey.OFFSET_COMMIT))
        outcome: KafkaError | None = None
        try:
            await a.commit({TP: 10})
        except KafkaError as exc:
            outcome = exc
        assert fake.committed(TP, GROUP) == 100, "the zombie's commit rolled the group's offset back"
        assert isinstance(outcome, CommitFailedError), repr(outcome)
        with pytest.raises(CommitFailedError):
            await a.commit()  # its positions: refused the same way
        assert len(fake.of(ApiKey.OFFSET_COMMIT)) == sent  # nothing reached the coordinator
    finally:
        await b.close()
        await a.close()


async def test_a_fenced_members_auto_commit_never_rolls_the_offset_back(fake):
    """Auto commit on (Kafka's maybeAutoCommitOffsetsAsync before a rebalance). Interleaving:
    A consumed 0..9 and auto-committed 10; A is fenced; 90 more records arrive; B takes t-0
    from 10, commits 100 and leaves; A polls again: its onJoinPrepare must not auto-commit its stale position (10), and
    its new generation starts from 100. A regression guard: this holds before the fix too."""
    await produce(fake, 10)
    a, b = member(fake, enable_auto_commit=True, auto_commit_interval_ms=20), member(fake)
    await a.start()
    try:
        la = Recorder(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: fake.committed(TP, GROUP) == 10, a)
        await fence(fake, a)
        fenced_at = len(fake.requests)
        await produce(fake, 90)

        await b.start()
        b.subscribe(["t"])
        await poll_until(lambda: b.assignment() == {TP}, b)
        await b.commit({TP: 100})
        await b.close()

        await poll_until(lambda: la.assignments() == 2, a)
        late = [r.body for r in fake.requests[fenced_at:] if r.api_key is ApiKey.OFFSET_COMMIT]
        assert all(
            p["committed_offset"] != 10 for body in late for t in body["topics"] for p in t["partitions"]
        ), late
        assert fake.committed(TP, GROUP) == 100
        assert await a.position(TP) == 100
    finally:
        await b.close()
        await a.close()


# -- item 6: a fenced member's partitions are reported lost ----------------------------------------


async def test_a_fenced_member_reports_its_partitions_lost_before_giving_them_up(fake):
    """Interleaving: A owns t-0; its session expires and its heartbeat is answered
    UNKNOWN_MEMBER_ID; A polls: Kafka's onJoinPrepare sees the reset generation and calls
    onPartitionsLost (not onPartitionsRevoked: another member may own them already) while t-0
    is still assigned, then clears the assignment and rejoins."""
    a = member(fake)
    await a.start()
    try:
        la = Recorder(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: la.assignments() == 1, a)
        await fence(fake, a)
        await poll_until(lambda: la.assignments() == 2, a)
        assert [c for c in la.calls if c[0] != "assigned"] == [("lost", {TP}, {TP})], la.calls
    finally:
        await a.close()


class OnlyRevoked(ConsumerRebalanceListener):
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.calls: list[tuple[str, set[TopicPartition], set[TopicPartition]]] = []
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", set(revoked), self.consumer.assignment()))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned += 1


class DuckTyped:
    """A listener that is no ConsumerRebalanceListener (as cli/consume.py's CommitPrinted)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.calls: list[tuple[str, set[TopicPartition], set[TopicPartition]]] = []
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", set(revoked), self.consumer.assignment()))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned += 1


@pytest.mark.parametrize("listener_class", [OnlyRevoked, DuckTyped])
async def test_lost_partitions_default_to_the_revoke_callback(fake, listener_class):
    """Kafka's ConsumerRebalanceListener.onPartitionsLost defaults to onPartitionsRevoked.
    Interleaving as above: fenced by its heartbeat, then a poll."""
    a = member(fake)
    await a.start()
    try:
        listener = listener_class(a)
        a.subscribe(["t"], listener=listener)
        await poll_until(lambda: listener.assigned == 1, a)
        await fence(fake, a)
        await poll_until(lambda: listener.assigned == 2, a)
        assert listener.calls == [("revoked", {TP}, {TP})]
    finally:
        await a.close()


# -- a commit in flight while the generation changes -----------------------------------------------


async def test_a_commit_answered_after_its_generation_was_replaced_ends_nothing_new(fake):
    """Interleaving: A's commit under generation g is parked before the coordinator sees it;
    A is fenced (heartbeat) and rejoins under a new member id and generation; then the parked
    commit reaches the coordinator, which answers UNKNOWN_MEMBER_ID for the old member. Kafka
    (generationUnchanged()) resets nothing then: the answer is about a generation already
    gone, so A's new generation stays (no second rebalance), and the commit raises
    CommitFailedError."""
    a = member(fake)
    await a.start()
    try:
        la = Recorder(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: la.assignments() == 1, a)
        old = a.group_metadata()
        fake.hold[ApiKey.OFFSET_COMMIT] = 1
        commit = asyncio.get_running_loop().create_task(a.commit({TP: 5}))
        await fake.wait_held()
        await fence(fake, a)
        await poll_until(lambda: la.assignments() == 2, a)
        new = a.group_metadata()
        assert (new.generation_id, new.member_id) != (old.generation_id, old.member_id)

        fake.release()
        outcome: BaseException | None = None
        try:
            await commit
        except KafkaError as exc:
            outcome = exc
        coordinator = a._coordinator
        assert coordinator is not None
        assert not coordinator.need_rejoin, "a stale generation's answer sent the new one back to JoinGroup"
        assert a.group_metadata() == new
        assert isinstance(outcome, CommitFailedError), repr(outcome)
        assert fake.committed(TP, GROUP) == -1
    finally:
        await a.close()


async def test_a_heartbeat_answered_after_its_generation_was_replaced_ends_nothing_new(fake):
    """Interleaving: A's heartbeat under generation g is parked before the coordinator sees it;
    A's session expires; A's commit is answered UNKNOWN_MEMBER_ID (the generation it was sent
    under is A's current one: reset) and A rejoins under a new member id and generation; then
    the parked heartbeat reaches the coordinator and is answered UNKNOWN_MEMBER_ID for the old
    member. Kafka's HeartbeatResponseHandler ignores it (generationUnchanged() is false): A's
    new generation and its assignment stay."""
    a = member(fake)
    await a.start()
    try:
        la = Recorder(a)
        a.subscribe(["t"], listener=la)
        await poll_until(lambda: la.assignments() == 1, a)
        old = a.group_metadata()
        fake.hold[ApiKey.HEARTBEAT] = 1
        await fake.wait_held()
        fake.advance(SESSION_MS + 1)
        with pytest.raises(KafkaError):
            await a.commit({TP: 5})
        await poll_until(lambda: la.assignments() == 2, a)
        new = a.group_metadata()
        assert (new.generation_id, new.member_id) != (old.generation_id, old.member_id)

        coordinator = a._coordinator
        assert coordinator is not None
        seen = len(fake.requests)
        fake.release()
        # the heartbeat loop handles the parked answer before it sends its next heartbeat
        await until(
            lambda: (
                coordinator.need_rejoin
                or any(
                    r.api_key is ApiKey.HEARTBEAT and r.body["member_id"] == new.member_id
                    for r in fake.requests[seen:]
                )
            )
        )
        assert not coordinator.need_rejoin, (
            "a stale heartbeat answer sent the new generation back to JoinGroup"
        )
        assert a.group_metadata() == new
        assert a.assignment() == {TP}
    finally:
        await a.close()
