"""The admin APIs as the Kafka listener serves them: Kafka's messages (kio) to and from the bodies of
client/protocol/admin_schemas.py, for CreateTopics and DeleteTopics (KIP-4), CreatePartitions
(KIP-195), ElectLeaders (KIP-460), AlterPartitionReassignments and ListPartitionReassignments
(KIP-455) here, the config APIs in admin_apis_configs.py and DescribeCluster and DescribeLogDirs
in admin_apis_cluster.py (docs/design.md "Two wire protocols"; docs/operations.md for each API).

The versions served, with what the clients send (librdkafka 2.x asks CreateTopics <=4,
DeleteTopics <=4, CreatePartitions <=2, ElectLeaders <=2; Java 3.x and kafka-python 3.0 the
newest the broker has):

* CreateTopics v2-v7: v0-v1 are gone from Kafka 4.0's schemas (kio has none); v5+ answer the
  created topic's partition count, replication factor and configs, which our CreateTopics body
  does not carry, so they are Kafka's "not returned" -1, -1 and no configs (Java's admin reads
  that as metadata not supported, librdkafka ignores it); v7's topic id is the zero UUID: topics
  have no ids (KIP-516) here. A topic with a null config value is refused INVALID_CONFIG, as Kafka refuses it,
  without reaching the handler.
* DeleteTopics v1-v5: v0 is gone from Kafka 4.0's schemas, v6 names topics by id (kafka-python
  turns its names into v5's ``topic_names`` when the broker stops at v5).
* CreatePartitions v0-v3: every version.
* ElectLeaders v0-v2: v0 has no election type (preferred) and no top-level error code: a request
  refused whole carries its error on every partition it named, as Kafka answers v0.
* AlterPartitionReassignments v0: v1 adds KIP-860's allow_replication_factor_change, a check we
  do not make. A null replica list cancels a reassignment in Kafka; this broker cannot cancel
  one, so such a partition is sent on as an empty list (the broker refuses the request whole,
  all or nothing) and answered INVALID_REQUEST saying so.
* ListPartitionReassignments v0: every version.
"""

from __future__ import annotations

from typing import Any

from broker.kafka_protocol.admin_apis_cluster import CLUSTER_APIS
from broker.kafka_protocol.admin_apis_configs import CONFIG_APIS
from broker.kafka_protocol.entities import ZERO_UUID, make, response_module, to_ms
from broker.kafka_protocol.kafka_api import KafkaApi
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode

CANCEL_UNSUPPORTED = "Cancelling a reassignment (a null replica list) is not supported by this broker."


# -- CreateTopics, DeleteTopics, CreatePartitions --------------------------------------------------


def _null_configs(topic: Any) -> list[str]:
    return [str(c.name) for c in topic.configs if c.value is None]


def _create_topics_body(request: Any, version: int) -> dict:
    return {
        "topics": [
            {
                "name": str(t.name),
                "num_partitions": int(t.num_partitions),
                "replication_factor": int(t.replication_factor),
                "assignments": [
                    {"partition": int(a.partition_index), "broker_ids": [int(b) for b in a.broker_ids]}
                    for a in t.assignments
                ],
                "configs": {str(c.name): str(c.value) for c in t.configs},
            }
            for t in request.topics
            if not _null_configs(t)
        ],
        "timeout_ms": to_ms(request.timeout),
        "validate_only": bool(getattr(request, "validate_only", False)),
    }


def _create_topics_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.CREATE_TOPICS, version)
    answers = [(t["name"], t["error_code"], t.get("error_message")) for t in body["topics"]]
    for t in request.topics:
        nulls = _null_configs(t)
        if nulls:
            message = f"Null value not supported for topic configs: {','.join(nulls)}"
            answers.append((str(t.name), ErrorCode.INVALID_CONFIG, message))
    results = tuple(
        make(
            m.CreatableTopicResult,
            name=name,
            topic_id=ZERO_UUID,
            error_code=code,
            error_message=message,
            num_partitions=-1,
            replication_factor=-1,
            configs=(),
        )
        for name, code, message in answers
    )
    return make(m.CreateTopicsResponse, throttle_time=body.get("throttle_time_ms", 0), topics=results)


def _delete_topics_body(request: Any, version: int) -> dict:
    return {"topics": [str(name) for name in request.topic_names], "timeout_ms": to_ms(request.timeout)}


def _delete_topics_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.DELETE_TOPICS, version)
    responses = tuple(
        make(
            m.DeletableTopicResult,
            name=t["name"],
            error_code=t["error_code"],
            error_message=t.get("error_message"),
        )
        for t in body["topics"]
    )
    return make(m.DeleteTopicsResponse, throttle_time=body.get("throttle_time_ms", 0), responses=responses)


def _create_partitions_body(request: Any, version: int) -> dict:
    return {
        "topics": [
            {
                "name": str(t.name),
                "count": int(t.count),
                "assignments": None
                if t.assignments is None
                else [{"broker_ids": [int(b) for b in a.broker_ids]} for a in t.assignments],
            }
            for t in request.topics
        ],
        "timeout_ms": to_ms(request.timeout),
        "validate_only": bool(request.validate_only),
    }


def _create_partitions_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.CREATE_PARTITIONS, version)
    results = tuple(
        make(
            m.CreatePartitionsTopicResult,
            name=r["name"],
            error_code=r["error_code"],
            error_message=r.get("error_message"),
        )
        for r in body["results"]
    )
    return make(m.CreatePartitionsResponse, throttle_time=body.get("throttle_time_ms", 0), results=results)


# -- ElectLeaders ----------------------------------------------------------------------------------


def _elect_leaders_body(request: Any, version: int) -> dict:
    wanted = request.topic_partitions
    return {
        "election_type": int(getattr(request, "election_type", 0)),  # v0: preferred
        "topic_partitions": None
        if wanted is None
        else [{"topic": str(t.topic), "partitions": [int(p) for p in t.partitions]} for t in wanted],
        "timeout_ms": to_ms(request.timeout),
    }


def _elect_leaders_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.ELECT_LEADERS, version)
    results = [
        (
            r["topic"],
            [(p["partition_id"], p["error_code"], p.get("error_message")) for p in r["partition_result"]],
        )
        for r in body["replica_election_results"]
    ]
    if version == 0 and body["error_code"] != ErrorCode.NONE and not results:
        # v0 has no top-level error code: every partition asked carries it
        results = [
            (str(t.topic), [(int(p), body["error_code"], None) for p in t.partitions])
            for t in request.topic_partitions or ()
        ]
    return make(
        m.ElectLeadersResponse,
        throttle_time=body.get("throttle_time_ms", 0),
        error_code=body["error_code"],
        replica_election_results=tuple(
            make(
                m.ReplicaElectionResult,
                topic=topic,
                partition_result=tuple(
                    make(m.PartitionResult, partition_id=pid, error_code=code, error_message=message)
                    for pid, code, message in partitions
                ),
            )
            for topic, partitions in results
        ),
    )


# -- AlterPartitionReassignments, ListPartitionReassignments ----------------------------------------


def _alter_reassignments_body(request: Any, version: int) -> dict:
    return {
        "timeout_ms": to_ms(request.timeout),
        "topics": [
            {
                "name": str(t.name),
                "partitions": [
                    {
                        "partition_index": int(p.partition_index),
                        "replicas": [] if p.replicas is None else [int(r) for r in p.replicas],
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


def _alter_reassignments_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    cancels = {
        (str(t.name), int(p.partition_index))
        for t in request.topics
        for p in t.partitions
        if p.replicas is None
    }

    def partition(topic: str, p: dict) -> Any:
        code, message = p["error_code"], p.get("error_message")
        if (topic, p["partition_index"]) in cancels and code != ErrorCode.NONE:
            code, message = ErrorCode.INVALID_REQUEST, CANCEL_UNSUPPORTED
        return make(
            m.ReassignablePartitionResponse,
            partition_index=p["partition_index"],
            error_code=code,
            error_message=message,
        )

    responses = tuple(
        make(
            m.ReassignableTopicResponse,
            name=t["name"],
            partitions=tuple(partition(t["name"], p) for p in t["partitions"]),
        )
        for t in body["responses"]
    )
    return make(
        m.AlterPartitionReassignmentsResponse,
        throttle_time=body.get("throttle_time_ms", 0),
        error_code=body["error_code"],
        error_message=body.get("error_message"),
        responses=responses,
    )


def _list_reassignments_body(request: Any, version: int) -> dict:
    topics = request.topics
    return {
        "timeout_ms": to_ms(request.timeout),
        "topics": None
        if topics is None
        else [
            {"name": str(t.name), "partition_indexes": [int(p) for p in t.partition_indexes]} for t in topics
        ],
    }


def _list_reassignments_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    topics = tuple(
        make(
            m.OngoingTopicReassignment,
            name=t["name"],
            partitions=tuple(
                make(
                    m.OngoingPartitionReassignment,
                    partition_index=p["partition_index"],
                    replicas=tuple(p["replicas"]),
                    adding_replicas=tuple(p["adding_replicas"]),
                    removing_replicas=tuple(p["removing_replicas"]),
                )
                for p in t["partitions"]
            ),
        )
        for t in body["topics"]
    )
    return make(
        m.ListPartitionReassignmentsResponse,
        throttle_time=body.get("throttle_time_ms", 0),
        error_code=body["error_code"],
        error_message=body.get("error_message"),
        topics=topics,
    )


ADMIN_APIS: tuple[KafkaApi, ...] = (
    KafkaApi(ApiKey.CREATE_TOPICS, 2, 7, _create_topics_body, _create_topics_response),
    KafkaApi(ApiKey.DELETE_TOPICS, 1, 5, _delete_topics_body, _delete_topics_response),
    KafkaApi(ApiKey.CREATE_PARTITIONS, 0, 3, _create_partitions_body, _create_partitions_response),
    KafkaApi(ApiKey.ELECT_LEADERS, 0, 2, _elect_leaders_body, _elect_leaders_response),
    KafkaApi(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0, _alter_reassignments_body, _alter_reassignments_response
    ),
    KafkaApi(
        ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, _list_reassignments_body, _list_reassignments_response
    ),
    *CONFIG_APIS,
    *CLUSTER_APIS,
)
