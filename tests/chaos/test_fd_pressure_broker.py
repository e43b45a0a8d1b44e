"""Issue 25: a broker with no descriptor free degrades and recovers, never halts (what the chaos
fault ``fd-pressure`` does, held here longer than the ZooKeeper session and with every path that
needs a new descriptor forced while it lasts).

Three brokers (session 6 s), a 6-partition RF 3 topic, an idempotent acks=all producer writing
throughout. Broker 1's soft RLIMIT_NOFILE is lowered to 3 for 9 s: the fault with no room at all
(chaos/fd_pressure.py's limit sits at the first free number, which a transient descriptor can
give back; this one never frees), its open descriptors above it still usable, and meanwhile: a new client connects to it (accept()
meets EMFILE), broker 2 is SIGKILLed and restarted (broker 1's fetchers and, when it is the
controller, its channel reconnect: EMFILE), and high-watermark checkpoints fall due every 500 ms
(EMFILE opening the file: the write closes the idle segment files and tries again,
broker/log/checkpoint.py). Then the limit is restored. The test asks that broker 1 is the same
process throughout, kept its ZooKeeper session (kazoo waits with poll(2), zk/poll_handler.py: it
dropped the connection and lost the session before), met EMFILE on each path and handled each
as a resource error, not a disk failure; that the waiting client is served once room returns;
that every partition has a full ISR again; and that nothing the producer sent failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import time
from pathlib import Path

import pytest

from chaos.serving import Served, wait_served
from client.admin import AdminClient
from client.producer import Producer
from tests.integration.cluster_fixtures import start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "pressure"
NO_ROOM_LIMIT = 3
HOLD_S = 9.0  # longer than the 6 s session: a dropped ZooKeeper connection would expire it


class Writer:
    """An idempotent acks=all producer writing batches of 20 until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(bootstrap, acks="all", enable_idempotence=True)
        self.acked = 0
        self.failed: list[BaseException] = []
        self._stop = False
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.producer.start()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while not self._stop:
            futures = [await self.producer.send(TOPIC, b"v%d" % (i + k)) for k in range(20)]
            i += 20
            for future in futures:
                try:
                    await future
                    self.acked += 1
                except Exception as exc:  # noqa: BLE001 - counted, the test asks for none
                    self.failed.append(exc)
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop = True
        if self._task is not None:
            await self._task
        await self.producer.close()


async def served_alone(port: int) -> list[str]:
    async with AdminClient(f"127.0.0.1:{port}") as admin:
        return await admin.list_topics()


async def test_a_broker_with_no_descriptor_free_degrades_keeps_its_session_and_recovers(tmp_path: Path):
    cluster = start_cluster(
        tmp_path / "cluster", overrides={"replica.high.watermark.checkpoint.interval.ms": "500"}
    )
    writer: Writer | None = None
    try:
        bootstrap = cluster.bootstrap_servers
        async with AdminClient(bootstrap) as admin:
            await admin.create_topic(TOPIC, 6, 3, {"min.insync.replicas": "2"})
        assert await wait_served(bootstrap, TOPIC, 60, print, full_isr=True) is not Served.NONE
        writer = Writer(bootstrap)
        await writer.start()
        await asyncio.sleep(2)
        broker = cluster.state.brokers[1]
        pid, port = broker.pid, broker.port

        # stdin, stdout and stderr are the only numbers below 3: none is ever free, not even one
        # a transient descriptor (a checkpoint's file, kazoo's selector) gives back
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (NO_ROOM_LIMIT, hard))
        waiting = socket.socket()  # made before: connecting needs no descriptor of the broker's
        waiting.setblocking(False)
        try:
            with contextlib.suppress(BlockingIOError):
                waiting.connect(("127.0.0.1", port))
            started = time.monotonic()
            await asyncio.to_thread(cluster.kill, 2, "KILL")
            await asyncio.to_thread(cluster.start, 2, 60)
            await asyncio.sleep(max(0.0, HOLD_S - (time.monotonic() - started)))
            assert os.path.exists(f"/proc/{pid}"), "broker 1 died with no descriptor free"
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            waiting.close()
        acked_at_heal = writer.acked

        assert TOPIC in await served_alone(port)  # a new connection is accepted again
        assert await wait_served(bootstrap, TOPIC, 60, print, full_isr=True) is Served.FULL
        await asyncio.sleep(1)
        assert writer.acked > acked_at_heal
        await writer.stop()
        assert not writer.failed, writer.failed[:3]
        writer = None
        assert cluster.state.brokers[1].pid == pid

        out = (tmp_path / "cluster" / "broker-1" / "broker.out").read_text()
        assert "accept() failed ([Errno 24] Too many open files)" in out
        assert "cannot connect to" in out and "Too many open files" in out  # a fetcher or the channel
        # a checkpoint met EMFILE: it gave back idle segment files and was written, or (none idle)
        # failed as a resource error with its dir online
        assert (
            "idle segment files and tried again" in out
            or "not a disk failure: the log dir stays online" in out
        )
        for forbidden in ("Connection dropped", "ZooKeeper session lost", "Shutdown broker because"):
            assert forbidden not in out, forbidden
        starts = [line for line in out.splitlines() if line.startswith("--- ")]
        assert len(starts) == 1, starts
    finally:
        if writer is not None:
            await writer.stop()
        cluster.down()
