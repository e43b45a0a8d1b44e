"""The log's half of compaction: what the cleaner may read of a log, and swapping a cleaned
segment in for the segments it replaces (Kafka's ``Log.replaceSegments``; docs/design.md "Log
compaction").

:meth:`LogCleaning.cleaning_view` hands the cleaner, under the log's lock, a
:class:`CleaningView`: the segments as they are (sizes, times, paths), the offsets that bound
what may be cleaned, the truncation generation, and each active producer's last offset. The
cleaner then works off the event loop on its own read-only descriptors of those segment files
and writes ``<base>.log.cleaned`` (with ``.index.cleaned`` and ``.timeindex.cleaned``).

:meth:`LogCleaning.replace_segments` is the swap, on the loop, under the log's lock. It first
checks that the pass is still valid: the log is open and its dir online, no truncation happened
since the view (a truncation may have removed the dirty records the offset map saw, so cleaning
by that map could drop the only remaining copy of a key), and every replaced segment is still
in the log (retention deletes whole segments). Otherwise it changes nothing and returns False;
the cleaner discards its ``.cleaned`` files. Then Kafka's crash-safe order:

1. the cleaned files are renamed ``.cleaned`` -> ``.swap`` and the directory fsynced;
2. the replaced segments are deleted, newest first, and the directory fsynced;
3. the ``.swap`` files are renamed to the segment's names and the directory fsynced.

A crash before 1 leaves ``.cleaned`` files, which the loader deletes; from 1 on, the loader
finishes the swap (:func:`broker.log.log_loader.complete_swaps`). A failure part way takes the
log dir offline (KIP-112): the next start finishes the swap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.checkpoint import fsync_dir
from broker.log.file_cache import SegmentFileCache
from broker.log.log_config import LogConfig
from broker.log.producer_snapshots import snapshot_path
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import LogSegment

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


@dataclass(frozen=True)
class SegmentView:
    """One segment as the view saw it."""

    segment: LogSegment
    base_offset: int
    next_offset: int
    size: int
    last_modified_ms: int
    largest_timestamp: int
    #: Kafka's first batch timestamp (KIP-354's clock); None when empty
    first_batch_timestamp: int | None
    offset_index_bytes: int
    time_index_bytes: int

    @property
    def log_path(self) -> Path:
        return self.segment.log_path


@dataclass(frozen=True)
class CleaningView:
    """A log as the cleaner may read it: its segments, the active one last."""

    dir: Path
    config: LogConfig
    segments: tuple[SegmentView, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    #: the log's truncation count when the view was taken
    generation: int
    #: producer id -> the last offset of its last batch (Kafka's lastRecordsOfActiveProducers)
    active_producers: dict[int, int]
    #: the log's segment file cache: the cleaned segment's ``.log`` descriptor goes there too
    file_cache: SegmentFileCache | None = None

    @property
    def active(self) -> SegmentView:
        return self.segments[-1]


def rename_segment_files(segment: LogSegment, old_suffix: str, new_suffix: str) -> None:
    """Kafka's ``changeFileSuffixes``: rename the segment's three files, descriptors kept open,
    the log file first."""
    for owner, attribute in ((segment, "log_path"), (segment.index, "path"), (segment.time_index, "path")):
        path: Path = getattr(owner, attribute)
        stem = path.name.removesuffix(old_suffix) if old_suffix else path.name
        target = path.with_name(stem + new_suffix)
        os.rename(path, target)
        setattr(owner, attribute, target)


def swap_in(dir: Path, cleaned: LogSegment, old: Sequence[LogSegment]) -> None:
    """Replace ``old`` by ``cleaned`` on disk, in the crash-safe order of the module doc. The
    producer snapshots at the bases that are no longer segments' go too (the loader deletes
    such strays anyway; Kafka keeps only its last few snapshots)."""
    rename_segment_files(cleaned, CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_dir(dir)
    for segment in reversed(old):
        segment.delete()
    fsync_dir(dir)
    rename_segment_files(cleaned, SWAP_SUFFIX, "")
    fsync_dir(dir)
    for segment in old[1:]:
        snapshot_path(dir, segment.base_offset).unlink(missing_ok=True)


def discard_cleaned(segment: LogSegment) -> None:
    """Close and delete an uncommitted ``.cleaned`` segment (its files may be gone already)."""
    with contextlib.suppress(OSError):
        segment.delete()


class LogCleaning:
    """The cleaning methods of :class:`broker.log.log.Log` (which defines what is declared here)."""

    dir: Path
    config: LogConfig
    log_start_offset: int
    high_watermark: int
    producer_state: ProducerStateManager
    _lock: threading.RLock
    _segments: list[LogSegment]
    _bases: list[int]
    _leo: int
    _truncations: int
    _closed: bool
    file_cache: SegmentFileCache

    if TYPE_CHECKING:  # defined by Log; declared here for the type checker only

        def _check_open(self) -> None: ...

        def _io(
            self, what: str, resource_retriable: bool = True
        ) -> contextlib.AbstractContextManager[None]: ...

        @property
        def is_offline(self) -> bool: ...

    def cleaning_view(self) -> CleaningView:
        """The log as the cleaner may read it; KafkaStorageError when closed or offline."""
        with self._lock:
            self._check_open()
            segments = tuple(
                SegmentView(
                    s,
                    s.base_offset,
                    s.next_offset,
                    s.size,
                    s.last_modified_ms,
                    s.largest_timestamp,
                    s.rolling_base_ms,
                    s.index.size_in_bytes,
                    s.time_index.size_in_bytes,
                )
                for s in self._segments
            )
            producers = {pid: e.last_offset for pid, e in self.producer_state.producers.items()}
            return CleaningView(
                self.dir,
                self.config,
                segments,
                self.log_start_offset,
                self._leo,
                self.high_watermark,
                self._truncations,
                producers,
                self.file_cache,
            )

    def cleaning_aborted(self, generation: int) -> bool:
        """True when a pass begun at ``generation`` can no longer be swapped in: the log was
        closed (deleted, its dir offline) or truncated since. Read without the lock, as a hint."""
        return self._closed or self.is_offline or self._truncations != generation

    def replace_segments(self, cleaned: LogSegment, old: Sequence[LogSegment], generation: int) -> bool:
        """Swap ``cleaned`` (its files ``.cleaned``) in for ``old``, adjacent segments below the
        active one; False, and nothing changed, when the pass begun at ``generation`` is no longer
        valid (see the module doc). KafkaStorageError when the swap itself fails."""
        with self._lock:
            if self.cleaning_aborted(generation):
                return False
            try:
                first = next(i for i, s in enumerate(self._segments) if s is old[0])
            except StopIteration:
                return False  # deleted by retention meanwhile
            end = first + len(old)
            if end >= len(self._segments) or any(
                a is not b for a, b in zip(self._segments[first:end], old, strict=True)
            ):
                return False
            if cleaned.base_offset != old[0].base_offset or cleaned.next_offset > self._bases[end]:
                raise ValueError(f"{self.dir}: {cleaned} cannot replace {old}")
            with self._io("replacing segments with their cleaned copy", resource_retriable=False):
                swap_in(self.dir, cleaned, old)
            self._segments[first:end] = [cleaned]
            self._bases[first:end] = [cleaned.base_offset]
            log.info(
                "%s: swapped in cleaned segment %s (%d bytes) for %d segment(s) of %d bytes",
                self.dir,
                cleaned.log_path.name,
                cleaned.size,
                len(old),
                sum(s.size for s in old),
            )
            return True
