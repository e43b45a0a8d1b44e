"""Issue 34 item 4, the chaos run's side: the partition assignment it records into the report dir
(``R/assignment.json``, chaos/assignment.py) is what ZooKeeper's ``/brokers/topics/<topic>``
holds, in Kafka's reassignment-JSON shape; when neither ZooKeeper nor the metadata answers (a
ZooKeeper fault still in force, every broker down), the record written before stays."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from chaos.assignment import record_assignment
from devcluster.ports import free_port
from ledger.assignment import read_assignment, write_assignment
from zk.paths import topic_path


async def test_the_assignment_is_recorded_from_zookeeper(tmp_path: Path, zookeeper) -> None:
    topic = f"recorded-{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(30)
    try:  # the topic znode as the controller writes it (version 2, KIP-455's empty moves)
        znode = {
            "version": 2,
            "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
            "adding_replicas": {},
            "removing_replicas": {},
        }
        client.create(topic_path(topic), json.dumps(znode).encode(), makepath=True)
        said: list[str] = []
        source = await record_assignment(
            tmp_path, topic, "after_heal", "127.0.0.1:1", zookeeper.port, said.append
        )
    finally:
        client.delete(topic_path(topic))
        client.stop()
        client.close()
    assert source == "zookeeper" and not said
    doc = json.loads((tmp_path / "assignment.json").read_text())
    assert doc["version"] == 1 and doc["source"] == "zookeeper" and doc["recorded"] == "after_heal"
    assert doc["partitions"] == [
        {"topic": topic, "partition": 0, "replicas": [1, 2, 3]},
        {"topic": topic, "partition": 1, "replicas": [2, 3, 1]},
    ]


async def test_a_read_nobody_answers_keeps_the_record_written_before(tmp_path: Path) -> None:
    write_assignment(tmp_path, {("t", 0): [1, 2, 3]}, source="zookeeper", recorded="start")
    said: list[str] = []
    dead = free_port()
    source = await record_assignment(tmp_path, "t", "after_heal", f"127.0.0.1:{dead}", dead, said.append, 1.0)
    assert source is None
    assert said[-1] == "the assignment of t was not recorded after heal"
    kept = read_assignment(tmp_path)
    assert kept is not None and (kept.replicas, kept.recorded) == ({("t", 0): [1, 2, 3]}, "start")
