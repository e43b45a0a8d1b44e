"""Adversarial review: the leader's HW while the ISR is below min.insync.replicas.

Kafka 3.7 (KAFKA-15583, core/src/main/scala/kafka/cluster/Partition.scala,
``maybeIncrementLeaderHW``) returns early ``if (isUnderMinIsr)``: "Not increasing HWM because
partition is under min ISR". ``isUnderMinIsr`` is ``isr.size < min(min.insync.replicas, RF)``
on the leader. Floodmark's ``ReplicaManager.maybe_increment_high_watermark`` /
``Partition.high_watermark_candidate`` have no such rule: with the ISR shrunk to the leader alone
the HW follows the leader's LEO.

Driven on a real ReplicaManager with the fake clock and the in-memory ZooKeeper store of
tests/unit/test_isr_manager.py (replicas 1, 2, 3; broker 1 leads).
"""

from __future__ import annotations

import asyncio

import pytest

from client.protocol.errors import ErrorCode
from tests.unit.test_isr_manager import LAG, Harness


@pytest.fixture
async def h(tmp_path):
    harness = Harness(tmp_path, min_isr=2)
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


async def test_an_acks_1_write_to_an_under_min_isr_partition_does_not_become_visible(h):
    """Interleaving: broker 1 leads with ISR (1,) (RF 3, min.insync.replicas=2: under min ISR);
    a producer with acks=1 writes one record. Kafka 3.7 (Partition.maybeIncrementLeaderHW,
    ``if (isUnderMinIsr) return false``) leaves the HW at 0: no consumer reads a record held by
    the leader alone. Floodmark moves the HW to 1 at once, so consumers read it, and a leader
    failure followed by an unclean election loses a record consumers already processed."""
    await h.lead(isr=(1,))
    status = await h.produce(acks=1)
    assert status.error_code == ErrorCode.NONE
    assert h.log.log_end_offset == 1
    assert h.log.high_watermark == 0, (
        f"HW moved to {h.log.high_watermark} with ISR {sorted(h.partition.isr)} below "
        "min.insync.replicas=2 (Kafka 3.7 keeps it at 0 until the ISR is back at the minimum)"
    )


async def test_a_parked_acks_all_write_waits_for_the_follower_to_rejoin_instead_of_failing(h):
    """Interleaving: ISR (1, 2) (min.insync.replicas=2), an acks=all write appended at offset 0
    and parked; broker 2 goes silent for more than replica.lag.time.max.ms and the isr-expiration
    check shrinks the ISR to (1,); broker 2 then fetches offset 1 and rejoins.

    Kafka 3.7: the shrink leaves the HW at 0 (under min ISR), so the write stays parked; the
    rejoin (maybeExpandIsr, then maybeIncrementLeaderHW once the ISR is (1, 2) again) moves the
    HW to 1 and the write succeeds (Partition.checkEnoughReplicasReachOffset with a maximal ISR of
    2). Floodmark: the shrink moves the HW to 1 over the leader alone and answers the write
    NOT_ENOUGH_REPLICAS_AFTER_APPEND; the producer retries and the record is written twice."""
    await h.lead(isr=(1, 2))
    h.follower_fetch(2, 0)
    answer = h.produce()
    await asyncio.sleep(0)
    assert not answer.done() and h.log.log_end_offset == 1
    h.clock.now += LAG + 1
    assert await h.shrink() == 1
    assert h.partition.isr == {1}
    h.follower_fetch(2, 1)  # broker 2 is back, has offset 0 and rejoins
    await h.rm.isr_manager.wait_idle()
    assert h.partition.isr == {1, 2}
    status = await asyncio.wait_for(answer, 5)
    assert status.error_code == ErrorCode.NONE, (
        f"the acks=all write was answered {ErrorCode(status.error_code).name} although the ISR "
        "came back to min.insync.replicas with it replicated (Kafka 3.7 keeps the HW under min "
        "ISR and answers NONE after the rejoin)"
    )


async def test_the_hw_waits_for_the_isr_itself_not_the_maximal_isr_of_a_pending_expand(tmp_path):
    """Interleaving: min.insync.replicas=3, ISR (1, 2) of replicas 1, 2, 3 (under min ISR);
    one acks=1 record; broker 2 fetches offset 1, then broker 3 fetches offset 1 and may rejoin:
    the expand to (1, 2, 3) is written but its ZooKeeper answer is held back.

    Kafka 3.7 (PartitionTest.testHighWatermarkAdvanceShouldNotAdvanceWhenUnderMinISR):
    ``isUnderMinIsr`` reads the ISR (``partitionState.isr``), not the maximal ISR, so the HW stays
    at 0 while the expand is pending although the maximal ISR has 3 members; once the write
    lands the ISR is (1, 2, 3) and the HW moves to 1."""
    h = Harness(tmp_path, min_isr=3)
    try:
        await h.lead(isr=(1, 2))
        assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        h.follower_fetch(2, 1)
        assert h.log.high_watermark == 0, "ISR (1, 2) is under min.insync.replicas=3"
        h.store.gate = asyncio.Event()
        h.follower_fetch(3, 1)
        await asyncio.sleep(0)
        assert h.partition.pending_isr_change is not None and h.partition.maximal_isr == {1, 2, 3}
        h.follower_fetch(3, 1)
        assert h.log.high_watermark == 0, (
            f"HW moved to {h.log.high_watermark} over the maximal ISR of a pending expand; the ISR "
            f"is still {sorted(h.partition.isr)} (Kafka 3.7 waits for the expand to land)"
        )
        h.store.gate.set()
        await h.rm.isr_manager.wait_idle()
        assert h.partition.isr == {1, 2, 3} and h.log.high_watermark == 1
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


async def test_min_insync_replicas_above_the_replication_factor_is_bounded_by_it(tmp_path):
    """Interleaving: the topic's min.insync.replicas=4 on replicas 1, 2, 3, ISR (1, 2, 3); an
    acks=all write; brokers 2 and 3 fetch offset 1.

    Kafka 3.7 (KAFKA-15583, Partition.effectiveMinIsr: min(min.insync.replicas, replication
    factor), used by appendRecordsToLeader, maybeIncrementLeaderHW and
    checkEnoughReplicasReachOffset alike): the write is accepted and answered NONE once the HW
    passes it. Kafka before 3.7 (and floodmark) refused every acks=all write with
    NOT_ENOUGH_REPLICAS, whatever the ISR; with only the HW rule bounded and not the others, an
    acks=1 record would stay invisible for ever."""
    h = Harness(tmp_path, overrides={"t": {"min.insync.replicas": "4"}})
    try:
        await h.lead(isr=(1, 2, 3))
        answer = h.produce()
        await asyncio.sleep(0)
        assert not answer.done() or answer.result().error_code == ErrorCode.NONE, (
            f"the acks=all write was answered {ErrorCode(answer.result().error_code).name} with the "
            "full ISR of an RF 3 topic (Kafka 3.7 bounds min.insync.replicas=4 by the RF)"
        )
        h.follower_fetch(2, 1)
        h.follower_fetch(3, 1)
        status = await asyncio.wait_for(answer, 5)
        assert status.error_code == ErrorCode.NONE and h.log.high_watermark == 1
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()
