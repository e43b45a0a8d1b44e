"""KIP-112's log-dir failure handling against a LeaderAndIsr in flight (issue 18 window 3;
Kafka's ReplicaManager.handleLogDirFailure holds replicaStateChangeLock, as becomeLeaderOrFollower
does). A real ReplicaManager over a real JBOD LogManager on disk; the topic-config read that a
LeaderAndIsr awaits is held by the test, so the failure lands exactly inside that await.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.config import BrokerConfig
from broker.log import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.replica_manager import ReplicaManager
from client.protocol.errors import ErrorCode
from tests.unit.test_isr_manager import Clock, MemoryIsrStore, leader_and_isr_request, partition_state_entry


def broker_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(
        {
            "broker.id": "1",
            "zookeeper.connect": "127.0.0.1:1",
            "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
        }
    )


async def test_a_leader_and_isr_suspended_in_a_zookeeper_read_finishes_before_the_dir_goes_offline(tmp_path):
    """t-0 lives in dir a (created before the restart). After the restart the first LeaderAndIsr
    for it (``is_new``, as for a re-created topic) suspends in its topic-config read; dir a fails
    then. The failure handling waits for the LeaderAndIsr, which completes against the log in dir
    a; then t-0 goes offline (the controller hears of it through the log-dir event), and no
    empty t-0 appeared in dir b.

    Failed before the fix: the handling ran inside the await, the LeaderAndIsr resumed, created
    an empty t-0 in dir b, made this broker its leader and answered NONE, while t-0 was no longer
    in ``partitions`` and was listed offline."""
    cfg = broker_config(tmp_path)
    clock = Clock()
    first = LogManager(cfg.log_dirs, cfg.log_config(), clock)
    first.get_or_create_log("t", 0, cfg.log_config())
    placed = first.get_log("t", 0).log_dir
    first.shutdown()
    assert placed == tmp_path / "a"

    gate = asyncio.Event()
    reads: list[str] = []

    async def topic_config(topic: str) -> dict[str, str]:
        reads.append(topic)
        await gate.wait()
        return {}

    log_manager = LogManager(cfg.log_dirs, cfg.log_config(), clock)
    log_manager.load_logs()
    events: list[dict] = []
    rm = ReplicaManager(
        cfg, log_manager, MetadataCache(1), clock, events.append, topic_config, isr_store=MemoryIsrStore()
    )
    try:
        entry = partition_state_entry("t", 1, leader=1, isr=(1,), zk_version=1) | {
            "replicas": [1],
            "is_new": True,
        }
        request = asyncio.create_task(rm.become_leader_or_follower(leader_and_isr_request(entry)))
        while not reads:
            await asyncio.sleep(0)
        log_manager.failure_channel.maybe_add_offline_log_dir(placed, "a write failed", OSError(5, "EIO"))
        failure = asyncio.create_task(rm.handle_log_dir_failure(placed))
        await asyncio.sleep(0)
        gate.set()
        answer = await request
        offline = await failure
        assert answer["partitions"][0]["error_code"] in (ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR)
        order = [e["event"] for e in events if e["event"] in ("BecameLeader", "ReplicaOffline")]
        # Either the LeaderAndIsr met the offline log (its own ReplicaOffline) or it completed
        # first; the failure handling comes last, never before a role change it would undo.
        assert order[-1] == "ReplicaOffline" and order.count("BecameLeader") <= 1, order
        assert "BecameLeader" not in order or order.index("BecameLeader") == 0, order
        assert ("t", 0) in rm.offline_partitions and ("t", 0) not in rm.partitions
        assert offline in ([], [("t", 0)])
        assert not (tmp_path / "b" / "t-0").exists(), "an empty t-0 was created in the other dir"
        assert log_manager.get_log("t", 0) is None
    finally:
        rm.shutdown()
        log_manager.shutdown()
