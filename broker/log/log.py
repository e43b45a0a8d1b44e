"""A partition's replica log: ordered segments, offsets, recovery and retention (SPEC 5.3 Storage).

Kafka's ``kafka.log.Log`` in miniature. The leader assigns offsets and stamps its leader epoch
into each batch header (both fields lie outside the CRC'd region); a follower keeps the
leader's offsets. Nothing here decodes records on the produce or fetch path: validation walks
batch headers and checks CRCs.

On open, stray temporary files are removed; after an unclean shutdown every segment from the
one holding the recovery point onward is re-scanned and a torn or corrupt tail truncated
(and logged). Retention deletes whole segments, by age and by size, never at or above the
high watermark, and advances the log start offset. Segments roll on size, age and full
indexes.

Producer state (SPEC 5.4 "Idempotent producer", :mod:`broker.log.producer_state`): a leader
append checks every batch that carries a producer id before offsets are assigned and answers a
retried duplicate with the original offsets (``LogAppendInfo.duplicate``) without writing it;
every written batch, leader or follower, is folded into the state, so a follower that becomes
leader knows the last 5 batches of each producer. As in Kafka, ``<offset>.snapshot`` files hold
the state as of an offset: one is written when a segment rolls and one at clean shutdown. On
open and after a truncation the state is the newest snapshot at or below the log end offset
plus a replay of the batch headers after it (never a record decode); snapshots above the log
end offset are deleted, and retention deletes those below the first segment. Producers idle for
``producer.id.expiration.ms`` are dropped after each load and by the log manager's periodic
:meth:`Log.remove_expired_producers` (Kafka's PeriodicProducerExpirationCheck).

A ``Log`` is safe to call from several threads: one re-entrant lock serialises appends, reads,
truncation and retention; ``flush`` does its fsyncs outside that lock.

I/O errors (KIP-112, docs/design.md "Log dir failure"): any OSError while appending, reading,
rolling, truncating, flushing or writing a snapshot or the epoch checkpoint closes the log for
good (until the broker restarts and recovery runs), reports the log dir to the
:class:`LogDirFailureChannel`, which takes every log in that dir offline, and surfaces as
KAFKA_STORAGE_ERROR. A failed append leaves no byte behind (:meth:`LogSegment.append`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint import CorruptCheckpoint, fsync_dir
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from broker.log.producer_state import CorruptSnapshot, ProducerStateManager
from broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_name
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import (
    BatchHeader,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
)

log = logging.getLogger(__name__)

STRAY_SUFFIXES = (".tmp", ".swap", ".deleted", ".cleaned")
SNAPSHOT_SUFFIX = ".snapshot"
SEGMENT_STEM = re.compile(r"^\d{20}$")
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
            "producer_id_expiration_ms": self.producer_id_expiration_ms >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"log config {name}={getattr(self, name)} is out of range")


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: (
        int  # the last offset of the batch holding the max timestamp (Kafka's shallow offset)
    )
    num_records: int
    valid_bytes: int
    batches: list[BatchHeader]  # as written: offsets assigned, leader epoch stamped
    #: True when the record set was a retried duplicate of a batch already in the log (SPEC 5.4):
    #: nothing was written and first/last offset are the original batch's.
    duplicate: bool = False


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


class Log:
    """Use :meth:`open`; the constructor only sets up an empty object."""

    def __init__(self, dir: Path, config: LogConfig, time_ms: Callable[[], int]) -> None:
        self.dir = Path(dir)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
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

    # ------------------------------------------------------------------ opening and recovery

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
    ) -> Log:
        self = cls(dir, config, time_ms)
        if failure_channel is not None:
            self.failure_channel = failure_channel
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._load(recovery_point, log_start_offset, clean_shutdown)
        return self

    def _segment_kwargs(self) -> dict:
        return {
            "index_interval_bytes": self.config.index_interval_bytes,
            "max_index_bytes": self.config.segment_index_bytes,
            "time_ms": self._time_ms,
        }

    def _remove_stray_files(self) -> list[int]:
        """Delete temporary and orphaned files; return the base offsets of the segments present."""
        bases: set[int] = set()
        index_files: list[Path] = []
        for path in self.dir.iterdir():
            if not path.is_file():
                continue
            if path.name.endswith(STRAY_SUFFIXES):
                log.warning("%s: deleting stray file %s", self.dir, path.name)
                path.unlink()
            elif path.suffix == LOG_SUFFIX and SEGMENT_STEM.match(path.stem):
                bases.add(int(path.stem))
            elif path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and SEGMENT_STEM.match(path.stem):
                index_files.append(path)
        for path in index_files:
            if int(path.stem) not in bases:
                log.warning("%s: deleting index %s, which has no log file", self.dir, path.name)
                path.unlink()
        return sorted(bases)

    def _open_epoch_cache(self) -> bool:
        """Load the leader epoch cache; on a corrupt file start empty and return False (the caller
        then re-scans every segment, which rebuilds the cache from the batches' epochs)."""
        path = self.dir / LEADER_EPOCH_CHECKPOINT
        try:
            self.leader_epoch_cache = LeaderEpochFileCache(path)
            return True
        except CorruptCheckpoint as e:
            log.warning("%s; rebuilding the leader epoch cache from the segments", e)
            path.unlink()
            self.leader_epoch_cache = LeaderEpochFileCache(path)
            return False

    def _assign_epoch_from_batch(self, header: BatchHeader) -> None:
        epoch = header.partition_leader_epoch
        if epoch >= 0 and epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(epoch, header.base_offset)

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        bases = self._remove_stray_files()
        if not self._open_epoch_cache():
            recovery_point, clean_shutdown = 0, False
        segments = [LogSegment(self.dir, base, **self._segment_kwargs()) for base in bases]
        first_unflushed = len(segments)
        if not clean_shutdown:
            first_unflushed = next(
                (i for i in range(len(segments)) if i + 1 == len(segments) or bases[i + 1] > recovery_point),
                len(segments),
            )
        for segment in segments[:first_unflushed]:
            problem = segment.load()
            if problem is not None:
                log.warning("%s; rebuilding the segment's indexes", problem)
                dropped = segment.recover(self._assign_epoch_from_batch)
                if dropped:
                    log.warning("%s: truncated %d invalid bytes at its end", segment.log_path, dropped)
        recovered = segments[first_unflushed:]
        for i, segment in enumerate(recovered):
            log.info("%s: recovering unflushed segment %s", self.dir, segment.log_path.name)
            dropped = segment.recover(self._assign_epoch_from_batch)
            if dropped:
                later = recovered[i + 1 :]
                log.warning(
                    "%s: torn or corrupt tail, dropped %d bytes after offset %d; deleting %d later segment(s)",
                    segment.log_path,
                    dropped,
                    segment.next_offset,
                    len(later),
                )
                for doomed in later:
                    doomed.delete()
                    segments.remove(doomed)
                recovered = recovered[: i + 1]
                break
        if segments and segments[-1].next_offset < log_start_offset:
            log.warning(
                "%s: log end offset %d is below the log start offset %d; deleting all segments",
                self.dir,
                segments[-1].next_offset,
                log_start_offset,
            )
            for segment in segments:
                segment.delete()
            segments, recovered = [], []
        if not segments:
            segments = [LogSegment.create(self.dir, log_start_offset, **self._segment_kwargs())]
            self._dir_dirty = True
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        for segment in recovered:
            segment.flush()
        if recovered:
            fsync_dir(self.dir)
        self.recovery_point = self._leo
        self.high_watermark = self.log_start_offset
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._load_producer_state()
        log.info(
            "%s: loaded %d segment(s), log start offset %d, log end offset %d, %d producer(s)%s",
            self.dir,
            len(segments),
            self.log_start_offset,
            self._leo,
            len(self.producer_state),
            "" if clean_shutdown else f", recovered {len(recovered)} segment(s)",
        )

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

    def _io(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Turn an OSError into KAFKA_STORAGE_ERROR, taking this log's dir (and the log) offline."""
        return self.failure_channel.io_errors(
            self.log_dir, f"Error while {what} for {self.topic}-{self.partition} in dir {self.log_dir}"
        )

    # ------------------------------------------------------------------ appending

    def _validate(
        self, records: bytes | bytearray | memoryview, as_leader: bool
    ) -> list[tuple[int, BatchHeader]]:
        if not records:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"empty record set for {self.topic}-{self.partition}")
        batches = list(iter_batches(records))  # CorruptRecordError is KafkaError(CORRUPT_MESSAGE)
        if not as_leader:
            return batches
        for pos, header in batches:
            if header.size > self.config.max_message_bytes:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch at byte {pos} is {header.size} bytes, max.message.bytes is {self.config.max_message_bytes}",
                )
            if header.size > self.config.segment_bytes:
                raise KafkaError(
                    ErrorCode.RECORD_LIST_TOO_LARGE,
                    f"batch at byte {pos} is {header.size} bytes, segment.bytes is {self.config.segment_bytes}",
                )
            if header.record_count <= 0 or header.record_count != header.last_offset_delta + 1:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"batch at byte {pos} has {header.record_count} records but lastOffsetDelta {header.last_offset_delta}",
                )
        return batches

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> LogAppendInfo:
        """Validate, check producer sequences, assign offsets from the LEO, stamp
        ``leader_epoch``, write. A retried duplicate is not written: the answer carries the
        original offsets and ``duplicate=True`` (SPEC 5.4)."""
        batches = self._validate(records, as_leader=True)
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
                return LogAppendInfo(
                    first_offset=original.first_offset,
                    last_offset=original.last_offset,
                    max_timestamp=-1,
                    offset_of_max_timestamp=original.last_offset,
                    num_records=original.last_offset - original.first_offset + 1,
                    valid_bytes=0,
                    batches=[],
                    duplicate=True,
                )
            buf = bytearray(records)
            offset = self._leo
            stamped: list[tuple[int, BatchHeader]] = []
            for pos, header in batches:
                set_base_offset(buf, pos, offset)
                set_partition_leader_epoch(buf, pos, leader_epoch)
                header = dataclasses.replace(header, base_offset=offset, partition_leader_epoch=leader_epoch)
                stamped.append((pos, header))
                offset = header.next_offset
            with self._io("appending to the log"):
                if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                    self.leader_epoch_cache.assign(leader_epoch, stamped[0][1].base_offset)
                return self._append(buf, stamped)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs."""
        batches = self._validate(records, as_leader=False)
        with self._lock:
            self._check_open()
            expected = self._leo
            for pos, header in batches:
                if header.base_offset < expected:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR,
                        f"non-monotonic offsets appending to {self.topic}-{self.partition}: batch at byte {pos} "
                        f"starts at {header.base_offset}, expected at least {expected}",
                    )
                expected = header.next_offset
            with self._io("appending to the log"):
                for _, header in batches:
                    self._assign_epoch_from_batch(header)
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
        first, last = batches[0][1], batches[-1][1]
        segment = self._maybe_roll(len(buf), first.base_offset, last.last_offset)
        segment.append(buf, batches)
        self._leo = segment.next_offset
        max_timestamp, offset_of_max = -1, first.base_offset
        update_producer = self.producer_state.update
        for _, header in batches:
            update_producer(header)
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        info = LogAppendInfo(
            first_offset=first.base_offset,
            last_offset=last.last_offset,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            num_records=sum(h.record_count for _, h in batches),
            valid_bytes=len(buf),
            batches=[h for _, h in batches],
        )
        if self._leo - self.recovery_point >= self.config.flush_interval_messages:
            self.flush()
        return info

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        now = self._time_ms()
        reason = None
        if segment.size + size > self.config.segment_bytes:
            reason = f"size {segment.size} + {size} bytes > segment.bytes {self.config.segment_bytes}"
        elif (
            segment.size > 0
            and segment.rolling_base_ms is not None
            and now - segment.rolling_base_ms > self.config.segment_ms
        ):
            reason = f"age {now - segment.rolling_base_ms} ms > segment.ms {self.config.segment_ms}"
        elif segment.indexes_full:
            reason = "its index is full"
        elif not segment.can_hold_offset(last_offset):
            reason = f"offset {last_offset} does not fit a relative offset"
        if reason is None:
            return segment
        return self._roll(max(self._leo, first_offset), reason)

    def _roll(self, base_offset: int, reason: str) -> LogSegment:
        active = self._segments[-1]
        if active.is_empty:
            if active.base_offset == base_offset:
                return active
            active.delete()
            self._segments.pop()
            self._bases.pop()
        segment = LogSegment.create(self.dir, base_offset, **self._segment_kwargs())
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        # No batch lies in [LEO, base_offset): the state is the state as of the new segment's base.
        self._write_producer_snapshot(base_offset)
        log.info("%s: rolled a new segment at offset %d (%s)", self.dir, base_offset, reason)
        return segment

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

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (a batch straddling it goes whole)."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.dir} to negative offset {offset}")
        with self._lock:
            self._check_open()
            with self._io("truncating the log"):
                if offset >= self._leo:
                    # No record to remove, but an epoch entry starting at the LEO (we led an epoch and
                    # wrote nothing in it) conflicts with the new leader: drop it, as Kafka does, or
                    # KIP-279's "truncate and ask again" would ask about that epoch forever.
                    self.leader_epoch_cache.truncate_from_end(self._leo)
                    return
                if offset < self._segments[0].base_offset:
                    self.truncate_fully_and_start_at(offset)
                    return
                old_leo = self._leo
                while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                    self._segments.pop().delete()
                    self._bases.pop()
                    self._dir_dirty = True
                self._segments[-1].truncate_to(offset)
                self._leo = self._segments[-1].next_offset
                self._after_truncation()
                self._load_producer_state()
                log.info("%s: truncated from log end offset %d to %d", self.dir, old_leo, self._leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and start an empty log at ``offset``."""
        with self._lock:
            self._check_open()
            with self._io("truncating the log"):
                for segment in self._segments:
                    segment.delete()
                segment = LogSegment.create(self.dir, offset, **self._segment_kwargs())
                self._segments, self._bases = [segment], [offset]
                self._dir_dirty = True
                self._leo = offset
                self.log_start_offset = offset
                self.leader_epoch_cache.clear()
                self._after_truncation()
                for _, path in self._snapshot_files():
                    path.unlink(missing_ok=True)
                self.producer_state.clear(offset)
                self.high_watermark = offset
                self.recovery_point = offset
                log.info("%s: truncated fully, the log now starts at offset %d", self.dir, offset)

    def _after_truncation(self) -> None:
        self._truncations += 1
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.log_start_offset = min(self.log_start_offset, self._leo)
        self.high_watermark = min(self.high_watermark, self._leo)
        self.recovery_point = min(self.recovery_point, self._leo)

    # ------------------------------------------------------------------ retention

    def delete_old_segments(self) -> int:
        """Retention: delete whole segments that are older than retention.ms, beyond
        retention.bytes, or wholly below the log start offset; only segments wholly below the
        high watermark, never an empty active segment. Returns how many were deleted."""
        with self._lock:
            self._check_open()
            with self._io("deleting old segments"):
                deleted = 0
                if self.config.retention_ms >= 0:
                    now = self._time_ms()
                    retention_ms = self.config.retention_ms
                    deleted += self._delete_segments(
                        lambda segment, _next: now - segment.largest_timestamp > retention_ms, "retention.ms"
                    )
                if self.config.retention_bytes >= 0:
                    excess = self.size_in_bytes - self.config.retention_bytes

                    def beyond_size(segment: LogSegment, _next: LogSegment | None) -> bool:
                        nonlocal excess
                        if excess - segment.size >= 0:
                            excess -= segment.size
                            return True
                        return False

                    deleted += self._delete_segments(beyond_size, "retention.bytes")
                deleted += self._delete_segments(
                    lambda _segment, following: (
                        following is not None and following.base_offset <= self.log_start_offset
                    ),
                    "log start offset",
                )
                return deleted

    def _delete_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> int:
        doomed: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            following = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = following.base_offset if following is not None else self._leo
            last_and_empty = following is None and segment.is_empty
            if self.high_watermark >= upper and not last_and_empty and predicate(segment, following):
                doomed.append(segment)
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(self._leo, "every segment is due for deletion")
        for segment in doomed:
            self._segments.remove(segment)
            self._bases.remove(segment.base_offset)
            segment.delete()
            log.info(
                "%s: deleted segment %s (%d bytes, next offset %d) by %s",
                self.dir,
                segment.log_path.name,
                segment.size,
                segment.next_offset,
                reason,
            )
        self._dir_dirty = True
        if self._segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self._segments[0].base_offset
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        # Snapshots go with their segments; the one at the first remaining segment's base holds
        # every producer of the deleted ones (KIP-360: producer state outlives retention).
        for offset, path in self._snapshot_files():
            if offset < self._segments[0].base_offset:
                path.unlink(missing_ok=True)
        return len(doomed)

    # ------------------------------------------------------------------ producer state (SPEC 5.4)

    def _snapshot_files(self) -> list[tuple[int, Path]]:
        """(offset, path) of every ``<offset>.snapshot`` file, by offset."""
        found = []
        for path in self.dir.glob("*" + SNAPSHOT_SUFFIX):
            if SEGMENT_STEM.match(path.stem):
                found.append((int(path.stem), path))
        return sorted(found)

    def _write_producer_snapshot(self, offset: int) -> None:
        """Write the state as ``<offset>.snapshot`` (temp file, then rename). Not fsynced, as in
        Kafka's roll path: a snapshot a crash tore fails its CRC and an older one is used. A
        failed write removes the temp file and raises (the caller's ``_io`` takes the dir
        offline, as Kafka does for any IOException in a log dir)."""
        self.producer_state.map_end_offset = offset
        path = self.dir / (segment_name(offset) + SNAPSHOT_SUFFIX)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(self.producer_state.to_bytes())
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end offset (the log manager does it at clean
        shutdown, so the next start replays nothing)."""
        with self._lock:
            self._check_open()
            with self._io("writing a producer snapshot"):
                self._write_producer_snapshot(self._leo)

    def _load_producer_state(self) -> None:
        """Rebuild the producer state: the newest valid snapshot at or below the log end offset
        (snapshots above it describe batches no longer in the log and are deleted), then every
        batch header after it. Without a snapshot: every batch header from the first segment."""
        state: ProducerStateManager | None = None
        for offset, path in reversed(self._snapshot_files()):
            if offset > self._leo:
                path.unlink(missing_ok=True)
                self._dir_dirty = True
                continue
            if state is not None:
                continue
            try:
                state = ProducerStateManager.from_bytes(path.read_bytes())
            except (OSError, CorruptSnapshot) as e:
                log.warning("%s: ignoring producer snapshot %s: %s", self.dir, path.name, e)
                path.unlink(missing_ok=True)
                continue
            state.map_end_offset = offset
        if state is None:
            state = ProducerStateManager(self._segments[0].base_offset)
        start = state.map_end_offset
        if start < self._leo:
            for segment in self._segments[max(0, bisect_right(self._bases, start) - 1) :]:
                for header in segment.batch_headers(start):
                    state.update(header)
        state.map_end_offset = self._leo
        state.remove_expired_producers(self._time_ms(), self.config.producer_id_expiration_ms)
        self.producer_state = state

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
        with self._io("flushing the log"):
            for segment in dirty:
                segment.flush()
            if dir_dirty:
                fsync_dir(self.dir)
        with self._lock:
            if generation == self._truncations and target > self.recovery_point:
                self.recovery_point = min(target, self._leo)
            self.last_flush_ms = self._time_ms()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close the log and remove its directory."""
        with self._lock:
            self.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            log.info("%s: deleted the log", self.dir)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self._leo}, "
            f"hw={self.high_watermark}, segments={len(self._segments)})"
        )
