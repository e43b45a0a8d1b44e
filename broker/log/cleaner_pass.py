"""The work of one cleaning pass over one log, done off the event loop (Kafka's ``Cleaner``:
``buildOffsetMap``, ``groupSegmentsBySize``, ``cleanSegments`` and ``cleanInto``; docs/design.md
"Log compaction").

Each step is a generator that reads (and writes) a batch at a time and yields the bytes it moved,
so the :class:`broker.log.cleaner.LogCleaner` can run it in an executor a few hundred KiB at a
time, throttle between steps and stop it: :func:`build_offset_map` maps every key of the dirty
section ``[first dirty, first uncleanable)`` to its last offset; :func:`clean_group` copies a
group of adjacent segments, keeping what :func:`retains` says, into one ``<base>.log.cleaned``
segment (with its indexes), which the log then swaps in
(:meth:`broker.log.log_cleaning.LogCleaning.replace_segments`).

The segments are read through descriptors of the cleaner's own (:class:`SegmentReader`), opened on
the loop from the view, so a segment deleted meanwhile stays readable; every batch's CRC is
checked, so a corrupt batch is never rewritten under a fresh CRC.

What is kept (Kafka's ``shouldRetainRecord``): every record past the map's latest offset; a
record whose key maps to a later offset goes; a tombstone (null value) stays while its segment's
last-modified time is after the delete horizon (the last-modified time of the last segment of
the cleaned section, minus ``delete.retention.ms``). Beyond Kafka, whose producers cannot write
keyless records to a compacted topic, a keyless record is kept (it cannot be compacted). Batches
keep their offsets (:mod:`broker.log.batch_filter`); an emptied batch goes unless it is the last
batch of an active producer (Kafka keeps it for the producer state) or the last batch of the
group, so a cleaned segment always ends where the segments it replaces ended: the loader's
torn-tail check and the swap recovery rely on that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass

from broker.log.batch_filter import filter_batch
from broker.log.index import MAX_RELATIVE_OFFSET
from broker.log.log_cleaning import CLEANED_SUFFIX, CleaningView, SegmentView, discard_cleaned
from broker.log.offset_map import OffsetMap
from broker.log.segment import LogSegment
from client.protocol.records import (
    CONTROL_MASK,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    BatchHeader,
    CorruptRecordError,
    Record,
    compute_crc,
    decode_batch,
    parse_header,
)


class CleaningAborted(Exception):
    """The pass was stopped: the cleaner shuts down, or the log changed under it."""


@dataclass
class PassStats:
    """Kafka's ``CleanerStats`` for one pass."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_records: int = 0
    records_read: int = 0
    records_retained: int = 0


class SegmentReader:
    """A read-only descriptor of one segment's log file, as large as the view saw it."""

    def __init__(self, view: SegmentView) -> None:
        self.view = view
        self._fd = os.open(view.log_path, os.O_RDONLY)

    def batches(self, start: int, buffer_size: int) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every whole batch from byte ``start`` (a batch boundary), CRC-checked."""
        end = self.view.size
        pos = start
        while pos < end:
            chunk = memoryview(os.pread(self._fd, min(max(buffer_size, HEADER_SIZE), end - pos), pos))
            rel = 0
            while rel + HEADER_SIZE <= len(chunk):
                header = parse_header(chunk, rel)
                if header.size < HEADER_SIZE or pos + rel + header.size > end:
                    raise CorruptRecordError(f"{self.view.log_path}: bad batch at byte {pos + rel}")
                if rel + header.size > len(chunk):
                    if rel:
                        break
                    chunk = memoryview(os.pread(self._fd, header.size, pos))  # larger than the buffer
                    if len(chunk) < header.size:
                        raise CorruptRecordError(f"{self.view.log_path}: truncated batch at byte {pos}")
                batch = chunk[rel : rel + header.size]
                if compute_crc(batch) != header.crc:
                    raise CorruptRecordError(
                        f"{self.view.log_path}: batch at byte {pos + rel} (base offset "
                        f"{header.base_offset}) fails its CRC"
                    )
                yield header, batch
                rel += header.size
            if rel == 0:
                raise CorruptRecordError(f"{self.view.log_path}: truncated batch at byte {pos}")
            pos += rel

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def build_offset_map(
    readers: Sequence[SegmentReader],
    offset_map: OffsetMap,
    start: int,
    end: int,
    buffer_size: int,
    stats: PassStats,
    check_aborted: Callable[[], None],
) -> Generator[int, None, bool]:
    """Map each key of ``[start, end)`` to its last offset (Kafka's ``buildOffsetMap``). Returns
    True when the map filled first: then it covers ``[start, offset_map.latest_offset]``."""
    offset_map.clear(start - 1)
    for reader in readers:
        view = reader.view
        if view.next_offset <= start or view.base_offset >= end:
            continue
        position = view.segment.index.lookup(start)[1] if view.base_offset < start else 0
        for header, batch in reader.batches(position, buffer_size):
            check_aborted()
            if header.base_offset >= end:
                return False
            stats.bytes_read += header.size
            if header.last_offset >= start:
                if not header.attributes & CONTROL_MASK:
                    for record in decode_batch(batch):
                        if record.offset < start or record.key is None:
                            continue
                        if record.offset >= end:
                            break
                        if not offset_map.put(record.key, record.offset):
                            return True
                        stats.map_records += 1
                offset_map.update_latest_offset(min(header.last_offset, end - 1))
            yield header.size
    return False


def delete_horizon_ms(view: CleaningView, first_dirty: int) -> int:
    """Kafka 2.x's delete horizon: the last-modified time of the last segment of the cleaned
    section (below ``first_dirty``) minus ``delete.retention.ms``; 0 when nothing is cleaned yet."""
    cleaned = [s for s in view.segments if s.base_offset < first_dirty]
    return cleaned[-1].last_modified_ms - view.config.delete_retention_ms if cleaned else 0


def group_segments_by_size(
    segments: Sequence[SegmentView], max_size: int, max_index_size: int
) -> list[list[SegmentView]]:
    """Adjacent segments whose sizes (log, offset index, time index) fit one segment, and whose
    offsets fit one segment's relative offsets (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[SegmentView]] = []
    for segment in segments:
        group = groups[-1] if groups else None
        if group is not None and (
            sum(s.size for s in group) + segment.size <= max_size
            and sum(s.offset_index_bytes for s in group) + segment.offset_index_bytes <= max_index_size
            and sum(s.time_index_bytes for s in group) + segment.time_index_bytes <= max_index_size
            and (segment.size == 0 or segment.next_offset - 1 - group[0].base_offset <= MAX_RELATIVE_OFFSET)
        ):
            group.append(segment)
        else:
            groups.append([segment])
    return groups


def retains(offset_map: OffsetMap, retain_deletes: bool) -> Callable[[Record], bool]:
    """Kafka's ``shouldRetainRecord`` for the records of one segment (keyless ones kept)."""
    latest = offset_map.latest_offset

    def retain(record: Record) -> bool:
        if record.offset > latest or record.key is None:
            return True
        return record.offset >= offset_map.get(record.key) and (record.value is not None or retain_deletes)

    return retain


def clean_group(
    view: CleaningView,
    group: Sequence[SegmentReader],
    offset_map: OffsetMap,
    horizon_ms: int,
    time_ms: Callable[[], int],
    buffer_size: int,
    stats: PassStats,
    check_aborted: Callable[[], None],
) -> Generator[int, None, LogSegment]:
    """Copy the retained records of ``group`` into a new ``<base>.log.cleaned`` segment, flushed,
    with the last-modified time of the group's last segment (Kafka's ``cleanSegments``). On any
    failure, or when the generator is closed, the cleaned files are deleted."""
    first, last = group[0].view, group[-1].view
    cleaned = LogSegment.create(
        view.dir,
        first.base_offset,
        suffix=CLEANED_SUFFIX,
        **view.config.segment_kwargs(time_ms, view.file_cache),
    )
    try:
        pending = bytearray()
        headers: list[tuple[int, BatchHeader]] = []
        for reader in group:
            retain = retains(offset_map, reader.view.last_modified_ms > horizon_ms)
            for header, batch in reader.batches(0, buffer_size):
                check_aborted()
                producer_last = view.active_producers.get(header.producer_id)
                keep_empty = header.last_offset == last.next_offset - 1 or (
                    header.producer_id != NO_PRODUCER_ID and producer_last == header.last_offset
                )
                out, kept = filter_batch(batch, header, retain, keep_empty)
                stats.bytes_read += header.size
                stats.records_read += header.record_count
                stats.records_retained += kept
                moved = header.size
                if out is not None:
                    headers.append((len(pending), parse_header(out)))
                    pending += out
                if len(pending) >= buffer_size:
                    moved += _write(cleaned, pending, headers, stats)
                    pending, headers = bytearray(), []
                yield moved
        if pending:
            yield _write(cleaned, pending, headers, stats)
        cleaned.flush()
        cleaned.last_modified_ms = last.last_modified_ms
        return cleaned
    except BaseException:
        discard_cleaned(cleaned)
        raise


def _write(
    cleaned: LogSegment, buf: bytearray, headers: list[tuple[int, BatchHeader]], stats: PassStats
) -> int:
    cleaned.append(buf, headers)
    stats.bytes_written += len(buf)
    return len(buf)
