"""ISR races on the leader (issue 9 findings 1 and 8; docs/guarantees.md): Kafka's KIP-497
maximal ISR and ReplicationUtils.updateLeaderAndIsr's check of an ambiguous write (KAFKA-2729).

Each test drives the real ReplicaManager, Partition, IsrManager and logs on disk (the harness of
tests/unit/test_isr_manager.py: a fake clock, the state znode as an in-memory compare-and-set
store) and forces one interleaving with events the test holds and releases. The followers are
simulated by their fetches: a follower fetching offset N holds exactly the offsets below N. Each
scenario checks its invariant after every step; each failed on the code before its fix, with the
failure named in its docstring.
"""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import BadVersionError, ConnectionLoss, NoNodeError

from broker.replica.isr_manager import ZkIsrStore
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from tests.unit.test_isr_manager import LAG, ZK_TP, Harness, MemoryIsrStore
from zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch, encode_partition_state
from zk.paths import partition_state_path

LEADER, JOINER, SLOW = 1, 2, 3  # assignment order 1,2,3: with 1 gone, ZooKeeper elects 2 first


class RacyIsrStore(MemoryIsrStore):
    """The state znode of MemoryIsrStore, plus what ZooKeeper can do to a write: land and not yet
    answer (``hold_after_commit``), or land and lose the answer (``lose_responses``: kazoo's
    ConnectionLoss when the connection drops after the request was sent). Reads are the znode."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_after_commit: asyncio.Event | None = None
        self.lose_responses = 0
        self.unreachable_after_lost_response = False  # then every call raises ConnectionLoss
        self.fail_before_commit = 0  # the next N writes raise ConnectionLoss without landing
        self.controller_epochs: dict[TopicPartition, int] = {}
        self.reads = 0

    async def update_leader_and_isr(
        self, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        self.writes += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        if self.fail_before_commit:
            self.fail_before_commit -= 1
            raise ConnectionLoss()
        written = self.compare_and_set(tp, leader_and_isr)
        if written is None:
            return None  # BADVERSION
        self.controller_epochs[tp] = controller_epoch
        if self.hold_after_commit is not None:
            await self.hold_after_commit.wait()
        if self.lose_responses:
            self.lose_responses -= 1
            if self.unreachable_after_lost_response:
                self.error = ConnectionLoss()
            raise ConnectionLoss()
        return written

    async def get_partition_state(self, tp: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
        self.reads += 1
        if self.error is not None:
            raise self.error
        state = self.states.get(tp)
        return (
            None if state is None else LeaderIsrAndControllerEpoch(state, self.controller_epochs.get(tp, 1))
        )


class RaceHarness(Harness):
    """Harness over a :class:`RacyIsrStore`, with the followers' true LEOs and every acks=all
    answer recorded, so the invariants can be checked against ZooKeeper's view."""

    def __init__(self, tmp_path, min_isr: int = 2) -> None:
        super().__init__(tmp_path, min_isr=min_isr)
        self.store = RacyIsrStore()
        self.rm.isr_manager.store = self.store
        self.follower_leo: dict[int, int] = {JOINER: 0, SLOW: 0}
        self.answers: list[asyncio.Future] = []

    def fetch(self, replica: int, offset: int) -> None:
        assert self.follower_fetch(replica, offset) == ErrorCode.NONE
        self.follower_leo[replica] = offset

    def produce_many(self, n: int) -> None:
        self.answers.extend(self.produce() for _ in range(n))

    def leo(self, replica: int) -> int:
        return self.log.log_end_offset if replica == LEADER else self.follower_leo[replica]

    def acknowledged(self) -> list[int]:
        return [
            a.result().base_offset
            for a in self.answers
            if a.done() and a.result().error_code == ErrorCode.NONE
        ]

    def check_hw_within_zookeeper_isr(self, step: str) -> None:
        """Finding 1's invariant: the HW is at most the LEO of every replica the state znode lists
        in the ISR, so no acknowledged offset is missing from any replica ZooKeeper could elect."""
        zk_isr = self.store.states[ZK_TP].isr
        hw = self.log.high_watermark
        for replica in zk_isr:
            assert hw <= self.leo(replica), (
                f"{step}: HW {hw} > LEO {self.leo(replica)} of broker {replica}, "
                f"which the state znode lists in the ISR {zk_isr}"
            )
        for offset in self.acknowledged():
            assert offset < hw, f"{step}: offset {offset} acknowledged above the HW {hw}"

    def check_elected_holds_acknowledged(self, step: str) -> None:
        """What finding 1's invariant protects: if the leader crashed now, the broker the
        controller would elect from the state znode's ISR holds every acknowledged offset."""
        elected = self.elected_after_leader_crash()
        missing = [offset for offset in self.acknowledged() if offset >= self.leo(elected)]
        assert not missing, f"{step}: acknowledged {missing} missing from broker {elected}, elected next"

    def check_invariants(self, step: str) -> None:
        self.check_hw_within_zookeeper_isr(step)
        self.check_elected_holds_acknowledged(step)

    def check_memory_matches_zookeeper(self, step: str) -> None:
        """Finding 8's invariant: once no ISR write is in flight, the leader's ISR and zkVersion
        are the state znode's."""
        zk = self.store.states[ZK_TP]
        memory = (self.partition.ordered_isr(self.partition.isr), self.partition.zk_version)
        assert not self.partition.isr_update_in_flight, f"{step}: an ISR write is still in flight"
        assert memory == (zk.isr, zk.zk_version), (
            f"{step}: leader has ISR {memory[0]} at zkVersion {memory[1]}, "
            f"ZooKeeper has ISR {zk.isr} at zkVersion {zk.zk_version}"
        )

    def elected_after_leader_crash(self) -> int:
        """The controller's choice when the leader dies: the first live ISR member, in assignment
        order, of the ISR as the state znode holds it (SPEC 4, OfflinePartitionLeaderElection)."""
        return next(r for r in (1, 2, 3) if r in self.store.states[ZK_TP].isr and r != LEADER)

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)


@pytest.fixture
async def rh(tmp_path):
    harness = RaceHarness(tmp_path)
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


# -- finding 1: the HW and an expand in flight (KIP-497's maximal ISR) -------------------------------


@pytest.mark.parametrize("landed", [True, False], ids=["landed-not-answered", "held-before-landing"])
async def test_hw_never_passes_a_follower_whose_isr_expand_is_in_flight(rh, landed):
    """ISR {1,3}; 3 is slow so the HW lags; 2 catches up past the HW but not to the LEO and its
    expand {1,2,3} is being written; 3 fetches to the LEO. Kafka counts 2 in the HW from the
    moment the expand is sent (the maximal ISR), so the HW stops at 2's LEO.

    Failed before the fix (landed-not-answered): ``after the slow follower caught up: HW 5 > LEO 3
    of broker 2, which the state znode lists in the ISR (1, 2, 3)``; acknowledged offsets 3 and
    4 were then missing from broker 2, whom the controller elects when broker 1 dies.
    (held-before-landing: the same, at ``after the expand landed``.)"""
    await rh.lead(isr=(LEADER, SLOW))
    rh.produce_many(5)
    rh.check_invariants("after produce")
    rh.fetch(SLOW, 2)
    rh.check_invariants("after the slow follower fetched offset 2")
    assert rh.log.high_watermark == 2 and rh.acknowledged() == [0, 1]

    hold = asyncio.Event()
    if landed:
        rh.store.hold_after_commit = hold
    else:
        rh.store.gate = hold
    rh.fetch(JOINER, 3)  # past the HW (2), not at the LEO (5): may join, and does
    await rh.settle()
    assert rh.partition.isr_update_in_flight and rh.store.writes == 1
    assert (rh.store.states[ZK_TP].isr == (1, 2, 3)) is landed
    rh.check_invariants("while the expand is in flight")

    rh.fetch(SLOW, 5)
    await rh.settle()
    rh.check_invariants("after the slow follower caught up")

    hold.set()
    await rh.rm.isr_manager.wait_idle()
    await rh.settle()
    rh.check_invariants("after the expand landed")
    assert rh.partition.isr == {1, 2, 3} and rh.store.states[ZK_TP].isr == (1, 2, 3)
    assert rh.log.high_watermark == 3 and rh.acknowledged() == [0, 1, 2]

    rh.fetch(JOINER, 5)
    await rh.settle()
    rh.check_invariants("after the joiner caught up")
    assert rh.log.high_watermark == 5 and rh.acknowledged() == [0, 1, 2, 3, 4]
    assert rh.elected_after_leader_crash() == JOINER  # checked at every step above, not only here


async def test_hw_keeps_counting_followers_until_a_shrink_is_written(rh):
    """A shrink in flight is not yet in ZooKeeper, so the followers it removes still hold the HW
    back until the write returns. What guards this is that the in-memory ISR changes only when
    the write succeeds (:meth:`Partition.complete_isr_update`); KIP-497's maximal ISR adds nothing
    for a shrink (its replicas are the ISR's), which is why the expand tests above pin that rule."""
    await rh.lead(isr=(1, 2, 3))
    rh.fetch(JOINER, 0)
    rh.fetch(SLOW, 0)
    rh.produce_many(3)
    rh.clock.now += LAG + 1
    rh.fetch(JOINER, 3)  # 2 keeps up; 3 went silent at 0
    rh.check_hw_within_zookeeper_isr("before the shrink")
    hold = asyncio.Event()
    rh.store.gate = hold
    assert rh.rm.maybe_shrink_isr() == 1
    await rh.settle()
    assert rh.partition.isr == {1, 2, 3} and rh.log.high_watermark == 0
    rh.check_hw_within_zookeeper_isr("while the shrink is in flight")
    hold.set()
    await rh.rm.isr_manager.wait_idle()
    rh.check_hw_within_zookeeper_isr("after the shrink")
    assert rh.store.states[ZK_TP].isr == (1, 2) and rh.log.high_watermark == 3
    assert rh.acknowledged() == [0, 1, 2]


# -- finding 8: the answer to a successful ISR write is lost (KAFKA-2729) -----------------------------


async def expand_with_lost_answer(rh: RaceHarness) -> None:
    """ISR {1,3}; 2 joins; the expand lands at zkVersion 1 and its answer is lost."""
    await rh.lead(isr=(LEADER, SLOW))
    rh.produce_many(1)
    rh.fetch(SLOW, 1)
    assert rh.acknowledged() == [0]
    rh.store.lose_responses = 1
    rh.fetch(JOINER, 1)
    await rh.rm.isr_manager.wait_idle()
    await rh.settle()
    assert rh.store.states[ZK_TP] == LeaderAndIsr(1, 0, (1, 2, 3), 1)


async def test_a_lost_answer_to_a_landed_isr_write_does_not_freeze_the_isr(rh):
    """The expand lands but the leader sees ConnectionLoss. The leader re-sends the same
    conditional write (BADVERSION: it had landed), reads the znode, finds its own write and
    adopts it with its zkVersion; so the next change, a shrink, is written, and a parked acks=all
    request completes instead of timing out.

    Failed before the fix: ``after the lost answer: leader has ISR (1, 3) at zkVersion 0,
    ZooKeeper has ISR (1, 2, 3) at zkVersion 1``; every later ISR write then failed BADVERSION."""
    await expand_with_lost_answer(rh)
    rh.check_memory_matches_zookeeper("after the lost answer")
    rh.check_hw_within_zookeeper_isr("after the lost answer")
    assert rh.rm.isr_manager.isr_expands == 1 and rh.store.writes == 2 and rh.store.reads == 1

    rh.produce_many(1)  # offset 1: waits for the ISR {1,2,3}
    rh.clock.now += LAG + 1
    rh.fetch(JOINER, 2)  # 2 keeps up; 3 went silent at 1
    rh.check_hw_within_zookeeper_isr("before the shrink")
    assert rh.acknowledged() == [0]
    assert await rh.shrink() == 1
    await rh.settle()
    rh.check_memory_matches_zookeeper("after the shrink")
    rh.check_hw_within_zookeeper_isr("after the shrink")
    assert rh.store.states[ZK_TP] == LeaderAndIsr(1, 0, (1, 2), 2)
    assert rh.acknowledged() == [0, 1] and rh.log.high_watermark == 2
    outcomes = [e["outcome"] for e in rh.state_changes if e["event"] in ("IsrExpand", "IsrShrink")]
    assert outcomes[0].startswith("written") and "ConnectionLoss" in outcomes[0]
    assert outcomes[1] == "written"


async def test_an_unknown_outcome_that_did_not_land_is_written_by_the_resend(rh):
    """ConnectionLoss before the write reached ZooKeeper: the re-sent conditional write lands."""
    await rh.lead(isr=(LEADER, SLOW))
    rh.store.fail_before_commit = 1
    rh.fetch(JOINER, 0)
    await rh.rm.isr_manager.wait_idle()
    assert rh.store.writes == 2
    rh.check_memory_matches_zookeeper("after the resend")
    assert rh.store.states[ZK_TP] == LeaderAndIsr(1, 0, (1, 2, 3), 1)


async def test_an_outcome_still_unknown_keeps_the_joiner_counted_until_settled(rh):
    """ZooKeeper stays unreachable after the write may have landed: the leader does not know the
    ISR, so the joiner stays in the maximal ISR (the HW waits for it) and no other ISR change is
    proposed; the isr-expiration tick re-sends the write once ZooKeeper answers again."""
    await rh.lead(isr=(LEADER, SLOW))
    rh.produce_many(2)
    rh.fetch(SLOW, 1)
    rh.store.lose_responses = 1
    rh.store.unreachable_after_lost_response = True
    rh.fetch(JOINER, 1)  # lands at zkVersion 1, then ZooKeeper goes away
    await rh.rm.isr_manager.wait_idle()
    assert rh.store.states[ZK_TP] == LeaderAndIsr(1, 0, (1, 2, 3), 1)
    assert rh.partition.isr == {1, 3} and rh.partition.pending_isr_change is not None
    assert not rh.partition.isr_update_in_flight and rh.partition.maximal_isr == {1, 2, 3}
    rh.fetch(SLOW, 2)
    rh.check_hw_within_zookeeper_isr("while the outcome is unknown")
    assert rh.log.high_watermark == 1
    rh.clock.now += LAG + 1
    assert rh.rm.maybe_shrink_isr() == 1  # the tick settles the pending write; no new shrink
    await rh.rm.isr_manager.wait_idle()
    assert rh.partition.pending_isr_change is not None  # ZooKeeper still unreachable
    rh.store.error = None
    assert rh.rm.maybe_shrink_isr() == 1
    await rh.rm.isr_manager.wait_idle()
    rh.check_memory_matches_zookeeper("after ZooKeeper came back")
    assert rh.partition.pending_isr_change is None and rh.store.states[ZK_TP].isr == (1, 2, 3)
    rh.check_hw_within_zookeeper_isr("after ZooKeeper came back")


async def test_other_state_from_the_same_leader_epoch_is_not_adopted(rh):
    """Kafka's checkLeaderAndIsrZkData: only the exact state written (leader, leader epoch, ISR,
    controller epoch) counts as our write. Anything else means another writer moved the znode
    on: the ISR stays as it was, the change stays pending (it may have been in ZooKeeper) and is
    not re-sent, and the controller's LeaderAndIsr will bring the new state."""
    await rh.lead(isr=(LEADER, SLOW))
    rh.store.lose_responses = 1
    rh.store.hold_after_commit = hold = asyncio.Event()
    rh.fetch(JOINER, 0)
    await rh.settle()
    rh.store.states[ZK_TP] = LeaderAndIsr(1, 0, (1,), 2)  # someone else, same leader epoch
    hold.set()
    await rh.rm.isr_manager.wait_idle()
    assert rh.partition.isr == {1, 3} and rh.partition.zk_version == 0
    assert rh.partition.pending_isr_rejected and not rh.partition.isr_update_in_flight
    (line,) = [e for e in rh.state_changes if e["event"] == "IsrExpand"]
    assert line["outcome"].startswith("rejected")
    writes = rh.store.writes
    assert rh.rm.maybe_shrink_isr() == 0 and rh.store.writes == writes  # not re-sent


async def test_a_leader_and_isr_supersedes_an_unknown_outcome(rh):
    """The controller's LeaderAndIsr carries the znode's state: a change still pending is dropped."""
    await rh.lead(isr=(LEADER, SLOW))
    rh.store.error = ConnectionLoss()
    rh.fetch(JOINER, 0)
    await rh.rm.isr_manager.wait_idle()
    assert rh.partition.pending_isr_change is not None
    rh.store.error = None
    await rh.lead(isr=(1, 2, 3), epoch=1, zk_version=5)
    assert rh.partition.pending_isr_change is None and rh.partition.maximal_isr == {1, 2, 3}
    rh.check_memory_matches_zookeeper("after LeaderAndIsr")


# -- issue 18 window 1: an expand refused after its answer was lost (Kafka 2.7+ keeps it pending) --------


async def test_hw_never_passes_a_joiner_whose_landed_expand_is_refused_on_resend(rh):
    """ISR {1,3}, broker 3 at offset 2, HW 2. Broker 2 fetches to 3; the expand to {1,2,3} lands
    at zkVersion 1 but its answer is lost and ZooKeeper stays away, so the outcome is unknown.
    Broker 3 fetches to 5: the HW stays at 3, held by broker 2 in the maximal ISR. Broker 3 dies;
    the controller reads zkVersion 1 and writes ISR (1,2) at leader epoch 1, zkVersion 2. The
    leader's settle re-sends at zkVersion 0 and is refused (BADVERSION); the znode is not its
    write. ZooKeeper lists broker 2 in the ISR, so the HW must not pass broker 2's LEO (3) until
    the controller's LeaderAndIsr arrives, at any step.

    Failed before the fix: ``after the resend was refused: HW 5 > LEO 3 of broker 2, which the
    state znode lists in the ISR (1, 2)``: the refusal cleared the pending expand, broker 3 (dead,
    out of ZooKeeper's ISR) still counted, and offsets 3-4 were acknowledged; broker 2, whom the
    controller elects when broker 1 dies, never had them."""
    check = rh.check_invariants

    await rh.lead(isr=(LEADER, SLOW))
    rh.produce_many(5)
    rh.fetch(SLOW, 2)
    await rh.settle()
    check("after the slow follower fetched offset 2")
    assert rh.log.high_watermark == 2

    rh.store.lose_responses = 1
    rh.store.unreachable_after_lost_response = True
    rh.fetch(JOINER, 3)  # lands at zkVersion 1; the answer is lost and ZooKeeper goes away
    await rh.rm.isr_manager.wait_idle()
    await rh.settle()
    assert rh.store.states[ZK_TP] == LeaderAndIsr(1, 0, (1, 2, 3), 1)
    assert rh.partition.pending_isr_change is not None and not rh.partition.isr_update_in_flight
    check("with the expand's outcome unknown")

    rh.fetch(SLOW, 5)
    await rh.settle()
    check("after broker 3 fetched to the LEO")
    assert rh.log.high_watermark == 3

    # Broker 3 dies: the controller removes it from the ISR (a new leader epoch, as Kafka's does).
    rh.store.states[ZK_TP] = LeaderAndIsr(1, 1, (1, 2), 2)
    rh.store.error = None
    assert rh.rm.maybe_shrink_isr() == 1  # the isr-expiration tick settles the pending expand
    await rh.rm.isr_manager.wait_idle()
    await rh.settle()
    (line,) = [e for e in rh.state_changes if e["event"] == "IsrExpand"][-1:]
    assert line["outcome"].startswith("rejected"), line
    check("after the resend was refused")
    assert rh.log.high_watermark == 3 and rh.acknowledged() == [0, 1, 2]
    assert rh.partition.pending_isr_change is not None  # kept until the controller's word
    rh.clock.now += LAG + 1
    assert rh.rm.maybe_shrink_isr() == 0  # nothing re-sent, no other change proposed meanwhile
    check("after an isr-expiration tick")

    # The controller's LeaderAndIsr for epoch 1 supersedes the pending change.
    await rh.lead(isr=(1, 2), epoch=1, zk_version=2)
    await rh.settle()
    assert rh.partition.pending_isr_change is None and rh.partition.isr == {1, 2}
    check("after the controller's LeaderAndIsr")
    assert rh.log.high_watermark == 3
    rh.fetch(JOINER, 5)
    await rh.settle()
    check("after broker 2 caught up")
    assert rh.log.high_watermark == 5 and rh.acknowledged() == [0, 1, 2, 3, 4]


async def test_an_expand_refused_at_once_stays_pending_until_leader_and_isr(rh):
    """The bridge's transparent resend after a dropped connection can turn a landed write into
    BADVERSION with no ConnectionLoss reaching the ISR manager: a first refusal is as ambiguous as
    a settled one. The joiner keeps counting in the HW and no other change is proposed until a
    LeaderAndIsr. (Failed before the fix: the pending expand was cleared at once.)"""
    await rh.lead(isr=(LEADER, SLOW))
    rh.produce_many(2)
    rh.fetch(SLOW, 1)
    rh.store.states[ZK_TP] = LeaderAndIsr(
        1, 0, (1, 2, 3), 1
    )  # "our" write landed; the answer we get is BADVERSION
    rh.fetch(JOINER, 1)
    await rh.rm.isr_manager.wait_idle()
    assert rh.store.writes == 1 and rh.partition.pending_isr_change is not None
    assert rh.partition.maximal_isr == {1, 2, 3}
    rh.fetch(SLOW, 2)
    await rh.settle()
    rh.check_hw_within_zookeeper_isr("after the refusal")
    assert rh.log.high_watermark == 1
    await rh.lead(isr=(1, 2, 3), epoch=1, zk_version=1)
    assert rh.partition.pending_isr_change is None and not rh.partition.pending_isr_rejected


# -- the ZooKeeper layer: ReplicationUtils.updateLeaderAndIsr's checker ------------------------------


class FakeZnodes:
    """Just enough of ZkBridge for the state znode: versioned set and get, with a lost answer."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.lose_responses = 0

    async def set(self, path: str, value: bytes, version: int = -1):
        if path not in self.nodes:
            raise NoNodeError()
        if version not in (-1, self.nodes[path][1]):
            raise BadVersionError()
        self.nodes[path] = (value, self.nodes[path][1] + 1)
        if self.lose_responses:
            self.lose_responses -= 1
            raise ConnectionLoss()
        return _Stat(self.nodes[path][1])

    async def get(self, path: str, watch=None):
        if path not in self.nodes:
            return None
        data, version = self.nodes[path]
        return data, _Stat(version)


class _Stat:
    def __init__(self, version: int) -> None:
        self.version = version


async def test_zk_store_adopts_its_own_landed_write_and_rejects_any_other_state():
    znodes = FakeZnodes()
    store = ZkIsrStore(znodes)  # type: ignore[arg-type]
    path = partition_state_path("t", 0)
    initial = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 4, (1, 3), 0), 7)
    znodes.nodes[path] = (encode_partition_state(initial), 0)
    proposed = LeaderAndIsr(1, 4, (1, 2, 3), 0)

    znodes.lose_responses = 1
    with pytest.raises(ConnectionLoss):
        await store.update_leader_and_isr(ZK_TP, proposed, 7)
    # The identical re-send fails BADVERSION; the znode holds exactly what was written: ours.
    assert await store.update_leader_and_isr(ZK_TP, proposed, 7) == LeaderAndIsr(1, 4, (1, 2, 3), 1)
    state = await store.get_partition_state(ZK_TP)
    assert state == LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 4, (1, 2, 3), 1), 7)
    # Same leader and epoch but another ISR, or another controller epoch: not ours.
    assert await store.update_leader_and_isr(ZK_TP, LeaderAndIsr(1, 4, (1, 2), 0), 7) is None
    assert await store.update_leader_and_isr(ZK_TP, proposed, 8) is None
    assert await store.update_leader_and_isr(TopicPartition("t", 9), proposed, 7) is None  # no znode
