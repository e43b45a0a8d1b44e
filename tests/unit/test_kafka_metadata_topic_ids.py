"""Topic ids on the wire (KIP-516): the controller's UpdateMetadata carries each topic's id to
every broker's MetadataCache; the Kafka listener answers Metadata v10+ with it, read back by
kafka-python's own MetadataResponse (an oracle independent of kio), and our admin client's
describe_topics and ``floodmark topics describe`` show it as kafka-topics.sh does
(``TopicId: <id>``). Before topic ids the answer's topic id was the zero UUID and the line read
``TopicId: -``.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from broker.kafka_protocol.codec import KafkaCodec
from broker.metadata_cache import MetadataCache
from cli.topics import describe_text
from client.protocol.api import ApiKey
from client.protocol.framing import RequestHeader
from client.types import PartitionDescription, TopicDescription

TOPIC_ID = "b1Sle8nHTmWcGCu-bBzMJw"


def cache_with_topic_ids() -> MetadataCache:
    cache = MetadataCache(1)
    state = {
        "controller_epoch": 1,
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1],
        "zk_version": 0,
        "replicas": [1],
    }
    cache.update(
        {
            "controller_id": 1,
            "live_brokers": [{"id": 1, "host": "h", "port": 9092}],
            "partition_states": [
                {**state, "topic": "with-id", "partition": 0, "topic_id": TOPIC_ID},
                {**state, "topic": "without-id", "partition": 0},
            ],
        }
    )
    return cache


@pytest.mark.parametrize("version", [10, 11, 12])
def test_metadata_v10_and_later_answer_the_controllers_topic_id(version: int) -> None:
    body = cache_with_topic_ids().metadata_response(None, "cluster")
    frame = KafkaCodec().encode_response(RequestHeader(3, version, 7, "unit"), ApiKey.METADATA, body, None)
    (size,) = struct.unpack_from(">I", frame)
    assert size == len(frame) - 4
    answer = MetadataResponse.decode(frame[4:], version=version, header=True)
    ids = {t.name: t.topic_id for t in answer.topics}
    # b1Sle8nHTmWcGCu-bBzMJw is base64 (url-safe) of these 16 bytes
    assert ids == {
        "with-id": uuid.UUID("6f54a57b-c9c7-4e65-9c18-2bbe6c1ccc27"),
        "without-id": None,  # kafka-python reads the zero UUID as None
    }


def test_a_topic_deleted_from_the_cache_forgets_its_id() -> None:
    cache = cache_with_topic_ids()
    cache.update(
        {
            "controller_id": 1,
            "live_brokers": [{"id": 1, "host": "h", "port": 9092}],
            "partition_states": [
                {
                    "topic": "with-id",
                    "partition": 0,
                    "controller_epoch": 1,
                    "leader": -2,
                    "leader_epoch": 0,
                    "isr": [1],
                    "zk_version": 0,
                    "replicas": [1],
                }
            ],
        }
    )
    assert "with-id" not in cache.topic_ids


def test_describe_prints_the_topic_id_as_kafka_topics_sh_does() -> None:
    partition = PartitionDescription(0, 1, 0, [1], [1], [])
    lines = describe_text(
        [TopicDescription("with-id", [partition], topic_id=TOPIC_ID), TopicDescription("old", [partition])]
    )
    assert lines[0].startswith(f"Topic: with-id\tTopicId: {TOPIC_ID}\tPartitionCount: 1\t")
    assert lines[2].startswith("Topic: old\tTopicId: -\tPartitionCount: 1\t")
