"""KIP-112, the broker's side of telling the controller (Kafka's
ReplicaManager.handleLogDirFailure -> zkClient.propagateLogDirEvent; docs/design.md "Log dir
failure"): the /log_dir_event_notification znode is written again until it lands, since nothing
else would ever make the controller send the broker the LeaderAndIsr whose KAFKA_STORAGE_ERROR
answers take its offline replicas out of the ISRs. The real BrokerServer method against a real
ZooKeeper, with the bridge's give-ups injected (tests/bridge_faults.py).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from broker.config import BrokerConfig
from broker.server import BrokerServer
from tests.bridge_faults import FailingZk
from zk.bridge import ZkBridge
from zk.data import decode_log_dir_event
from zk.paths import LOG_DIR_EVENT_NOTIFICATION_PATH


class _Dirs:
    """The broker's LogManager and ReplicaManager, as far as _handle_log_dir_failure uses them:
    one dir left online."""

    online_log_dirs = (Path("/data/b"),)

    async def handle_log_dir_failure(self, log_dir: Path) -> None:
        return None


async def test_the_broker_writes_its_log_dir_event_notification_until_it_lands(zk: ZkBridge) -> None:
    failing = FailingZk(zk)
    for _ in range(2):  # the bridge gave up twice (no connection within its retry timeout)
        failing.fail("create", match=lambda p: str(p).startswith(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/"))
    server = BrokerServer(
        BrokerConfig({"broker.id": "2", "zookeeper.connect": "zk:2181"}), rng=random.Random(0)
    )
    server.zk = failing  # type: ignore[assignment]
    server.log_manager = server.replica_manager = _Dirs()  # type: ignore[assignment]

    await asyncio.wait_for(server._handle_log_dir_failure(Path("/data/a")), 10)

    assert failing.injected == ["create before", "create before"]
    children = await zk.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH) or []
    assert len(children) == 1, "the controller was never told of the failed log dir"
    got = await zk.get(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{children[0]}")
    assert got is not None and decode_log_dir_event(got[0]) == 2
