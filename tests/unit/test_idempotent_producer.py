"""The idempotent producer's client half (SPEC 5.4 "Idempotent producer", SPEC 6): config rules,
the accumulator's sequence bookkeeping with a fake clock, the broker's InitProducerId epoch bump
(KIP-360), and the producer end to end over real sockets against tests/unit/fake_cluster.py,
whose partitions apply the broker's own producer-state rules. kafka-python (the independent
oracle) reads the batch headers."""

from __future__ import annotations

import asyncio

import pytest
from kafka.record.memory_records import MemoryRecords

from broker.producer_id_manager import (
    MAX_PRODUCER_EPOCH,
    InvalidProducerIdAndEpoch,
    ProducerIdManager,
    bumped_epoch,
)
from client import Producer
from client.producer import ProducerConfig
from client.producer.accumulator import NO_PRODUCER_ID, NO_SEQUENCE, RecordAccumulator
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from tests.unit.fake_cluster import FakeCluster

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


# -- config ------------------------------------------------------------------------------------


def test_idempotence_is_on_by_default_exactly_with_acks_all():
    assert ProducerConfig(acks="all").idempotent
    assert ProducerConfig(acks=-1).idempotent
    assert not ProducerConfig(acks=1).idempotent
    assert not ProducerConfig(acks=0).idempotent
    assert not ProducerConfig(acks="all", enable_idempotence=False).idempotent
    assert not ProducerConfig(acks="all", retries=0).idempotent  # implicit: quietly off, as Kafka
    assert ProducerConfig(acks="all", enable_idempotence=True).idempotent


def test_explicit_idempotence_with_other_acks_is_a_clear_error():
    with pytest.raises(ValueError, match=r"enable_idempotence=True needs acks='all' \(-1\), got acks=1"):
        ProducerConfig(acks=1, enable_idempotence=True)
    with pytest.raises(ValueError, match="retries > 0"):
        ProducerConfig(acks="all", enable_idempotence=True, retries=0)
    with pytest.raises(ValueError, match="enable_idempotence must be"):
        ProducerConfig(acks="all", enable_idempotence="yes")


# -- the accumulator's sequence numbers ----------------------------------------------------------


def acc() -> RecordAccumulator:
    return RecordAccumulator(batch_size=1000, linger_ms=0, retry_backoff_ms=100, delivery_timeout_ms=5000)


def drain_one(a: RecordAccumulator, tp: TopicPartition, records: int, now: float = 0.0):
    for _ in range(records):
        a.append(tp, None, b"x", 0, [], now)
    (batch,) = [b for b in a.ready(now).batches if b.tp == tp]
    a.assign_sequence(batch)
    a.mark_in_flight(batch)
    return batch


def test_sequences_are_assigned_at_first_drain_per_partition_and_kept_on_retry():
    a = acc()
    a.set_producer_id(7, 0)
    first = drain_one(a, A, 3)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 0, 0)
    other = drain_one(a, B, 2)
    assert other.base_sequence == 0  # each partition counts on its own
    a.reenqueue(first, 0)
    assert a.ready(1000).batches[0] is first
    a.assign_sequence(first)  # the retry: nothing changes
    assert first.base_sequence == 0 and a.next_sequence(A) == 3
    a.complete(first)
    assert drain_one(a, A, 1).base_sequence == 3


def test_a_drained_batch_takes_no_more_records():
    a = acc()
    a.set_producer_id(7, 0)
    a.append(A, None, b"x", 0, [], 0)
    (batch,) = a.ready(0).batches
    a.assign_sequence(batch)
    again, _ = a.append(A, None, b"y", 0, [], 0)
    assert again is not batch and batch.record_count == 1


def test_sequences_wrap_to_zero_after_int32_max():
    a = acc()
    a.set_producer_id(7, 0)
    a._next_sequence[A] = 2**31 - 2
    batch = drain_one(a, A, 3)
    assert batch.base_sequence == 2**31 - 2 and a.next_sequence(A) == 1


def test_rewind_only_for_the_latest_batch_of_the_current_producer_id():
    a = acc()
    a.set_producer_id(7, 0)
    batch = drain_one(a, A, 2)
    assert a.rewind_sequence(batch) and a.next_sequence(A) == 0
    a.complete(batch)
    batch = drain_one(a, A, 2)
    assert batch.base_sequence == 0
    a.set_producer_id(8, 0)  # a new producer id: every partition restarts at 0
    assert a.next_sequence(A) == 0 and not a.rewind_sequence(batch)


def test_no_sequence_without_a_producer_id():
    a = acc()
    a.append(A, None, b"x", 0, [], 0)
    (batch,) = a.ready(0).batches
    with pytest.raises(RuntimeError):
        a.assign_sequence(batch)


# -- the broker's InitProducerId rule (KIP-360) ----------------------------------------------------


def test_init_producer_id_bumps_the_callers_epoch_and_takes_a_new_id_when_it_is_exhausted():
    assert bumped_epoch(-1, -1) is None  # no id given (an older client): a new id
    assert bumped_epoch(1000, 0) == 1
    assert bumped_epoch(1000, MAX_PRODUCER_EPOCH - 1) == MAX_PRODUCER_EPOCH
    assert bumped_epoch(1000, MAX_PRODUCER_EPOCH) is None  # Short.MaxValue: a new id at epoch 0
    for pair in [(1000, -1), (-1, 0), (-2, -1), (1000, MAX_PRODUCER_EPOCH + 1)]:
        with pytest.raises(InvalidProducerIdAndEpoch, match="give both"):
            bumped_epoch(*pair)


async def test_the_producer_id_manager_bumps_without_zookeeper_and_allocates_otherwise():
    class Manager(ProducerIdManager):
        async def generate_producer_id(self) -> int:  # the ZooKeeper block claim, stubbed
            return 4242

    manager = Manager(1, zk=None)
    assert await manager.init_producer_id() == (4242, 0)
    assert await manager.init_producer_id(1000, 6) == (1000, 7)
    assert await manager.init_producer_id(1000, MAX_PRODUCER_EPOCH) == (4242, 0)


# -- the producer against the fake cluster ----------------------------------------------------------


@pytest.fixture
async def fake():
    cluster = await FakeCluster().start()
    cluster.create("t", 2)
    yield cluster
    await cluster.stop()


def producer(fake: FakeCluster, **overrides) -> Producer:
    return Producer(fake.bootstrap, **{"acks": "all", "linger_ms": 1, "retry_backoff_ms": 10, **overrides})


def headers(fake: FakeCluster, partition: int) -> list[tuple[int, int, int, int, int]]:
    """(base offset, producer id, epoch, base sequence, record count) of every stored batch."""
    records = MemoryRecords(fake.log_bytes("t", partition))
    out = []
    while records.has_next():
        batch = records.next_batch()
        batch.validate_crc()
        out.append(
            (
                batch.base_offset,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                len(list(batch)),
            )
        )
    return out


async def send_batch(p: Producer, n: int, partition: int = 0, tag: str = "v") -> list:
    futures = [await p.send("t", f"{tag}{i}".encode(), partition=partition) for i in range(n)]
    await p.flush()
    return [f.result() for f in futures]


async def test_start_fetches_a_producer_id_and_batches_carry_consecutive_sequences(fake):
    async with producer(fake) as p:
        assert p.producer_id == 1000 and p.producer_epoch == 0
        await send_batch(p, 3)
        second = await send_batch(p, 2)
        # what the chaos ledger records for each acknowledged write
        assert [(m.offset, m.producer_id, m.sequence) for m in second] == [(3, 1000, 3), (4, 1000, 4)]
        await send_batch(p, 4, partition=1)
        await send_batch(p, 1)
    assert len(fake.of(ApiKey.INIT_PRODUCER_ID)) == 1
    assert fake.of(ApiKey.INIT_PRODUCER_ID)[0].body["transactional_id"] is None
    assert headers(fake, 0) == [(0, 1000, 0, 0, 3), (3, 1000, 0, 3, 2), (5, 1000, 0, 5, 1)]
    assert headers(fake, 1) == [(0, 1000, 0, 0, 4)]


async def test_without_idempotence_no_producer_id_is_fetched(fake):
    async with producer(fake, acks=1) as p:
        assert p.producer_id == NO_PRODUCER_ID
        metadata = await send_batch(p, 2)
    assert [(m.producer_id, m.sequence) for m in metadata] == [(-1, -1), (-1, -1)]
    assert fake.of(ApiKey.INIT_PRODUCER_ID) == []
    assert headers(fake, 0) == [(0, -1, -1, NO_SEQUENCE, 2)]


async def test_init_producer_id_retries_retriable_errors(fake):
    fake.init_producer_id_errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE]
    async with producer(fake) as p:
        assert p.producer_id == 1000
    assert len(fake.of(ApiKey.INIT_PRODUCER_ID)) == 3


async def test_a_lost_response_is_retried_and_deduplicated(fake):
    fake.drop_response_next.add(ApiKey.PRODUCE)  # the fake appends, then the answer is lost
    async with producer(fake) as p:
        metadata = await send_batch(p, 5)
    assert [m.offset for m in metadata] == [0, 1, 2, 3, 4]
    produces = fake.of(ApiKey.PRODUCE)
    assert len(produces) == 2
    sent = [r.body["topics"][0]["partitions"][0]["records"] for r in produces]
    assert sent[0] == sent[1]  # the very same bytes, sequence included
    assert headers(fake, 0) == [(0, 1000, 0, 0, 5)]  # written once
    assert [r.value for r in fake.records("t", 0)] == [b"v%d" % i for i in range(5)]


async def test_without_idempotence_the_same_lost_response_duplicates(fake):
    fake.drop_response_next.add(ApiKey.PRODUCE)
    async with producer(fake, enable_idempotence=False) as p:
        await send_batch(p, 5)
    assert [r.value for r in fake.records("t", 0)] == [b"v%d" % i for i in range(5)] * 2  # at-least-once


async def test_retries_keep_the_sequence_and_the_order(fake):
    fake.produce_errors[("t", 0)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS]
    async with producer(fake) as p:
        first = [await p.send("t", b"a%d" % i, partition=0) for i in range(3)]
        deadline = asyncio.get_running_loop().time() + 10
        while not fake.of(ApiKey.PRODUCE):  # the first batch is on the wire: closed to appends
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.001)
        second = [await p.send("t", b"b%d" % i, partition=0) for i in range(2)]
        await p.flush()
    assert [f.result().offset for f in first + second] == [0, 1, 2, 3, 4]
    sent = [r.body["topics"][0]["partitions"][0]["records"] for r in fake.of(ApiKey.PRODUCE)]
    assert sent[0] == sent[1] == sent[2]  # three attempts of the first batch, identical
    assert [h[3] for h in headers(fake, 0)] == [0, 3]
    assert [r.value for r in fake.records("t", 0)] == [b"a0", b"a1", b"a2", b"b0", b"b1"]


async def test_out_of_order_fails_the_batch_with_kafkas_name_then_the_next_epoch_starts_clean(fake):
    async with producer(fake) as p:
        await send_batch(p, 2)
        fake.produce_errors[("t", 0)] = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
        with pytest.raises(KafkaError) as err:
            await send_batch(p, 3)
        assert err.value.name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        assert str(err.value).startswith("OUT_OF_ORDER_SEQUENCE_NUMBER")
        await send_batch(p, 1, tag="after")
        # KIP-360: the same producer id at the next epoch, sequences from 0
        assert (p.producer_id, p.producer_epoch) == (1000, 1) and p.metrics["producer_id_resets"] == 1
    first, bump = fake.of(ApiKey.INIT_PRODUCER_ID)
    assert (first.body["producer_id"], first.body["producer_epoch"]) == (-1, -1)
    assert (bump.body["producer_id"], bump.body["producer_epoch"]) == (1000, 0)
    assert headers(fake, 0) == [(0, 1000, 0, 0, 2), (2, 1000, 1, 0, 1)]


async def test_a_surely_refused_batch_hands_its_sequences_to_the_next(fake):
    async with producer(fake) as p:
        await send_batch(p, 2)
        fake.produce_errors[("t", 0)] = [ErrorCode.MESSAGE_TOO_LARGE]  # checked before any append
        with pytest.raises(KafkaError, match="MESSAGE_TOO_LARGE"):
            await send_batch(p, 3)
        await send_batch(p, 2, tag="next")  # sequence 2 again: the fake's real rules accept no gap
        assert p.producer_id == 1000 and p.metrics["producer_id_resets"] == 0
    assert headers(fake, 0) == [(0, 1000, 0, 0, 2), (2, 1000, 0, 2, 2)]


async def test_a_batch_whose_sequence_is_in_doubt_leads_to_an_epoch_bump(fake):
    # acks=all timing out at the broker: the batch may be in the log, its sequence is in doubt.
    # (The batch really written late, after the bump, is fenced: test_idempotent_producer_races.)
    async with producer(fake, retries=1) as p:
        await send_batch(p, 1)
        fake.produce_errors[("t", 0)] = [ErrorCode.REQUEST_TIMED_OUT] * 2
        with pytest.raises(KafkaError, match="REQUEST_TIMED_OUT"):
            await send_batch(p, 2)
        await send_batch(p, 1, tag="after")
        assert (p.producer_id, p.producer_epoch) == (1000, 1)
    assert headers(fake, 0) == [(0, 1000, 0, 0, 1), (1, 1000, 1, 0, 1)]


async def test_the_epoch_bump_is_per_producer_every_partition_restarts_at_zero(fake):
    async with producer(fake) as p:
        await send_batch(p, 2, partition=1)
        await send_batch(p, 1)
        fake.produce_errors[("t", 0)] = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
        with pytest.raises(KafkaError, match="OUT_OF_ORDER_SEQUENCE_NUMBER"):
            await send_batch(p, 1)
        await send_batch(p, 1, partition=1, tag="after")  # the new epoch must start at 0 here too
    assert headers(fake, 1) == [(0, 1000, 0, 0, 2), (2, 1000, 1, 0, 1)]
