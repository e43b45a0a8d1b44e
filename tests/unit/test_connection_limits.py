"""Issue 19 items 6 (the acceptor), 8 and 9 on an in-process SocketServer over real sockets, and
the pure rules under them: the connection quotas (``max.connections``, per address, the protected
inter-broker listener, the defaults derived from the file budget), the request memory pool
(``queued.max.request.bytes``) and the acceptor's back-off when accept() meets EMFILE.

Each socket test waits for the event that shows the behaviour (a response, a close, a counted
metric), never for time to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
from collections.abc import AsyncIterator
from typing import Any

from broker.config import BrokerConfig
from broker.network import Listener, NetworkConfig, Request, SocketServer
from broker.network.memory_pool import MemoryPool
from broker.network.quotas import ConnectionQuotas, derived_connection_limits
from client.connection import BrokerConnection
from client.protocol.api import ApiKey
from client.protocol.framing import LENGTH, FrameDecoder, decode_response, encode_request

METADATA = {"brokers": [], "cluster_id": None, "controller_id": -1, "topics": []}
HOST = "127.0.0.1"
MIB = 1024 * 1024


async def answer_metadata(request: Request) -> None:
    request.respond(METADATA)


class Recorder:
    """A metrics sink that wakes waiters on the kinds they wait for."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.connections: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    def on_request(self, api_key: ApiKey, latency_ms: float) -> None:
        pass

    def on_bytes(self, received: int, sent: int) -> None:
        pass

    def on_error(self, kind: str) -> None:
        self.errors.append(kind)
        self.changed.set()

    def on_connection(self, listener: str, event: str) -> None:
        self.connections.append((listener, event))
        self.changed.set()

    async def wait_for(self, predicate, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


@contextlib.asynccontextmanager
async def serving(handler=answer_metadata, metrics=None, **settings: Any) -> AsyncIterator[SocketServer]:
    settings.setdefault("listeners", (Listener("PLAINTEXT", HOST, 0),))
    server = SocketServer(NetworkConfig(**settings), handler, metrics)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def open_from(port: int, source: str = HOST) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(HOST, port, local_addr=(source, 0))


async def closed_by_server(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


# -- the rules ------------------------------------------------------------------------------------


def test_the_derived_limits_leave_the_file_budget_reserve():
    assert derived_connection_limits(1024) == (128, 64)  # 1024 // 8: half the non-replica quarter
    assert derived_connection_limits(20_000) == (2500, 1250)
    assert derived_connection_limits(100) == (16, 8)  # a floor, even on a tiny budget
    config = BrokerConfig({"broker.id": 1, "zookeeper.connect": "zk:2181"}).network_config(file_budget=1024)
    assert (config.max_connections, config.max_connections_per_ip) == (128, 64)
    assert config.queued_max_request_bytes == 200 * MIB
    given = BrokerConfig(
        {
            "broker.id": 1,
            "zookeeper.connect": "zk:2181",
            "max.connections": "10",
            "max.connections.per.ip.overrides": "127.0.0.2:3,[::1]:4",
            "queued.max.request.bytes": "-1",
        }
    ).network_config(file_budget=1024)
    assert (given.max_connections, given.max_connections_per_ip) == (10, 5)
    assert given.max_connections_per_ip_overrides == (("127.0.0.2", 3), ("::1", 4))
    assert given.queued_max_request_bytes is None


def test_quotas_count_per_address_and_exempt_the_inter_broker_listener():
    quotas = ConnectionQuotas(3, 2, {"10.0.0.9": 5}, protected_listener="INTERNAL", listener_count=2)
    assert quotas.try_acquire("10.0.0.1", "CLIENT") is None
    assert quotas.try_acquire("10.0.0.1", "CLIENT") is None
    assert quotas.try_acquire("10.0.0.1", "CLIENT") == "refused_per_ip"
    assert quotas.try_acquire("10.0.0.9", "CLIENT") is None  # its override is 5
    assert quotas.try_acquire("10.0.0.9", "CLIENT") == "refused_max_connections"
    assert quotas.try_acquire("10.0.0.2", "INTERNAL") is None  # not counted toward max.connections
    assert quotas.try_acquire("10.0.0.3", "INTERNAL") is None
    assert (quotas.count, quotas.counted_toward_max()) == (5, 3)
    quotas.release("10.0.0.1", "CLIENT")
    assert quotas.try_acquire("10.0.0.9", "CLIENT") is None
    # With one listener the inter-broker one is the only one, and it is limited (Kafka's rule).
    single = ConnectionQuotas(1, protected_listener="PLAINTEXT", listener_count=1)
    assert single.try_acquire("10.0.0.1") is None
    assert single.try_acquire("10.0.0.2") == "refused_max_connections"


def test_the_pool_keeps_half_for_small_frames_and_never_refuses_a_frame_for_good():
    pool = MemoryPool(200, small_frame_bytes=10)
    assert pool.try_allocate(90)  # the first large frame
    assert not pool.try_allocate(90)  # a second one would take large frames past half
    assert all(pool.try_allocate(10) for _ in range(11))  # small frames use the rest...
    assert not pool.try_allocate(1)  # ...until it is full
    granted: list[str] = []
    pool.wait("large", 90, lambda: granted.append("large"))
    pool.wait("small", 5, lambda: granted.append("small"))
    pool.release(10)  # the small waiter fits, the large one ahead of it does not
    assert granted == ["small"] and pool.waiting == 1
    pool.release(90)
    assert granted == ["small", "large"] and pool.used == 195
    idle = MemoryPool(100, small_frame_bytes=10)
    assert idle.try_allocate(150)  # larger than the pool, granted when it holds nothing
    assert not idle.try_allocate(1)
    pool.withdraw("nobody")  # withdrawing an unknown waiter is harmless


# -- item 8: the limits on real sockets -----------------------------------------------------------


async def test_a_client_flood_never_starves_the_inter_broker_listener():
    metrics = Recorder()
    listeners = (Listener("CLIENT", HOST, 0), Listener("INTERNAL", HOST, 0))
    async with serving(
        metrics=metrics, listeners=listeners, max_connections=2, inter_broker_listener="INTERNAL"
    ) as server:
        client_port, internal_port = server.bound_ports["CLIENT"], server.bound_ports["INTERNAL"]
        held = [await BrokerConnection.open(HOST, client_port) for _ in range(2)]
        for conn in held:
            assert await conn.request(ApiKey.METADATA, {"topics": None}) == METADATA
        reader, writer = await open_from(client_port)
        assert await closed_by_server(reader)  # the third client connection is refused...
        # ...while the inter-broker listener still takes connections and serves them.
        replicas = [await BrokerConnection.open(HOST, internal_port) for _ in range(3)]
        for conn in replicas:
            assert await conn.request(ApiKey.METADATA, {"topics": None}) == METADATA
        assert metrics.connections.count(("CLIENT", "refused_max_connections")) == 1
        assert metrics.connections.count(("INTERNAL", "created")) == 3
        for conn in held + replicas:
            conn.close()
        writer.close()


async def test_one_address_cannot_take_every_connection():
    metrics = Recorder()
    async with serving(metrics=metrics, max_connections=10, max_connections_per_ip=2) as server:
        flood = [await open_from(server.port, "127.0.0.2") for _ in range(5)]
        await metrics.wait_for(
            lambda: (
                metrics.connections.count(("PLAINTEXT", "refused_per_ip")) == 3
                and metrics.connections.count(("PLAINTEXT", "created")) == 2
            )
        )
        assert server.quotas.by_address == {"127.0.0.2": 2}
        other = await BrokerConnection.open(HOST, server.port)  # from 127.0.0.1
        assert await other.request(ApiKey.METADATA, {"topics": None}) == METADATA
        other.close()
        for _, writer in flood:
            writer.close()


# -- item 6: the acceptor backs off on EMFILE -----------------------------------------------------


@contextlib.contextmanager
def file_table_full():
    """Fill this process's file table: the soft RLIMIT_NOFILE lowered to just above the highest
    open descriptor and every free number below it taken by /dev/null. Yields the placeholders;
    closing one frees a descriptor. Restores the limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    placeholders: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, hard))
    try:
        with contextlib.suppress(OSError):
            while True:
                placeholders.append(os.open(os.devnull, os.O_RDONLY))
        yield placeholders
    finally:
        for fd in placeholders:
            with contextlib.suppress(OSError):
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_accept_meeting_emfile_backs_off_counts_it_and_serves_the_connection_later():
    metrics = Recorder()
    async with serving(metrics=metrics, accept_backoff_ms=(20, 100)) as server:
        client = socket.socket()  # made before the table is full: connecting needs no new fd
        client.setblocking(False)
        with file_table_full() as placeholders:
            with contextlib.suppress(BlockingIOError):
                client.connect((HOST, server.port))
            # The connection is in the backlog; accept() fails with EMFILE and is counted.
            await metrics.wait_for(lambda: "accept_emfile" in metrics.errors)
            assert server.connection_count == 0
            # A descriptor frees up: after its back-off the acceptor takes the waiting connection.
            os.close(placeholders.pop())
            await metrics.wait_for(lambda: ("PLAINTEXT", "created") in metrics.connections)
        reader, writer = await asyncio.open_connection(sock=client)
        writer.write(encode_request(ApiKey.METADATA, 0, 7, "emfile", {"topics": None}))
        decoder = FrameDecoder()
        async with asyncio.timeout(5):
            while (payload := decoder.next_frame()) is None:
                decoder.feed(await reader.read(65536))
        assert decode_response(payload) == (7, METADATA)
        # Backed off, not spinning: a handful of failed accepts, not thousands.
        assert 1 <= metrics.errors.count("accept_emfile") <= 20
        writer.close()


# -- item 9: stalled partial frames stay within the pool ------------------------------------------


async def test_stalled_partial_frames_stay_within_the_pool_and_others_are_served():
    metrics = Recorder()
    pool_bytes, frame = 8 * MIB, 4 * MIB - 1
    async with serving(
        metrics=metrics, socket_request_max_bytes=4 * MIB, queued_max_request_bytes=pool_bytes
    ) as server:
        stalled = []
        for _ in range(6):
            reader, writer = await open_from(server.port, "127.0.0.3")
            writer.write(LENGTH.pack(frame) + bytes(3 * MIB))  # most of a large frame, then nothing
            stalled.append((reader, writer))
        pool = server.pool
        # One large frame is granted (large frames share half the pool); the other five wait.
        async with asyncio.timeout(5):
            while pool.waiting < 5:
                await asyncio.sleep(0.01)
        assert pool.used == frame and pool.large_used == frame
        buffered = sum(c.decoder.buffered for p in server.processors for c in p.connections.values())
        # The granted frame's 3 MiB, and at most one socket read (256 KiB) for each waiting one.
        assert buffered <= 3 * MIB + 4 + 5 * 256 * 1024
        conn = await BrokerConnection.open(HOST, server.port)
        for _ in range(20):  # others are served meanwhile, from the half kept for small frames
            assert await conn.request(ApiKey.METADATA, {"topics": None}) == METADATA
        assert pool.used == frame  # each answered request gave its bytes back
        conn.close()
        for _, writer in stalled:
            writer.close()
        async with asyncio.timeout(5):
            while server.connection_count:
                await asyncio.sleep(0.01)
        assert (pool.used, pool.waiting) == (0, 0)
