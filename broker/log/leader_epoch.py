"""The leader epoch cache of KIP-101 (Kafka's LeaderEpochFileCache; docs/guarantees.md
"No acknowledged write lost, no divergence").

Each replica remembers, per leader epoch, the first offset written in it: a list of
``(epoch, start_offset)`` with both strictly increasing, persisted in the partition's
``leader-epoch-checkpoint`` in Kafka's text format::

    0
    <count>
    <epoch> <start_offset>      (one line per entry)

``end_offset_for`` answers OffsetsForLeaderEpoch: the end offset of an epoch is the start offset
of the next epoch the cache knows. With entries (1, 20) (2, 80) (3, 120), a follower whose last
epoch is 1 is told 80, and truncates there if its log goes further.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint import (
    CorruptCheckpoint,
    Relieve,
    atomic_write_text,
    format_checkpoint,
    parse_int,
    read_checkpoint_entries,
)

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Kafka's LeaderEpochFileCache. Every change is persisted before it is applied in memory,
    so a failed write (an I/O error in the log dir) changes nothing."""

    def __init__(self, path: Path, relieve: Relieve | None = None) -> None:
        self.path = Path(path)
        self.relieve = relieve  # gives descriptors back when a write meets EMFILE (atomic_write_text)
        self._entries: list[EpochEntry] = self._load()

    def _load(self) -> list[EpochEntry]:
        rows = read_checkpoint_entries(self.path, fields=2)
        if rows is None:
            return []
        entries: list[EpochEntry] = []
        for number, (epoch, offset) in enumerate(rows, start=3):
            entry = EpochEntry(parse_int(self.path, number, epoch), parse_int(self.path, number, offset))
            if entry.epoch < 0 or entry.start_offset < 0:
                raise CorruptCheckpoint(f"{self.path}: line {number}: negative epoch or offset")
            if entries and (
                entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset
            ):
                raise CorruptCheckpoint(
                    f"{self.path}: line {number}: entry {entry} does not follow {entries[-1]}"
                )
            entries.append(entry)
        return entries

    def _replace(self, entries: list[EpochEntry]) -> None:
        """Persist ``entries`` (temp file, fsync, rename), then adopt them: a failed write
        raises and leaves both the file and the cache as they were."""
        atomic_write_text(
            self.path, format_checkpoint([(e.epoch, e.start_offset) for e in entries]), self.relieve
        )
        self._entries = entries

    # ------------------------------------------------------------------ queries

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch: the LEO for the latest epoch; otherwise the
        largest known epoch <= requested with the start offset of the first epoch above it; for an
        epoch below the first known one, (requested, start of the first epoch) as in Kafka (older
        epochs were removed, or an unclean leader never had them: the asker must truncate there);
        undefined when the cache is empty or the requested epoch is above the latest."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        if requested_epoch > self.latest_epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch < self._entries[0].epoch:
            return requested_epoch, self._entries[0].start_offset
        previous = self._entries[0]
        for entry in self._entries:
            if entry.epoch > requested_epoch:
                return previous.epoch, entry.start_offset
            previous = entry
        raise AssertionError("unreachable: the latest epoch is above the requested one")

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which ``offset`` was written: that of the last entry starting at or before it."""
        epoch = UNDEFINED_EPOCH
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            epoch = entry.epoch
        return epoch

    # ------------------------------------------------------------------ changes

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``. A no-op unless ``epoch`` is above the
        latest; entries that start at or after ``start_offset`` conflict with it and are removed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        latest = self.latest_epoch
        if epoch <= latest:
            if epoch < latest:
                log.warning(
                    "%s: ignoring epoch %d at offset %d, below the latest epoch %d",
                    self.path,
                    epoch,
                    start_offset,
                    latest,
                )
            return
        kept = [e for e in self._entries if e.start_offset < start_offset]
        removed = self._entries[len(kept) :]
        # Kafka's maybeTruncateNonMonotonicEntries warns of non-trivial removals only: one epoch
        # that started where the new one starts wrote nothing (a leader re-elected with no append)
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning(
                "%s: epoch %d at offset %d removes conflicting entries %s",
                self.path,
                epoch,
                start_offset,
                removed,
            )
        self._replace([*kept, EpochEntry(epoch, start_offset)])

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget every epoch that starts at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._replace([e for e in self._entries if e.start_offset < end_offset])

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs that lie wholly before ``start_offset``; the one covering it now starts there."""
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if not before:
            return
        after = [e for e in self._entries if e.start_offset > start_offset]
        updated = [EpochEntry(before[-1].epoch, start_offset), *after]
        if updated != self._entries:
            self._replace(updated)

    def clear(self) -> None:
        self._replace([])
