"""The log cleaner's broker properties (Kafka's KafkaConfig "Log cleaner" section, with Kafka's
names and defaults; docs/operations.md "Broker configuration"), ``log.cleanup.policy`` (Kafka's
list type), and :class:`CleanerConfig`, the settings object built from them (Kafka's
``CleanerConfig``; docs/design.md "Log compaction").

The topic-level settings of compaction (``cleanup.policy``, ``delete.retention.ms``,
``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms`` of KIP-354)
take their defaults from the ``log.cleaner.*`` rows here and travel in each log's
:class:`broker.log.log_config.LogConfig`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.config_error import ConfigError
from broker.config_prop import INT_MAX, LONG_MAX, Prop

DOUBLE_MAX = sys.float_info.max
COMPACT = "compact"
DELETE = "delete"
CLEANUP_POLICIES = (COMPACT, DELETE)
#: Kafka's ``log.cleaner.io.buffer.load.factor``: the share of the offset map's slots a pass fills
DEDUPE_LOAD_FACTOR = 0.9
#: Kafka's SkimpyOffsetMap entry: a 16-byte MD5 of the key and an 8-byte offset
BYTES_PER_MAP_ENTRY = 24
#: Kafka's floor for ``log.cleaner.dedupe.buffer.size`` per cleaner thread
MIN_DEDUPE_BUFFER_PER_THREAD = 1024 * 1024


@dataclass(frozen=True)
class PolicyListProp(Prop):
    """Kafka's ``ValidList.in("compact", "delete")``: a non-empty comma-separated list of the
    choices, in either order; parsed to the list without repeats."""

    def parse(self, raw: str | int | bool) -> Any:
        items = [item.strip() for item in str(raw).split(",") if item.strip()]
        unknown = [item for item in items if item not in self.choices]
        if not items or unknown:
            raise ConfigError(
                f"Invalid value {str(raw).strip()!r} for configuration {self.name}: "
                f"every item must be one of {', '.join(self.choices)}"
            )
        return list(dict.fromkeys(items))


CLEANUP_POLICY_PROPERTY = PolicyListProp("log.cleanup.policy", "list", [DELETE], choices=CLEANUP_POLICIES)

LOG_CLEANER_PROPERTIES: tuple[Prop, ...] = (
    Prop(
        "log.cleaner.enable",
        "bool",
        True,
        doc="Run the log cleaner, which compacts the logs whose cleanup.policy contains `compact`.",
    ),
    Prop(
        "log.cleaner.threads",
        "int",
        1,
        low=0,
        doc="Cleaner threads in Kafka; here one cleaner task whatever the value (0 disables cleaning); "
        "the dedupe buffer is still divided by it.",
    ),
    Prop(
        "log.cleaner.io.max.bytes.per.second",
        "double",
        DOUBLE_MAX,
        low=1.0,
        doc="The cleaner's read plus write rate is throttled to this many bytes per second.",
    ),
    Prop(
        "log.cleaner.dedupe.buffer.size",
        "int",
        134217728,
        low=0,
        doc="Memory for the cleaner's offset map (key -> last offset), counted at 24 bytes a key "
        "as Kafka's SkimpyOffsetMap; a pass whose dirty section holds more keys cleans up to where "
        "the map filled. At least 1 MiB per cleaner thread.",
    ),
    Prop(
        "log.cleaner.io.buffer.size",
        "int",
        524288,
        low=0,
        high=INT_MAX,
        doc="The cleaner's read and write buffers together; also the bytes one step of work off the "
        "event loop reads.",
    ),
    Prop(
        "log.cleaner.backoff.ms",
        "int",
        15000,
        low=0,
        doc="How long the cleaner sleeps when no log needs cleaning.",
    ),
    Prop(
        "log.cleaner.min.cleanable.ratio",
        "double",
        0.5,
        low=0.0,
        high=1.0,
        doc="A log is cleaned only when its dirty bytes exceed this share of its cleanable bytes "
        "(unless max.compaction.lag.ms forces it). Topic-level: `min.cleanable.dirty.ratio`.",
    ),
    Prop(
        "log.cleaner.delete.retention.ms",
        "int",
        86400000,
        low=0,
        doc="How long a tombstone (a null value) stays once it is in the cleaned part of the log. "
        "Topic-level: `delete.retention.ms`.",
    ),
    Prop(
        "log.cleaner.min.compaction.lag.ms",
        "int",
        0,
        low=0,
        doc="A record stays uncompacted for at least this long. Topic-level: `min.compaction.lag.ms`.",
    ),
    Prop(
        "log.cleaner.max.compaction.lag.ms",
        "int",
        LONG_MAX,
        low=1,
        doc="A record stays uncompacted for at most about this long (KIP-354): a log whose oldest "
        "dirty segment is older is cleaned whatever its dirty ratio, and the active segment of a "
        "compacted log rolls at this age. Topic-level: `max.compaction.lag.ms`.",
    ),
)


@dataclass(frozen=True)
class CleanerConfig:
    """What the log cleaner reads of the broker's properties (Kafka's ``CleanerConfig``)."""

    enable_cleaner: bool = True
    num_threads: int = 1
    max_io_bytes_per_second: float = DOUBLE_MAX
    dedupe_buffer_size: int = 134217728
    io_buffer_size: int = 524288
    backoff_ms: int = 15000

    def __post_init__(self) -> None:
        if self.num_threads < 0 or self.io_buffer_size < 0 or self.backoff_ms < 0:
            raise ValueError(f"cleaner config {self} is out of range")
        if self.max_io_bytes_per_second <= 0 or self.dedupe_buffer_size < 0:
            raise ValueError(f"cleaner config {self} is out of range")

    @property
    def enabled(self) -> bool:
        return self.enable_cleaner and self.num_threads > 0

    @property
    def max_map_entries(self) -> int:
        """Keys one pass maps: each cleaner thread's share of the dedupe buffer at 24 bytes an
        entry, times Kafka's load factor (at least 1)."""
        per_thread = self.dedupe_buffer_size // max(1, self.num_threads)
        return max(1, int(per_thread // BYTES_PER_MAP_ENTRY * DEDUPE_LOAD_FACTOR))

    @classmethod
    def from_properties(cls, get: Callable[[str], Any]) -> CleanerConfig:
        threads = get("log.cleaner.threads")
        dedupe = get("log.cleaner.dedupe.buffer.size")
        if threads > 0 and dedupe / threads < MIN_DEDUPE_BUFFER_PER_THREAD:
            raise ConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        return cls(
            enable_cleaner=get("log.cleaner.enable"),
            num_threads=threads,
            max_io_bytes_per_second=get("log.cleaner.io.max.bytes.per.second"),
            dedupe_buffer_size=dedupe,
            io_buffer_size=get("log.cleaner.io.buffer.size"),
            backoff_ms=get("log.cleaner.backoff.ms"),
        )
