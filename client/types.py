"""Value types the client hands to and gets back from its users, defined once for client/.

Plain immutable records, shaped like the Java client's (``TopicPartition``,
``RecordMetadata``, ``ConsumerRecord``, ``NewTopic``, ``TopicDescription``,
``PartitionReassignment`` of KIP-455 ...), so code and operators that know Kafka recognise them;
and the partition and topic metadata the client caches (``PartitionInfo``, ``TopicInfo``, parsed
in :mod:`client.metadata`). Nothing here does I/O.
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
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata): the next offset the group should read,
    with an optional metadata string and the leader epoch of the record before it (KIP-320)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A group member's identity now (Kafka's ConsumerGroupMetadata, KIP-447): the generation is
    -1 and the member id empty while it holds none."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


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
    #: KIP-516: the topic's id (Kafka's Uuid text); None when the cluster reports none
    topic_id: str | None = None


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment in progress, as ListPartitionReassignments reports it (Kafka's Admin
    ``PartitionReassignment``, KIP-455): ``replicas`` every replica the partition has meanwhile
    (the target's and the ones leaving), ``adding_replicas`` the target's that are new,
    ``removing_replicas`` the ones that leave when it completes."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


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


# -- configs (KIP-133's DescribeConfigs and AlterConfigs) --------------------------------------


@dataclass(frozen=True)
class ConfigResource:
    """What a config belongs to (Kafka's ConfigResource): ``type`` a
    :class:`~client.protocol.api.ConfigResourceType` (TOPIC with the topic's name, BROKER with
    the broker id as a string)."""

    type: int
    name: str


@dataclass(frozen=True)
class ConfigSynonym:
    """One place a config's value may come from, highest precedence first (KIP-226)."""

    name: str
    value: str | None
    source: int  # a ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource with its effective value (Kafka's ConfigEntry)."""

    name: str
    value: str | None
    source: int  # a ConfigSource
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()


@dataclass(frozen=True)
class Config:
    """Every config the broker described for one resource (Kafka's Config)."""

    entries: tuple[ConfigEntry, ...]

    def get(self, name: str) -> ConfigEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    def values(self, source: int | None = None) -> dict[str, str | None]:
        """``{name: value}``, only the entries from ``source`` when given."""
        return {e.name: e.value for e in self.entries if source is None or e.source == source}


# -- consumer groups (Kafka's Admin listConsumerGroups / describeConsumerGroups) ---------------


@dataclass(frozen=True)
class ConsumerGroupListing:
    """One group a broker coordinates, as ListGroups names it (Kafka's ConsumerGroupListing):
    ``protocol_type`` "consumer" for consumer groups, "" for a group that only has committed
    offsets; ``state`` Kafka's group state name (``Stable``, ``Empty`` ...), None when unknown."""

    group_id: str
    protocol_type: str
    state: str | None = None


@dataclass(frozen=True)
class MemberDescription:
    """One member of a group (Kafka's MemberDescription); ``assignment`` its partitions, known
    only while the group is Stable (empty otherwise)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A group as its coordinator describes it (Kafka's ConsumerGroupDescription): ``state``
    ``Dead`` for a group that does not exist, ``protocol`` the assignor chosen (Stable only),
    ``coordinator`` the broker id that answered."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[MemberDescription, ...] = ()
