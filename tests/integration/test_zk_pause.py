"""The chaos fault ``zk-pause`` on a real local cluster (chaos/faults.py LocalBackend; issue 10):
ZooKeeper is SIGSTOPped for 2 s, a third of the 6 s session timeout, then SIGCONTed. Every
client sees ConnectionLoss and goes SUSPENDED, but no session expires, so afterwards the
cluster still has a controller and every broker is registered, under the sessions they held.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from chaos.faults import LocalBackend
from devcluster.cluster import LocalCluster
from devcluster.zookeeper import ruok
from tests.integration.cluster_fixtures import start_cluster

pytestmark = pytest.mark.integration

PAUSE_S = 2.0  # < zookeeper.session.timeout.ms (6000, cluster_fixtures.TEST_SETTINGS)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = start_cluster(tmp_path / "cluster", brokers=3)
    yield c
    c.resume_zookeeper()  # a failed assertion must not leave ZooKeeper stopped for down()
    c.down()


def owners(client: KazooClient) -> dict[str, int]:
    """The session that owns each ephemeral: /controller and /brokers/ids/<id>."""
    paths = ["/controller"] + [f"/brokers/ids/{i}" for i in client.get_children("/brokers/ids")]
    return {path: client.get(path)[1].ephemeralOwner for path in paths}


@pytest.mark.timeout(180)
def test_zk_pause_shorter_than_the_session_leaves_controller_and_registrations(cluster: LocalCluster) -> None:
    backend = LocalBackend(cluster)
    port = int(cluster.zookeeper_connect.rsplit(":", 1)[1])
    client = KazooClient(cluster.zookeeper_connect, timeout=30)
    client.start(30)
    try:
        controller_before, epoch_before = cluster.controller()
        assert controller_before is not None
        before = owners(client)
        assert len(before) == 4  # the controller and three brokers

        backend.pause_zookeeper()
        try:
            assert not ruok("127.0.0.1", port, timeout=0.5)  # stopped: it answers nothing
            time.sleep(PAUSE_S)
        finally:
            backend.resume_zookeeper()

        deadline = time.monotonic() + 30
        while not ruok("127.0.0.1", port):
            assert time.monotonic() < deadline, "ZooKeeper did not answer ruok after SIGCONT"
            time.sleep(0.2)
        status = cluster.status()
        assert status["controller"]["id"] is not None
        assert [b["id"] for b in status["brokers"] if b["registered"] and b["alive"]] == [1, 2, 3]
        # Sessions survived: the same sessions own the same ephemerals, and no new election ran.
        assert cluster.controller() == (controller_before, epoch_before)
        assert owners(client) == before
    finally:
        client.stop()
        client.close()
