"""What the integration tests read and write in ZooKeeper directly, as Kafka's own tools do
(AdminZkClient's topic znodes, kafka-reassign-partitions.sh's request), through a kazoo client."""

from __future__ import annotations

import json
from typing import Any

REASSIGN = "/admin/reassign_partitions"


def create_with_assignment(zk: Any, topic: str, assignment: dict[int, list[int]]) -> None:
    """What kafka-topics.sh --replica-assignment writes (Kafka's AdminZkClient): the topic's
    config znode, then its assignment, which the controller's watch turns into partitions."""
    zk.create(f"/config/topics/{topic}", json.dumps({"version": 1, "config": {}}).encode(), makepath=True)
    body = {"version": 1, "partitions": {str(p): r for p, r in assignment.items()}}
    zk.create(f"/brokers/topics/{topic}", json.dumps(body).encode(), makepath=True)


def request_move(zk: Any, moves: dict[tuple[str, int], list[int]]) -> None:
    """What kafka-reassign-partitions.sh --execute wrote (Kafka 2.x's ZooKeeper tool)."""
    body = {
        "version": 1,
        "partitions": [{"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()],
    }
    zk.create(REASSIGN, json.dumps(body).encode(), makepath=True)


def assigned(zk: Any, topic: str, partition: int) -> list[int]:
    return json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"][str(partition)]


def partition_state(zk: Any, topic: str, partition: int) -> tuple[dict, int]:
    """The partition's state znode (leader, leader_epoch, isr, ...) and its version."""
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data), stat.version
