"""Leader-side ISR management and acks=all, through a real ReplicaManager and real logs on disk
(SPEC 5.4; seed 001). The clock is a fake one; the state znode is an in-memory compare-and-set
store with ZooKeeper's version semantics (tests/integration/test_isr.py runs the real one).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.log import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.delayed import ProducePartitionStatus
from broker.replica.isr_manager import IsrChangeTracker
from broker.replica.replica_manager import ReplicaManager
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch
from client.types import TopicPartition
from zk.data import LeaderAndIsr

LAG = 10_000
TP = ("t", 0)
ZK_TP = TopicPartition("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class MemoryIsrStore:
    """The state znode's conditional set, in memory: a write names the version it read."""

    def __init__(self) -> None:
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.notifications: list[list[TopicPartition]] = []
        self.gate: asyncio.Event | None = None  # when set, writes wait for it
        self.writes = 0
        self.error: Exception | None = None

    async def update_leader_and_isr(
        self, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        self.writes += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.compare_and_set(tp, leader_and_isr)

    def compare_and_set(self, tp: TopicPartition, leader_and_isr: LeaderAndIsr) -> LeaderAndIsr | None:
        """ZooKeeper's conditional set: None (BADVERSION) unless the version is the one read."""
        current = self.states[tp]
        if current.zk_version != leader_and_isr.zk_version:
            return None
        written = leader_and_isr.with_zk_version(current.zk_version + 1)
        self.states[tp] = written
        return written

    async def propagate_isr_change(self, partitions: list[TopicPartition]) -> None:
        self.notifications.append(list(partitions))


def partition_state_entry(
    topic: str,
    epoch: int,
    leader: int = 1,
    isr: tuple[int, ...] = (1, 2, 3),
    zk_version: int = 0,
    is_new: bool = False,
    partition: int = 0,
) -> dict:
    """One partition's entry of a LeaderAndIsr request from controller epoch 1, replicas 1, 2, 3."""
    return {
        "topic": topic,
        "partition": partition,
        "controller_epoch": 1,
        "leader": leader,
        "leader_epoch": epoch,
        "isr": list(isr),
        "zk_version": zk_version,
        "replicas": [1, 2, 3],
        "is_new": is_new,
    }


def leader_and_isr_request(*entries: dict, controller_epoch: int = 1) -> dict:
    return {
        "controller_id": 9,
        "controller_epoch": controller_epoch,
        "partition_states": list(entries),
        "live_leaders": [],
    }


class Harness:
    def __init__(
        self, tmp_path: Path, min_isr: int = 1, overrides: dict[str, dict[str, str]] | None = None
    ) -> None:
        self.clock = Clock()
        self.store = MemoryIsrStore()
        self.state_changes: list[dict] = []
        cfg = BrokerConfig(
            {
                "broker.id": "1",
                "zookeeper.connect": "127.0.0.1:1",
                "log.dirs": str(tmp_path / "logs"),
                "replica.lag.time.max.ms": str(LAG),
                "min.insync.replicas": str(min_isr),
            }
        )
        topic_overrides = overrides or {}

        async def topic_config(topic: str) -> dict[str, str]:
            return topic_overrides.get(topic, {})

        self.rm = ReplicaManager(
            cfg,
            LogManager(cfg.log_dirs, cfg.log_config(), self.clock),
            MetadataCache(1),
            self.clock,
            self.state_changes.append,
            topic_config,
            isr_store=self.store,
        )

    async def lead(self, isr=(1, 2, 3), leader=1, epoch=0, zk_version=0, topic="t") -> None:
        self.store.states[TopicPartition(topic, 0)] = LeaderAndIsr(leader, epoch, tuple(isr), zk_version)
        body = leader_and_isr_request(
            partition_state_entry(topic, epoch, leader=leader, isr=isr, zk_version=zk_version)
        )
        response = await self.rm.become_leader_or_follower(body)
        assert response["partitions"][0]["error_code"] == ErrorCode.NONE

    def produce(self, acks: int = -1, timeout_ms: int = 60_000, topic: str = "t") -> asyncio.Future:
        answer: asyncio.Future = asyncio.get_running_loop().create_future()

        def respond(statuses: dict[tuple[str, int], ProducePartitionStatus]) -> None:
            answer.set_result(statuses[(topic, 0)])

        self.rm.append_records(acks, timeout_ms, {(topic, 0): build_batch([(None, b"v", 0, [])])}, respond)
        return answer

    def follower_fetch(self, replica_id: int, offset: int) -> int:
        fetch = {"fetch_offset": offset, "current_leader_epoch": -1, "partition_max_bytes": 1 << 20}
        return self.rm.read(TP, replica_id, fetch, 1 << 20).error_code

    @property
    def log(self):
        return self.rm.get_log(TP)

    @property
    def partition(self):
        return self.rm.get_partition(TP)

    async def shrink(self) -> int:
        started = self.rm.maybe_shrink_isr()
        await self.rm.isr_manager.wait_idle()
        return started


@pytest.fixture
async def h(tmp_path):
    harness = Harness(tmp_path, min_isr=2)
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


# -- acks=all (SPEC 5.4) ------------------------------------------------------------------------


async def test_not_enough_replicas_before_append_uses_topic_override_then_broker_default(tmp_path):
    hs = Harness(tmp_path, min_isr=2, overrides={"strict": {"min.insync.replicas": "3"}})
    await hs.lead(isr=(1, 2), topic="strict")
    await hs.lead(isr=(1,), topic="t")
    strict = await hs.produce(topic="strict")
    assert (
        strict.error_code == ErrorCode.NOT_ENOUGH_REPLICAS and "min.insync.replicas=3" in strict.error_message
    )
    default = await hs.produce(topic="t")
    assert (
        default.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        and "min.insync.replicas=2" in default.error_message
    )
    assert (
        hs.rm.get_log(("strict", 0)).log_end_offset == 0 and hs.log.log_end_offset == 0
    )  # refused, not appended
    assert (await hs.produce(acks=1, topic="t")).error_code == ErrorCode.NONE  # acks=1 does not care
    hs.rm.shutdown()
    hs.rm.log_manager.shutdown()


async def test_acks_all_completes_when_the_hw_passes_the_batch(h):
    await h.lead()
    answer = h.produce()
    await asyncio.sleep(0)
    assert not answer.done() and h.log.log_end_offset == 1 and h.log.high_watermark == 0
    h.follower_fetch(2, 1)
    assert not answer.done()  # broker 3 is in the ISR and has not fetched offset 0 yet
    h.follower_fetch(3, 1)
    status = await asyncio.wait_for(answer, 5)
    assert status.error_code == ErrorCode.NONE and status.base_offset == 0 and h.log.high_watermark == 1


async def test_shrink_past_a_silent_follower_lets_parked_acks_all_succeed(h):
    await h.lead()
    h.follower_fetch(2, 0)
    h.follower_fetch(3, 0)
    answer = h.produce()
    h.clock.now += LAG // 2
    h.follower_fetch(2, 1)  # broker 2 keeps up; broker 3 went silent
    assert await h.shrink() == 0  # not yet past the lag time
    h.clock.now += LAG // 2 + 1
    assert await h.shrink() == 1
    assert h.partition.isr == {1, 2} and h.store.states[ZK_TP] == LeaderAndIsr(1, 0, (1, 2), 1)
    assert h.partition.zk_version == 1
    status = await asyncio.wait_for(answer, 5)
    assert status.error_code == ErrorCode.NONE and h.log.high_watermark == 1
    (line,) = [e for e in h.state_changes if e["event"] == "IsrShrink"]
    assert line["old_isr"] == [1, 2, 3] and line["new_isr"] == [1, 2] and line["outcome"] == "written"
    assert h.rm.isr_manager.isr_shrinks == 1


async def test_shrink_below_min_insync_holds_the_hw_and_the_parked_request_times_out(h):
    """Kafka 3.7 (KAFKA-15583, Partition.maybeIncrementLeaderHW ``if (isUnderMinIsr) return
    false``): the shrink to the leader alone (min.insync.replicas=2) does not move the HW over the
    leader's LEO, so the parked acks=all write is not failed with NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (before 3.7 the HW moved and it was): it waits, and answers REQUEST_TIMED_OUT at its timeout
    while no follower comes back. Its record is in the leader's log, invisible to consumers."""
    await h.lead()
    h.follower_fetch(2, 0)
    h.follower_fetch(3, 0)
    answer = h.produce()
    h.clock.now += LAG + 1
    await h.shrink()
    assert h.partition.isr == {1}
    await asyncio.sleep(0)
    assert not answer.done() and h.log.high_watermark == 0 and h.log.log_end_offset == 1
    (parked,) = h.rm.produce_purgatory._watchers[TP]
    parked._expire()  # its timer fires (the purgatory's timers are the loop's: forced here)
    status = await asyncio.wait_for(answer, 5)
    assert status.error_code == ErrorCode.REQUEST_TIMED_OUT and h.log.high_watermark == 0
    later = await h.produce()
    assert later.error_code == ErrorCode.NOT_ENOUGH_REPLICAS and h.log.log_end_offset == 1
    assert (await h.produce(acks=1)).error_code == ErrorCode.NONE  # acks=1 is appended ...
    assert h.log.log_end_offset == 2 and h.log.high_watermark == 0  # ... and stays invisible


async def test_failed_conditional_write_leaves_the_isr_and_the_request_waiting(h):
    await h.lead()
    h.store.states[ZK_TP] = LeaderAndIsr(2, 1, (2, 3), 1)  # the controller moved leadership away
    answer = h.produce()
    h.clock.now += LAG + 1
    await h.shrink()
    assert (
        h.partition.isr == {1, 2, 3} and h.partition.zk_version == 0 and not h.partition.isr_update_in_flight
    )
    assert h.store.states[ZK_TP] == LeaderAndIsr(2, 1, (2, 3), 1)
    assert h.log.high_watermark == 0 and not answer.done()
    (line,) = [e for e in h.state_changes if e["event"] == "IsrShrink"]
    assert line["outcome"].startswith("rejected")
    assert h.store.notifications == [] and not h.rm.isr_manager.changes.pending


async def test_zookeeper_errors_leave_the_isr_unchanged(h):
    await h.lead()
    h.store.error = ConnectionError("connection loss")
    h.clock.now += LAG + 1
    await h.shrink()
    assert h.partition.isr == {1, 2, 3} and not h.partition.isr_update_in_flight
    assert h.rm.isr_manager.failed_isr_updates == 1


async def test_losing_leadership_fails_parked_request_with_not_leader(h):
    await h.lead()
    answer = h.produce()
    await asyncio.sleep(0)
    assert not answer.done()
    await h.lead(leader=2, epoch=1, isr=(2, 3), zk_version=1)
    status = await asyncio.wait_for(answer, 5)
    assert status.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_parked_request_times_out(h):
    await h.lead()
    status = await asyncio.wait_for(h.produce(timeout_ms=50), 5)
    assert status.error_code == ErrorCode.REQUEST_TIMED_OUT and h.log.log_end_offset == 1


# -- expand and propagation -----------------------------------------------------------------------


async def test_follower_at_the_hw_rejoins_and_the_change_is_announced_after_the_blackout(h):
    await h.lead(isr=(1, 2))
    answer = h.produce()
    h.follower_fetch(2, 1)
    assert (await asyncio.wait_for(answer, 5)).error_code == ErrorCode.NONE and h.log.high_watermark == 1
    h.follower_fetch(3, 0)  # below the HW: not yet
    await h.rm.isr_manager.wait_idle()
    assert h.partition.isr == {1, 2} and h.store.writes == 0
    h.follower_fetch(3, 1)
    await h.rm.isr_manager.wait_idle()
    assert h.partition.isr == {1, 2, 3} and h.store.states[ZK_TP].isr == (1, 2, 3)
    assert [e["new_isr"] for e in h.state_changes if e["event"] == "IsrExpand"] == [[1, 2, 3]]
    await h.rm.maybe_propagate_isr_changes()
    assert h.store.notifications == []  # the last change was under 5 s ago
    h.clock.now += 5_001
    await h.rm.maybe_propagate_isr_changes()
    assert h.store.notifications == [[ZK_TP]]
    await h.rm.maybe_propagate_isr_changes()
    assert h.store.notifications == [[ZK_TP]]  # announced once


async def test_one_isr_write_in_flight_per_partition(h):
    await h.lead(isr=(1, 2))
    h.store.gate = asyncio.Event()
    h.follower_fetch(3, 0)
    h.follower_fetch(3, 0)
    await asyncio.sleep(0)
    h.clock.now += LAG + 1
    assert h.rm.maybe_shrink_isr() == 0
    assert h.store.writes == 1 and h.partition.isr_update_in_flight
    h.store.gate.set()
    await h.rm.isr_manager.wait_idle()
    assert h.partition.isr == {1, 2, 3} and not h.partition.isr_update_in_flight


def test_isr_change_tracker_batches_like_kafka():
    t = IsrChangeTracker(last_propagation_ms=95_000)  # Kafka starts the clock at start-up
    assert t.take_due(100_000) == []
    t.record(ZK_TP, 100_000)
    t.record(TopicPartition("u", 1), 103_000)
    assert t.take_due(106_000) == []  # still changing: wait for 5 s of quiet ...
    assert t.take_due(108_001) == [ZK_TP, TopicPartition("u", 1)]
    assert t.take_due(110_000) == []
    due, now = [], 110_000
    while not due and now < 200_000:  # ... unless changes never stop: then 60 s after the last
        t.record(ZK_TP, now)
        due = t.take_due(now)
        now += 2_500
    assert due == [ZK_TP] and 108_001 + 60_000 < now - 2_500 <= 108_001 + 62_500
    t.restore([ZK_TP])
    assert t.pending == {ZK_TP}
