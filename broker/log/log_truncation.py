"""The file half of a log's truncation (Kafka's ``LocalLog.truncateTo`` and
``truncateFullyAndStartAt``), in an order a crash or a power loss cannot turn into a hole or a
resurrection (docs/design.md "Durability: flush and fsync rules"; docs/guarantees.md "Process
crash and power loss").

Kafka leaves a truncation to the page cache; here it is fsynced before it returns, because the
callers make durable promises right after it: the new leader's epoch entry is fsynced
(:mod:`broker.log.leader_epoch`) and the log manager checkpoints the lowered recovery point.
Whatever lies wholly above the truncation goes first and durably (newest segment first, a
directory fsync after), the one segment holding the offset is cut and fsynced last: a crash
part way leaves the old log or a prefix of it, never a cut segment followed by old ones.
:meth:`broker.log.log.Log.truncate_to` and ``truncate_fully_and_start_at`` use these and then
fix the offsets, the epoch cache and the producer state; they live in :class:`LogTruncation`,
the truncation half of :class:`broker.log.log.Log`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.checkpoint import fsync_dir
from broker.log.file_cache import SegmentFileCache
from broker.log.leader_epoch import LeaderEpochFileCache
from broker.log.log_config import LogConfig
from broker.log.producer_snapshots import delete_snapshots_above, snapshot_files
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import LogSegment

log = logging.getLogger(__name__)


def truncate_segments(dir: Path, segments: list[LogSegment], bases: list[int], offset: int) -> None:
    """Remove every batch holding an offset >= ``offset`` from ``segments`` (their ``bases``
    follow), ``offset`` being at or above the first segment's base: the segments based above it
    and the producer snapshots above it are deleted and the directory fsynced, then the segment
    holding ``offset`` is cut and fsynced."""
    keep = bisect_right(bases, offset)  # the segments based at or below offset (one at least)
    doomed = segments[keep:]
    snapshots_deleted = delete_snapshots_above(dir, offset)
    for segment in reversed(doomed):
        segment.delete()
    del segments[keep:], bases[keep:]
    if doomed or snapshots_deleted:
        fsync_dir(dir)
    if segments[-1].truncate_to(offset):
        segments[-1].flush()


def replace_all_segments(dir: Path, segments: list[LogSegment], offset: int, **segment_kwargs) -> LogSegment:
    """Delete every segment and start an empty one at ``offset``. The producer snapshots go
    first, durably, then the segments, newest first: a crash part way leaves the old log (or a
    prefix of it) without snapshots, or the new empty log; never a snapshot of the wiped history
    beside a log that no longer holds it."""
    for _, path in snapshot_files(dir):
        path.unlink(missing_ok=True)
    fsync_dir(dir)
    for segment in reversed(segments):
        segment.delete()
    segment = LogSegment.create(dir, offset, **segment_kwargs)
    fsync_dir(dir)
    return segment


class LogTruncation:
    """The truncation methods of :class:`broker.log.log.Log` (which defines what is declared here)."""

    dir: Path
    config: LogConfig
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager
    log_start_offset: int
    high_watermark: int
    recovery_point: int
    checkpoint_after_truncation: Callable[[LogTruncation], None] | None
    _lock: threading.RLock
    _time_ms: Callable[[], int]
    _segments: list[LogSegment]
    _bases: list[int]
    _leo: int
    _truncations: int
    file_cache: SegmentFileCache

    if TYPE_CHECKING:  # defined by Log; declared here for the type checker only

        def _check_open(self) -> None: ...

        def _io(
            self, what: str, resource_retriable: bool = True
        ) -> contextlib.AbstractContextManager[None]: ...

        def _load_producer_state(self) -> None: ...

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (a batch straddling it goes whole),
        durably (:mod:`broker.log.log_truncation`) before the epoch cache forgets, so a new
        leader's epoch entry is never durable over batches that may come back; then the log
        manager checkpoints the lowered recovery point."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.dir} to negative offset {offset}")
        with self._lock:
            self._check_open()
            with self._io("truncating the log", resource_retriable=False):  # half done: fail the dir
                if offset >= self._leo:
                    # No record to remove, but an epoch entry starting at the LEO (we led an epoch and
                    # wrote nothing in it) conflicts with the new leader: drop it, as Kafka does, or
                    # KIP-279's "truncate and ask again" would ask about that epoch forever.
                    self.leader_epoch_cache.truncate_from_end(self._leo)
                    return
                if offset < self._segments[0].base_offset:
                    self._truncate_fully(offset)
                else:
                    old_leo = self._leo
                    truncate_segments(self.dir, self._segments, self._bases, offset)
                    self._leo = self._segments[-1].next_offset
                    self._after_truncation()
                    self._load_producer_state()
                    log.info("%s: truncated from log end offset %d to %d", self.dir, old_leo, self._leo)
            self._checkpoint_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and start an empty log at ``offset``."""
        with self._lock:
            self._check_open()
            with self._io("truncating the log", resource_retriable=False):  # half done: fail the dir
                self._truncate_fully(offset)
            self._checkpoint_truncation()

    def _truncate_fully(self, offset: int) -> None:
        kwargs = self.config.segment_kwargs(self._time_ms, self.file_cache)
        self._segments = [replace_all_segments(self.dir, self._segments, offset, **kwargs)]
        self._bases = [offset]
        self._leo = offset
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self._after_truncation()
        self.producer_state.clear(offset)
        self.high_watermark = offset
        self.recovery_point = offset
        log.info("%s: truncated fully, the log now starts at offset %d", self.dir, offset)

    def _checkpoint_truncation(self) -> None:
        if self.checkpoint_after_truncation is not None:
            self.checkpoint_after_truncation(self)

    def _after_truncation(self) -> None:
        self._truncations += 1
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.log_start_offset = min(self.log_start_offset, self._leo)
        self.high_watermark = min(self.high_watermark, self._leo)
        self.recovery_point = min(self.recovery_point, self._leo)
