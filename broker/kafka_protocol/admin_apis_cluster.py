"""DescribeCluster (KIP-700, KIP-919's endpoint type) and DescribeLogDirs (KIP-113, KIP-827's
sizes) as the Kafka listener serves them (docs/design.md "Two wire protocols"; the handlers:
broker/cluster_admin_apis.py, docs/operations.md "Incremental changes, the cluster and log dirs").

DescribeCluster v0-v1: v1 adds ``endpoint_type`` (a v0 request asks for brokers); v2 adds
KIP-1073's fenced brokers, a KRaft notion a ZooKeeper-era broker has no answer for. A nil cluster
id (ZooKeeper has none yet) is sent as "": the field is not nullable.

DescribeLogDirs v1-v4: v0 is gone from Kafka 4.0's schema (v1 is the same message), v2 is v1
flexible, v3 adds the top-level error code, v4 the total and usable bytes (-1 for a dir that
could not be read); v5 adds KIP-1066's cordoned dirs, which we do not have.
"""

from __future__ import annotations

from typing import Any

from broker.kafka_protocol.entities import make, response_module
from broker.kafka_protocol.kafka_api import KafkaApi
from client.protocol.admin_schemas import AUTHORIZED_OPERATIONS_OMITTED, EndpointType
from client.protocol.api import ApiKey


def _describe_cluster_body(request: Any, version: int) -> dict:
    return {
        "include_cluster_authorized_operations": bool(request.include_cluster_authorized_operations),
        "endpoint_type": int(getattr(request, "endpoint_type", EndpointType.BROKER)),
    }


def _describe_cluster_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.DESCRIBE_CLUSTER, version)
    brokers = tuple(
        make(
            m.DescribeClusterBroker,
            broker_id=b["broker_id"],
            host=b["host"],
            port=b["port"],
            rack=b.get("rack"),
        )
        for b in body["brokers"]
    )
    return make(
        m.DescribeClusterResponse,
        throttle_time=body.get("throttle_time_ms", 0),
        error_code=body["error_code"],
        error_message=body.get("error_message"),
        endpoint_type=body.get("endpoint_type", int(EndpointType.BROKER)),
        cluster_id=body["cluster_id"] or "",
        controller_id=body["controller_id"],
        brokers=brokers,
        cluster_authorized_operations=body.get(
            "cluster_authorized_operations", AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def _describe_log_dirs_body(request: Any, version: int) -> dict:
    topics = request.topics
    return {
        "topics": None
        if topics is None
        else [{"topic": str(t.topic), "partitions": [int(p) for p in t.partitions]} for t in topics]
    }


def _log_dir_result(m: Any, result: dict) -> Any:
    topics = tuple(
        make(
            m.DescribeLogDirsTopic,
            name=t["name"],
            partitions=tuple(
                make(
                    m.DescribeLogDirsPartition,
                    partition_index=p["partition_index"],
                    partition_size=p["partition_size"],
                    offset_lag=p["offset_lag"],
                    is_future_key=p["is_future_key"],
                )
                for p in t["partitions"]
            ),
        )
        for t in result["topics"]
    )
    return make(
        m.DescribeLogDirsResult,
        error_code=result["error_code"],
        log_dir=result["log_dir"],
        topics=topics,
        total_bytes=result.get("total_bytes", -1),
        usable_bytes=result.get("usable_bytes", -1),
    )


def _describe_log_dirs_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.DESCRIBE_LOG_DIRS, version)
    return make(
        m.DescribeLogDirsResponse,
        throttle_time=body.get("throttle_time_ms", 0),
        error_code=body.get("error_code", 0),
        results=tuple(_log_dir_result(m, r) for r in body["results"]),
    )


CLUSTER_APIS: tuple[KafkaApi, ...] = (
    KafkaApi(ApiKey.DESCRIBE_CLUSTER, 0, 1, _describe_cluster_body, _describe_cluster_response),
    KafkaApi(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, _describe_log_dirs_body, _describe_log_dirs_response),
)
