"""A partition's replica log: ordered segments, appends, reads, truncation and rolling.

Kafka's ``kafka.log.Log`` (``UnifiedLog``) in miniature. The leader assigns offsets and stamps its
leader epoch into each batch header; a follower keeps the leader's offsets. Nothing here decodes
records on the produce or fetch path. Segments roll on size, age and full indexes. The other
mechanisms live beside it, as in Kafka: the settings in :mod:`broker.log.log_config`
(``LogConfig``), checking and stamping a record set in :mod:`broker.log.log_validator`
(``LogValidator``), opening and recovery in :mod:`broker.log.log_loader` (``LogLoader``),
retention in :mod:`broker.log.retention` (``deleteOldSegments``), producer snapshots in
:mod:`broker.log.producer_snapshots`, compaction's segment swap in :mod:`broker.log.log_cleaning`.

Producer state (KIP-98, docs/design.md "Idempotent producer"): a leader append checks every batch
with a producer id before offsets are assigned and answers a retried duplicate with the original
offsets (``LogAppendInfo.duplicate``), unwritten; every written batch is folded into the state.
Idle producers go in :meth:`Log.remove_expired_producers` (PeriodicProducerExpirationCheck).

A ``Log`` is thread-safe: one re-entrant lock serialises all but ``flush``'s fsyncs.

Durability (docs/design.md "Durability: flush and fsync rules"): a roll schedules Kafka's
"flush-log" job (``schedule_once``: the log manager's flusher thread), which fsyncs the rolled
segments (writing their index entries: docs/design.md "Open files at scale (issue 25)") and the
new segment's producer snapshot before the recovery point passes them; one that meets EMFILE
leaves the recovery point, and the periodic flush redoes it. A truncation is fsynced before it
returns (Kafka's is not) and the log manager checkpoints the lowered recovery point at once.

I/O errors (KIP-112, docs/design.md "Log dir failure", docs/guarantees.md "Disk faults"): an
OSError in any operation closes the log until a restart recovers it, reports the dir to the
:class:`LogDirFailureChannel` (every log in it goes offline) and surfaces as KAFKA_STORAGE_ERROR.
A failed append leaves no byte behind (:meth:`LogSegment.append`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log import retention
from broker.log.checkpoint import fsync_dir, fsync_file
from broker.log.file_cache import SegmentFileCache
from broker.log.leader_epoch import LeaderEpochFileCache
from broker.log.log_cleaning import LogCleaning
from broker.log.log_config import MAX_LONG, LogConfig
from broker.log.log_dir_failure import KafkaResourceError, KafkaStorageError, LogDirFailureChannel
from broker.log.log_loader import assign_epoch_from_batch, load_log
from broker.log.log_truncation import LogTruncation
from broker.log.log_validator import LogAppendInfo, assign_offsets, check_follower_offsets, validate_records
from broker.log.producer_snapshots import (
    delete_snapshots_below,
    rebuild_producer_state,
    snapshot_path,
    write_snapshot,
)
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import LogSegment
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import BatchHeader

log = logging.getLogger(__name__)


#: Kafka's ``Scheduler.scheduleOnce(name, job)``: run ``job`` once, off the caller's path
ScheduleOnce = Callable[[str, Callable[[], None]], object]


def run_now(name: str, job: Callable[[], None]) -> None:
    """The scheduler of a log opened on its own: the job runs at once, on the caller's thread."""
    job()


@dataclass(frozen=True)
class FetchDataInfo:
    fetch_offset: int
    records: bytes  # whole batches, possibly b""


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``"my.topic-name-3"`` -> ``("my.topic-name", 3)``; ValueError when it is not a partition dir."""
    topic, sep, partition = dir_name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


class Log(LogTruncation, LogCleaning):
    """Use :meth:`open`; the constructor only sets up an empty object."""

    def __init__(self, dir: Path, config: LogConfig, time_ms: Callable[[], int]) -> None:
        self.dir = Path(dir)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self._name = f"{self.topic}-{self.partition}"
        self.config = config
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._leo = 0
        self.log_start_offset = 0
        self.recovery_point = 0
        self.high_watermark = 0
        self.last_flush_ms = time_ms()
        self.leader_epoch_cache: LeaderEpochFileCache
        self.producer_state = ProducerStateManager()
        self._truncations = 0  # bumped by every truncation, so a concurrent flush never over-claims
        self._dir_dirty = False  # segment files created or removed since the last directory fsync
        self._closed = False
        self.log_dir = self.dir.parent
        #: where this log reports I/O errors (the log manager's, shared by every log; a log
        #: opened on its own gets one of its own): once its dir is offline, the log is closed
        self.failure_channel = LogDirFailureChannel()
        #: runs the "flush-log" job a roll schedules (the log manager's flusher thread)
        self.schedule_once: ScheduleOnce = run_now
        #: called, under the log's lock, after every truncation: the log manager checkpoints the
        #: recovery points of the log's dir at once (Kafka's LogManager.truncateTo)
        self.checkpoint_after_truncation: Callable[[Log], None] | None = None
        #: holds the segments' ``.log`` descriptors (the log manager's, shared by every log)
        self.file_cache = SegmentFileCache()

    # ------------------------------------------------------------------ opening (broker.log.log_loader)

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        time_ms: Callable[[], int],
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        failure_channel: LogDirFailureChannel | None = None,
        file_cache: SegmentFileCache | None = None,
    ) -> Log:
        self = cls(dir, config, time_ms)
        self.failure_channel = failure_channel or self.failure_channel
        self.file_cache = file_cache or self.file_cache
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            loaded = load_log(
                self.dir, config, time_ms, recovery_point, log_start_offset, clean_shutdown, self.file_cache
            )
            self._segments = loaded.segments
            self._bases = [segment.base_offset for segment in loaded.segments]
            self._leo = self.recovery_point = loaded.segments[-1].next_offset
            self.log_start_offset = self.high_watermark = loaded.log_start_offset
            self.leader_epoch_cache = loaded.leader_epoch_cache
            self.producer_state = loaded.producer_state
            self._dir_dirty = loaded.dir_dirty
        return self

    # ------------------------------------------------------------------ state

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.index_interval_bytes = config.index_interval_bytes

    def _check_open(self) -> None:
        if self.failure_channel.is_offline(self.log_dir):
            raise KafkaStorageError(f"log dir {self.log_dir} of {self.topic}-{self.partition} is offline")
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    @property
    def is_offline(self) -> bool:
        """True once an I/O error took this log's dir offline."""
        return self.failure_channel.is_offline(self.log_dir)

    def _io(self, what: str, resource_retriable: bool = True) -> contextlib.AbstractContextManager[None]:
        """Turn an OSError into KAFKA_STORAGE_ERROR, taking this log's dir (and the log) offline;
        EMFILE and the like only fail the operation, unless it cannot be left half done
        (``resource_retriable`` False; broker/log/log_dir_failure.py)."""
        return self.failure_channel.io_errors(
            self.log_dir,
            f"Error while {what} for {self.topic}-{self.partition} in dir {self.log_dir}",
            resource_retriable=resource_retriable,
        )

    # ------------------------------------------------------------------ appending

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> LogAppendInfo:
        """Validate, check producer sequences, assign offsets from the LEO, stamp
        ``leader_epoch``, write. A retried duplicate is not written: the answer carries the
        original offsets and ``duplicate=True`` (KIP-98)."""
        batches = validate_records(records, self.config, self._name, as_leader=True)
        with self._lock:
            self._check_open()
            original = self.producer_state.check_append(header for _, header in batches)
            if original is not None:
                log.debug(
                    "%s: duplicate batch of offsets %d..%d not appended again",
                    self.dir,
                    original.first_offset,
                    original.last_offset,
                )
                return LogAppendInfo.for_duplicate(original)
            buf, stamped = assign_offsets(records, batches, self._leo, leader_epoch)
            with self._io("appending to the log"):
                if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                    self.leader_epoch_cache.assign(leader_epoch, stamped[0][1].base_offset)
                return self._append(buf, stamped)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs."""
        batches = validate_records(records, self.config, self._name, as_leader=False)
        with self._lock:
            self._check_open()
            check_follower_offsets(batches, self._leo, self._name)
            with self._io("appending to the log"):
                for _, header in batches:
                    assign_epoch_from_batch(self.leader_epoch_cache, header)
                return self._append(records, batches)

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """Record (epoch, start offset) in the leader epoch cache (a new leader's first step)."""
        with self._lock:
            self._check_open()
            with self._io("writing the leader epoch checkpoint"):
                self.leader_epoch_cache.assign(epoch, start_offset)

    def _append(
        self, buf: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]]
    ) -> LogAppendInfo:
        segment = self._maybe_roll(len(buf), batches[0][1].base_offset, batches[-1][1].last_offset)
        segment.append(buf, batches)
        self._leo = segment.next_offset
        for _, header in batches:
            self.producer_state.update(header)
        info = LogAppendInfo.of_written(batches, len(buf))
        if self._leo - self.recovery_point >= self.config.flush_interval_messages:
            self.flush()
        return info

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        now = self._time_ms()
        reason = segment.roll_reason(
            size, last_offset, now, self.config.segment_bytes, self.config.max_segment_ms
        )
        if reason is None:
            return segment
        return self._roll(max(self._leo, first_offset), reason)

    def _roll(self, base_offset: int, reason: str) -> LogSegment:
        active = self._segments[-1]
        replaced = active.is_empty  # an empty active segment is replaced, not kept before the new one
        if replaced and active.base_offset == base_offset:
            return active
        # The new segment first: EMFILE creating it leaves the log as it was, never segmentless.
        kwargs = self.config.segment_kwargs(self._time_ms, self.file_cache)
        segment = LogSegment.create(self.dir, base_offset, **kwargs)
        if replaced:
            self._segments.pop()
            self._bases.pop()
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        if replaced:
            active.delete()  # a crash before this leaves an empty non-last segment: recovery ends the log there
        # No batch lies in [LEO, base_offset): the state is the state as of the new segment's base.
        write_snapshot(self.dir, self.producer_state, base_offset)
        log.info("%s: rolled a new segment at offset %d (%s)", self.dir, base_offset, reason)
        # Kafka's roll: scheduleOnce("flush-log") flushes the old segments, off the append path.
        self.schedule_once("flush-log", lambda: self._flush_rolled(base_offset))
        self._check_open()  # a flush that ran at once and failed took the dir offline: append nothing
        return segment

    def _flush_rolled(self, base_offset: int) -> None:
        """The roll's "flush-log" job (:meth:`flush_rolled`); it never raises, since it runs
        inside the append (a log opened on its own) or on the flusher thread."""
        try:
            self.flush_rolled(base_offset)
        except KafkaStorageError as e:  # the dir went offline (the channel has it) or the log closed
            log.info("%s: no flush after the roll at %d: %s", self.dir, base_offset, e)
        except KafkaResourceError as e:  # EMFILE: the recovery point stays; the flush scheduler retries
            log.warning(
                "%s: no flush after the roll at %d, left to the next flush: %s", self.dir, base_offset, e
            )

    def flush_rolled(self, base_offset: int) -> None:
        """fsync the producer snapshot at ``base_offset`` (a roll's) and every segment below it,
        then move the recovery point there (:meth:`flush`). The roll's job, and the log
        manager's periodic catch-up for one that failed."""
        with self._io("flushing a rolled segment"):
            if not self._closed:
                fsync_file(snapshot_path(self.dir, base_offset))
        self.flush(base_offset)

    def roll(self) -> None:
        """Start a new active segment at the LEO (nothing happens when the active one is empty)."""
        with self._lock:
            self._check_open()
            with self._io("rolling a segment"):
                self._roll(self._leo, "requested")

    # ------------------------------------------------------------------ reading

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset``, up to ``max_bytes`` (at least one
        batch when ``min_one_message``), and only batches wholly below ``max_offset`` (the HW for
        consumers). Data comes from one segment per call, as in Kafka."""
        with self._lock:
            self._check_open()
            with self._io("reading the log"):
                leo = self._leo
                if start_offset < self.log_start_offset or start_offset > leo:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {start_offset} is outside [{self.log_start_offset}, {leo}] "
                        f"of {self.topic}-{self.partition}",
                    )
                if start_offset == leo or (max_offset is not None and start_offset >= max_offset):
                    return FetchDataInfo(start_offset, b"")
                i = max(0, bisect_right(self._bases, start_offset) - 1)
                while i < len(self._segments):
                    data = self._segments[i].read(start_offset, max_bytes, max_offset, min_one_message)
                    if data is not None:
                        return FetchDataInfo(start_offset, data)
                    i += 1
                return FetchDataInfo(start_offset, b"")

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or above the log start offset whose
        timestamp is >= ``timestamp``; None when there is none."""
        with self._lock:
            self._check_open()
            with self._io("searching the time index"):
                for segment in self._segments:
                    starting = max(self.log_start_offset, segment.base_offset)
                    if segment.max_timestamp < timestamp or segment.next_offset <= starting:
                        continue
                    found = segment.find_offset_by_timestamp(timestamp, starting)
                    if found is not None:
                        return found
                return None

    # ------------------------------------------------------------------ offsets

    def update_high_watermark(self, offset: int) -> int:
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self._leo)
            return self.high_watermark

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Move the log start offset forward (never past the HW); whole segments below it go
        at the next :meth:`delete_old_segments`."""
        with self._lock:
            if offset <= self.log_start_offset:
                return
            if offset > self.high_watermark:
                raise KafkaError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"cannot move the log start offset of {self.topic}-{self.partition} to {offset}, "
                    f"above the high watermark {self.high_watermark}",
                )
            log.info("%s: log start offset %d -> %d", self.dir, self.log_start_offset, offset)
            self.log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)

    # ------------------------------------------------------------------ retention (broker.log.retention)

    def delete_old_segments(self) -> int:
        """Retention: delete whole segments that are older than retention.ms, beyond
        retention.bytes, or wholly below the log start offset; only segments wholly below the
        high watermark, never an empty active segment. Returns how many were deleted."""
        with self._lock:
            self._check_open()
            with self._io("deleting old segments"):
                checks = retention.retention_checks(
                    self.config, self._time_ms, lambda: self.size_in_bytes, lambda: self.log_start_offset
                )
                return sum(self._delete_segments(predicate, reason) for predicate, reason in checks)

    def _delete_segments(self, predicate: retention.Predicate, reason: str) -> int:
        doomed = retention.deletable_segments(self._segments, self._leo, self.high_watermark, predicate)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(self._leo, "every segment is due for deletion")
        retention.remove_segments(self._segments, self._bases, doomed, self.dir, reason)
        self._dir_dirty = True
        if self._segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self._segments[0].base_offset
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        # Snapshots go with their segments; the one at the first remaining segment's base holds
        # every producer of the deleted ones (KIP-360: producer state outlives retention).
        delete_snapshots_below(self.dir, self._segments[0].base_offset)
        return len(doomed)

    # ------------------------------------------------------------------ producer state (producer_snapshots)

    def take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end offset (the log manager does it at clean
        shutdown, so the next start replays nothing)."""
        with self._lock:
            self._check_open()
            with self._io("writing a producer snapshot"):
                write_snapshot(self.dir, self.producer_state, self._leo)

    def _load_producer_state(self) -> None:
        """Rebuild the producer state from the newest snapshot at or below the log end offset."""
        self.producer_state, deleted = rebuild_producer_state(
            self.dir, self._segments, self._leo, self._time_ms(), self.config.producer_id_expiration_ms
        )
        self._dir_dirty = self._dir_dirty or deleted

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers idle for ``producer.id.expiration.ms`` (Kafka's
        Log.removeExpiredProducers); the next snapshot no longer holds them. Returns how many."""
        with self._lock:
            expired = self.producer_state.remove_expired_producers(
                now_ms, self.config.producer_id_expiration_ms
            )
        if expired:
            log.debug("%s: expired %d idle producer id(s)", self.dir, len(expired))
        return len(expired)

    # ------------------------------------------------------------------ durability and lifecycle

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding data below ``offset`` (default: the LEO) that may be dirty,
        and move the recovery point there."""
        with self._lock:
            self._check_open()
            target = self._leo if offset is None else min(offset, self._leo)
            dirty: list[LogSegment] = []
            if target > self.recovery_point:
                for i, segment in enumerate(self._segments):
                    following = self._bases[i + 1] if i + 1 < len(self._bases) else MAX_LONG
                    if segment.base_offset < target and following > self.recovery_point:
                        dirty.append(segment)
            generation = self._truncations
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            with self._io("flushing the log"):
                for segment in dirty:
                    segment.flush()
                if dir_dirty:
                    fsync_dir(self.dir)
        except KafkaError:
            with self._lock:  # not fsynced (EMFILE opening the dir): the next flush does it
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        with self._lock:
            if generation == self._truncations and target > self.recovery_point:
                self.recovery_point = min(target, self._leo)
            self.last_flush_ms = self._time_ms()

    def close(self, write_indexes: bool = True) -> None:
        """Close every segment, first writing unflushed index entries unless the dir is offline."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                segment.close(write_indexes=write_indexes and not self.is_offline)

    def delete(self) -> None:
        """Close the log and remove its directory."""
        with self._lock:
            self.close(write_indexes=False)
            shutil.rmtree(self.dir, ignore_errors=True)
            log.info("%s: deleted the log", self.dir)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self._leo}, "
            f"hw={self.high_watermark}, segments={len(self._segments)})"
        )
