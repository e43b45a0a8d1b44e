"""Issue 19 items 8 and 9 against a live broker process: a flood of idle connections under a low
file limit, and stalled partial frames claiming far more memory than the broker has to give.

Item 8: the broker runs under ``prlimit --nofile=1024`` with the default (derived) connection
limits, and one address opens 1,500 idle connections: the excess is closed at once and counted,
the broker's file table stays below its limit, the next high-watermark checkpoint is written (it
met EMFILE before, took the only log dir offline and halted the broker), and produce and fetch go on.

Item 9: 20 clients each send a frame header claiming just under 100 MiB, then 90 MiB of it, and
stall. With the default ``queued.max.request.bytes`` (200 MiB) the broker's resident memory stays
under its baseline + 200 MiB + 64 MiB at every sample (it reached 1.88 GB before), and produce and
fetch from another client go on meanwhile.

The connection limits are dynamic broker configs (KIP-402): an override set at run time applies to
the next connections without a restart, and deleting it brings the derived limit back.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.network.quotas import derived_connection_limits
from client.admin import AdminClient
from client.cluster_admin import AlterConfigOp, AlterConfigOpType
from client.consumer import Consumer
from client.producer import Producer
from client.protocol.api import ConfigResourceType
from client.protocol.errors import ErrorCode, KafkaError
from client.types import ConfigResource, TopicPartition
from devcluster.cluster import LocalCluster
from devcluster.ports import free_port, free_port_block
from tests.integration.cluster_fixtures import TEST_SETTINGS
from tests.integration.failover_helpers import eventually

pytestmark = pytest.mark.integration

FILE_LIMIT = 1024
FLOOD = 1500
MIB = 1024 * 1024


def start_one_broker(data_dir: Path, command: list[str] | None, **overrides: str) -> LocalCluster:
    base = free_port_block(1)
    cluster = LocalCluster(data_dir, broker_command=command)
    cluster.up(
        brokers=1,
        zookeeper_port=base - 1,
        base_port=base,
        overrides={**TEST_SETTINGS, **overrides},
        timeout=60,
    )
    return cluster


def broker_pid(cluster: LocalCluster) -> int:
    assert cluster.state is not None
    pid = cluster.state.brokers[1].pid
    assert pid is not None
    return pid


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def produce_and_fetch(bootstrap: str, topic: str, count: int, first_offset: int) -> None:
    producer = Producer(bootstrap, acks=1)
    await producer.start()
    futures = [await producer.send(topic, b"v%d" % i, partition=0) for i in range(count)]
    await producer.flush()
    assert [f.result().offset for f in futures] == list(range(first_offset, first_offset + count))
    await producer.close()
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < first_offset + count and time.monotonic() < deadline:
        got += await consumer.poll(timeout_ms=500)
    await consumer.close()
    assert [r.offset for r in got] == list(range(first_offset + count))


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient(bootstrap)
    await admin.start()
    await admin.create_topic(topic, 1, 1)
    await admin.close()


def written_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # not written yet
        return 0


def scrape(port: int, name: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    }


@pytest.fixture
def limited_broker(tmp_path: Path) -> Iterator[tuple[LocalCluster, int]]:
    metrics_port = free_port()
    command = ["prlimit", f"--nofile={FILE_LIMIT}:{FILE_LIMIT}", "--", sys.executable, "-m", "broker"]
    cluster = start_one_broker(
        tmp_path,
        command,
        **{"replica.high.watermark.checkpoint.interval.ms": "200", "metrics.port": str(metrics_port)},
    )
    yield cluster, metrics_port
    cluster.down()


async def test_idle_connections_beyond_the_limits_are_refused_and_the_broker_keeps_serving(limited_broker):
    cluster, metrics_port = limited_broker
    pid = broker_pid(cluster)
    bootstrap = cluster.bootstrap_servers
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    await create_topic(bootstrap, "flooded")
    await produce_and_fetch(bootstrap, "flooded", 50, 0)
    _, per_ip = derived_connection_limits(FILE_LIMIT)

    flood: list[socket.socket] = []
    for _ in range(FLOOD):  # idle connections from one address, sending nothing
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.connect((host, int(port)))
        sock.setblocking(False)
        flood.append(sock)
    flood_done = time.time_ns()
    # Wait for the event that shows the limit: the broker closing every connection over it.
    poller = select.poll()
    by_fd = {s.fileno(): s for s in flood}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    closed: set[int] = set()
    deadline = time.monotonic() + 60
    while len(closed) < FLOOD - per_ip and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            try:
                data = by_fd[fd].recv(1)
            except ConnectionError:
                data = b""
            if not data:
                closed.add(fd)
                poller.unregister(fd)
    assert len(closed) == FLOOD - per_ip, f"the broker closed {len(closed)} of {FLOOD} idle connections"
    assert len(os.listdir(f"/proc/{pid}/fd")) < FILE_LIMIT - 100

    # The periodic high-watermark checkpoint (what met EMFILE and halted the broker) is written
    # again after the flood, and the broker still serves produce and fetch from other addresses.
    checkpoint = Path(cluster.state.brokers[1].log_dir) / "replication-offset-checkpoint"
    deadline = time.monotonic() + 30
    while written_ns(checkpoint) <= flood_done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert written_ns(checkpoint) > flood_done
    await produce_and_fetch(bootstrap, "flooded", 50, 50)
    refused = scrape(metrics_port, "kafka_server_socket_server_metrics_connection_total")
    assert refused[
        'kafka_server_socket_server_metrics_connection_total{event="refused_per_ip",listener="PLAINTEXT"}'
    ] >= (FLOOD - per_ip)
    offline = scrape(metrics_port, "kafka_log_logmanager_offlinelogdirectorycount")
    assert list(offline.values()) == [0.0]
    for sock in flood:
        sock.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = start_one_broker(tmp_path, None)
    yield cluster
    cluster.down()


async def test_stalled_partial_frames_leave_memory_bounded_and_others_served(broker):
    pid = broker_pid(broker)
    bootstrap = broker.bootstrap_servers
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    await create_topic(bootstrap, "stalled")
    await produce_and_fetch(bootstrap, "stalled", 50, 0)
    baseline = rss_bytes(pid)
    bound = baseline + 200 * MIB + 64 * MIB  # queued.max.request.bytes' default, and slack

    claim, send = 100 * MIB - 64, 90 * MIB
    chunk = memoryview(bytes(MIB))
    clients = []
    for _ in range(20):
        sock = socket.create_connection((host, int(port)))
        sock.setblocking(False)
        sock.send(claim.to_bytes(4, "big"))
        clients.append([sock, 0])
    peak = rss_bytes(pid)
    # Push each client's 90 MiB as far as the broker takes it; stop when all is sent or nothing
    # moved for two seconds (the clients the pool has not served are paused). The bound is
    # checked at every sample, whatever the broker has read so far.
    poller = select.poll()
    by_fd = {sock.fileno(): entry for entry in clients for sock in entry[:1]}
    for fd in by_fd:
        poller.register(fd, select.POLLOUT)
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < 2.0 and any(sent < send for _, sent in clients):
        for fd, _ in poller.poll(200):
            entry = by_fd[fd]
            sock, sent = entry
            try:
                n = sock.send(chunk[: min(MIB, send - sent)])
            except BlockingIOError:
                continue
            entry[1] += n
            last_progress = time.monotonic()
            if entry[1] >= send:
                poller.unregister(fd)
        peak = max(peak, rss_bytes(pid))
        assert peak < bound, f"broker RSS {peak / MIB:.0f} MiB over the bound {bound / MIB:.0f} MiB"
    # Meanwhile another client's produce and fetch are served.
    await produce_and_fetch(bootstrap, "stalled", 50, 50)
    peak = max(peak, rss_bytes(pid))
    assert peak < bound, f"broker RSS {peak / MIB:.0f} MiB over the bound {bound / MIB:.0f} MiB"
    assert sum(sent for _, sent in clients) < 20 * send  # the pool held most of them back
    for sock, _ in clients:
        sock.close()


def closed_of(host: str, port: int, count: int, wait_s: float = 1.0) -> int:
    """Open ``count`` idle connections from 127.0.0.2; how many the broker closed within ``wait_s``
    (a refused connection is closed at once, an admitted idle one stays open)."""
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.connect((host, port))
        socks.append(sock)
    poller = select.poll()
    for sock in socks:
        poller.register(sock.fileno(), select.POLLIN)
    closed: set[int] = set()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and len(closed) < count:
        for fd, _ in poller.poll(100):
            if fd not in closed:
                closed.add(fd)
                poller.unregister(fd)
    for sock in socks:
        sock.close()
    return len(closed)


async def test_the_connection_limits_are_dynamic_broker_configs(broker):
    """KIP-402's reconfigurable connection quotas on a live broker: ``max.connections.per.ip.overrides``
    set on the broker's own entity at run time limits 127.0.0.2 to 3 connections (the other 2 of 5
    are closed at once and counted), with no restart; deleting it brings back the derived limit,
    and 5 connections stay open. A malformed value is INVALID_CONFIG and changes nothing."""
    host, port = broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    own = ConfigResource(ConfigResourceType.BROKER, "1")
    key = "max.connections.per.ip.overrides"
    async with AdminClient(broker.bootstrap_servers) as admin:
        with pytest.raises(KafkaError) as refused:
            await admin.incremental_alter_configs({own: [AlterConfigOp(key, "127.0.0.2")]})
        assert refused.value.code == ErrorCode.INVALID_CONFIG and key in str(refused.value)
        assert closed_of(host, int(port), 5) == 0
        await admin.incremental_alter_configs({own: [AlterConfigOp(key, "127.0.0.2:3")]})
        await eventually(lambda: is_closed(host, int(port), 2), "the override applied", 15)
        await admin.incremental_alter_configs({own: [AlterConfigOp(key, op_type=AlterConfigOpType.DELETE)]})
        await eventually(lambda: is_closed(host, int(port), 0), "the override removed", 15)
    out = Path(broker.state.brokers[1].out).read_text()
    assert "connection limits now" in out and "'127.0.0.2': 3" in out


async def is_closed(host: str, port: int, expected: int) -> bool:
    return closed_of(host, port, 5) == expected
