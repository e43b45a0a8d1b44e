"""Real clusters for integration tests: ZooKeeper from the Debian jars and broker processes,
started through the same LocalCluster the `floodmark cluster` commands use."""

from __future__ import annotations

import urllib.request
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


def scrape_metrics(url: str) -> dict[str, float]:
    """A broker's /metrics as name -> value (labelled samples keep their labels in the name)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines())
        if name and not name.startswith("#")
    }
