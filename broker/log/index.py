"""A segment's offset index and time index: Kafka's OffsetIndex and TimeIndex, in
their on-disk layout.

``<base>.index``: sparse, 8-byte entries ``relative offset (uint32 BE), file position (uint32 BE)``;
an entry maps the last offset of a batch to the position where that batch starts, one entry per
``index.interval.bytes`` of log written (Kafka's per-batch rule).

``<base>.timeindex``: 12-byte entries ``timestamp (int64 BE), relative offset (uint32 BE)``,
appended whenever a batch's max timestamp exceeds the last entry's, so the last entry is the
segment's largest timestamp.

Both live in memory (compact ``array`` columns searched with bisect: as many bytes as the file)
and hold no file descriptor (docs/design.md "Open files at scale (issue 25)"; Kafka memory-maps
them). The file is read once, when the segment is loaded; appends only add to memory, and the
entries not yet on disk are written by :meth:`flush` (open, append, fsync, close: the log flushes a
segment before its recovery point passes it, so whatever the recovery point covers has its index
on disk) and by :meth:`write_pending` (no fsync: a segment closed without a flush). A truncation
below what is on disk cuts the file (open, ftruncate, close) and is fsynced at the next flush. The
file is always a prefix of the entries in memory. A file whose size is not a multiple of the entry
size, or whose entries are out of order, is reported by :meth:`sanity_error` and rebuilt by the
segment. A failed write (ENOSPC, EIO) cuts the file back to its size before the write (docs/design.md
"Log dir failure").
"""

from __future__ import annotations

import abc
import contextlib
import os
import struct
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
MAX_RELATIVE_OFFSET = 2**31 - 1  # Kafka keeps relative offsets within an Int
_LITTLE_ENDIAN = sys.byteorder == "little"


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (O_APPEND). On an OSError some bytes may already be
    written: the caller truncates the file back to its size before the call."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_file(path: Path) -> bytes | None:
    """The whole file, or None when it does not exist (one open, read, close)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0) if size else b""
    finally:
        os.close(fd)


def _uint32_pairs(raw: bytes) -> tuple[array, array]:
    """Split big-endian (uint32, uint32) pairs into two columns."""
    both = array("I")
    both.frombytes(raw)
    if _LITTLE_ENDIAN:
        both.byteswap()
    return both[0::2], both[1::2]


class _IndexFile(abc.ABC):
    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, *, create: bool = False) -> None:
        """Read the file at ``path`` (the entries of a whole number of entry sizes), or with
        ``create`` start empty and create the file, cutting any leftover to nothing."""
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._lock = threading.Lock()  # appends, flushes (off the log's lock) and truncations
        self._dirty = False  # the file changed (a truncation) since its last fsync
        raw = b""
        if create:
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
            self.was_missing = False
        else:
            read = _read_file(self.path)
            self.was_missing = read is None
            raw = read or b""
        self._file_bytes = len(raw)  # the file's size as far as this process knows
        self._load(raw[: len(raw) - len(raw) % self.entry_size])

    @abc.abstractmethod
    def _load(self, raw: bytes) -> None:
        """Fill the in-memory columns from whole entries."""

    @abc.abstractmethod
    def _encode(self, start: int, end: int) -> bytes:
        """Entries ``[start, end)`` in the file's layout."""

    @abc.abstractmethod
    def _truncate_entries(self, count: int) -> None:
        """Drop the in-memory entries from ``count`` on (each index keeps its own columns)."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self) * self.entry_size

    @property
    def pending_entries(self) -> int:
        """Entries in memory that are not in the file yet."""
        return len(self) - self._file_bytes // self.entry_size

    def _size_error(self) -> str | None:
        if self._file_bytes % self.entry_size:
            return f"{self.path}: size {self._file_bytes} is not a multiple of {self.entry_size}"
        return None

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries; the file is cut when it holds more (a failed
        cut leaves both as they were)."""
        with self._lock:
            if count * self.entry_size < self._file_bytes:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    os.ftruncate(fd, count * self.entry_size)
                finally:
                    os.close(fd)
                self._file_bytes = count * self.entry_size
                self._dirty = True
            self._truncate_entries(count)

    def reset(self) -> None:
        self.truncate_entries(0)

    def flush(self) -> None:
        """Write the pending entries and fsync the file (nothing when it is up to date)."""
        self._write(fsync=True)

    def write_pending(self) -> None:
        """Write the pending entries without an fsync (a segment closed without a flush)."""
        self._write(fsync=False)

    def _write(self, fsync: bool) -> None:
        with self._lock:
            whole = self._file_bytes - self._file_bytes % self.entry_size
            written = whole // self.entry_size
            if written == len(self) and whole == self._file_bytes and not self.was_missing:
                if fsync and self._dirty:
                    self._sync(os.O_RDWR, b"")
                return
            self._sync(os.O_RDWR | os.O_CREAT | os.O_APPEND, self._encode(written, len(self)), fsync)

    def _sync(self, flags: int, buf: bytes, fsync: bool = True) -> None:
        """Open the file, cut any partial entry, append ``buf`` (cut back on failure), fsync."""
        fd = os.open(self.path, flags, 0o644)
        try:
            whole = self._file_bytes - self._file_bytes % self.entry_size
            if whole != self._file_bytes:
                os.ftruncate(fd, whole)
                self._file_bytes = whole
            if buf:
                try:
                    write_all(fd, buf)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, self._file_bytes)
                    raise
                self._file_bytes += len(buf)
            self.was_missing = False
            if fsync:
                os.fsync(fd)
                self._dirty = False
            else:
                self._dirty = True
        finally:
            os.close(fd)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    entry_size = OFFSET_ENTRY.size

    def _load(self, raw: bytes) -> None:
        self._rel_offsets, self._positions = _uint32_pairs(raw)

    def __len__(self) -> int:
        return len(self._positions)

    def _encode(self, start: int, end: int) -> bytes:
        both = array("I", bytes(8 * (end - start)))
        both[0::2] = self._rel_offsets[start:end]
        both[1::2] = self._positions[start:end]
        if _LITTLE_ENDIAN:
            both.byteswap()
        return both.tobytes()

    def sanity_error(self, log_size: int) -> str | None:
        """Why this index cannot be trusted for a log of ``log_size`` bytes, or None."""
        error = self._size_error()
        if error:
            return error
        rel, pos = self._rel_offsets, self._positions
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                return f"{self.path}: entry {i} is out of order"
        if pos and pos[-1] >= log_size:
            return f"{self.path}: last entry points at byte {pos[-1]}, the log has {log_size}"
        return None

    @property
    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base offset, 0) when empty."""
        if not self._positions:
            return self.base_offset, 0
        return self.base_offset + self._rel_offsets[-1], self._positions[-1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry at or below ``offset``; (base offset, 0) if none.
        The batch holding ``offset`` starts at or after that position."""
        i = bisect_right(self._rel_offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel_offsets[i], self._positions[i]

    def append_entries(self, entries: list[tuple[int, int]]) -> None:
        """Append (absolute offset, position) entries, strictly increasing after the last one
        (in memory: :meth:`flush` writes them)."""
        if not entries:
            return
        last = self._rel_offsets[-1] if self._rel_offsets else -1
        for offset, _ in entries:
            rel = offset - self.base_offset
            if rel <= last or rel > MAX_RELATIVE_OFFSET:
                raise ValueError(f"{self.path}: offset {offset} cannot follow relative offset {last}")
            last = rel
        with self._lock:
            for offset, position in entries:
                self._rel_offsets.append(offset - self.base_offset)
                self._positions.append(position)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for ``offset`` or later."""
        self.truncate_entries(bisect_left(self._rel_offsets, offset - self.base_offset))

    def _truncate_entries(self, count: int) -> None:
        del self._rel_offsets[count:]
        del self._positions[count:]


class TimeIndex(_IndexFile):
    entry_size = TIME_ENTRY.size

    def _load(self, raw: bytes) -> None:
        self._timestamps = array("q")
        self._rel_offsets = array("I")
        for ts, rel in TIME_ENTRY.iter_unpack(raw):
            self._timestamps.append(ts)
            self._rel_offsets.append(rel)

    def __len__(self) -> int:
        return len(self._rel_offsets)

    def _encode(self, start: int, end: int) -> bytes:
        pack = TIME_ENTRY.pack
        return b"".join(pack(self._timestamps[i], self._rel_offsets[i]) for i in range(start, end))

    def sanity_error(self, next_offset: int) -> str | None:
        """Why this index cannot be trusted for a segment whose next offset is ``next_offset``."""
        error = self._size_error()
        if error:
            return error
        ts, rel = self._timestamps, self._rel_offsets
        for i in range(1, len(ts)):
            if ts[i] <= ts[i - 1] or rel[i] < rel[i - 1]:
                return f"{self.path}: entry {i} is out of order"
        if rel and self.base_offset + rel[-1] >= next_offset:
            return f"{self.path}: last entry names offset {self.base_offset + rel[-1]}, past the log end"
        return None

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, or None."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._rel_offsets[-1]

    def lookup_below(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry whose timestamp is strictly below ``timestamp``:
        no record at or before that offset can have a timestamp >= ``timestamp``."""
        i = bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return None
        return self._timestamps[i], self.base_offset + self._rel_offsets[i]

    def append_entries(self, entries: list[tuple[int, int]]) -> None:
        """Append (timestamp, absolute offset) entries; timestamps strictly increasing (in
        memory: :meth:`flush` writes them)."""
        if not entries:
            return
        last_ts = self._timestamps[-1] if self._timestamps else None
        last_rel = self._rel_offsets[-1] if self._rel_offsets else 0
        for timestamp, offset in entries:
            rel = offset - self.base_offset
            if (last_ts is not None and timestamp <= last_ts) or rel < last_rel or rel > MAX_RELATIVE_OFFSET:
                raise ValueError(f"{self.path}: entry ({timestamp}, {offset}) is out of order")
            last_ts, last_rel = timestamp, rel
        with self._lock:
            for timestamp, offset in entries:
                self._timestamps.append(timestamp)
                self._rel_offsets.append(offset - self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for ``offset`` or later."""
        self.truncate_entries(bisect_left(self._rel_offsets, offset - self.base_offset))

    def _truncate_entries(self, count: int) -> None:
        del self._timestamps[count:]
        del self._rel_offsets[count:]
