"""Real clusters for integration tests: ZooKeeper from the Debian jars and broker processes,
started through the same LocalCluster the `floodmark cluster` commands use."""

from __future__ import annotations

from pathlib import Path

from devcluster.cluster import LocalCluster
from devcluster.ports import free_port_block

TEST_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
    "num.io.threads": "4",
    "num.network.threads": "2",
}


def start_cluster(data_dir: Path, brokers: int = 3, overrides: dict[str, str] | None = None) -> LocalCluster:
    base = free_port_block(brokers)
    cluster = LocalCluster(data_dir)
    cluster.up(
        brokers=brokers,
        zookeeper_port=base - 1,
        base_port=base,
        overrides={**TEST_SETTINGS, **(overrides or {})},
        timeout=60,
    )
    return cluster
