"""The idempotent producer's race windows (issue 18, windows 10-12), each driven step by step
against tests/unit/fake_cluster.py, whose partitions apply the broker's own producer-state rules
(:class:`broker.log.producer_state.ProducerStateManager`).

* Window 10: a batch the client gave up on (its request held at the leader past the client's
  timeout) is processed after a later batch. KIP-360's epoch bump on the same producer id
  fences it with INVALID_PRODUCER_EPOCH; a new producer id did not.
* Window 11: a batch refused while ``close()`` drains hands its sequences to the next batch of
  its partition instead of failing every later batch with OUT_OF_ORDER_SEQUENCE_NUMBER.
* Window 12: a malformed Produce or InitProducerId answer is retried, not left hanging.

The test holds a request with a future it controls (:class:`GatedCluster`); the client's own
request timeout is the only timer, and every wait is on the event that shows the outcome.
"""

from __future__ import annotations

import asyncio

import pytest

from client import Producer
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from tests.unit.fake_cluster import FakeCluster
from tests.unit.test_idempotent_producer import headers

#: A bound on waits whose event never comes on the unfixed code: the test fails instead of hanging.
BOUND_S = 10.0


class GatedCluster(FakeCluster):
    """The fake, plus: each future in ``gates`` holds one produce request (the next ones, in
    order) before it is handled, and ``answers`` gets the response each held request got;
    ``malformed_next`` answers the next request of an API with a body that breaks its schema
    (a produce is handled first, so its batch is in the log)."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Future] = []
        self.held = 0  # produce requests that reached their gate
        self.answers: list[asyncio.Future] = []
        self.malformed_next: set[ApiKey] = set()

    async def _produce(self, node: int, body: dict) -> dict | None:
        if not self.gates:
            response = await super()._produce(node, body)
            if ApiKey.PRODUCE in self.malformed_next:
                self.malformed_next.discard(ApiKey.PRODUCE)
                return {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]}
            return response
        gate = self.gates.pop(0)
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self.answers.append(answer)
        self.held += 1
        await gate
        response = await super()._produce(node, body)
        answer.set_result(response)
        return response

    async def _init_producer_id(self, node: int, body: dict) -> dict:
        if ApiKey.INIT_PRODUCER_ID in self.malformed_next:
            self.malformed_next.discard(ApiKey.INIT_PRODUCER_ID)
            return {"error_code": 0, "producer_id": "not a number", "producer_epoch": 0}
        return await super()._init_producer_id(node, body)


@pytest.fixture
async def gated():
    cluster = await GatedCluster().start()
    cluster.create("t", 2)
    yield cluster
    await cluster.stop()


def producer(fake: FakeCluster, **overrides) -> Producer:
    return Producer(fake.bootstrap, **{"acks": "all", "linger_ms": 1, "retry_backoff_ms": 10, **overrides})


async def test_a_batch_given_up_on_and_processed_late_is_fenced_by_the_epoch_bump(gated):
    """Window 10: A (epoch 0, sequence 1) waits at the leader; the client gives up on it, bumps
    the epoch, writes B (epoch 1, sequence 0); then the leader processes A: refused, not written
    after B."""
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    p = producer(gated, retries=1, request_timeout_ms=50)
    await p.start()
    try:
        first = await p.send("t", b"first", partition=0)
        assert (await first).offset == 0
        gated.gates += [gate, gate]  # both attempts of A wait at the leader
        a = await p.send("t", b"A", partition=0)
        with pytest.raises(KafkaError) as failed:
            await asyncio.wait_for(a, BOUND_S)
        assert failed.value.name == "REQUEST_TIMED_OUT"  # what the user sees: A failed
        assert gated.held == 2  # yet both of its requests are still at the leader
        b = await p.send("t", b"B", partition=0)
        assert (await asyncio.wait_for(b, BOUND_S)).offset == 1
        gate.set_result(None)  # the leader gets to A at last
        late = [await asyncio.wait_for(answer, BOUND_S) for answer in gated.answers]
    finally:
        await p.close(timeout=1)
    assert [r.value for r in gated.records("t", 0)] == [b"first", b"B"]  # no A after B
    codes = [r["topics"][0]["partitions"][0]["error_code"] for r in late]
    assert codes == [ErrorCode.INVALID_PRODUCER_EPOCH] * 2
    assert headers(gated, 0) == [(0, 1000, 0, 0, 1), (1, 1000, 1, 0, 1)]
    bump = gated.of(ApiKey.INIT_PRODUCER_ID)[-1].body  # KIP-360: the same id, the next epoch
    assert (bump["producer_id"], bump["producer_epoch"]) == (1000, 0)
    assert (p.producer_id, p.producer_epoch) == (1000, 1)


async def test_a_batch_refused_during_close_hands_its_sequences_to_the_next(gated):
    """Window 11: while close() drains, MESSAGE_TOO_LARGE on one batch must not leave a
    sequence gap that fails every later batch of its partition."""
    p = producer(gated, batch_size=1)  # one record per batch
    await p.start()
    try:
        assert (await (await p.send("t", b"before", partition=0))).offset == 0
        gated.produce_errors[("t", 0)] = [ErrorCode.MESSAGE_TOO_LARGE]
        futures = [await p.send("t", b"r%d" % i, partition=0) for i in range(3)]  # no yield: queued
    finally:
        await p.close(timeout=BOUND_S)  # closing before the sender drained any of them
    assert futures[0].exception().name == "MESSAGE_TOO_LARGE"
    outcomes = [f.exception().name if f.exception() else f.result().offset for f in futures[1:]]
    assert outcomes == [1, 2]
    assert headers(gated, 0) == [(0, 1000, 0, 0, 1), (1, 1000, 0, 1, 1), (2, 1000, 0, 2, 1)]


async def test_a_malformed_produce_response_is_retried_not_left_in_flight(gated):
    """Window 12: a produce answer that breaks the schema (the batch was written) fails the
    attempt like a lost answer: the retry is recognised as a duplicate and flush() returns."""
    gated.malformed_next.add(ApiKey.PRODUCE)
    p = producer(gated)
    await p.start()
    try:
        future = await p.send("t", b"v", partition=0)
        metadata = await asyncio.wait_for(future, BOUND_S)
        await asyncio.wait_for(p.flush(), BOUND_S)
    finally:
        await p.close(timeout=1)
    assert (metadata.offset, metadata.producer_id, metadata.sequence) == (0, 1000, 0)
    assert len(gated.of(ApiKey.PRODUCE)) == 2
    assert headers(gated, 0) == [(0, 1000, 0, 0, 1)]  # written once


async def test_a_malformed_init_producer_id_answer_is_retried(gated):
    """Window 12: the epoch bump's InitProducerId answered with a malformed body is retried; the
    producer does not stay without a producer id (-1) for ever."""
    p = producer(gated)
    await p.start()
    try:
        assert (await (await p.send("t", b"a", partition=0))).offset == 0
        gated.produce_errors[("t", 0)] = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
        gated.malformed_next.add(ApiKey.INIT_PRODUCER_ID)
        with pytest.raises(KafkaError, match="OUT_OF_ORDER_SEQUENCE_NUMBER"):
            await asyncio.wait_for(await p.send("t", b"refused", partition=0), BOUND_S)
        metadata = await asyncio.wait_for(await p.send("t", b"after", partition=0), BOUND_S)
    finally:
        await p.close(timeout=1)
    assert len(gated.of(ApiKey.INIT_PRODUCER_ID)) == 3  # start, the malformed answer, its retry
    assert (metadata.offset, metadata.producer_id, metadata.sequence) == (1, 1000, 0)
    assert headers(gated, 0) == [(0, 1000, 0, 0, 1), (1, 1000, 1, 0, 1)]
