"""A segment's offset index and time index: Kafka's OffsetIndex and TimeIndex, in
their on-disk layout.

``<base>.index``: sparse, 8-byte entries ``relative offset (uint32 BE), file position (uint32 BE)``;
an entry maps the last offset of a batch to the position where that batch starts, one entry per
``index.interval.bytes`` of log written (Kafka's per-batch rule).

``<base>.timeindex``: 12-byte entries ``timestamp (int64 BE), relative offset (uint32 BE)``,
appended whenever a batch's max timestamp exceeds the last entry's, so the last entry is the
segment's largest timestamp.

Both are append-only files mirrored in memory (Python lists searched with bisect); no mmap,
no preallocation. A file whose size is not a multiple of the entry size, or whose entries are
out of order, is reported by :meth:`sanity_error` and rebuilt by the segment. A failed write
(ENOSPC, EIO) cuts the file back to its size before the write and leaves the entries in memory
as they were (docs/design.md "Log dir failure").
"""

from __future__ import annotations

import abc
import contextlib
import os
import struct
from bisect import bisect_left, bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
MAX_RELATIVE_OFFSET = 2**31 - 1  # Kafka keeps relative offsets within an Int


def _open_fd(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (O_APPEND). On an OSError some bytes may already be
    written: the caller truncates the file back to its size before the call."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _IndexFile(abc.ABC):
    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self.was_missing = not self.path.exists()
        self._fd = _open_fd(self.path)
        self._raw_size = os.fstat(self._fd).st_size

    def __len__(self) -> int:
        return len(self._rel_offsets)  # type: ignore[attr-defined]

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self) * self.entry_size

    def _size_error(self) -> str | None:
        if self._raw_size % self.entry_size:
            return f"{self.path}: size {self._raw_size} is not a multiple of {self.entry_size}"
        return None

    @abc.abstractmethod
    def _truncate_entries(self, count: int) -> None:
        """Drop the in-memory entries from ``count`` on (each index keeps its own lists)."""

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries, on disk and then in memory (a failed truncate
        leaves both as they were)."""
        os.ftruncate(self._fd, count * self.entry_size)
        self._raw_size = count * self.entry_size
        self._truncate_entries(count)

    def _write_entries(self, buf: bytes | bytearray) -> None:
        """Append encoded entries to the file; on failure cut the file back to where it was, so
        a torn entry never stays behind (and the next append lands where this one would have)."""
        try:
            write_all(self._fd, buf)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._raw_size)
            raise
        self._raw_size += len(buf)

    def reset(self) -> None:
        self.truncate_entries(0)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    entry_size = OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        raw = _read_all(self._fd)
        usable = len(raw) - len(raw) % self.entry_size
        self._rel_offsets: list[int] = []
        self._positions: list[int] = []
        for rel, pos in OFFSET_ENTRY.iter_unpack(raw[:usable]):
            self._rel_offsets.append(rel)
            self._positions.append(pos)

    def sanity_error(self, log_size: int) -> str | None:
        """Why this index cannot be trusted for a log of ``log_size`` bytes, or None."""
        error = self._size_error()
        if error:
            return error
        for i in range(1, len(self._rel_offsets)):
            if (
                self._rel_offsets[i] <= self._rel_offsets[i - 1]
                or self._positions[i] <= self._positions[i - 1]
            ):
                return f"{self.path}: entry {i} is out of order"
        if self._positions and self._positions[-1] >= log_size:
            return f"{self.path}: last entry points at byte {self._positions[-1]}, the log has {log_size}"
        return None

    @property
    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base offset, 0) when empty."""
        if not self._rel_offsets:
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
        """Append (absolute offset, position) entries, strictly increasing after the last one."""
        if not entries:
            return
        buf = bytearray()
        last = self._rel_offsets[-1] if self._rel_offsets else -1
        for offset, position in entries:
            rel = offset - self.base_offset
            if rel <= last or rel > MAX_RELATIVE_OFFSET:
                raise ValueError(f"{self.path}: offset {offset} cannot follow relative offset {last}")
            buf += OFFSET_ENTRY.pack(rel, position)
            last = rel
        self._write_entries(buf)
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

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        raw = _read_all(self._fd)
        usable = len(raw) - len(raw) % self.entry_size
        self._timestamps: list[int] = []
        self._rel_offsets: list[int] = []
        for ts, rel in TIME_ENTRY.iter_unpack(raw[:usable]):
            self._timestamps.append(ts)
            self._rel_offsets.append(rel)

    def sanity_error(self, next_offset: int) -> str | None:
        """Why this index cannot be trusted for a segment whose next offset is ``next_offset``."""
        error = self._size_error()
        if error:
            return error
        for i in range(1, len(self._timestamps)):
            if (
                self._timestamps[i] <= self._timestamps[i - 1]
                or self._rel_offsets[i] < self._rel_offsets[i - 1]
            ):
                return f"{self.path}: entry {i} is out of order"
        if self._rel_offsets and self.base_offset + self._rel_offsets[-1] >= next_offset:
            return f"{self.path}: last entry names offset {self.base_offset + self._rel_offsets[-1]}, past the log end"
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
        """Append (timestamp, absolute offset) entries; timestamps strictly increasing."""
        if not entries:
            return
        buf = bytearray()
        last_ts = self._timestamps[-1] if self._timestamps else None
        last_rel = self._rel_offsets[-1] if self._rel_offsets else 0
        for timestamp, offset in entries:
            rel = offset - self.base_offset
            if (last_ts is not None and timestamp <= last_ts) or rel < last_rel or rel > MAX_RELATIVE_OFFSET:
                raise ValueError(f"{self.path}: entry ({timestamp}, {offset}) is out of order")
            buf += TIME_ENTRY.pack(timestamp, rel)
            last_ts, last_rel = timestamp, rel
        self._write_entries(buf)
        for timestamp, offset in entries:
            self._timestamps.append(timestamp)
            self._rel_offsets.append(offset - self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for ``offset`` or later."""
        self.truncate_entries(bisect_left(self._rel_offsets, offset - self.base_offset))

    def _truncate_entries(self, count: int) -> None:
        del self._timestamps[count:]
        del self._rel_offsets[count:]
