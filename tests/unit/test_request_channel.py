"""RequestChannel (SPEC 5.1): bounded request queue with FIFO backpressure, per-processor
response queues, and the answer-once rules of Request."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.network.request_channel import Request, RequestChannel
from client.protocol.api import ApiKey
from client.protocol.framing import RequestHeader, decode_response


def make_request(channel: RequestChannel | None, correlation_id: int = 1, processor_id: int = 0) -> Request:
    return Request(
        header=RequestHeader(int(ApiKey.METADATA), 0, correlation_id, "test"),
        api_key=ApiKey.METADATA,
        body={"topics": None},
        connection_id=f"conn-{correlation_id}",
        client_address="127.0.0.1:1",
        processor_id=processor_id,
        received_ms=0.0,
        _channel=channel,
    )


async def test_requests_go_straight_in_until_the_queue_is_full():
    channel = RequestChannel(queued_max_requests=2, num_processors=1)
    admitted: list[int] = []
    assert channel.send_request(make_request(channel, 1), lambda: admitted.append(1))
    assert channel.send_request(make_request(channel, 2), lambda: admitted.append(2))
    assert channel.request_queue_size == 2
    assert not channel.send_request(make_request(channel, 3), lambda: admitted.append(3))
    assert channel.request_queue_size == 2
    assert channel.blocked_count == 1
    assert admitted == []  # the callback is only for requests that had to wait


async def test_taking_a_request_admits_the_oldest_blocked_one():
    channel = RequestChannel(queued_max_requests=1, num_processors=1)
    admitted: list[int] = []
    channel.send_request(make_request(channel, 1), lambda: admitted.append(1))
    for cid in (2, 3, 4):
        assert not channel.send_request(make_request(channel, cid), lambda cid=cid: admitted.append(cid))
    order = []
    for expected_admissions in ([2], [2, 3], [2, 3, 4], [2, 3, 4]):
        order.append((await channel.receive_request()).header.correlation_id)
        assert admitted == expected_admissions
        assert channel.request_queue_size <= 1
    assert order == [1, 2, 3, 4]
    assert channel.blocked_count == 0


async def test_new_requests_do_not_overtake_blocked_ones():
    channel = RequestChannel(queued_max_requests=1, num_processors=1)
    channel.send_request(make_request(channel, 1), lambda: None)
    assert not channel.send_request(make_request(channel, 2), lambda: None)
    await channel.receive_request()  # admits 2: the queue is full again
    # Even with a free slot, a newcomer queues behind a blocked request.
    channel2 = RequestChannel(queued_max_requests=2, num_processors=1)
    channel2.send_request(make_request(channel2, 1), lambda: None)
    channel2.send_request(make_request(channel2, 2), lambda: None)
    assert not channel2.send_request(make_request(channel2, 3), lambda: None)
    (await channel2.receive_request())  # 1 out, 3 in
    assert not channel2.send_request(make_request(channel2, 4), lambda: None)
    assert [(await channel2.receive_request()).header.correlation_id for _ in range(3)] == [2, 3, 4]


async def test_withdrawn_requests_are_never_admitted():
    channel = RequestChannel(queued_max_requests=1, num_processors=1)
    channel.send_request(make_request(channel, 1), lambda: None)
    gone = make_request(channel, 2)
    channel.send_request(gone, lambda: pytest.fail("a withdrawn request was admitted"))
    channel.send_request(make_request(channel, 3), lambda: None)
    channel.withdraw(gone)
    assert [(await channel.receive_request()).header.correlation_id for _ in range(2)] == [1, 3]


async def test_receive_waits_for_a_request():
    channel = RequestChannel(queued_max_requests=4, num_processors=1)
    waiter = asyncio.create_task(channel.receive_request())
    await asyncio.sleep(0)  # the task runs to its first suspension: the empty queue's get()
    assert not waiter.done()
    sent = make_request(channel, 9)
    channel.send_request(sent, lambda: None)
    # What ends the wait is this request and nothing else: a receive that returned early (at
    # whatever time) would have returned something other than ``sent``, or raised.
    assert await asyncio.wait_for(waiter, 1) is sent
    assert channel.request_queue_size == 0


async def test_responses_go_to_their_processors_queue():
    channel = RequestChannel(queued_max_requests=4, num_processors=3)
    make_request(channel, 1, processor_id=2).respond({"n": 1})
    make_request(channel, 2, processor_id=0).no_response()
    make_request(channel, 3, processor_id=2).close_connection()
    assert channel.response_queue(1).empty()
    zero = channel.response_queue(0).get_nowait()
    assert zero.payload is None and not zero.close
    first, second = (channel.response_queue(2).get_nowait() for _ in range(2))
    assert decode_response(first.payload[4:]) == (1, {"n": 1})
    assert second.close and second.payload is None


async def test_a_second_answer_is_ignored_and_logged(caplog):
    channel = RequestChannel(queued_max_requests=4, num_processors=1)
    request = make_request(channel, 5)
    assert not request.responded
    request.respond({"first": True})
    with caplog.at_level(logging.WARNING, logger="broker.network.request_channel"):
        request.respond({"second": True})
        request.no_response()
    assert request.responded
    assert channel.response_queue(0).qsize() == 1
    assert sum("after it was answered" in r.getMessage() for r in caplog.records) == 2


async def test_an_unencodable_body_raises_and_leaves_the_request_unanswered():
    channel = RequestChannel(queued_max_requests=4, num_processors=1)
    request = make_request(channel, 6)
    with pytest.raises(TypeError):
        request.respond({"not msgpack": object()})
    assert not request.responded
    request.respond({"ok": True})
    assert channel.response_queue(0).qsize() == 1


async def test_a_closed_channel_drops_responses_and_blocked_requests():
    channel = RequestChannel(queued_max_requests=1, num_processors=1)
    channel.send_request(make_request(channel, 1), lambda: None)
    channel.send_request(make_request(channel, 2), lambda: pytest.fail("admitted after close"))
    channel.close()
    make_request(channel, 3).respond({"late": True})
    assert channel.response_queue(0).empty()
    assert channel.blocked_count == 0
    await channel.receive_request()


def test_queue_must_hold_at_least_one_request():
    with pytest.raises(ValueError):
        RequestChannel(queued_max_requests=0, num_processors=1)
