"""A log's settings: Kafka's topic-level ``LogConfig`` (``kafka.log.LogConfig``), with Kafka's
defaults and ranges.

One frozen value per log, built from the broker's defaults and the topic's overrides
(``KafkaConfig.log_config`` in broker/config.py; docs/operations.md "Broker configuration"); a
change reaches a live log through :meth:`broker.log.log.Log.update_config`. ``producer.id.expiration.ms`` is broker-wide, as in
Kafka, but travels here because every log expires its own producers (docs/design.md
"Idempotent producer").

Compaction (docs/design.md "Log compaction"; Kafka's LogCleaner): ``cleanup.policy`` is Kafka's
list of ``delete`` (retention, :mod:`broker.log.retention`) and ``compact`` (the cleaner,
:mod:`broker.log.cleaner`), either or both; ``delete.retention.ms``, ``min.cleanable.dirty.ratio``,
``min.compaction.lag.ms`` and ``max.compaction.lag.ms`` (KIP-354) are the topic's compaction
settings. The broker-wide ``log.cleaner.*`` settings (:class:`CleanerConfig`) travel here too, in
``cleaner``, so the log manager, which is built from the default config, has them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.log.cleaner_config import CLEANUP_POLICIES, COMPACT, DELETE, CleanerConfig

if TYPE_CHECKING:
    from broker.log.file_cache import SegmentFileCache

MAX_LONG = 2**63 - 1
MIN_SEGMENT_BYTES = 14
MAX_SEGMENT_BYTES = 2**31 - 1


@dataclass(frozen=True)
class LogConfig:
    """Kafka's topic-level log settings, with Kafka's defaults."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    flush_interval_messages: int = MAX_LONG
    flush_interval_ms: int = MAX_LONG
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    segment_index_bytes: int = 10485760
    #: how long a deleted log's renamed ``*-delete`` directory stays before it is removed
    file_delete_delay_ms: int = 60000
    #: broker-wide ``producer.id.expiration.ms`` (no topic override), as Kafka gives every Log
    producer_id_expiration_ms: int = 86400000
    #: Kafka's list: ``("delete",)``, ``("compact",)`` or both, in the order given
    cleanup_policy: tuple[str, ...] = (DELETE,)
    #: how long a tombstone stays once in the cleaned section (Kafka's deleteRetentionMs)
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = MAX_LONG  # KIP-354
    #: broker-wide ``log.cleaner.*`` (no topic override), read by the log manager
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)

    def __post_init__(self) -> None:
        checks = {
            "segment_bytes": MIN_SEGMENT_BYTES <= self.segment_bytes <= MAX_SEGMENT_BYTES,
            "segment_ms": self.segment_ms >= 1,
            "retention_ms": self.retention_ms >= -1,
            "retention_bytes": self.retention_bytes >= -1,
            "flush_interval_messages": self.flush_interval_messages >= 1,
            "flush_interval_ms": self.flush_interval_ms >= 0,
            "index_interval_bytes": self.index_interval_bytes >= 0,
            "max_message_bytes": self.max_message_bytes >= 0,
            "segment_index_bytes": self.segment_index_bytes >= 12,
            "file_delete_delay_ms": self.file_delete_delay_ms >= 0,
            "producer_id_expiration_ms": self.producer_id_expiration_ms >= 1,
            "cleanup_policy": bool(self.cleanup_policy) and set(self.cleanup_policy) <= set(CLEANUP_POLICIES),
            "delete_retention_ms": self.delete_retention_ms >= 0,
            "min_cleanable_dirty_ratio": 0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            "min_compaction_lag_ms": self.min_compaction_lag_ms >= 0,
            "max_compaction_lag_ms": self.max_compaction_lag_ms >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"log config {name}={getattr(self, name)} is out of range")

    @property
    def compact(self) -> bool:
        """The cleaner compacts this log (``cleanup.policy`` contains ``compact``)."""
        return COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention by time and size applies (``cleanup.policy`` contains ``delete``)."""
        return DELETE in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """The age at which the active segment rolls: ``segment.ms``, or for a compacted log
        ``max.compaction.lag.ms`` when smaller, so a record is never kept out of the cleaner's
        reach longer than that (KIP-354; Kafka's ``LogConfig.maxSegmentMs``)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def segment_kwargs(self, time_ms: Callable[[], int], file_cache: SegmentFileCache | None = None) -> dict:
        """The keyword arguments every :class:`~broker.log.segment.LogSegment` of the log gets
        (``file_cache``: the log manager's, whose bound holds every segment's descriptor)."""
        return {
            "index_interval_bytes": self.index_interval_bytes,
            "max_index_bytes": self.segment_index_bytes,
            "time_ms": time_ms,
            "file_cache": file_cache,
        }
