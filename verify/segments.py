"""Read a replica's segment files straight from a log dir and compare replicas (SPEC 5.3, 8).

Every replica of a partition must hold byte-identical batches below the high watermark: the
leader assigns offsets and stamps its leader epoch before any follower copies a batch, and
followers copy bytes without re-encoding. This module reads ``<log.dir>/<topic>-<p>/*.log``
with :mod:`client.protocol.records` only (no broker code), stopping at the first torn or
corrupt batch, so it can read the logs of a live broker as well as a dead one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from client.protocol.records import valid_prefix


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
                StoredBatch(header.base_offset, header.last_offset, header.partition_leader_epoch,
                            bytes(buf[pos : pos + header.size]))
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
        name: {b.base_offset: b for b in batches if b.last_offset < below} for name, batches in replicas.items()
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
                    Divergence(topic, partition, base, (reference, other), f"only {holder} has a batch at {base}")
                )
            elif mine.data != theirs.data:
                problems.append(
                    Divergence(topic, partition, base, (reference, other), f"batches at {base} differ")
                )
    return problems
