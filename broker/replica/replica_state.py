"""What the LeaderAndIsr handler (:mod:`broker.replica.leader_and_isr`) needs of the
:class:`~broker.replica.replica_manager.ReplicaManager` that owns the replica state, and of its
fetcher manager (Kafka's ReplicaFetcherManager); docs/design.md "Broker"."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from broker.config import BrokerConfig
from broker.log import Log, LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.partition import Partition
from broker.replica.replication_quota import ReplicationQuotas
from client.types import TopicPartition


class ReplicaFetchers(Protocol):
    """What the replica manager needs of its fetcher manager
    (:class:`~broker.replica.fetcher_manager.ReplicaFetcherManager`, Kafka's ReplicaFetcherManager)."""

    def add_partition(self, tp: TopicPartition, leader: dict, leader_epoch: int) -> None: ...

    def remove_partition(self, tp: TopicPartition) -> None: ...

    async def shutdown(self) -> None: ...


class NoReplicaFetchers:
    """The fetcher manager of a replica manager that never fetches (unit tests): it does nothing."""

    def add_partition(self, tp: TopicPartition, leader: dict, leader_epoch: int) -> None:
        pass

    def remove_partition(self, tp: TopicPartition) -> None:
        pass

    async def shutdown(self) -> None:
        pass


class ReplicaState(Protocol):
    """What the handler reads and changes of the
    :class:`~broker.replica.replica_manager.ReplicaManager` that owns the state."""

    config: BrokerConfig
    broker_id: int
    broker_epoch: int
    controller_epoch: int
    log_manager: LogManager
    metadata_cache: MetadataCache
    fetchers: ReplicaFetchers
    partitions: dict[TopicPartition, Partition]
    offline_partitions: set[TopicPartition]
    topic_overrides: dict[str, dict[str, str]]
    topic_configs: dict[str, dict]
    quotas: ReplicationQuotas
    topic_config_source: Callable[[str], Awaitable[dict[str, str]]]
    time_ms: Callable[[], int]
    state_change_log: Callable[[dict], None]

    def maybe_increment_high_watermark(self, partition: Partition, log_: Log) -> bool: ...

    def wake(self, tp: TopicPartition) -> None: ...
