"""The record accumulator's rules, driven by a fake clock (times are plain arguments)."""

from __future__ import annotations

from client.producer.accumulator import BATCH_OVERHEAD, RecordAccumulator, estimate_record_size
from client.types import TopicPartition

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
VALUE = b"x" * 84  # 100 bytes with the record overhead


def acc(batch_size=1000, linger_ms=10, retry_backoff_ms=100, delivery_timeout_ms=5000) -> RecordAccumulator:
    return RecordAccumulator(batch_size, linger_ms, retry_backoff_ms, delivery_timeout_ms)


def add(a: RecordAccumulator, tp=A, now=0.0, value=VALUE, handle=None):
    return a.append(tp, None, value, 0, [], now, handle)


def test_record_size_estimate():
    assert estimate_record_size(None, VALUE, []) == 100
    assert estimate_record_size(b"k", b"v", [("h", b"vv")]) == 16 + 1 + 1 + 1 + 2 + 2


def test_linger_makes_a_batch_ready():
    a = acc(linger_ms=10)
    batch, wake = add(a, now=0)
    assert wake  # a new batch: the sender must arm its linger timer
    _, wake = add(a, now=3)
    assert not wake
    result = a.ready(5)
    assert result.batches == [] and result.next_ready_ms == 10
    assert a.ready(10).batches == [batch]
    assert batch.record_count == 2


def test_size_makes_a_batch_ready_and_opens_the_next():
    a = acc(batch_size=BATCH_OVERHEAD + 300, linger_ms=1000)
    first = [add(a, now=0) for _ in range(3)]
    assert first[-1][1]  # the third record filled it: wake
    assert len({id(b) for b, _ in first}) == 1
    assert a.ready(0).batches == [first[0][0]]
    assert a.would_open_batch(A, 100)
    second, wake = add(a, now=1)
    assert wake and second is not first[0][0]
    assert a.ready(1).batches == [first[0][0]]  # only the head of a partition is ready


def test_oversized_record_gets_its_own_batch():
    a = acc(batch_size=200)
    small, _ = add(a, now=0)
    big, _ = add(a, now=0, value=b"y" * 500)
    assert big is not small and big.record_count == 1
    after, _ = add(a, now=0)
    assert after is not big


def test_one_in_flight_batch_per_partition():
    a = acc(batch_size=BATCH_OVERHEAD + 100, linger_ms=0)
    b1, _ = add(a, now=0)
    b2, _ = add(a, now=0)
    other, _ = add(a, tp=B, now=0)
    assert a.ready(0).batches == [b1, other]
    a.mark_in_flight(b1)
    a.mark_in_flight(other)
    assert a.ready(0).batches == []  # b2 waits: its partition is muted
    a.complete(b1)
    assert a.ready(0).batches == [b2]


def test_drained_batch_takes_no_more_records():
    a = acc(linger_ms=0)
    b1, _ = add(a, now=0)
    a.mark_in_flight(b1)
    assert a.would_open_batch(A, 10)
    b2, wake = add(a, now=1)
    assert b2 is not b1 and wake


def test_retry_reenqueues_at_the_head_keeping_order():
    a = acc(batch_size=BATCH_OVERHEAD + 100, linger_ms=0, retry_backoff_ms=100)
    b1, _ = add(a, now=0, handle="r1")
    b2, _ = add(a, now=0, handle="r2")
    a.mark_in_flight(b1)
    a.reenqueue(b1, 10, error="NOT_LEADER_OR_FOLLOWER")
    result = a.ready(50)
    assert result.batches == [] and result.next_ready_ms == 110  # backing off; b2 must not overtake
    assert a.ready(110).batches == [b1]
    a.mark_in_flight(b1)
    assert b1.attempts == 2 and b1.last_error == "NOT_LEADER_OR_FOLLOWER"
    a.complete(b1)
    assert a.ready(110).batches == [b2]
    assert [h for b in a.batches() for h in b.handles] == ["r2"]


def test_delivery_timeout_expires_waiting_batches_but_not_in_flight_ones():
    a = acc(batch_size=BATCH_OVERHEAD + 100, delivery_timeout_ms=1000)
    b1, _ = add(a, now=0)
    b2, _ = add(a, now=200)
    other, _ = add(a, tp=B, now=0)
    a.mark_in_flight(other)
    assert a.next_expiry_ms() == 1000
    assert a.expire(999) == []
    assert a.expire(1000) == [b1]
    assert b1.done
    assert a.expire(1200) == [b2]
    assert a.batches() == [other]
    assert a.is_expired(other, 1000)


def test_buffered_bytes_are_released_on_completion():
    a = acc()
    b1, _ = add(a)
    add(a)
    assert a.buffered_bytes == BATCH_OVERHEAD + 200 == b1.size
    a.mark_in_flight(b1)
    a.complete(b1)
    a.complete(b1)  # idempotent
    assert a.buffered_bytes == 0 and len(a) == 0 and not a.has_unsent


def test_flush_and_close_make_everything_ready():
    a = acc(linger_ms=10_000)
    b1, _ = add(a, now=0)
    assert a.ready(1).batches == []
    a.begin_flush()
    assert a.ready(1).batches == [b1]
    a.end_flush()
    assert a.ready(1).batches == []
    a.closing = True
    assert a.ready(1).batches == [b1]


def test_abort_all_removes_everything():
    a = acc()
    add(a)
    add(a, tp=B)
    aborted = a.abort_all()
    assert len(aborted) == 2 and all(b.done for b in aborted)
    assert a.buffered_bytes == 0 and a.batches() == []
