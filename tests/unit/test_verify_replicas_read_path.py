"""The broker side of ``floodmark verify-replicas``: a Fetch from Kafka's debugging consumer
(replica id -2, Request.DebuggingConsumerId), through a real ReplicaManager and real logs
(docs/operations.md "Verifying replicas (`floodmark verify-replicas`)").

As in Kafka (``fetchOnlyFromLeader = false``, committed data only for it): the leader and a
follower both serve it, each below its own HW, answering its own HW; it is no follower, so the
leader's follower state, HW and ISR do not move; a parked one waits at a follower as at the
leader. A consumer (-1) and a broker id keep their behaviour.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from client.protocol.api import CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch, iter_batches
from tests.unit.test_isr_manager import TP, Harness

DEBUG = DEBUGGING_REPLICA_ID


def fetch_entry(offset: int, epoch: int = -1) -> dict:
    return {"fetch_offset": offset, "current_leader_epoch": epoch, "partition_max_bytes": 1 << 20}


def offsets(records: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(records)]


def batch(n: int, base_offset: int = 0) -> bytes:
    return build_batch([(None, b"v%d" % i, 0, []) for i in range(n)], base_offset=base_offset)


@pytest.fixture
async def h(tmp_path):
    harness = Harness(tmp_path, min_isr=1)
    yield harness
    harness.rm.shutdown()
    harness.rm.log_manager.shutdown()


async def leader_with_hw_1_leo_2(h: Harness) -> None:
    """Broker 1 leads t-0 (ISR 1, 2, 3): two records, the HW at 1 (both followers fetched offset 1)."""
    await h.lead()
    await h.produce(acks=1)
    h.follower_fetch(2, 1)
    h.follower_fetch(3, 1)
    await h.produce(acks=1)
    assert (h.log.high_watermark, h.log.log_end_offset) == (1, 2)


def follower_state(h: Harness) -> list:
    return [dataclasses.asdict(r) for _, r in sorted(h.partition.remote_replicas.items())]


async def test_the_leader_serves_a_debugging_fetch_below_its_hw_and_changes_nothing(h):
    await leader_with_hw_1_leo_2(h)
    before = (follower_state(h), h.log.high_watermark, set(h.partition.isr))
    h.clock.now += 60_000  # a follower fetch now would move the followers' caught-up times

    result = h.rm.read(TP, DEBUG, fetch_entry(0), 1 << 20)
    assert result.error_code == ErrorCode.NONE and result.high_watermark == 1
    assert offsets(result.records) == [(0, 0)]  # committed data only: not the batch at 1 (LEO 2)
    assert (follower_state(h), h.log.high_watermark, set(h.partition.isr)) == before
    at_hw = h.rm.read(TP, DEBUG, fetch_entry(1), 1 << 20)
    assert at_hw.error_code == ErrorCode.NONE and at_hw.records == b""


async def test_a_consumer_and_a_broker_id_keep_their_behaviour(h):
    await leader_with_hw_1_leo_2(h)
    consumer = h.rm.read(TP, CONSUMER_REPLICA_ID, fetch_entry(0), 1 << 20)
    assert offsets(consumer.records) == [(0, 0)] and consumer.high_watermark == 1
    follower = h.rm.read(TP, 2, fetch_entry(2), 1 << 20)  # a follower reads to the LEO, and counts
    assert follower.error_code == ErrorCode.NONE and h.partition.remote_replicas[2].log_end_offset == 2
    assert h.rm.read(TP, -3, fetch_entry(0), 1 << 20).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert h.rm.read(TP, 7, fetch_entry(0), 1 << 20).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_a_follower_serves_a_debugging_fetch_below_its_own_hw(h):
    await h.lead(leader=2)  # broker 1 follows broker 2
    assert not h.partition.is_leader
    assert h.rm.append_as_follower(TP, batch(2), leader_high_watermark=1) is not None
    assert h.rm.append_as_follower(TP, batch(1, base_offset=2), leader_high_watermark=1) is not None
    assert (h.log.high_watermark, h.log.log_end_offset) == (1, 3)

    debug = h.rm.read(TP, DEBUG, fetch_entry(0), 1 << 20)
    assert debug.error_code == ErrorCode.NONE and debug.high_watermark == 1
    assert debug.records == b""  # the batch 0-1 is not wholly below the follower's HW 1
    h.rm.append_as_follower(TP, b"", leader_high_watermark=3)
    debug = h.rm.read(TP, DEBUG, fetch_entry(0), 1 << 20)
    assert debug.high_watermark == 3 and offsets(debug.records) == [(0, 1), (2, 2)]
    consumer = h.rm.read(TP, CONSUMER_REPLICA_ID, fetch_entry(0), 1 << 20)
    assert consumer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER  # unchanged: leaders only


async def test_a_debugging_fetch_is_fenced_and_refused_like_any_other(h):
    await h.lead(leader=2, epoch=3)
    assert h.rm.read(TP, DEBUG, fetch_entry(0, epoch=2), 1 << 20).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert h.rm.read(TP, DEBUG, fetch_entry(0, epoch=4), 1 << 20).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert h.rm.read(TP, DEBUG, fetch_entry(0, epoch=3), 1 << 20).error_code == ErrorCode.NONE
    unknown = h.rm.read(("nosuch", 0), DEBUG, fetch_entry(0), 1 << 20)
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    beyond = h.rm.read(TP, DEBUG, fetch_entry(5), 1 << 20)
    assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def fetch_body(offset: int, max_wait_ms: int) -> dict:
    return {
        "replica_id": DEBUG,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [{"topic": TP[0], "partitions": [{"partition": TP[1], **fetch_entry(offset)}]}],
    }


async def test_a_parked_debugging_fetch_waits_at_a_follower_until_max_wait(h):
    """Kafka's DelayedFetch looks the partition up with the fetch's fetchOnlyFromLeader: at a
    follower a caught-up debugging fetch waits out max wait rather than answering at once."""
    await h.lead(leader=2)
    h.rm.append_as_follower(TP, batch(1), leader_high_watermark=1)
    answered: asyncio.Future = asyncio.get_running_loop().create_future()
    loop = asyncio.get_running_loop()
    started = loop.time()
    h.rm.fetch_messages(fetch_body(1, 300), lambda results, *_: answered.set_result(results))
    await asyncio.sleep(0.05)
    assert not answered.done()  # parked, not answered NOT_LEADER_OR_FOLLOWER at once
    results = await asyncio.wait_for(answered, 5)
    assert loop.time() - started >= 0.25
    assert results[TP].error_code == ErrorCode.NONE and results[TP].high_watermark == 1


async def test_a_debugging_fetch_with_data_below_the_hw_is_answered_at_once(h):
    await leader_with_hw_1_leo_2(h)
    answered: asyncio.Future = asyncio.get_running_loop().create_future()
    h.rm.fetch_messages(fetch_body(0, 10_000), lambda results, *_: answered.set_result(results))
    results = await asyncio.wait_for(answered, 1)
    assert offsets(results[TP].records) == [(0, 0)]
