"""The cluster, log dirs and incremental config changes as the AdminClient asks for them (Kafka's
Admin ``describeCluster`` over DescribeCluster, KIP-700; ``describeLogDirs`` over DescribeLogDirs,
KIP-113 and KIP-827; ``incrementalAlterConfigs`` over IncrementalAlterConfigs, KIP-339;
docs/operations.md "Incremental changes, the cluster and log dirs"). Mixed into
:class:`client.admin.AdminClient`.

``describe_cluster`` asks any broker; one that does not know DescribeCluster (an older broker
answers INVALID_REQUEST) is asked for Metadata without topics instead, as Kafka's admin falls back
to Metadata. ``describe_log_dirs`` asks each broker about its own dirs. ``incremental_alter_configs``
routes resources as ``alter_configs`` does (a BROKER id to that broker, the rest to any broker) and
raises the first refused resource's KafkaError; the configs it does not name keep their overrides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from client import config_bodies
from client.metadata import Cluster, parse_brokers
from client.protocol.admin_schemas import AlterConfigOpType
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import BrokerInfo, ClusterDescription, ConfigResource, TopicPartition

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterAdminMixin",
    "LogDirDescription",
    "ReplicaInfo",
]


@dataclass(frozen=True)
class AlterConfigOp:
    """One change of IncrementalAlterConfigs (Kafka's AlterConfigOp): SET ``value``, DELETE the
    override (``value`` unused), APPEND or SUBTRACT the comma-separated ``value`` of a list config."""

    name: str
    value: str | None = None
    op_type: AlterConfigOpType = AlterConfigOpType.SET

    def wire(self) -> dict:
        value = None if self.op_type is AlterConfigOpType.DELETE else self.value
        return {"name": self.name, "config_operation": int(self.op_type), "value": value}


@dataclass(frozen=True)
class ReplicaInfo:
    """A partition's replica in a log dir (Kafka's ReplicaInfo)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log dir of a broker (Kafka's LogDirDescription): ``error`` None when it is online;
    ``total_bytes`` and ``usable_bytes`` None when the broker did not say."""

    error: KafkaError | None
    replica_infos: dict[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None


def incremental_body(
    configs: Mapping[ConfigResource, Iterable[AlterConfigOp]], group: list, validate_only: bool
) -> dict:
    """The IncrementalAlterConfigs request for the resources ``group`` of ``configs``."""
    resources = []
    for r in group:
        ops = list(configs[r])
        for op in ops:
            if not isinstance(op, AlterConfigOp):
                raise TypeError(f"incremental_alter_configs takes AlterConfigOp objects, got {op!r}")
        resources.append(
            {"resource_type": int(r.type), "resource_name": r.name, "configs": [op.wire() for op in ops]}
        )
    return {"resources": resources, "validate_only": validate_only}


def cluster_description(body: dict) -> ClusterDescription:
    """A DescribeCluster response as the description ``describe_cluster`` returns."""
    brokers = sorted(
        (BrokerInfo(b["broker_id"], b["host"], b["port"], b.get("rack")) for b in body["brokers"]),
        key=lambda b: b.node_id,
    )
    return ClusterDescription(body["cluster_id"], body["controller_id"], brokers)


def log_dir_descriptions(body: dict) -> dict[str, LogDirDescription]:
    """A DescribeLogDirs response as log dir path -> description; a top-level error raised."""
    if body.get("error_code", ErrorCode.NONE) != ErrorCode.NONE:
        raise KafkaError(body["error_code"], "describe log dirs: the broker refused the request")
    out = {}
    for result in body["results"]:
        code = result["error_code"]
        out[result["log_dir"]] = LogDirDescription(
            None if code == ErrorCode.NONE else KafkaError(code, f"log dir {result['log_dir']}"),
            {
                TopicPartition(t["name"], p["partition_index"]): ReplicaInfo(
                    p["partition_size"], p["offset_lag"], p["is_future_key"]
                )
                for t in result["topics"]
                for p in t["partitions"]
            },
            None if result.get("total_bytes", -1) < 0 else result["total_bytes"],
            None if result.get("usable_bytes", -1) < 0 else result["usable_bytes"],
        )
    return out


class ClusterAdminMixin:
    """AdminClient's DescribeCluster, DescribeLogDirs and IncrementalAlterConfigs methods."""

    _cluster: Cluster

    if TYPE_CHECKING:

        async def _request_node(self, node: int | None, api: ApiKey, body: dict, what: str) -> dict: ...

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and the live brokers, sorted by id."""
        body = {"include_cluster_authorized_operations": False}
        try:
            response = await self._request_node(None, ApiKey.DESCRIBE_CLUSTER, body, "describe cluster")
        except KafkaError as exc:
            if exc.code != ErrorCode.INVALID_REQUEST:
                raise
            metadata = await self._cluster.request_metadata([])  # a broker without DescribeCluster
            brokers = sorted(parse_brokers(metadata).values(), key=lambda b: b.node_id)
            return ClusterDescription(metadata["cluster_id"], metadata["controller_id"], brokers)
        return cluster_description(response)

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Each broker's log dirs (default: every live broker's) with the replicas in them (only
        ``partitions`` when given): broker id -> log dir path -> description."""
        nodes = (
            [b.node_id for b in (await self.describe_cluster()).brokers]
            if brokers is None
            else [int(b) for b in brokers]
        )
        topics = None
        if partitions is not None:
            grouped: dict[str, set[int]] = {}
            for topic, partition in partitions:
                grouped.setdefault(topic, set()).add(int(partition))
            topics = [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(grouped.items())]
        out = {}
        for node in nodes:
            response = await self._request_node(
                node, ApiKey.DESCRIBE_LOG_DIRS, {"topics": topics}, f"describe log dirs of broker {node}"
            )
            out[node] = log_dir_descriptions(response)
        return out

    async def incremental_alter_configs(
        self, configs: Mapping[ConfigResource, Iterable[AlterConfigOp]], validate_only: bool = False
    ) -> None:
        """Apply each resource's operations, in order, to its overrides (KIP-339); the configs
        not named keep theirs. ``validate_only`` checks without writing. Raises the first
        refused resource's KafkaError."""
        for node, group in config_bodies.by_node(configs).items():
            body = incremental_body(configs, group, validate_only)
            response = await self._request_node(
                node, ApiKey.INCREMENTAL_ALTER_CONFIGS, body, "incremental alter configs"
            )
            config_bodies.answers(response["responses"], group, "incremental alter configs")
