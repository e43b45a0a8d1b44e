"""The network layer end to end over real sockets (SPEC 5.1, 5.2): ordering, round-robin,
limits, error responses, backpressure, parked requests, and a flood of malformed frames.

The only stand-in is the API handler, a few lines per test. Well-formed requests go through
client.connection.BrokerConnection; where the exact bytes or order on the wire matter, a raw
socket client reads the frames itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.network import Listener, NetworkConfig, Request, SocketServer
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.framing import LENGTH, FrameDecoder, decode_response, encode_request
from tests.fuzz_frames import hammer, malformed_frames

# A Metadata response that passes BrokerConnection's response validation.
METADATA = {"brokers": [], "cluster_id": None, "controller_id": -1, "topics": []}
HOST = "127.0.0.1"


async def answer_metadata(request: Request) -> None:
    request.respond(METADATA)


@contextlib.asynccontextmanager
async def serving(handler, metrics=None, **settings: Any) -> AsyncIterator[SocketServer]:
    server = SocketServer(
        NetworkConfig(listeners=(Listener("PLAINTEXT", HOST, 0),), **settings), handler, metrics
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class RawClient:
    """Frames on a plain socket, so tests see exactly what the broker wrote and in what order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(1 << 24)

    @classmethod
    async def open(cls, port: int) -> RawClient:
        return cls(*await asyncio.open_connection(HOST, port))

    def send(self, api_key: int, correlation_id: int, body: Any, api_version: int = 0) -> None:
        self.writer.write(encode_request(api_key, api_version, correlation_id, "raw", body))

    async def response(self, timeout: float = 5.0) -> tuple[int, Any]:
        async with asyncio.timeout(timeout):
            while (payload := self.decoder.next_frame()) is None:
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("closed by the broker")
                self.decoder.feed(data)
        return decode_response(payload)

    async def closed_by_server(self, timeout: float = 5.0) -> bool:
        """True once the broker closes (EOF or reset); False if it stays open for ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except ConnectionError:
            pass
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def eventually(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


# -- ordering and distribution --------------------------------------------------------------------


async def test_pipelined_requests_are_answered_in_request_order():
    rng = random.Random(7)

    async def slow_echo(request: Request) -> None:
        await asyncio.sleep(rng.random() * 0.004)  # concurrent requests finish out of order
        request.respond({"cid": request.header.correlation_id})

    async with serving(slow_echo, num_network_threads=2, num_io_threads=8) as server:
        clients = [await RawClient.open(server.port) for _ in range(6)]
        for c, client in enumerate(clients):
            for i in range(40):
                client.send(ApiKey.METADATA, c * 1000 + i, {"topics": None})

        async def read_all(c: int, client: RawClient) -> list[int]:
            got = []
            for _ in range(40):
                cid, body = await client.response()
                assert body == {"cid": cid}
                got.append(cid)
            return got

        results = await asyncio.gather(*(read_all(c, client) for c, client in enumerate(clients)))
        for c, got in enumerate(results):
            assert got == [c * 1000 + i for i in range(40)]
        for client in clients:
            await client.close()


async def test_connections_are_spread_round_robin_over_processors():
    async def which_processor(request: Request) -> None:
        request.respond({"processor": request.processor_id, "connection": request.connection_id})

    async with serving(which_processor, num_network_threads=3) as server:
        seen = []
        clients = []
        for i in range(9):
            client = await RawClient.open(server.port)  # one at a time, so accept order is known
            client.send(ApiKey.METADATA, i, {"topics": None})
            _, body = await client.response()
            seen.append(body["processor"])
            clients.append(client)
            assert body["connection"].startswith(f"{HOST}:{server.port}-{HOST}:")
        assert seen == [0, 1, 2] * 3
        assert [p.connection_count for p in server.processors] == [3, 3, 3]
        assert server.connection_count == 9
        for client in clients:
            await client.close()
        await eventually(lambda: server.connection_count == 0)


# -- limits and malformed input ---------------------------------------------------------------------


async def test_an_oversize_frame_closes_only_its_connection():
    async with serving(answer_metadata, socket_request_max_bytes=1024) as server:
        good = await BrokerConnection.open(HOST, server.port)
        bad = await RawClient.open(server.port)
        bad.writer.write(LENGTH.pack(1025))  # the length alone is enough: no body is ever sent
        assert await bad.closed_by_server()
        assert await good.request(ApiKey.METADATA, {"topics": None}) == METADATA
        # A frame right at the limit is fine.
        fits = await RawClient.open(server.port)
        fits.send(ApiKey.METADATA, 5, {"topics": ["x" * 900]})
        assert (await fits.response())[0] == 5
        good.close()
        await bad.close()
        await fits.close()


async def test_garbage_closes_the_connection():
    async with serving(answer_metadata) as server:
        client = await RawClient.open(server.port)
        client.writer.write(LENGTH.pack(5) + b"\xc1\xc1\xc1\xc1\xc1")
        assert await client.closed_by_server()
        await client.close()
        conn = await BrokerConnection.open(HOST, server.port)
        assert await conn.request(ApiKey.METADATA, {"topics": None}) == METADATA
        conn.close()


async def test_a_body_of_the_wrong_shape_gets_invalid_request_and_the_connection_lives_on(caplog):
    async with serving(answer_metadata) as server:
        conn = await BrokerConnection.open(HOST, server.port)
        with caplog.at_level(logging.WARNING, logger="broker.network"), pytest.raises(KafkaError) as error:
            await conn.request(ApiKey.METADATA, {"topics": 5})
        assert error.value.code == ErrorCode.INVALID_REQUEST
        assert "topics" in error.value.message
        assert any(
            "INVALID_REQUEST" in r.getMessage() and "127.0.0.1:" in r.getMessage() for r in caplog.records
        )
        assert await conn.request(ApiKey.METADATA, {"topics": None}) == METADATA

        raw = await RawClient.open(server.port)
        raw.send(ApiKey.PRODUCE, 4242, ["not", "a", "map"])
        raw.send(ApiKey.METADATA, 4243, {"topics": None})
        cid, body = await raw.response()
        assert cid == 4242 and body["error_code"] == ErrorCode.INVALID_REQUEST
        assert await raw.response() == (4243, METADATA)
        conn.close()
        await raw.close()


async def test_an_unknown_api_key_gets_invalid_request():
    async with serving(answer_metadata) as server:
        raw = await RawClient.open(server.port)
        raw.send(999, 31, {})
        raw.send(17, 32, {})
        for cid in (31, 32):
            got_cid, body = await raw.response()
            assert got_cid == cid
            assert body == {"error_code": ErrorCode.INVALID_REQUEST, "error_message": body["error_message"]}
            assert "unknown API key" in body["error_message"]
        raw.send(ApiKey.METADATA, 33, {"topics": None})
        assert await raw.response() == (33, METADATA)
        await raw.close()


async def test_an_unsupported_version_gets_unsupported_version():
    async with serving(answer_metadata) as server:
        raw = await RawClient.open(server.port)
        raw.send(ApiKey.METADATA, 70, {"topics": None}, api_version=7)
        cid, body = await raw.response()
        assert cid == 70 and body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        raw.send(ApiKey.METADATA, 71, {"topics": None})
        assert await raw.response() == (71, METADATA)
        await raw.close()


async def test_a_handler_exception_becomes_unknown_server_error(caplog):
    async def flaky(request: Request) -> None:
        if request.body["topics"] == ["boom"]:
            raise RuntimeError("disk on fire")
        request.respond(METADATA)

    async with serving(flaky, num_io_threads=1) as server:
        conn = await BrokerConnection.open(HOST, server.port)
        with caplog.at_level(logging.ERROR, logger="broker.network.handlers"):
            for _ in range(3):  # the only handler task survives every failure
                with pytest.raises(KafkaError) as error:
                    await conn.request(ApiKey.METADATA, {"topics": ["boom"]})
                assert error.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
                assert "disk on fire" in error.value.message
        assert any("METADATA" in r.getMessage() and "disk on fire" in r.getMessage() for r in caplog.records)
        assert await conn.request(ApiKey.METADATA, {"topics": None}) == METADATA
        conn.close()


async def test_max_connections_is_enforced():
    async with serving(answer_metadata, max_connections=2) as server:
        first = await BrokerConnection.open(HOST, server.port)
        second = await BrokerConnection.open(HOST, server.port)
        await eventually(lambda: server.connection_count == 2)
        third = await RawClient.open(server.port)
        assert await third.closed_by_server()
        assert server.connection_count == 2
        assert await second.request(ApiKey.METADATA, {"topics": None}) == METADATA
        first.close()
        await eventually(lambda: server.connection_count == 1)
        fourth = await BrokerConnection.open(HOST, server.port)
        assert await fourth.request(ApiKey.METADATA, {"topics": None}) == METADATA
        second.close()
        fourth.close()
        await third.close()


async def test_idle_connections_are_closed():
    parked: list[Request] = []

    async def park(request: Request) -> None:
        parked.append(request)

    async with serving(answer_metadata, connections_max_idle_ms=400) as server:
        idle = await RawClient.open(server.port)
        busy = await BrokerConnection.open(HOST, server.port)
        for _ in range(6):  # traffic every 100 ms keeps a connection alive
            await asyncio.sleep(0.1)
            assert await busy.request(ApiKey.METADATA, {"topics": None}) == METADATA
        assert await idle.closed_by_server(timeout=2)
        assert busy.is_open
        busy.close()
        await idle.close()

    async with serving(park, connections_max_idle_ms=150) as server:
        waiting = await RawClient.open(server.port)  # a parked request is not idleness
        waiting.send(ApiKey.METADATA, 1, {"topics": None})
        await eventually(lambda: len(parked) == 1)
        assert not await waiting.closed_by_server(timeout=0.5)
        parked[0].respond(METADATA)
        assert await waiting.response() == (1, METADATA)
        assert await waiting.closed_by_server(timeout=2)
        await waiting.close()


# -- flow control and deferred answers --------------------------------------------------------------


async def test_backpressure_with_a_tiny_queue_still_completes_everything():
    high_water = 0
    blocked_seen = 0
    server_ref: list[SocketServer] = []

    async def slow(request: Request) -> None:
        nonlocal high_water, blocked_seen
        server = server_ref[0]
        high_water = max(high_water, server.request_queue_size)
        blocked_seen = max(blocked_seen, server.channel.blocked_count)
        await asyncio.sleep(0.002)
        request.respond(METADATA)

    async with serving(slow, queued_max_requests=2, num_io_threads=2) as server:
        server_ref.append(server)
        conns = [await BrokerConnection.open(HOST, server.port) for _ in range(20)]
        futures = [conn.send(ApiKey.METADATA, {"topics": None}) for conn in conns for _ in range(10)]
        bodies = await asyncio.wait_for(asyncio.gather(*futures), 30)
        assert bodies == [METADATA] * 200
        assert high_water <= 2
        assert blocked_seen > 0  # the queue really was full and connections really waited
        for conn in conns:
            conn.close()


async def test_a_parked_request_is_answered_later_from_another_task():
    parked: asyncio.Queue[Request] = asyncio.Queue()

    async def park(request: Request) -> None:
        if request.body["topics"] == ["later"]:
            await parked.put(request)  # returns at once: the handler task is free again
        else:
            request.respond(METADATA)

    async def purgatory() -> None:
        request = await parked.get()
        await asyncio.sleep(0.05)
        request.respond({**METADATA, "controller_id": 42})

    async with serving(park, num_io_threads=1) as server:
        completer = asyncio.create_task(purgatory())
        raw = await RawClient.open(server.port)
        raw.send(ApiKey.METADATA, 1, {"topics": ["later"]})
        raw.send(ApiKey.METADATA, 2, {"topics": None})  # muted behind the parked request
        other = await BrokerConnection.open(HOST, server.port)
        # The single handler is not blocked by the parked request.
        assert await asyncio.wait_for(other.request(ApiKey.METADATA, {"topics": None}), 1) == METADATA
        assert await raw.response() == (1, {**METADATA, "controller_id": 42})
        assert await raw.response() == (2, METADATA)
        await completer
        other.close()
        await raw.close()


async def test_responding_after_the_connection_closed_is_a_silent_no_op(caplog):
    parked: list[Request] = []

    async def park(request: Request) -> None:
        parked.append(request)

    async with serving(park) as server:
        raw = await RawClient.open(server.port)
        raw.send(ApiKey.METADATA, 1, {"topics": None})
        await eventually(lambda: len(parked) == 1)
        await raw.close()
        await eventually(lambda: server.connection_count == 0)
        with caplog.at_level(logging.INFO, logger="broker.network"):
            parked[0].respond(METADATA)
            await asyncio.sleep(0.05)
        assert parked[0].responded
        assert not [r for r in caplog.records if r.levelno >= logging.INFO]


async def test_no_response_unmutes_the_connection():
    async def acks_zero(request: Request) -> None:
        if request.api_key is ApiKey.PRODUCE and request.body["acks"] == 0:
            request.no_response()
        else:
            request.respond(METADATA)

    async with serving(acks_zero) as server:
        conn = await BrokerConnection.open(HOST, server.port)
        produce = {"acks": 0, "timeout_ms": 1000, "topics": [{"topic": "t", "partitions": []}]}
        for _ in range(5):
            assert conn.send(ApiKey.PRODUCE, produce, expect_response=False) is None
        assert await asyncio.wait_for(conn.request(ApiKey.METADATA, {"topics": None}), 2) == METADATA
        conn.close()


async def test_close_connection_closes_after_earlier_responses():
    async def closer(request: Request) -> None:
        if request.body["topics"] == ["bye"]:
            request.close_connection()
        else:
            request.respond(METADATA)

    async with serving(closer) as server:
        raw = await RawClient.open(server.port)
        raw.send(ApiKey.METADATA, 1, {"topics": None})
        raw.send(ApiKey.METADATA, 2, {"topics": ["bye"]})
        raw.send(ApiKey.METADATA, 3, {"topics": None})
        assert await raw.response() == (1, METADATA)
        assert await raw.closed_by_server()
        await raw.close()


# -- metrics, stop, fuzz ----------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[ApiKey, float]] = []
        self.received = self.sent = 0
        self.errors: list[str] = []

    def on_request(self, api_key: ApiKey, latency_ms: float) -> None:
        self.requests.append((api_key, latency_ms))

    def on_bytes(self, received: int, sent: int) -> None:
        self.received += received
        self.sent += sent

    def on_error(self, kind: str) -> None:
        self.errors.append(kind)


async def test_metrics_sink_sees_requests_bytes_and_errors():
    metrics = Recorder()
    async with serving(answer_metadata, metrics=metrics, socket_request_max_bytes=100) as server:
        conn = await BrokerConnection.open(HOST, server.port)
        await conn.request(ApiKey.METADATA, {"topics": None})
        with pytest.raises(KafkaError):
            await conn.request(ApiKey.METADATA, {"topics": 1})
        raw = await RawClient.open(server.port)
        raw.writer.write(LENGTH.pack(101))
        assert await raw.closed_by_server()
        conn.close()
        await raw.close()
    assert [key for key, _ in metrics.requests] == [ApiKey.METADATA]
    assert metrics.requests[0][1] >= 0
    assert metrics.received > 0 and metrics.sent > 0
    assert metrics.errors == ["invalid_request", "oversize_frame"]


async def test_stop_closes_every_connection():
    server = SocketServer(NetworkConfig(listeners=(Listener("PLAINTEXT", HOST, 0),)), answer_metadata)
    await server.start()
    raws = [await RawClient.open(server.port) for _ in range(5)]
    await eventually(lambda: server.connection_count == 5)
    await server.stop()
    for raw in raws:
        assert await raw.closed_by_server(timeout=2)
        await raw.close()
    with pytest.raises(OSError):
        await asyncio.open_connection(HOST, server.port)
    await server.stop()  # idempotent


async def test_ten_thousand_malformed_frames_then_a_normal_request_succeeds(caplog):
    limit = 1 << 20
    rng = random.Random(20240601)
    async with serving(answer_metadata, socket_request_max_bytes=limit, num_network_threads=3) as server:
        bystander = await BrokerConnection.open(HOST, server.port)
        with caplog.at_level(logging.INFO, logger="broker.network"):
            stats = await hammer(
                HOST, server.port, malformed_frames(rng, 10_000, limit), connections=16, timeout=45, rng=rng
            )
        assert not stats.timed_out, stats
        assert stats.frames_sent == 10_000
        # Every "error" frame on a healthy connection got its error code under its correlation id.
        assert stats.answered > 2000 and stats.unanswered == 0 and stats.wrong_answers == 0, stats
        assert await bystander.request(ApiKey.METADATA, {"topics": None}) == METADATA
        fresh = await BrokerConnection.open(HOST, server.port)
        assert await fresh.request(ApiKey.METADATA, {"topics": None}) == METADATA
        await eventually(lambda: server.connection_count == 2)
        bystander.close()
        fresh.close()
    log_bytes = sum(len(r.getMessage()) for r in caplog.records)
    assert log_bytes < 100_000, f"{len(caplog.records)} log records, {log_bytes} bytes"
