"""A log's settings: Kafka's topic-level ``LogConfig`` (``kafka.log.LogConfig``), with Kafka's
defaults and ranges.

One frozen value per log, built from the broker's defaults and the topic's overrides
(``KafkaConfig.log_config`` in broker/config.py; docs/operations.md "Broker configuration"); a
change reaches a live log through :meth:`broker.log.log.Log.update_config`. ``producer.id.expiration.ms`` is broker-wide, as in
Kafka, but travels here because every log expires its own producers (docs/design.md
"Idempotent producer").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"log config {name}={getattr(self, name)} is out of range")

    def segment_kwargs(self, time_ms: Callable[[], int]) -> dict:
        """The keyword arguments every :class:`~broker.log.segment.LogSegment` of the log gets."""
        return {
            "index_interval_bytes": self.index_interval_bytes,
            "max_index_bytes": self.segment_index_bytes,
            "time_ms": time_ms,
        }
