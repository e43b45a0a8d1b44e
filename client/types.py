"""Value types the client hands to and gets back from its users, defined once for client/.

Plain immutable records, shaped like the Java client's (``TopicPartition``,
``RecordMetadata``, ``ConsumerRecord``, ``NewTopic``, ``TopicDescription`` ...), so code and
operators that know Kafka recognise them; and the partition and topic metadata the client
caches (``PartitionInfo``, ``TopicInfo``, parsed in :mod:`client.metadata`). Nothing here
does I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed. ``offset`` is -1 for acks=0 (nothing was acknowledged).
    ``producer_id`` and ``sequence`` are the idempotent producer's (KIP-98), -1 without it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    producer_id: int = -1
    sequence: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    leader_epoch: int = -1


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 for partitions or replication factor means the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


@dataclass(frozen=True, slots=True)
class PartitionInfo(PartitionDescription):
    """One partition of a Metadata response, as the client caches it (Kafka's PartitionInfo):
    the admin's description plus the partition's error code."""

    error_code: int = 0

    def description(self) -> PartitionDescription:
        """The admin client's view of it (no error code)."""
        return PartitionDescription(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(PartitionDescription)}
        )


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic of a Metadata response, as the client caches it."""

    name: str
    error_code: int
    is_internal: bool
    partitions: dict[int, PartitionInfo]
    #: Sorted partition ids, and those whose leader is a known broker.
    partition_ids: list[int]
    available: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    error_code: int = 0
    is_internal: bool = False


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]
