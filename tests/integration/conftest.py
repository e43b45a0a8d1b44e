"""Fixtures shared by the integration tests. Each test module defines its own ``cluster``
(module-scoped, with the settings it needs); ``zk`` opens a ZooKeeper session on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from devcluster.cluster import LocalCluster


@pytest.fixture(scope="module")
def zk(cluster):
    client = KazooClient(cluster.zookeeper_connect)
    client.start(30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir whose cluster, whatever a test left running, is stopped at teardown."""
    data_dir = tmp_path / "cluster"
    yield data_dir
    if (data_dir / "cluster.json").exists():
        LocalCluster.load(data_dir).down(timeout=5)
