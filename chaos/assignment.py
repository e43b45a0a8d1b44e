"""The chaos run's record of the partition assignment (docs/operations.md "Chaos runs and
verification"): ``R/assignment.json`` (:mod:`ledger.assignment`, Kafka's reassignment-JSON
shape), written at the run's start and again after its final heal, so that a run verified
offline (a heal that failed, a cluster that cannot serve) holds every replica against the
assignment the cluster had rather than the replication factor the surviving directories suggest.

Where it is read: ZooKeeper's ``/brokers/topics/<topic>``, the znode the controller places
replicas in (Kafka's ``KafkaZkClient.getReplicaAssignmentForTopics``), when the run knows its
ZooKeeper (the local runner); else, or when ZooKeeper does not answer (a ``zookeeper`` fault still
in force), the Metadata response's replicas, which every broker has from the controller's
UpdateMetadata. Each read is bounded; when neither answers, the record already written stays
and the run says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from client.admin import AdminClient
from devcluster.zookeeper import zk_session
from ledger.assignment import write_assignment
from zk.data import decode_topic_assignment
from zk.paths import topic_path

#: How long one source may take to answer (seconds).
READ_TIMEOUT_S = 10.0
Say = Callable[[str], None]


def zookeeper_assignment(port: int, topic: str, timeout_s: float = READ_TIMEOUT_S) -> dict[int, list[int]]:
    """``{partition: replicas}`` of ``topic`` as ZooKeeper holds it (blocking: run it in a thread)."""
    with zk_session(port, timeout_s) as client:
        data, _ = client.get(topic_path(topic))
    return decode_topic_assignment(data)


async def metadata_assignment(
    bootstrap: str, topic: str, timeout_s: float = READ_TIMEOUT_S
) -> dict[int, list[int]]:
    """``{partition: replicas}`` of ``topic`` from a Metadata response (every assigned replica,
    the offline ones included)."""
    async with AdminClient(bootstrap, request_timeout_ms=int(timeout_s * 1000)) as admin:
        (description,) = await asyncio.wait_for(admin.describe_topics([topic]), timeout_s)
    return {p.partition: list(p.replicas) for p in description.partitions}


async def record_assignment(
    report_dir: Path,
    topic: str,
    recorded: str,
    bootstrap: str,
    zookeeper_port: int | None,
    say: Say,
    timeout_s: float = READ_TIMEOUT_S,
) -> str | None:
    """Read ``topic``'s assignment (ZooKeeper first, when ``zookeeper_port`` is known, else the
    metadata) and write it to ``report_dir/assignment.json`` as ``recorded`` (``start`` or
    ``after_heal``); the source it came from, or None when neither answered."""
    replicas: dict[int, list[int]] = {}
    source = None
    if zookeeper_port is not None:
        try:
            replicas = await asyncio.to_thread(zookeeper_assignment, zookeeper_port, topic, timeout_s)
            source = "zookeeper"
        except Exception as exc:  # noqa: BLE001 - a faulted ZooKeeper: the metadata below
            say(f"could not read the assignment of {topic} from ZooKeeper ({exc}): asking the metadata")
    if not replicas:
        try:
            replicas = await metadata_assignment(bootstrap, topic, timeout_s)
            source = "metadata"
        except Exception as exc:  # noqa: BLE001 - reported; the record written before stays
            say(f"could not read the assignment of {topic} from the metadata either ({exc})")
    if not replicas or source is None:
        say(f"the assignment of {topic} was not recorded {recorded.replace('_', ' ')}")
        return None
    write_assignment(
        report_dir, {(topic, p): r for p, r in replicas.items()}, source=source, recorded=recorded
    )
    return source
