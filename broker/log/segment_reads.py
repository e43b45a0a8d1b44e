"""The reading half of :class:`broker.log.segment.LogSegment` (Kafka's ``LogSegment.read``,
``translateOffset`` and ``findOffsetByTimestamp``): batch headers walked from the offset index's
nearest entry, whole batches read with ``pread`` through the segment's pinned descriptor
(docs/design.md "Open files at scale (issue 25)"); records are decoded only to answer a timestamp
lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from broker.log.index import OffsetIndex, TimeIndex
from client.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    parse_header,
)

SCAN_CHUNK = 16 * 1024


class SegmentReads:
    """The reading methods of :class:`broker.log.segment.LogSegment` (which defines what is
    declared here)."""

    base_offset: int
    index: OffsetIndex
    time_index: TimeIndex
    _size: int

    if TYPE_CHECKING:  # defined by LogSegment; declared here for the type checker only

        def _pread(self, size: int, position: int) -> bytes: ...

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
                chunk = self._pread(SCAN_CHUNK, pos)
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
            return self._pread(first.size, position) if min_one_message else b""
        buf = self._pread(min(max_bytes, available), position)
        end = 0
        while end + HEADER_SIZE <= len(buf):
            header = parse_header(buf, end)
            if end + header.size > len(buf) or (max_offset is not None and header.last_offset >= max_offset):
                break
            end += header.size
        return buf if end == len(buf) else buf[:end]

    def read_batch(self, position: int, size: int) -> bytes:
        return self._pread(size, position)

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
