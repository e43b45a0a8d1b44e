"""Fixtures shared by the integration tests. Each test module defines its own ``cluster``
(module-scoped, with the settings it needs); ``zk`` opens a ZooKeeper session on it."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient


@pytest.fixture(scope="module")
def zk(cluster):
    client = KazooClient(cluster.zookeeper_connect)
    client.start(30)
    yield client
    client.stop()
    client.close()
