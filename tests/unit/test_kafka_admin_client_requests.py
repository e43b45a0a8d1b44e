"""The admin requests as a real client encodes them: kafka-python 3.0's request classes (its own
encoder over Kafka's JSON schemas) at each API's newest advertised version, read with kio's reader
as the Kafka listener reads them and translated by broker/kafka_protocol/admin_apis*.py's
``to_body`` into exactly the body our schema takes (the shapes a client really sends: kafka-python
names DeleteTopics' topics as v6 does and turns them into v5's ``topic_names``, leaves
CreatePartitions' assignments null, asks DescribeCluster for v2's fenced brokers).
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.kafka_protocol import entities
from client.protocol.api import ApiKey, validate_request
from tests.unit.kafka_admin_roundtrip import APIS, TOPIC, kp


def kafka_python_requests() -> list[tuple[Any, int, dict]]:
    """(kafka-python request, version, the body it must become) at each API's newest version."""
    c, d, p = kp.CreateTopicsRequest, kp.DeleteTopicsRequest, kp.CreatePartitionsRequest
    i, e = kp.IncrementalAlterConfigsRequest, kp.ElectLeadersRequest
    topic = c.CreatableTopic(
        name="a",
        num_partitions=2,
        replication_factor=1,
        assignments=[],
        configs=[c.CreatableTopic.CreatableTopicConfig(name="x", value="1")],
    )
    config = i.AlterConfigsResource.AlterableConfig(name="x", config_operation=1, value=None)
    return [
        (
            c(topics=[topic], timeout_ms=1000, validate_only=False),
            7,
            {
                "topics": [
                    {
                        "name": "a",
                        "num_partitions": 2,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": {"x": "1"},
                    }
                ],
                "timeout_ms": 1000,
                "validate_only": False,
            },
        ),
        (d(topics=[d.DeleteTopicState(name="a")], timeout_ms=1000), 5, {"topics": ["a"], "timeout_ms": 1000}),
        (
            p(topics=[p.CreatePartitionsTopic(name="a", count=3)], timeout_ms=1000, validate_only=True),
            3,
            {
                "topics": [{"name": "a", "count": 3, "assignments": None}],
                "timeout_ms": 1000,
                "validate_only": True,
            },
        ),
        (
            i(
                resources=[i.AlterConfigsResource(resource_type=TOPIC, resource_name="a", configs=[config])],
                validate_only=False,
            ),
            1,
            {
                "resources": [
                    {
                        "resource_type": TOPIC,
                        "resource_name": "a",
                        "configs": [{"name": "x", "config_operation": 1, "value": None}],
                    }
                ],
                "validate_only": False,
            },
        ),
        (kp.DescribeLogDirsRequest(topics=None), 4, {"topics": None}),
        (
            e(election_type=0, topic_partitions=None, timeout_ms=100),
            2,
            {"election_type": 0, "topic_partitions": None, "timeout_ms": 100},
        ),
        (
            kp.DescribeClusterRequest(
                include_cluster_authorized_operations=True, include_fenced_brokers=True
            ),
            1,
            {"include_cluster_authorized_operations": True, "endpoint_type": 1},
        ),
    ]


@pytest.mark.parametrize(("request_", "version", "expected"), kafka_python_requests())
def test_requests_as_kafka_python_encodes_them(request_: Any, version: int, expected: dict) -> None:
    data = bytes(request_.encode(version=version))
    key = ApiKey(request_.API_KEY)
    entity, end = entities.request_reader(key, version)(data, 0)
    assert end == len(data)
    body = APIS[key].to_body(entity, version)
    assert validate_request(key, 0, body) == body == expected
