"""Opening a log: Kafka's ``LogLoader`` (``kafka.log.LogLoader.load``), the start-up half of a
partition's log (docs/design.md "Log dir failure"; docs/guarantees.md "Disk faults").

:func:`load_log` takes a partition directory and what the log manager's checkpoints say about it
(recovery point, log start offset, whether the last shutdown was clean) and returns a
:class:`LoadedLog` (Kafka's ``LoadedLogOffsets`` plus the segments, the leader epoch cache and the
producer state) for :meth:`broker.log.log.Log.open` to adopt. In order:

* a swap of the log cleaner that a crash interrupted is finished (:func:`complete_swaps`;
  docs/design.md "Log compaction"): each ``<base>.log.swap`` replaces the segments it covers;
* stray temporary files (``.tmp``, ``.swap``, ``.deleted``, ``.cleaned``: a cleaner's unfinished
  pass) and indexes without a ``.log`` are deleted (Kafka's ``removeTempFilesAndCollectSwapFiles``);
* the leader epoch checkpoint (KIP-101) is read; a corrupt one is deleted, and every segment is
  then re-scanned, which rebuilds the cache from the batches' epochs;
* segments below the recovery point are opened and their indexes checked; a bad index is rebuilt
  from the ``.log`` (Kafka's ``sanityCheck`` then ``recoverSegment``);
* after an unclean shutdown every segment from the one holding the recovery point onward is
  re-scanned (Kafka's ``recoverLog``): a torn or corrupt tail is truncated to the last whole,
  valid batch, logged, and every later segment deleted; the recovered segments are fsynced.
  Beyond Kafka (docs/design.md "Durability: flush and fsync rules"): the later segments are
  deleted, newest first and durably, *before* the tail is cut, so a crash during recovery leaves
  the tear for the next recovery to find; a re-scanned segment that is not the last and stops
  short of the next one's base (a rolled segment a power loss emptied) is a torn tail too; and a
  segment below the recovery point whose index check fails and whose re-scan drops bytes ends
  the log as well;
* a log that ends below the log start offset is emptied, an empty directory gets an empty segment
  at the log start offset, and the epoch cache is cut to the surviving offsets;
* the producer state is rebuilt from the snapshots (:mod:`broker.log.producer_snapshots`).

A load that fails part way (an I/O error, or EMFILE: out of file descriptors, which leaves the
dir online and the load to be retried) closes every segment it opened before it raises.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint import CorruptCheckpoint, Relieve, fsync_dir
from broker.log.file_cache import SegmentFileCache
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from broker.log.log_config import LogConfig
from broker.log.producer_snapshots import rebuild_producer_state
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_STEM,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_name,
)
from client.protocol.records import HEADER_SIZE, MAGIC, BatchHeader, parse_header

log = logging.getLogger(__name__)

STRAY_SUFFIXES = (".tmp", ".swap", ".deleted", ".cleaned")
SWAP_LOG_SUFFIX = LOG_SUFFIX + ".swap"


@dataclass
class LoadedLog:
    """A loaded log's state, for :meth:`broker.log.log.Log.open` to adopt."""

    segments: list[LogSegment]  # never empty
    log_start_offset: int
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager
    #: segment or snapshot files were created or removed without a directory fsync
    dir_dirty: bool


def swap_end_offset(path: Path, base: int) -> int | None:
    """The offset after the last whole batch of the segment file at ``path``, walking batch
    headers only; None when it holds no whole batch at or above ``base`` (not a cleaned segment:
    every cleaned segment holds one batch at least)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos, end = 0, None
        while pos + HEADER_SIZE <= size:
            header = parse_header(os.pread(fd, HEADER_SIZE, pos))
            if header.magic != MAGIC or header.size < HEADER_SIZE or pos + header.size > size:
                break
            if header.base_offset < (base if end is None else end):
                break
            pos, end = pos + header.size, header.next_offset
        return end
    finally:
        os.close(fd)


def complete_swaps(dir: Path) -> int:
    """Finish the log cleaner's swaps that a crash interrupted (Kafka's loader with ``.swap``
    files; :mod:`broker.log.log_cleaning`). A ``<base>.log.swap`` holds the cleaned copy of the
    segments from ``base`` up to its own end offset (a cleaned segment ends where the segments it
    replaces ended): those still present are deleted, then the swap file becomes ``<base>.log``.
    Its indexes are deleted and rebuilt by the load. A ``.swap`` that holds no whole batch is
    left to :func:`remove_stray_files`. Returns how many swaps were finished."""
    swaps = sorted(
        path
        for path in dir.iterdir()
        if path.name.endswith(SWAP_LOG_SUFFIX) and SEGMENT_STEM.match(path.name[: -len(SWAP_LOG_SUFFIX)])
    )
    finished = 0
    for swap in swaps:
        stem = swap.name[: -len(SWAP_LOG_SUFFIX)]
        base = int(stem)
        end = swap_end_offset(swap, base)
        if end is None:
            continue  # not a cleaned segment: deleted with the other stray files
        covered = sorted(
            int(path.stem)
            for path in dir.glob("*" + LOG_SUFFIX)
            if SEGMENT_STEM.match(path.stem) and base <= int(path.stem) < end
        )
        for old in reversed(covered):
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (dir / (segment_name(old) + suffix)).unlink(missing_ok=True)
        for name in (stem + INDEX_SUFFIX, stem + TIME_INDEX_SUFFIX):
            (dir / name).unlink(missing_ok=True)
            (dir / (name + ".swap")).unlink(missing_ok=True)
        os.rename(swap, dir / (stem + LOG_SUFFIX))
        log.warning(
            "%s: finished the cleaner's swap of %s for %d segment(s) in [%d, %d)",
            dir,
            swap.name,
            len(covered),
            base,
            end,
        )
        finished += 1
    if finished:
        fsync_dir(dir)
    return finished


def remove_stray_files(dir: Path) -> list[int]:
    """Delete temporary and orphaned files; return the base offsets of the segments present."""
    bases: set[int] = set()
    index_files: list[Path] = []
    for path in sorted(dir.iterdir()):  # name order: the file system's own order is its own
        if not path.is_file():
            continue
        if path.name.endswith(STRAY_SUFFIXES):
            log.warning("%s: deleting stray file %s", dir, path.name)
            path.unlink()
        elif path.suffix == LOG_SUFFIX and SEGMENT_STEM.match(path.stem):
            bases.add(int(path.stem))
        elif path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and SEGMENT_STEM.match(path.stem):
            index_files.append(path)
    for path in index_files:
        if int(path.stem) not in bases:
            log.warning("%s: deleting index %s, which has no log file", dir, path.name)
            path.unlink()
    return sorted(bases)


def open_epoch_cache(dir: Path, relieve: Relieve | None = None) -> tuple[LeaderEpochFileCache, bool]:
    """Load the leader epoch cache; on a corrupt file start empty and return False with it (the
    caller then re-scans every segment, which rebuilds the cache from the batches' epochs)."""
    path = dir / LEADER_EPOCH_CHECKPOINT
    try:
        return LeaderEpochFileCache(path, relieve), True
    except CorruptCheckpoint as e:
        log.warning("%s; rebuilding the leader epoch cache from the segments", e)
        path.unlink()
        return LeaderEpochFileCache(path, relieve), False


def assign_epoch_from_batch(cache: LeaderEpochFileCache, header: BatchHeader) -> None:
    """Record the batch's leader epoch when it is newer than the cache's latest (a follower's
    append and a segment re-scan both do this)."""
    epoch = header.partition_leader_epoch
    if epoch >= 0 and epoch > cache.latest_epoch:
        cache.assign(epoch, header.base_offset)


def end_log_after(dir: Path, segments: list[LogSegment], i: int) -> None:
    """Delete every segment after ``segments[i]``, newest first, and fsync the directory: the
    log now ends in ``segments[i]``, and a crash part way leaves a shorter log, never a hole."""
    later = segments[i + 1 :]
    if not later:
        return
    log.warning(
        "%s: deleting %d segment(s) after %s, which ends the log at offset %d",
        dir,
        len(later),
        segments[i].log_path.name,
        segments[i].next_offset,
    )
    for doomed in reversed(later):
        doomed.delete()
    del segments[i + 1 :]
    fsync_dir(dir)


def recover_segments(
    dir: Path,
    segments: list[LogSegment],
    first_unflushed: int,
    on_batch: Callable[[BatchHeader], None],
    gaps_allowed: bool = False,
) -> list[LogSegment]:
    """Load the segments below ``first_unflushed`` (their indexes checked), re-scan the rest
    (Kafka's ``recoverLog``), and end the log at the first segment that is torn: one whose
    re-scan dropped bytes, or, among the re-scanned, one that is not the last and stops short of
    the next segment's base (a roll never leaves one: it is a rolled segment whose data a power
    loss took while its name survived). The later segments are deleted before the torn tail is
    cut (:func:`end_log_after`). ``segments`` is updated in place; returns the re-scanned or
    rebuilt segments, which the caller fsyncs.

    ``gaps_allowed`` (a compacted log, docs/design.md "Log compaction") drops the second test, as
    Kafka has none: a compacted log has offset gaps by design, and a follower of one rolls at the
    first offset of a fetched batch, past a gap, so its segments may end short of the next base."""
    recovered: list[LogSegment] = []
    i = 0
    while i < len(segments):
        segment = segments[i]
        if i < first_unflushed:
            problem = segment.load()
            if problem is None:
                i += 1
                continue
            log.warning("%s; rebuilding the segment's indexes", problem)
        else:
            log.info("%s: recovering unflushed segment %s", dir, segment.log_path.name)
        recovered.append(segment)
        dropped = segment.recover(on_batch, before_truncate=lambda i=i: end_log_after(dir, segments, i))
        if dropped:
            log.warning(
                "%s: torn or corrupt tail, dropped %d bytes after offset %d",
                segment.log_path,
                dropped,
                segment.next_offset,
            )
        elif (
            not gaps_allowed
            and i >= first_unflushed
            and i + 1 < len(segments)
            and segment.next_offset != segments[i + 1].base_offset
        ):
            log.warning(
                "%s: ends at offset %d, short of the next segment's base %d: a torn tail",
                segment.log_path,
                segment.next_offset,
                segments[i + 1].base_offset,
            )
            end_log_after(dir, segments, i)
        i += 1
    return recovered


def open_segments(dir: Path, bases: list[int], segment_kwargs: dict) -> list[LogSegment]:
    """Open the segment at each of ``bases``; when one fails to open (EMFILE: out of file
    descriptors), close those already opened before raising, or their descriptors leak."""
    segments: list[LogSegment] = []
    try:
        for base in bases:
            segments.append(LogSegment(dir, base, **segment_kwargs))
    except BaseException:
        close_segments(segments)
        raise
    return segments


def close_segments(segments: list[LogSegment]) -> None:
    for segment in segments:
        segment.close()


def load_log(
    dir: Path,
    config: LogConfig,
    time_ms: Callable[[], int],
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
    file_cache: SegmentFileCache | None = None,
) -> LoadedLog:
    """Load the segments of ``dir`` (their ``.log`` descriptors through ``file_cache``),
    recovering what an unclean shutdown may have left torn. A load that fails part way (an I/O
    error, EMFILE) closes every segment it opened."""
    segment_kwargs = config.segment_kwargs(time_ms, file_cache)
    complete_swaps(dir)
    bases = remove_stray_files(dir)
    cache, cache_ok = open_epoch_cache(dir, file_cache.close_idle if file_cache is not None else None)
    if not cache_ok:
        recovery_point, clean_shutdown = 0, False
    first_unflushed = len(bases)
    if not clean_shutdown:
        first_unflushed = next(
            (i for i in range(len(bases)) if i + 1 == len(bases) or bases[i + 1] > recovery_point),
            len(bases),
        )
    segments = open_segments(dir, bases, segment_kwargs)
    try:
        return _load_segments(
            dir, config, segment_kwargs, segments, first_unflushed, cache, log_start_offset, clean_shutdown
        )
    except BaseException:
        close_segments(segments)  # every segment still open, the empty one a load creates included
        raise


def _load_segments(
    dir: Path,
    config: LogConfig,
    segment_kwargs: dict,
    segments: list[LogSegment],
    first_unflushed: int,
    cache: LeaderEpochFileCache,
    log_start_offset: int,
    clean_shutdown: bool,
) -> LoadedLog:
    """The rest of :func:`load_log`, on the opened ``segments`` (updated in place)."""

    def assign_epoch(header: BatchHeader) -> None:
        assign_epoch_from_batch(cache, header)

    recovered = recover_segments(dir, segments, first_unflushed, assign_epoch, gaps_allowed=config.compact)
    if segments and segments[-1].next_offset < log_start_offset:
        log.warning(
            "%s: log end offset %d is below the log start offset %d; deleting all segments",
            dir,
            segments[-1].next_offset,
            log_start_offset,
        )
        for segment in segments:
            segment.delete()
        segments.clear()
        recovered = []
    dir_dirty = False
    if not segments:
        segments.append(LogSegment.create(dir, log_start_offset, **segment_kwargs))
        dir_dirty = True
    log_end_offset = segments[-1].next_offset
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    for segment in recovered:
        segment.flush()
    if recovered:
        fsync_dir(dir)
    cache.truncate_from_end(log_end_offset)
    cache.truncate_from_start(log_start_offset)
    producer_state, deleted = rebuild_producer_state(
        dir, segments, log_end_offset, segment_kwargs["time_ms"](), config.producer_id_expiration_ms
    )
    log.info(
        "%s: loaded %d segment(s), log start offset %d, log end offset %d, %d producer(s)%s",
        dir,
        len(segments),
        log_start_offset,
        log_end_offset,
        len(producer_state),
        "" if clean_shutdown else f", recovered {len(recovered)} segment(s)",
    )
    return LoadedLog(list(segments), log_start_offset, cache, producer_state, dir_dirty or deleted)
