"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex`` (Kafka's LogSegment).

The ``.log`` file is a plain concatenation of RecordBatch v2 batches, exactly as Kafka writes
them. The segment only walks batch headers (:func:`client.protocol.records.parse_header`); it
decodes records solely to answer a timestamp lookup. Files stay open: appends use ``os.write``
on an O_APPEND descriptor, reads use ``os.pread``. An append is all or nothing: a write that
fails part way is cut back off the file and the indexes (docs/design.md "Log dir failure").

A segment is not thread-safe by itself: the owning :class:`broker.log.log.Log` serialises
appends, reads and truncations. Only ``flush`` may run concurrently with them (a small lock
keeps it from racing ``close``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.log.index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex, write_all
from client.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    parse_header,
    valid_prefix,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SCAN_CHUNK = 16 * 1024
RECOVER_CHUNK = 8 * 1024 * 1024
NO_TIMESTAMP = -1
#: a :func:`segment_name` stem (of a segment, index or producer snapshot file)
SEGMENT_STEM = re.compile(r"^\d{20}$")


def segment_name(base_offset: int) -> str:
    """Kafka's file name stem: the base offset, zero-padded to 20 digits."""
    return f"{base_offset:020d}"


@dataclass(frozen=True)
class _AppendState:
    """What an append changes, so a failed one can be undone."""

    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int
    rolling_base_ms: int | None
    last_modified_ms: int
    index_entries: int
    time_index_entries: int


class SegmentUnwritable(OSError):
    """A failed append could not be undone (the truncate failed too): the segment refuses
    every later append, so nothing is ever written after its torn bytes."""


class LogSegment:
    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        time_ms: Callable[[], int],
        suffix: str = "",
    ) -> None:
        """Open (creating when missing) the three files of the segment at ``base_offset`` (each
        name ending in ``suffix``: the cleaner's ``.cleaned``). The in-memory state is not derived
        yet: call :meth:`load` (trusting the files) or :meth:`recover`."""
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._time_ms = time_ms
        stem = segment_name(base_offset)
        self.log_path = self.dir / (stem + LOG_SUFFIX + suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:  # out of descriptors (EMFILE) half way: close what was opened, or it leaks for good
            self.index = OffsetIndex(self.dir / (stem + INDEX_SUFFIX + suffix), base_offset, max_index_bytes)
            try:
                self.time_index = TimeIndex(
                    self.dir / (stem + TIME_INDEX_SUFFIX + suffix), base_offset, max_index_bytes
                )
            except BaseException:
                self.index.close()
                raise
        except BaseException:
            os.close(self._fd)
            raise
        stat = os.fstat(self._fd)
        self._size = stat.st_size
        self._last_modified_ms = stat.st_mtime_ns // 1_000_000
        self._next_offset = base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index = 0
        self._rolling_base_ms: int | None = None
        self._io_lock = threading.Lock()
        self._torn: str | None = None  # why appends are refused (a failed append left bytes behind)

    @classmethod
    def create(cls, dir: Path, base_offset: int, **kwargs) -> LogSegment:
        """A new, empty segment; leftovers of an old segment with the same base are discarded."""
        segment = cls(dir, base_offset, **kwargs)
        if segment._size or len(segment.index) or len(segment.time_index):
            segment._truncate_files(0)
        return segment

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
        end = position
        try:
            for pos, header in self._scan_headers(position):
                last, end = header, pos + header.size
        except CorruptRecordError as e:
            return f"{self.log_path}: {e}"
        if end != self._size:
            return f"{self.log_path}: the last batch ends at byte {end}, the file has {self._size}"
        self._next_offset = last.next_offset if last is not None else self.base_offset
        error = self.time_index.sanity_error(self._next_offset)
        if error:
            return error
        last_time = self.time_index.last_entry
        if last_time is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last_time
        if self._size >= HEADER_SIZE:
            first = parse_header(os.pread(self._fd, HEADER_SIZE, 0))
            self._rolling_base_ms = first.max_timestamp if first.max_timestamp >= 0 else self._time_ms()
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
        file_size = os.fstat(self._fd).st_size
        pos = 0
        want = RECOVER_CHUNK
        while pos < file_size:
            chunk = os.pread(self._fd, want, pos)
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
            os.ftruncate(self._fd, pos)
        self._size = pos
        if self._size >= HEADER_SIZE:
            first = parse_header(os.pread(self._fd, HEADER_SIZE, 0))
            self._rolling_base_ms = first.max_timestamp if first.max_timestamp >= 0 else self._time_ms()
        return dropped

    def _reset_state(self) -> None:
        self._next_offset = self.base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        self._rolling_base_ms = None

    # ------------------------------------------------------------------ writing

    def append(self, buf: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write whole batches; ``batches`` are (position in ``buf``, header) with final offsets.

        All or nothing: when a write fails part way (ENOSPC, EIO), the log file and both indexes
        are cut back to their sizes before the call and the in-memory state restored, then the
        OSError is raised; the next append lands where the failed one would have. When even
        that cut fails, the segment refuses every later append (:class:`SegmentUnwritable`)."""
        if self._torn is not None:
            raise SegmentUnwritable(f"{self.log_path}: refusing to append after a failed write: {self._torn}")
        before = self._append_state()
        try:
            write_all(self._fd, buf)
            self._size += len(buf)
            now = self._time_ms()
            if self._rolling_base_ms is None:
                self._rolling_base_ms = now
            self._last_modified_ms = now
            self._index_batches([(before.size + pos, header) for pos, header in batches])
        except OSError as e:
            self._undo_append(before, e)
            raise

    def _append_state(self) -> _AppendState:
        return _AppendState(
            self._size,
            self._next_offset,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._bytes_since_index,
            self._rolling_base_ms,
            self._last_modified_ms,
            len(self.index),
            len(self.time_index),
        )

    def _undo_append(self, before: _AppendState, error: OSError) -> None:
        try:
            os.ftruncate(self._fd, before.size)
            if len(self.index) != before.index_entries:
                self.index.truncate_entries(before.index_entries)
            if len(self.time_index) != before.time_index_entries:
                self.time_index.truncate_entries(before.time_index_entries)
        except OSError as undo_error:
            self._torn = f"{error}; cutting the file back to {before.size} bytes failed too: {undo_error}"
            log.error("%s: %s", self.log_path, self._torn)
        self._size = before.size
        self._next_offset = before.next_offset
        self._max_timestamp = before.max_timestamp
        self._offset_of_max_timestamp = before.offset_of_max_timestamp
        self._bytes_since_index = before.bytes_since_index
        self._rolling_base_ms = before.rolling_base_ms
        self._last_modified_ms = before.last_modified_ms

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
        os.ftruncate(self._fd, position)
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
        os.ftruncate(self._fd, size)
        self._size = size
        self.index.reset()
        self.time_index.reset()
        self._reset_state()

    # ------------------------------------------------------------------ reading

    def _scan_headers(self, start: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from ``start`` (a batch boundary) to ``end``,
        reading the file in chunks and skipping batch bodies."""
        end = self._size if end is None else end
        pos = start
        chunk = b""
        chunk_pos = start
        while pos < end:
            rel = pos - chunk_pos
            if rel + HEADER_SIZE > len(chunk):
                chunk = os.pread(self._fd, SCAN_CHUNK, pos)
                chunk_pos, rel = pos, 0
            header = parse_header(chunk, rel)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                raise CorruptRecordError(f"batch at byte {pos} has impossible length {header.batch_length}")
            yield pos, header
            pos += header.size

    def batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches whose last offset is >= ``from_offset``, in order, read
        without decoding any record (the log rebuilds its producer state with them)."""
        _, position = self.index.lookup(from_offset)
        for _, header in self._scan_headers(position):
            if header.last_offset >= from_offset:
                yield header

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``, or None."""
        _, position = self.index.lookup(offset)
        for pos, header in self._scan_headers(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool
    ) -> bytes | None:
        """Whole batches from the one holding ``start_offset``: at most ``max_bytes`` (but the
        first batch anyway when ``min_one_message``), none that reaches ``max_offset``. None when
        no batch in this segment reaches ``start_offset``."""
        found = self.find_batch(start_offset)
        if found is None:
            return None
        position, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return b""
        available = self._size - position
        if first.size > max_bytes:
            return os.pread(self._fd, first.size, position) if min_one_message else b""
        buf = os.pread(self._fd, min(max_bytes, available), position)
        end = 0
        while end + HEADER_SIZE <= len(buf):
            header = parse_header(buf, end)
            if end + header.size > len(buf) or (max_offset is not None and header.last_offset >= max_offset):
                break
            end += header.size
        return buf if end == len(buf) else buf[:end]

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``starting_offset`` whose timestamp
        is >= ``timestamp``. The time index skips the batches that cannot hold it; only the one
        batch that does is decoded."""
        below = self.time_index.lookup_below(timestamp)
        start = max(starting_offset, self.base_offset if below is None else below[1] + 1)
        _, position = self.index.lookup(start)
        for pos, header in self._scan_headers(position):
            if header.last_offset < start or header.max_timestamp < timestamp:
                continue
            for record in decode_batch(self.read_batch(pos, header.size)):
                if record.offset >= start and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        with self._io_lock:
            if self._fd < 0:
                return
            os.fsync(self._fd)
            self.index.flush()
            self.time_index.flush()

    def close(self) -> None:
        with self._io_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self.index.close()
            self.time_index.close()

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index.delete()
        self.time_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self._size}, next_offset={self._next_offset})"
