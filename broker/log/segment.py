"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex`` (Kafka's LogSegment).

The ``.log`` file is a plain concatenation of RecordBatch v2 batches, exactly as Kafka writes
them. The segment only walks batch headers (:func:`client.protocol.records.parse_header`); it
decodes records solely to answer a timestamp lookup. Appends use ``os.write`` on an O_APPEND
descriptor, reads use ``os.pread``. An append is all or nothing: a write that fails part way is
cut back off the file (docs/design.md "Log dir failure").

Open files (docs/design.md "Open files at scale (issue 25)"): the ``.log`` descriptor, active
segment included, comes from the broker-wide :class:`broker.log.file_cache.SegmentFileCache`
(an LRU bounded by ``log.segment.open.files.max``), pinned for each I/O call; the indexes hold no
descriptor (:mod:`broker.log.index`): :meth:`flush` writes their new entries and fsyncs all three.

A segment is not thread-safe by itself: the owning :class:`broker.log.log.Log` serialises
appends, reads and truncations. Only ``flush`` may run concurrently with them (a small lock
keeps it from racing ``close``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from broker.log.file_cache import SegmentFileCache
from broker.log.index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex, write_all
from broker.log.segment_reads import SegmentReads
from client.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    parse_header,
    valid_prefix,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
RECOVER_CHUNK = 8 * 1024 * 1024
NO_TIMESTAMP = -1
#: a :func:`segment_name` stem (of a segment, index or producer snapshot file)
SEGMENT_STEM = re.compile(r"^\d{20}$")


def segment_name(base_offset: int) -> str:
    """Kafka's file name stem: the base offset, zero-padded to 20 digits."""
    return f"{base_offset:020d}"


class SegmentUnwritable(OSError):
    """A failed append could not be undone (the truncate failed too): the segment refuses
    every later append, so nothing is ever written after its torn bytes."""


class LogSegment(SegmentReads):
    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        time_ms: Callable[[], int],
        suffix: str = "",
        file_cache: SegmentFileCache | None = None,
        create: bool = False,
    ) -> None:
        """The segment at ``base_offset`` (each file name ending in ``suffix``: the cleaner's
        ``.cleaned``), its ``.log`` opened through ``file_cache`` (default: a cache of its own).
        The indexes are read now; the in-memory state is not derived yet: call :meth:`load`
        (trusting the files) or :meth:`recover`. ``create`` (:meth:`create`) creates the three
        files, emptying the indexes."""
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._time_ms = time_ms
        stem = segment_name(base_offset)
        cache = file_cache if file_cache is not None else SegmentFileCache(1)
        self._file = cache.handle(self.dir / (stem + LOG_SUFFIX + suffix))
        try:  # out of descriptors (EMFILE) half way: close what was opened, or it leaks for good
            if create:
                self._file.create()
            stat = os.stat(self._file.path)
            self.index = OffsetIndex(
                self.dir / (stem + INDEX_SUFFIX + suffix), base_offset, max_index_bytes, create=create
            )
            self.time_index = TimeIndex(
                self.dir / (stem + TIME_INDEX_SUFFIX + suffix), base_offset, max_index_bytes, create=create
            )
        except BaseException:
            self._file.close()
            raise
        self._size = stat.st_size
        self._last_modified_ms = stat.st_mtime_ns // 1_000_000
        self._next_offset = base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index = 0
        self._rolling_base_ms: int | None = None
        self._io_lock = threading.Lock()
        self._closed = False
        self._torn: str | None = None  # why appends are refused (a failed append left bytes behind)

    @classmethod
    def create(cls, dir: Path, base_offset: int, **kwargs) -> LogSegment:
        """A new, empty segment; leftovers of an old segment with the same base are discarded."""
        segment = cls(dir, base_offset, create=True, **kwargs)
        if segment._size:
            segment._truncate_files(0)
        return segment

    @property
    def log_path(self) -> Path:
        return self._file.path

    @log_path.setter
    def log_path(self, path: Path) -> None:
        """The cleaner renames the files (an open descriptor follows; a later open uses ``path``)."""
        self._file.path = Path(path)

    def _pread(self, size: int, position: int) -> bytes:
        with self._file.pinned() as fd:
            return os.pread(fd, size, position)

    # ------------------------------------------------------------------ state

    @property
    def size(self) -> int:
        return self._size

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def next_offset(self) -> int:
        """The offset after the last batch in this segment (its base offset when empty)."""
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment, -1 when there is none."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention by time compares: the max timestamp, or the last write time without one."""
        return self._max_timestamp if self._max_timestamp >= 0 else self._last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return self._last_modified_ms

    @last_modified_ms.setter
    def last_modified_ms(self, ms: int) -> None:
        """Kafka's ``lastModified_=``: a cleaned segment keeps its sources' time (the file's too)."""
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))
        self._last_modified_ms = ms

    @property
    def rolling_base_ms(self) -> int | None:
        """When this segment's age started counting (first append); None while empty."""
        return self._rolling_base_ms

    @property
    def indexes_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    def roll_reason(
        self, size: int, last_offset: int, now_ms: int, segment_bytes: int, segment_ms: int
    ) -> str | None:
        """Why an append of ``size`` bytes ending at ``last_offset`` must go to a new segment
        (size, age, a full index, an offset too far for the index), or None (Kafka's
        ``LogSegment.shouldRoll``)."""
        if self.size + size > segment_bytes:
            return f"size {self.size} + {size} bytes > segment.bytes {segment_bytes}"
        if self.size > 0 and self.rolling_base_ms is not None and now_ms - self.rolling_base_ms > segment_ms:
            return f"age {now_ms - self.rolling_base_ms} ms > segment.ms {segment_ms}"
        if self.indexes_full:
            return "its index is full"
        if not self.can_hold_offset(last_offset):
            return f"offset {last_offset} does not fit a relative offset"
        return None

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    # ------------------------------------------------------------------ loading

    def load(self) -> str | None:
        """Derive the in-memory state from files written by a clean run. Returns why the files
        cannot be trusted (the caller then runs :meth:`recover`), or None."""
        if self._size and (self.index.was_missing or self.time_index.was_missing):
            return f"{self.log_path}: an index file is missing"
        error = self.index.sanity_error(self._size)
        if error:
            return error
        _, position = self.index.last_entry
        last: BatchHeader | None = None
        end, newest = position, NO_TIMESTAMP
        try:
            for pos, header in self._scan_headers(position):
                last, end, newest = header, pos + header.size, max(newest, header.max_timestamp)
        except CorruptRecordError as e:
            return f"{self.log_path}: {e}"
        if end != self._size:
            return f"{self.log_path}: the last batch ends at byte {end}, the file has {self._size}"
        self._next_offset = last.next_offset if last is not None else self.base_offset
        error = self.time_index.sanity_error(self._next_offset)
        if error:
            return error
        last_time = self.time_index.last_entry
        if newest > (last_time[0] if last_time is not None else NO_TIMESTAMP):
            return f"{self.time_index.path}: behind the log (a batch has max timestamp {newest})"
        if last_time is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last_time
        if self._size >= HEADER_SIZE:
            self._set_rolling_base()
        return None

    def recover(
        self,
        on_batch: Callable[[BatchHeader], None] | None = None,
        before_truncate: Callable[[], None] | None = None,
    ) -> int:
        """Re-read the whole file, keep the longest prefix of whole, CRC-valid batches with
        increasing offsets, truncate the rest and rebuild both indexes. Returns the bytes dropped.
        ``on_batch`` sees every kept batch (the log feeds the leader epoch cache with it);
        ``before_truncate`` runs once a tail is found to be invalid, before it is cut (the loader
        deletes the later segments there, so a crash in between leaves the tear to find again)."""
        self.index.reset()
        self.time_index.reset()
        self._reset_state()
        with self._file.pinned() as fd:
            return self._recover(fd, on_batch, before_truncate)

    def _recover(
        self,
        fd: int,
        on_batch: Callable[[BatchHeader], None] | None,
        before_truncate: Callable[[], None] | None,
    ) -> int:
        file_size = os.fstat(fd).st_size
        pos = 0
        want = RECOVER_CHUNK
        while pos < file_size:
            chunk = os.pread(fd, want, pos)
            length, batches = valid_prefix(chunk)
            kept: list[tuple[int, BatchHeader]] = []
            expected = self._next_offset
            for rel, header in batches:
                if header.base_offset < expected or not self.can_hold_offset(header.last_offset):
                    break
                kept.append((pos + rel, header))
                expected = header.next_offset
            self._index_batches(kept)
            if on_batch is not None:
                for _, header in kept:
                    on_batch(header)
            if len(kept) < len(batches):  # offsets went backwards: treat as corruption
                pos = batches[len(kept)][0] + pos
                break
            pos += length
            if length:
                want = RECOVER_CHUNK
                continue
            # Nothing valid at pos: a torn or corrupt tail, unless the batch is just larger than the chunk.
            if pos + len(chunk) >= file_size or len(chunk) < HEADER_SIZE:
                break
            header = parse_header(chunk)
            if len(chunk) < header.size <= file_size - pos:
                want = header.size
                continue
            break
        dropped = file_size - pos
        if dropped:
            if before_truncate is not None:
                before_truncate()
            os.ftruncate(fd, pos)
        self._size = pos
        if self._size >= HEADER_SIZE:
            self._set_rolling_base()
        return dropped

    def _set_rolling_base(self) -> None:
        first = parse_header(self._pread(HEADER_SIZE, 0))
        self._rolling_base_ms = first.max_timestamp if first.max_timestamp >= 0 else self._time_ms()

    def _reset_state(self) -> None:
        self._next_offset = self.base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        self._rolling_base_ms = None

    # ------------------------------------------------------------------ writing

    def append(self, buf: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write whole batches; ``batches`` are (position in ``buf``, header) with final offsets.

        All or nothing: when a write fails part way (ENOSPC, EIO), the log file is cut back to
        its size before the call, nothing else having changed (the index entries are added in
        memory after the write), then the OSError is raised; the next append lands where the
        failed one would have. When even that cut fails, the segment refuses every later append
        (:class:`SegmentUnwritable`)."""
        if self._torn is not None:
            raise SegmentUnwritable(f"{self.log_path}: refusing to append after a failed write: {self._torn}")
        before = self._size
        with self._file.pinned() as fd:
            try:
                write_all(fd, buf)
            except OSError as e:
                self._undo_append(fd, before, e)
                raise
        self._size += len(buf)
        now = self._time_ms()
        if self._rolling_base_ms is None:
            self._rolling_base_ms = now
        self._last_modified_ms = now
        self._index_batches([(before + pos, header) for pos, header in batches])

    def _undo_append(self, fd: int, size: int, error: OSError) -> None:
        """Cut the torn bytes of a failed write off the file."""
        try:
            os.ftruncate(fd, size)
        except OSError as undo_error:
            self._torn = f"{error}; cutting the file back to {size} bytes failed too: {undo_error}"
            log.error("%s: %s", self.log_path, self._torn)

    def _index_batches(self, batches: Iterable[tuple[int, BatchHeader]]) -> None:
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        for pos, header in batches:
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
                time_entries.append((header.max_timestamp, header.last_offset))
            if self._bytes_since_index > self.index_interval_bytes:
                offset_entries.append((header.last_offset, pos))
                self._bytes_since_index = 0
            self._bytes_since_index += header.size
            self._next_offset = header.next_offset
        self.index.append_entries(offset_entries)
        self.time_index.append_entries(time_entries)

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and everything after it; returns the bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        position, header = found
        removed = self._size - position
        self.index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        with self._file.pinned() as fd:
            os.ftruncate(fd, position)
        self._size = position
        self._last_modified_ms = self._time_ms()
        self._bytes_since_index = 0
        last_time = self.time_index.last_entry
        if last_time is None:
            self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        else:
            self._max_timestamp, self._offset_of_max_timestamp = last_time
        if position == 0:
            self._next_offset = self.base_offset
            self._rolling_base_ms = None
        else:
            self._next_offset = header.base_offset
        return removed

    def _truncate_files(self, size: int) -> None:
        with self._file.pinned() as fd:
            os.ftruncate(fd, size)
        self._size = size
        self.index.reset()
        self.time_index.reset()
        self._reset_state()

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the ``.log``, then write the indexes' new entries and fsync them: everything
        the recovery point will cover is on disk, its indexes included."""
        with self._io_lock:
            if self._closed:
                return
            with self._file.pinned() as fd:
                os.fsync(fd)
            self.index.flush()
            self.time_index.flush()

    def close(self, write_indexes: bool = True) -> None:
        """Close the ``.log`` descriptor for good; ``write_indexes`` first writes the indexes'
        new entries, without an fsync (a failure is logged: an unflushed segment is recovered
        from its ``.log`` after an unclean stop anyway)."""
        with self._io_lock:
            if self._closed:
                return
            self._closed = True
            if write_indexes:
                for index in (self.index, self.time_index):
                    try:
                        index.write_pending()
                    except OSError as e:
                        log.warning("%s: index entries not written at close: %s", index.path, e)
            self._file.close()

    def delete(self) -> None:
        self.close(write_indexes=False)
        self.log_path.unlink(missing_ok=True)
        self.index.delete()
        self.time_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self._size}, next_offset={self._next_offset})"
