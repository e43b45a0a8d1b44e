"""Retention: which old segments a log may delete (Kafka's ``UnifiedLog.deleteOldSegments``:
``deleteRetentionMsBreachedSegments``, ``deleteRetentionSizeBreachedSegments``,
``deleteLogStartOffsetBreachedSegments`` and their shared ``deletableSegments``).

The choice is pure functions of the segments and the log's offsets, in the manner of
:mod:`broker.replica.partition`; :meth:`broker.log.log.Log.delete_old_segments` runs the three
checks of :func:`retention_checks` in Kafka's order and :func:`remove_segments` deletes what they
pick. Retention deletes whole segments, oldest first
and stopping at the first one a check keeps:

* ``retention.ms``: a segment whose largest timestamp is more than ``retention.ms`` old;
* ``retention.bytes``: the oldest segments while the log without them is still at least
  ``retention.bytes`` long;
* the log start offset (moved by DeleteRecords or by the leader, Kafka's
  ``maybeIncrementLogStartOffset``): a segment wholly below it.

A log whose ``cleanup.policy`` lacks ``delete`` (``compact`` alone: the log cleaner keeps the
last record per key, docs/design.md "Log compaction") gets only the log start offset check, as
in Kafka's ``deleteOldSegments``; ``compact,delete`` gets all three.

The settings are described in docs/operations.md "Broker configuration" and "Topic-level
overrides". A segment is deletable only when it lies wholly below the high watermark, and an empty
active segment never is. Deleting moves the log start offset
up to the first remaining segment; the producer snapshots below it go too, keeping the one at its
base (KIP-360: producer state outlives retention, docs/design.md "Idempotent producer").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.log.log_config import LogConfig
from broker.log.segment import LogSegment

log = logging.getLogger(__name__)

#: (segment, the segment after it or None for the active one) -> delete it?
Predicate = Callable[[LogSegment, LogSegment | None], bool]


def retention_checks(
    config: LogConfig,
    time_ms: Callable[[], int],
    size_in_bytes: Callable[[], int],
    log_start_offset: Callable[[], int],
) -> Iterator[tuple[Predicate, str]]:
    """(predicate, reason) of each check the config enables, in Kafka's order: retention.ms,
    retention.bytes (both only with ``cleanup.policy`` ``delete``), the log start offset. Lazy:
    the caller deletes what one check picks before the next is built, so the size check measures
    what time retention left and the log start check sees the log start offset the deletions
    moved."""
    if config.delete and config.retention_ms >= 0:
        yield retention_ms_breached(time_ms(), config.retention_ms), "retention.ms"
    if config.delete and config.retention_bytes >= 0:
        yield retention_size_breached(size_in_bytes(), config.retention_bytes), "retention.bytes"
    yield log_start_offset_breached(log_start_offset()), "log start offset"


def deletable_segments(
    segments: list[LogSegment], log_end_offset: int, high_watermark: int, predicate: Predicate
) -> list[LogSegment]:
    """The oldest segments ``predicate`` picks, stopping at the first it keeps, at the first not
    wholly below the high watermark, and at an empty active segment (Kafka's
    ``deletableSegments``)."""
    doomed: list[LogSegment] = []
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        upper = following.base_offset if following is not None else log_end_offset
        last_and_empty = following is None and segment.is_empty
        if high_watermark >= upper and not last_and_empty and predicate(segment, following):
            doomed.append(segment)
        else:
            break
    return doomed


def retention_ms_breached(now_ms: int, retention_ms: int) -> Predicate:
    """Segments whose newest record is more than ``retention_ms`` old."""
    return lambda segment, _next: now_ms - segment.largest_timestamp > retention_ms


def retention_size_breached(size_in_bytes: int, retention_bytes: int) -> Predicate:
    """The oldest segments while the log without them stays at least ``retention_bytes`` long."""
    excess = size_in_bytes - retention_bytes

    def beyond_size(segment: LogSegment, _next: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return beyond_size


def log_start_offset_breached(log_start_offset: int) -> Predicate:
    """Segments wholly below the log start offset (the next segment starts at or below it)."""
    return lambda _segment, following: following is not None and following.base_offset <= log_start_offset


def remove_segments(
    segments: list[LogSegment], bases: list[int], doomed: list[LogSegment], dir: Path, reason: str
) -> None:
    """Drop ``doomed`` from a log's ``segments`` and their ``bases`` and delete their files."""
    for segment in doomed:
        segments.remove(segment)
        bases.remove(segment.base_offset)
        segment.delete()
        log.info(
            "%s: deleted segment %s (%d bytes, next offset %d) by %s",
            dir,
            segment.log_path.name,
            segment.size,
            segment.next_offset,
            reason,
        )
