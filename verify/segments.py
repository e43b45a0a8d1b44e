"""Read a replica's segment files straight from a log dir and compare replicas.

Every replica of a partition must hold byte-identical batches below the high watermark: the
leader assigns offsets and stamps its leader epoch before any follower copies a batch, and
followers copy bytes without re-encoding. This module reads ``<log.dir>/<topic>-<p>/*.log``
with :mod:`client.protocol.records` only (no broker code), stopping at the first torn or
corrupt batch, so it can read the logs of a live broker as well as a dead one.

:func:`scan_replica` is the verification job's view (docs/design.md "Verification job"): it does not
stop at a batch that fails its CRC but reports it (``crc_ok=False``) and goes on, because a corrupt
batch below the high watermark is exactly what the divergence check must see; it stops only where
the bytes no longer frame a batch (a torn tail).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from client.protocol.records import BatchHeader, CorruptRecordError, compute_crc, iter_batches, valid_prefix


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes


def read_replica(partition_dir: Path) -> list[StoredBatch]:
    """Every whole batch in a partition directory's segments, in offset order."""
    batches: list[StoredBatch] = []
    for segment in sorted(partition_dir.glob("*.log")):
        buf = segment.read_bytes()
        _, found = valid_prefix(buf)
        for pos, header in found:
            batches.append(
                StoredBatch(
                    header.base_offset,
                    header.last_offset,
                    header.partition_leader_epoch,
                    bytes(buf[pos : pos + header.size]),
                )
            )
    return batches


@dataclass(frozen=True)
class Divergence:
    """Two replicas disagree on the batch at ``base_offset`` (or one lacks it)."""

    topic: str
    partition: int
    base_offset: int
    replicas: tuple[str, str]
    reason: str


def compare_replicas(
    topic: str, partition: int, replicas: dict[str, list[StoredBatch]], below: int
) -> list[Divergence]:
    """Compare every replica's batches that end below offset ``below`` (the high watermark) with
    the first replica's. A replica missing a batch below ``below`` that another holds is a
    divergence too: below the HW every ISR member must have everything."""
    problems: list[Divergence] = []
    committed = {
        name: {b.base_offset: b for b in batches if b.last_offset < below}
        for name, batches in replicas.items()
    }
    names = sorted(committed)
    if not names:
        return problems
    reference = names[0]
    for other in names[1:]:
        for base in sorted(set(committed[reference]) | set(committed[other])):
            mine, theirs = committed[reference].get(base), committed[other].get(base)
            if mine is None or theirs is None:
                holder = other if mine is None else reference
                problems.append(
                    Divergence(
                        topic, partition, base, (reference, other), f"only {holder} has a batch at {base}"
                    )
                )
            elif mine.data != theirs.data:
                problems.append(
                    Divergence(topic, partition, base, (reference, other), f"batches at {base} differ")
                )
    return problems


# -- the verification job's view: every framed batch, CRC-valid or not ----------------------------


@dataclass(frozen=True)
class ScannedBatch:
    """One framed batch of a segment; ``data`` is a view into the mapped segment file."""

    segment_base: int
    position: int
    header: BatchHeader
    data: memoryview
    crc_ok: bool


@dataclass
class SegmentScan:
    """Where a segment's framed batches end, and the file's size (bytes past ``end`` are torn)."""

    base_offset: int
    end: int = 0
    size: int = 0


def segment_files(partition_dir: Path) -> list[tuple[int, Path]]:
    """``(base offset, path)`` of every ``<20 digits>.log`` in a partition directory, in order."""
    found = []
    for path in partition_dir.glob("*.log"):
        if len(path.stem) == 20 and path.stem.isdigit():
            found.append((int(path.stem), path))
    return sorted(found)


def scan_segment(buf: bytes | bytearray | memoryview) -> tuple[list[tuple[int, BatchHeader, bool]], int]:
    """``[(position, header, crc_ok)]`` of every framed batch in ``buf`` and where framing ends.
    Framing ends at a short, oversized or wrong-magic batch header; a bad CRC does not end it."""
    view = memoryview(buf)
    found: list[tuple[int, BatchHeader, bool]] = []
    end = 0
    try:
        for pos, header in iter_batches(view, check_crc=False):
            end = pos + header.size
            found.append((pos, header, compute_crc(view[pos:end]) == header.crc))
    except CorruptRecordError:
        pass
    return found, end


def scan_replica(partition_dir: Path, scans: list[SegmentScan] | None = None) -> Iterator[ScannedBatch]:
    """Every framed batch of a partition directory's segments, in file order. Each segment is
    read whole (one segment in memory at a time); ``data`` views the bytes read. When ``scans``
    is given, one :class:`SegmentScan` per segment is appended to it."""
    for base, path in segment_files(partition_dir):
        scan = SegmentScan(base)
        if scans is not None:
            scans.append(scan)
        try:
            buf = path.read_bytes()
        except FileNotFoundError:  # deleted by retention or truncation while we listed
            continue
        scan.size = len(buf)
        view = memoryview(buf)
        found, scan.end = scan_segment(view)
        for pos, header, crc_ok in found:
            yield ScannedBatch(base, pos, header, view[pos : pos + header.size], crc_ok)
