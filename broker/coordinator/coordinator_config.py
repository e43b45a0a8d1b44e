"""The group coordinator's and the offsets topic's broker properties (Kafka's KafkaConfig
"Group coordinator configuration" and "Offset management configuration", with Kafka's names and
defaults; docs/operations.md "Broker configuration"), and the settings object built from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.config_prop import INT_MAX, Prop

GROUP_COORDINATOR_PROPERTIES: tuple[Prop, ...] = (
    Prop(
        "group.min.session.timeout.ms",
        "int",
        6000,
        low=0,
        doc="The smallest `session.timeout.ms` a member may ask for (else INVALID_SESSION_TIMEOUT).",
    ),
    Prop(
        "group.max.session.timeout.ms",
        "int",
        1800000,
        low=0,
        doc="The largest `session.timeout.ms` a member may ask for (else INVALID_SESSION_TIMEOUT).",
    ),
    Prop(
        "group.initial.rebalance.delay.ms",
        "int",
        3000,
        low=0,
        doc="How long the first rebalance of an empty group waits for more members to join "
        "(KIP-134), extended by the same amount while members keep arriving, at most up to the "
        "rebalance timeout.",
    ),
    Prop(
        "group.max.size",
        "int",
        INT_MAX,
        low=1,
        doc="The most members a group admits (GROUP_MAX_SIZE_REACHED).",
    ),
    Prop(
        "offsets.topic.num.partitions",
        "int",
        50,
        low=1,
        doc="Partitions of `__consumer_offsets`, created on first use; a group's partition is "
        "abs(String.hashCode(group.id)) mod this. Do not change it once the topic exists.",
    ),
    Prop(
        "offsets.topic.replication.factor",
        "int",
        3,
        low=1,
        doc="Replication factor of `__consumer_offsets`; a smaller cluster gets its live broker count.",
    ),
    Prop(
        "offsets.topic.segment.bytes", "int", 104857600, low=1, doc="`segment.bytes` of `__consumer_offsets`."
    ),
    Prop(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        low=1,
        doc="How long an offset commit or a group write waits for every in-sync replica (acks=all).",
    ),
    Prop(
        "offsets.retention.minutes",
        "int",
        10080,
        low=1,
        doc="How long an empty group's committed offsets are kept after its last member left (KIP-211).",
    ),
    Prop(
        "offsets.retention.check.interval.ms",
        "int",
        600000,
        low=1,
        doc="How often expired offsets are looked for.",
    ),
    Prop("offset.metadata.max.bytes", "int", 4096, low=0, doc="The longest metadata string of a commit."),
)


@dataclass(frozen=True)
class GroupConfig:
    """What the coordinator reads of the broker's properties (Kafka's GroupConfig + OffsetConfig)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = INT_MAX
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_commit_timeout_ms: int = 5000
    offsets_retention_ms: int = 10080 * 60_000
    offsets_retention_check_interval_ms: int = 600000
    max_metadata_size: int = 4096

    @classmethod
    def from_properties(cls, get: Callable[[str], Any]) -> GroupConfig:
        return cls(
            min_session_timeout_ms=get("group.min.session.timeout.ms"),
            max_session_timeout_ms=get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
            max_size=get("group.max.size"),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions"),
            offsets_topic_replication_factor=get("offsets.topic.replication.factor"),
            offsets_topic_segment_bytes=get("offsets.topic.segment.bytes"),
            offsets_commit_timeout_ms=get("offsets.commit.timeout.ms"),
            offsets_retention_ms=get("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms"),
            max_metadata_size=get("offset.metadata.max.bytes"),
        )
