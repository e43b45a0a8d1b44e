"""Issue 25: a ZooKeeper session survives a full file table (zk/poll_handler.py).

What the fd-pressure fault found: kazoo's connection thread opens an epoll descriptor for every
wait on its socket, so with no descriptor free it dropped a healthy connection ("Connection
dropped: socket connection error: Too many open files"), could not reconnect, and the broker's
session expired (it lost its registration and its controllership). Here two clients of one real
ZooKeeper, kazoo's default handler and the bridge's poll(2) handler, live through this process's
file table filled to its (lowered) limit for longer than their ping interval: the polling one
stays connected and answers, the default one drops its connection.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient, KazooState

from devcluster.ports import free_port
from devcluster.zookeeper import ZooKeeperProcess
from zk.bridge import ZkBridge
from zk.poll_handler import PollThreadingHandler

pytestmark = pytest.mark.integration

SESSION_S = 4.0  # kazoo pings every third of the session or so: several waits while the table is full


@contextlib.contextmanager
def no_descriptor_free() -> Iterator[None]:
    """This process's soft RLIMIT_NOFILE lowered to 3 for a while, then restored: every number
    below the limit (stdin, stdout, stderr) is taken for good, so no new descriptor can be had,
    and the ones above it stay open and usable (what fd-pressure does to a broker, with no room;
    a limit at a higher number would leave room whenever a transient descriptor below it closes)."""
    assert {0, 1, 2} <= {int(fd) for fd in os.listdir("/proc/self/fd")}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (3, hard))
    try:
        with pytest.raises(OSError, match="Too many open files"):
            os.close(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def zookeeper(tmp_path) -> Iterator[ZooKeeperProcess]:
    server = ZooKeeperProcess(free_port(), tmp_path / "zookeeper").start()
    yield server
    server.stop()


def started(client: KazooClient) -> tuple[KazooClient, list[KazooState]]:
    states: list[KazooState] = []
    client.add_listener(states.append)
    client.start(15)
    client.ensure_path("/fd-pressure")
    states.clear()  # the start's CONNECTED: only what comes after counts
    return client, states


def test_a_polling_session_outlives_a_full_file_table_and_kazoos_default_does_not(zookeeper):
    hosts = zookeeper.connect_string
    polling, polling_states = started(KazooClient(hosts, timeout=SESSION_S, handler=PollThreadingHandler()))
    default, default_states = started(KazooClient(hosts, timeout=SESSION_S))
    try:
        with no_descriptor_free():
            time.sleep(SESSION_S * 0.75)  # several pings; under the session timeout
            assert polling.connected and polling_states == [], polling_states
            assert polling.exists("/fd-pressure") is not None  # a request on the live connection
            default_dropped = KazooState.SUSPENDED in default_states
        assert default_dropped, "kazoo's default handler kept its connection: the fault was not real"
        polling.set("/fd-pressure", b"after")
        assert polling_states == []
    finally:
        for client in (polling, default):
            client.stop()
            client.close()


def test_the_bridge_uses_the_polling_handler():
    bridge = ZkBridge("127.0.0.1:1", session_timeout_ms=6000)
    assert isinstance(bridge.client.handler, PollThreadingHandler)
