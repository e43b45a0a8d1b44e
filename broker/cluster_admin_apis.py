"""DescribeCluster (KIP-700), DescribeLogDirs (KIP-113, with KIP-827's sizes) and
IncrementalAlterConfigs (KIP-339) at the broker: the admin APIs Kafka's own admin clients use
besides Metadata and AlterConfigs (docs/operations.md "Incremental changes, the cluster and log
dirs"). KafkaApis takes :meth:`ClusterAdminApis.handlers` into its dispatch table.

DescribeCluster, at any broker, is Metadata without topics: the cluster id, the controller this
broker knows, and the live brokers with their address on the listener the request came in on
(a broker without that listener is left out, as Metadata leaves it out). A ZooKeeper-era broker
has only the BROKER endpoint type (KIP-919): asked for controllers it answers
MISMATCHED_ENDPOINT_TYPE, for an unknown type UNSUPPORTED_ENDPOINT_TYPE. Without an authorizer
no authorized operations are computed (INT32_MIN, KIP-430's "not provided").

DescribeLogDirs describes this broker's own log dirs (Kafka's ReplicaManager.describeLogDirs):
per configured dir, its absolute path, KAFKA_STORAGE_ERROR when the dir is offline or its file
system cannot be read, else the file system's total and usable bytes (``statvfs``) and each
asked partition held there (``topics`` nil: every one) with its size in bytes, its offset lag
(0: a current replica's max(HW - LEO, 0); only a future replica, moving between dirs, lags,
and there are none here) and ``is_future_key`` false. A topic with no asked partition in a dir
is left out of that dir.

IncrementalAlterConfigs: :mod:`broker.incremental_alter_configs`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Protocol

from broker.config import BrokerConfig
from broker.incremental_alter_configs import incremental_alter_configs
from broker.log.disk_space import Statvfs
from broker.metadata_cache import MetadataCache
from broker.network import Request
from broker.replica.replica_manager import ReplicaManager
from client.protocol.admin_schemas import AUTHORIZED_OPERATIONS_OMITTED, EndpointType
from client.protocol.api import ApiKey, error_body
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from zk.bridge import ZkBridge

#: Kafka's error codes for a DescribeCluster endpoint type this broker does not serve (KIP-919);
#: client.protocol.errors.ErrorCode does not list them.
MISMATCHED_ENDPOINT_TYPE = ErrorCode.MISMATCHED_ENDPOINT_TYPE
UNSUPPORTED_ENDPOINT_TYPE = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


class HostedLog(Protocol):
    """What DescribeLogDirs reads of a log (broker.log.Log)."""

    log_dir: Path

    @property
    def size_in_bytes(self) -> int: ...


def _space(statvfs: Statvfs, path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path`` (Kafka's FileStore totals)."""
    stat = statvfs(path)
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def describe_log_dirs(
    log_dirs: Collection[Path],
    is_offline: Callable[[Path], bool],
    logs: Mapping[tuple[str, int], HostedLog],
    wanted: Collection[tuple[str, int]] | None,
    statvfs: Statvfs = os.statvfs,
) -> list[dict]:
    """DescribeLogDirs' ``results`` for these dirs and the logs in them; ``wanted`` None: all."""
    results = []
    for log_dir in log_dirs:
        path = os.path.abspath(log_dir)
        if is_offline(log_dir):
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": []})
            continue
        try:
            total, usable = _space(statvfs, path)
        except OSError:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": []})
            continue
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), lg in sorted(logs.items()):
            if Path(lg.log_dir) != Path(log_dir) or (wanted is not None and (topic, partition) not in wanted):
                continue
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "partition_size": lg.size_in_bytes,
                    "offset_lag": 0,
                    "is_future_key": False,
                }
            )
        results.append(
            {
                "error_code": ErrorCode.NONE,
                "log_dir": path,
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return results


class ClusterAdminApis:
    """The three handlers, over the broker's config, ZooKeeper, metadata cache and logs."""

    def __init__(
        self,
        config: BrokerConfig,
        zk: ZkBridge,
        metadata_cache: MetadataCache,
        replica_manager: ReplicaManager,
        cluster_id: Callable[[], str | None],
        statvfs: Statvfs | None = None,
    ) -> None:
        self.config = config
        self.zk = zk
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager  # its log manager is read at each request
        self.cluster_id = cluster_id
        #: None: the replica manager's (the broker's injected one, ServerRuntime.statvfs)
        self.statvfs = statvfs or replica_manager.disk_space.statvfs

    def handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[None]]]:
        return {
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
        }

    async def handle_incremental_alter_configs(self, request: Request) -> None:
        request.respond(await incremental_alter_configs(self.zk, self.config, request.body))

    async def handle_describe_cluster(self, request: Request) -> None:
        request.respond(self.describe_cluster(request.body, request.listener_name))

    def describe_cluster(self, body: dict, listener_name: str) -> dict:
        """The DescribeCluster response for a request that arrived on ``listener_name``."""
        endpoint_type = body["endpoint_type"]
        if endpoint_type == EndpointType.CONTROLLER:
            return error_body(
                MISMATCHED_ENDPOINT_TYPE,
                "The request was sent to an endpoint of type BROKER, "
                "but we wanted an endpoint of type CONTROLLER",
            )
        if endpoint_type != EndpointType.BROKER:
            return error_body(UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {endpoint_type}")
        brokers = self.metadata_cache.alive_endpoints(listener_name)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "endpoint_type": int(EndpointType.BROKER),
            "cluster_id": self.cluster_id(),
            "controller_id": self.metadata_cache.controller_id,
            "brokers": [
                {"broker_id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in brokers.values()
            ],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    async def handle_describe_log_dirs(self, request: Request) -> None:
        topics = request.body["topics"]
        wanted = (
            None
            if topics is None
            else {TopicPartition(t["topic"], p) for t in topics for p in t["partitions"]}
        )
        log_manager = self.replica_manager.log_manager
        results = describe_log_dirs(
            log_manager.log_dirs, log_manager.is_offline, log_manager.all_logs(), wanted, self.statvfs
        )
        request.respond({"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results})
