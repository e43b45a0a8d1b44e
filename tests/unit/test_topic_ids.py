"""Topic ids (KIP-516) in ZooKeeper mode, piece by piece: Kafka's Uuid text, the topic znode's
``topic_id`` (TopicZNode version 3), ``partition.metadata`` (Kafka's PartitionMetadataFile), the
LogManager's INCONSISTENT_TOPIC_ID refusal, and the stray-replica rules of a FULL LeaderAndIsr
(Kafka's ``LogManager.findStrayReplicas``) as pure functions. The broker applying LeaderAndIsr
is tests/unit/test_leader_and_isr_topic_ids.py; the controller's side (ids assigned on first
read, carried in its requests) tests/unit/test_controller_topic_ids.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.log import LogManager
from broker.log import partition_metadata as pm
from broker.replica.topic_ids import find_stray_replicas
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.topic_id import ZERO_UUID, parse_uuid, random_uuid, uuid_bytes, uuid_str
from zk.data import decode_topic_assignment, decode_topic_id, encode_topic_assignment

OLD_ID = "b1Sle8nHTmWcGCu-bBzMJw"
NEW_ID = "Vf3q5yUFQ4i0gn0Pfq4MKA"


# -- Kafka's Uuid text ---------------------------------------------------------------------------


def test_uuid_text_is_kafkas_url_safe_base64_without_padding() -> None:
    """Uuid(0, 0).toString() and Uuid(0, 1).toString() as Kafka prints them; a round trip of
    bytes with the url-safe characters; Uuid.fromString's refusals."""
    assert uuid_str(bytes(16)) == ZERO_UUID == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_str(bytes(15) + b"\x01") == "AAAAAAAAAAAAAAAAAAAAAQ"
    raw = bytes([0xFB, 0xEF, 0xBE] * 5 + [0xFF])  # 6-bit groups of 62 ('-') and 63 ('_')
    assert uuid_str(raw) == "-" * 20 + "_w" and uuid_bytes(uuid_str(raw)) == raw
    for bad in ("AAAA", "A" * 25, "not base64 at all!!"):
        with pytest.raises(ValueError):
            parse_uuid(bad)


def test_random_uuid_is_never_reserved_nor_starts_with_a_dash() -> None:
    """Kafka's Uuid.randomUuid draws again for ZERO, ONE and ids printed with a leading '-'."""
    draws = iter([bytes(16), bytes(15) + b"\x01", b"\xfb" + bytes(15), bytes(range(16))])
    assert random_uuid(lambda n: next(draws)) == uuid_str(bytes(range(16)))


# -- the topic znode (Kafka's TopicZNode) ------------------------------------------------------


def test_a_topic_znode_without_an_id_reads_as_none_and_keeps_its_assignment() -> None:
    """Version 1 (floodmark before KIP-516, Kafka before 2.8, kafka-topics.sh --zookeeper)."""
    old = b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}'
    assert decode_topic_id(old) is None
    assert decode_topic_assignment(old) == {0: [1, 2], 1: [2, 3]}
    assert encode_topic_assignment({0: [1, 2]}) == b'{"version":1,"partitions":{"0":[1,2]}}'


def test_a_topic_znode_with_an_id_is_kafkas_version_3() -> None:
    """Kafka 3.7's TopicZNode.encode: version 3, partitions, adding/removing replicas, topic_id;
    a ZERO_UUID there means no id."""
    data = encode_topic_assignment({1: [2, 3], 0: [1, 2]}, OLD_ID)
    assert json.loads(data) == {
        "version": 3,
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": OLD_ID,
    }
    assert decode_topic_id(data) == OLD_ID and decode_topic_assignment(data) == {0: [1, 2], 1: [2, 3]}
    # what Kafka 3.7 itself writes reads the same (its key order is a hash map's)
    kafka = (
        b'{"removing_replicas":{},"partitions":{"0":[1,2]},"topic_id":"%s","adding_replicas":{},"version":3}'
    )
    assert decode_topic_id(kafka % OLD_ID.encode()) == OLD_ID
    assert decode_topic_id(b'{"version":3,"partitions":{},"topic_id":"AAAAAAAAAAAAAAAAAAAAAA"}') is None


# -- partition.metadata (Kafka's PartitionMetadataFile) ---------------------------------------------


def test_partition_metadata_is_kafkas_file_byte_for_byte(tmp_path: Path) -> None:
    """PartitionMetadata.encode: "version: 0\\ntopic_id: <id>", no trailing newline, written via
    partition.metadata.tmp (none left behind); read back; no file reads as None."""
    assert pm.read(tmp_path) is None
    pm.write(tmp_path, OLD_ID)
    assert (tmp_path / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: " + OLD_ID.encode()
    assert not (tmp_path / "partition.metadata.tmp").exists()
    assert pm.read(tmp_path) == OLD_ID
    pm.write(tmp_path, NEW_ID)
    assert pm.read(tmp_path) == NEW_ID


@pytest.mark.parametrize(
    "text",
    [
        "version: 0",  # no topic id line
        "version 0 1\ntopic_id: " + OLD_ID,  # malformed version line
        "version: x\ntopic_id: " + OLD_ID,
        "version: -1\ntopic_id: " + OLD_ID,  # below version 0
        "version: 0\ntopic_id: " + ZERO_UUID,  # Kafka: "Invalid topic ID"
        "version: 0\ntopic_id: nope",
    ],
)
def test_a_partition_metadata_file_kafka_would_refuse_is_corrupt(tmp_path: Path, text: str) -> None:
    """PartitionMetadataReadBuffer's refusals are an OSError (Kafka's IOException)."""
    (tmp_path / "partition.metadata").write_text(text)
    with pytest.raises(pm.CorruptPartitionMetadata):
        pm.read(tmp_path)


def test_a_newer_partition_metadata_version_is_read_as_kafka_reads_it(tmp_path: Path) -> None:
    """Kafka reads any version >= 0 (downgrade compatibility), with whitespace-split fields."""
    (tmp_path / "partition.metadata").write_text(f"version:  1\ntopic_id:\t{OLD_ID}\n")
    assert pm.read(tmp_path) == OLD_ID


def broker_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(
        {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path / "logs")}
    )


def test_log_manager_records_a_topic_id_once_and_refuses_another(tmp_path: Path) -> None:
    """UnifiedLog.assignTopicId, and getOrCreateLog's InconsistentTopicIdException; the id
    survives a restart of the manager (read from the file)."""
    cfg = broker_config(tmp_path)
    lm = LogManager(cfg.log_dirs, cfg.log_config(), lambda: 0)
    lg = lm.get_or_create_log("t", 0)
    assert lm.topic_ids.get("t", 0) is None
    lm.topic_ids.assign("t", 0, OLD_ID)
    lm.topic_ids.assign("t", 0, OLD_ID)  # again: nothing to do
    with pytest.raises(KafkaError) as refused:
        lm.topic_ids.assign("t", 0, NEW_ID)
    assert refused.value.code == ErrorCode.INCONSISTENT_TOPIC_ID
    assert pm.read(lg.dir) == OLD_ID
    lm.shutdown()
    again = LogManager(cfg.log_dirs, cfg.log_config(), lambda: 0)
    again.load_logs()
    assert again.topic_ids.get("t", 0) == OLD_ID
    again.shutdown()


# -- stray replicas (pure) -------------------------------------------------------------------------


def hosted(topic: str, topic_id: str, *partitions: int) -> dict:
    return {"topic": topic, "topic_id": topic_id, "partitions": list(partitions)}


def test_strays_are_logs_not_assigned_here_and_only_those() -> None:
    """An id that differs on an assigned partition is not a stray (issue 33's review: a lost id
    made a new controller draw another, and deleting by it took a live topic's every replica):
    the per-partition check answers INCONSISTENT_TOPIC_ID instead."""
    logs = {
        ("kept", 0): OLD_ID,  # assigned, same id
        ("moved", 1): NEW_ID,  # moved off this broker by a reassignment while it was down
        ("gone", 0): None,  # its topic deleted while this broker was down, no id on disk
        ("reborn", 0): OLD_ID,  # another id, still assigned: refused per partition, never deleted
        ("legacy", 0): None,  # assigned, older than topic ids: kept (the id gets recorded)
        ("unknown-id", 0): OLD_ID,  # assigned, the controller knows no id: kept
        ("new", 0): None,  # not in hosted_topics but in the request's states: kept
    }
    strays = find_stray_replicas(
        [
            hosted("kept", OLD_ID, 0),
            hosted("moved", NEW_ID, 0),
            hosted("reborn", NEW_ID, 0),
            hosted("legacy", NEW_ID, 0),
            hosted("unknown-id", ZERO_UUID, 0),
        ],
        [{"topic": "new", "partition": 0, "topic_id": NEW_ID}],
        logs,
    )
    assert [(s.tp, s.reason.split(";")[0]) for s in strays] == [
        (("gone", 0), "not assigned to this broker"),
        (("moved", 1), "not assigned to this broker"),
    ]


def test_an_empty_full_request_makes_every_log_a_stray() -> None:
    """A broker the controller assigns nothing (every replica moved off it, or every topic
    deleted, while it was down)."""
    strays = find_stray_replicas([], [], {("a", 0): None, ("b", 3): OLD_ID})
    assert [s.tp for s in strays] == [("a", 0), ("b", 3)]
