"""client/metadata.py's hedged metadata request: a bootstrap broker that accepts the connection
but never answers (a SIGSTOPped process: the kernel still completes the handshake) is not waited
for alone; the next candidate is asked while the first request is still outstanding, and the
first answer wins. Kafka's AdminClient waits out request.timeout.ms (30 s) there."""

from __future__ import annotations

import asyncio

import pytest

from client import AdminClient
from client.metadata import METADATA_HEDGE_AFTER_MS
from tests.unit.fake_cluster import FakeCluster


class Silent(asyncio.Protocol):
    """A broker that is paused: it reads the request and never answers."""

    received: list[bytes]

    def __init__(self, received: list[bytes]) -> None:
        self.received = received

    def data_received(self, data: bytes) -> None:
        self.received.append(data)


@pytest.fixture
async def silent():
    received: list[bytes] = []
    server = await asyncio.get_running_loop().create_server(lambda: Silent(received), "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], received
    server.close()


@pytest.fixture
async def fake():
    cluster = await FakeCluster().start()
    cluster.create("t", 3)
    yield cluster
    await cluster.stop()


async def test_a_paused_first_bootstrap_broker_is_hedged_not_waited_for(silent, fake):
    """The interleaving of `topics describe` with a SIGSTOPped broker first in the bootstrap list:
    its Metadata request is outstanding when the hedge asks the next broker, whose answer is used.
    Bounded well below the request timeout (60 s here): before the hedge, this timed out."""
    port, received = silent
    bootstrap = f"127.0.0.1:{port},{fake.bootstrap}"
    async with asyncio.timeout(10 * METADATA_HEDGE_AFTER_MS / 1000):
        async with AdminClient(bootstrap, request_timeout_ms=60_000) as admin:
            topics = await admin.list_topics()
    assert "t" in topics
    assert received, "the paused broker was asked first (its request is still unanswered)"


async def test_a_refused_candidate_moves_on_at_once_and_all_failing_is_one_clear_error(fake):
    from client.protocol.errors import KafkaError

    async with AdminClient(f"127.0.0.1:1,{fake.bootstrap}") as admin:
        assert "t" in await admin.list_topics()
    with pytest.raises(KafkaError, match=r"no broker reachable among 127\.0\.0\.1:1,127\.0\.0\.1:2"):
        async with AdminClient("127.0.0.1:1,127.0.0.1:2") as admin:
            await admin.list_topics()
