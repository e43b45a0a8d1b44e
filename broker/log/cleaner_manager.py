"""Which log the cleaner cleans next, and how far each is clean (Kafka's ``LogCleanerManager``;
docs/design.md "Log compaction").

Each log dir keeps a ``cleaner-offset-checkpoint`` (Kafka's name and text format, the
:class:`broker.log.checkpoint.OffsetCheckpointFile` of the other checkpoints): per compacted
partition, the offset below which the log is clean. A pass moves it to the end of what it
cleaned; a truncation below it lowers it to the new active segment's base (Kafka's
``maybeTruncateCheckpoint``); deleting a log drops its entry.

Choosing (Kafka's ``grabFilthiestCompactedLog``), pure functions of a
:class:`~broker.log.log_cleaning.CleaningView` and the clock, as :mod:`broker.log.retention`:

* the dirty section runs from the checkpoint (the first segment's base when there is none, or
  when it lies outside the log) to the first uncleanable offset: the lowest of the active
  segment's base, the high watermark, and the base of the first dirty segment holding a record
  younger than ``min.compaction.lag.ms``;
* the dirty ratio is the dirty section's bytes over the bytes of the log up to its end; a log is
  cleanable when it exceeds ``min.cleanable.dirty.ratio`` (strictly, as Kafka), or, KIP-354, when
  its oldest dirty segment's first batch is older than ``max.compaction.lag.ms`` and it has dirty
  bytes at all;
* the cleanable log with the highest ratio is cleaned next; a log whose pass failed unexpectedly
  is set aside until it is reopened (Kafka's uncleanable partitions, KIP-346).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint import CorruptCheckpoint, OffsetCheckpointFile
from broker.log.log import Log
from broker.log.log_cleaning import CleaningView
from broker.log.log_config import MAX_LONG
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from client.types import TopicPartition

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass(frozen=True)
class LogToClean:
    """A compacted log and its dirty section, as the manager measured it (Kafka's LogToClean)."""

    tp: TopicPartition
    log: Log
    view: CleaningView
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    #: the checkpoint lay outside the log and was reset to its start
    checkpoint_reset: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(view: CleaningView, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint was reset) of a log
    (Kafka's ``cleanableOffsets``)."""
    start = view.segments[0].base_offset
    first_dirty = start if checkpoint is None else checkpoint
    reset = not start <= first_dirty <= view.log_end_offset
    if reset:
        log.warning(
            "%s: cleaner checkpoint %d is outside [%d, %d]; cleaning from the start",
            view.dir,
            first_dirty,
            start,
            view.log_end_offset,
        )
        first_dirty = start
    bounds = [view.active.base_offset, view.high_watermark]
    lag_ms = view.config.min_compaction_lag_ms
    if lag_ms > 0:
        young = next(
            (
                s.base_offset
                for s in view.segments[:-1]
                if s.next_offset > first_dirty and s.largest_timestamp > now_ms - lag_ms
            ),
            None,
        )
        if young is not None:
            bounds.append(young)
    return first_dirty, min(bounds), reset and checkpoint is not None


def max_compaction_delay_ms(view: CleaningView, first_dirty: int, now_ms: int) -> int:
    """How far past ``max.compaction.lag.ms`` the oldest dirty segment's first batch is; 0 when
    none is (KIP-354's ``maxCompactionDelay``)."""
    stamps = [
        s.first_batch_timestamp
        for s in view.segments[:-1]
        if s.next_offset > first_dirty and s.first_batch_timestamp is not None and s.first_batch_timestamp > 0
    ]
    if not stamps:
        return 0
    clean_until = now_ms - view.config.max_compaction_lag_ms
    return max(0, clean_until - min(stamps))


def log_to_clean(
    tp: TopicPartition, lg: Log, view: CleaningView, checkpoint: int | None, now_ms: int
) -> LogToClean:
    first_dirty, first_uncleanable, reset = cleanable_offsets(view, checkpoint, now_ms)
    segments = view.segments[:-1]
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    dirty = 0
    if first_uncleanable > first_dirty:
        dirty = sum(
            s.size for s in segments if s.base_offset < first_uncleanable and s.next_offset > first_dirty
        )
    delay = (
        max_compaction_delay_ms(view, first_dirty, now_ms)
        if view.config.max_compaction_lag_ms < MAX_LONG
        else 0
    )
    return LogToClean(tp, lg, view, first_dirty, first_uncleanable, clean, dirty, delay > 0, reset)


class CleanerCheckpoints:
    """Every log dir's ``cleaner-offset-checkpoint``, cached; safe from any thread. A write error
    takes the dir offline (KIP-112). Never takes a log's or the log manager's lock, so it may be
    called under a log's lock (a truncation)."""

    def __init__(self, failure_channel: LogDirFailureChannel) -> None:
        self._failure_channel = failure_channel
        self._lock = threading.Lock()
        self._cache: dict[Path, dict[TopicPartition, int]] = {}

    def _entries(self, log_dir: Path) -> dict[TopicPartition, int]:
        entries = self._cache.get(log_dir)
        if entries is None:
            try:
                entries = OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT).read()
            except CorruptCheckpoint as e:
                log.warning("%s; cleaning every compacted log of the dir from its start", e)
                entries = {}
            except OSError as e:
                log.warning("cannot read %s: %s", log_dir / CLEANER_CHECKPOINT, e)
                entries = {}
            self._cache[log_dir] = entries
        return entries

    def get(self, log_dir: Path, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._entries(log_dir).get(tp)

    def all(self, log_dir: Path) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._entries(log_dir))

    def update(
        self, log_dir: Path, tp: TopicPartition, offset: int | None, keep: set[TopicPartition] | None = None
    ) -> None:
        """Set (None: remove) ``tp``'s entry and rewrite the file, keeping only the entries of
        ``keep`` (default: all others)."""
        if self._failure_channel.is_offline(log_dir):
            return
        with self._lock:
            entries = self._entries(log_dir)
            if keep is not None:
                for stale in set(entries) - keep - {tp}:
                    del entries[stale]
            if offset is None:
                entries.pop(tp, None)
            else:
                entries[tp] = offset
            with self._failure_channel.io_errors(
                log_dir, f"Error while writing {CLEANER_CHECKPOINT} in dir {log_dir}", reraise=False
            ):
                OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT).write(dict(entries))

    def maybe_truncate(self, log_dir: Path, tp: TopicPartition, offset: int) -> None:
        """Lower ``tp``'s entry to ``offset`` when above it (Kafka's maybeTruncateCheckpoint)."""
        current = self.get(log_dir, tp)
        if current is not None and current > offset:
            self.update(log_dir, tp, offset)


class LogCleanerManager:
    """The cleaner's choice of logs and its checkpoints. Called on the event loop."""

    def __init__(
        self,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        time_ms: Callable[[], int],
        failure_channel: LogDirFailureChannel,
    ) -> None:
        self._logs = logs
        self._time_ms = time_ms
        self.checkpoints = CleanerCheckpoints(failure_channel)
        self.in_progress: set[TopicPartition] = set()
        #: Kafka's uncleanable partitions (KIP-346): skipped while the log object is the same
        self.uncleanable: dict[TopicPartition, Log] = {}
        #: metrics: the highest dirty ratio and compaction delay seen at the last choice
        self.dirtiest_ratio = 0.0
        self.max_compaction_delay_ms = 0

    def grab_filthiest_compacted_log(self) -> LogToClean | None:
        """The cleanable compacted log with the highest dirty ratio, marked in progress; None
        when no log needs cleaning."""
        now = self._time_ms()
        candidates: list[LogToClean] = []
        delays = [0]
        for tp, lg in sorted(self._logs().items()):
            if not lg.config.compact or tp in self.in_progress or self.uncleanable.get(tp) is lg:
                continue
            with contextlib.suppress(KafkaStorageError):  # closed or offline: not cleaned
                view = lg.cleaning_view()
                measured = log_to_clean(tp, lg, view, self.checkpoints.get(lg.log_dir, tp), now)
                if measured.checkpoint_reset:
                    self.checkpoints.update(lg.log_dir, tp, measured.first_dirty_offset)
                if measured.needs_compaction_now:
                    delays.append(max_compaction_delay_ms(view, measured.first_dirty_offset, now))
                if measured.total_bytes > 0:
                    candidates.append(measured)
        self.dirtiest_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
        self.max_compaction_delay_ms = max(delays)
        cleanable = [
            c
            for c in candidates
            if (c.needs_compaction_now and c.cleanable_bytes > 0)
            or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
        ]
        if not cleanable:
            return None
        filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
        self.in_progress.add(filthiest.tp)
        return filthiest

    def done_cleaning(self, to_clean: LogToClean, end_offset: int | None) -> None:
        """The pass is over; a completed one moves the checkpoint to ``end_offset``."""
        self.in_progress.discard(to_clean.tp)
        if end_offset is not None:
            log_dir = to_clean.log.log_dir
            keep = {tp for tp, lg in self._logs().items() if lg.log_dir == log_dir}
            self.checkpoints.update(log_dir, to_clean.tp, end_offset, keep)

    def mark_uncleanable(self, to_clean: LogToClean) -> None:
        self.uncleanable[to_clean.tp] = to_clean.log
