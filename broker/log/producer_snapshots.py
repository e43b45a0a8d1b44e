"""Producer state on disk: the ``<offset>.snapshot`` files of a log and rebuilding the state from
them (docs/design.md "Idempotent producer"; Kafka's ``ProducerStateManager.takeSnapshot``,
``listSnapshotFiles``, ``truncateAndReload`` and ``UnifiedLog.rebuildProducerState``, KIP-98 and
KIP-360).

:mod:`broker.log.producer_state` is sans-IO; this module is its file half. A snapshot holds the
state as of an offset: the log writes one when a segment rolls and one at clean shutdown. On open
and after a truncation the state is the newest valid snapshot at or below the log end offset plus
a replay of the batch headers after it (never a record decode); snapshots above the log end
offset are deleted, and retention deletes those below the first segment
(:mod:`broker.log.retention`). Snapshots are written without fsync, as in Kafka's roll path (the
roll's "flush-log" job fsyncs the new segment's snapshot later, off the append path): a
snapshot a crash tore fails its CRC and an older one is used. A ``truncate_fully`` deletes them
first, durably, and the loader never uses a stray one (Kafka's ``removeStraySnapshots``).

Write errors are not swallowed: the caller's ``Log._io`` takes the log dir offline (KIP-112,
docs/design.md "Log dir failure").
"""

from __future__ import annotations

import contextlib
import logging
import os
from bisect import bisect_right
from pathlib import Path

from broker.log.producer_state import CorruptSnapshot, ProducerStateManager
from broker.log.segment import SEGMENT_STEM, LogSegment, segment_name

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"


def snapshot_files(dir: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every ``<offset>.snapshot`` file in ``dir``, by offset."""
    found = []
    for path in dir.glob("*" + SNAPSHOT_SUFFIX):
        if SEGMENT_STEM.match(path.stem):
            found.append((int(path.stem), path))
    return sorted(found)


def snapshot_path(dir: Path, offset: int) -> Path:
    return dir / (segment_name(offset) + SNAPSHOT_SUFFIX)


def write_snapshot(dir: Path, state: ProducerStateManager, offset: int) -> None:
    """Write ``state`` as of ``offset`` as ``<offset>.snapshot`` (temp file, then rename). A
    failed write removes the temp file and raises."""
    state.map_end_offset = offset
    path = snapshot_path(dir, offset)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(state.to_bytes())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def delete_snapshots_below(dir: Path, offset: int) -> None:
    """Delete every snapshot below ``offset`` (Kafka's ``deleteSnapshotsBefore``)."""
    for snapshot_offset, path in snapshot_files(dir):
        if snapshot_offset < offset:
            path.unlink(missing_ok=True)


def delete_snapshots_above(dir: Path, offset: int) -> bool:
    """Delete every snapshot above ``offset`` (a truncation there); True when one was deleted."""
    doomed = [path for snapshot_offset, path in snapshot_files(dir) if snapshot_offset > offset]
    for path in doomed:
        path.unlink(missing_ok=True)
    return bool(doomed)


def stray_snapshots(files: list[tuple[int, Path]], segments: list[LogSegment]) -> list[Path]:
    """Snapshots at no segment's base offset, except the newest such one when it lies above
    every base (the clean-shutdown snapshot at the LEO): Kafka's ``removeStraySnapshots``. A
    stray snapshot may describe a history the log no longer holds (a ``truncate_fully`` that a
    crash interrupted), so it is never used."""
    bases = {segment.base_offset for segment in segments}
    strays = [(offset, path) for offset, path in files if offset not in bases]
    if strays and strays[-1][0] > segments[-1].base_offset:
        strays.pop()
    return [path for _, path in strays]


def rebuild_producer_state(
    dir: Path, segments: list[LogSegment], log_end_offset: int, now_ms: int, expiration_ms: int
) -> tuple[ProducerStateManager, bool]:
    """The producer state of a log: the newest valid snapshot at or below the log end offset
    (snapshots above it describe batches no longer in the log and are deleted, and so are stray
    ones, :func:`stray_snapshots`), then every batch header after it; without a snapshot, every
    batch header from the first segment. Producers idle for ``expiration_ms`` are dropped.
    Returns the state and whether a file was deleted."""
    state: ProducerStateManager | None = None
    files = snapshot_files(dir)
    strays = stray_snapshots(files, segments)
    for path in strays:
        log.info("%s: deleting stray producer snapshot %s", dir, path.name)
        path.unlink(missing_ok=True)
    deleted = bool(strays)
    for offset, path in reversed(files):
        if path in strays:
            continue
        if offset > log_end_offset:
            path.unlink(missing_ok=True)
            deleted = True
            continue
        if state is not None:
            continue
        try:
            state = ProducerStateManager.from_bytes(path.read_bytes())
        except (OSError, CorruptSnapshot) as e:
            log.warning("%s: ignoring producer snapshot %s: %s", dir, path.name, e)
            path.unlink(missing_ok=True)
            continue
        state.map_end_offset = offset
    if state is None:
        state = ProducerStateManager(segments[0].base_offset)
    start = state.map_end_offset
    if start < log_end_offset:
        first = max(0, bisect_right(segments, start, key=lambda s: s.base_offset) - 1)
        for segment in segments[first:]:
            for header in segment.batch_headers(start):
                state.update(header)
    state.map_end_offset = log_end_offset
    state.remove_expired_producers(now_ms, expiration_ms)
    return state, deleted
