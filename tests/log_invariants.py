"""What a reloaded log must satisfy after a process crash or a power loss (test-only; the
checker of tests/unit/test_log_crash_harness.py).

A *lineage* is the history a log's offsets describe at one moment: every batch header it ever
held since its last ``truncate_fully_and_start_at``, those retention deleted included (their
producers outlive them, KIP-360), minus whatever a truncation removed. A crash or power loss
inside an operation leaves the lineage before it or the one after it, and the reloaded log must
be a contiguous run of that lineage (a power loss may lose a tail that was never fsynced; it
may bring back segments whose deletion was not yet durable, at the front). :func:`check_reload`
returns what is wrong, or None.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from kafka.record.memory_records import MemoryRecords

from broker.log import Log
from broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from broker.log.leader_epoch import EpochEntry
from broker.log.producer_state import ProducerStateManager
from client.protocol.records import BatchHeader, iter_batches


@dataclass(frozen=True)
class Lineage:
    headers: tuple[BatchHeader, ...]
    start: int  # where the lineage begins (0, or the offset of the last truncate_fully)


def key(header: BatchHeader) -> tuple[int, ...]:
    return (header.base_offset, header.last_offset, header.crc, header.partition_leader_epoch)


def segment_headers(log: Log) -> list[list[BatchHeader]]:
    """Every batch of every segment file, read from disk, kafka-python checking each CRC."""
    out: list[list[BatchHeader]] = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        records = MemoryRecords(data)
        decoded = []
        while records.has_next():
            batch = records.next_batch()
            if not batch.validate_crc():
                raise AssertionError(
                    f"{segment.log_path.name}: kafka-python finds a bad CRC at {batch.base_offset}"
                )
            decoded.append((batch.base_offset, batch.next_offset))
        headers = [h for _, h in iter_batches(data)]
        if decoded != [(h.base_offset, h.next_offset) for h in headers]:
            raise AssertionError(f"{segment.log_path.name}: kafka-python reads {decoded}")
        out.append(headers)
    return out


def index_problems(log: Log, per_segment: list[list[BatchHeader]]) -> list[str]:
    """Offset index entries must name a batch's last offset and its start; time index entries a
    batch's last offset and max timestamp."""
    problems = []
    for segment, headers in zip(log.segments, per_segment, strict=True):
        starts, pos = {}, 0
        for header in headers:
            starts[pos] = header
            pos += header.size
        raw = segment.index.path.read_bytes()
        for rel, position in OFFSET_ENTRY.iter_unpack(raw[: len(raw) - len(raw) % OFFSET_ENTRY.size]):
            header = starts.get(position)
            if header is None or header.last_offset != segment.base_offset + rel:
                problems.append(f"{segment.index.path.name}: entry ({rel}, {position}) is not on a batch")
        times = {(h.max_timestamp, h.last_offset) for h in headers}
        raw = segment.time_index.path.read_bytes()
        for ts, rel in TIME_ENTRY.iter_unpack(raw[: len(raw) - len(raw) % TIME_ENTRY.size]):
            if (ts, segment.base_offset + rel) not in times:
                problems.append(f"{segment.time_index.path.name}: entry ({ts}, {rel}) is not on a batch")
    return problems


def rebuilt_epochs(headers: list[BatchHeader], log_start: int) -> list[EpochEntry]:
    entries: list[EpochEntry] = []
    for header in headers:
        if not entries or header.partition_leader_epoch > entries[-1].epoch:
            entries.append(EpochEntry(header.partition_leader_epoch, header.base_offset))
    before = [e for e in entries if e.start_offset <= log_start]
    if before:
        entries = [
            EpochEntry(before[-1].epoch, log_start),
            *(e for e in entries if e.start_offset > log_start),
        ]
    return entries


def producers(state: ProducerStateManager) -> dict[int, tuple]:
    return {pid: (e.producer_epoch, e.last_timestamp, list(e.batches)) for pid, e in state.producers.items()}


def fold(headers: list[BatchHeader]) -> dict[int, tuple]:
    state = ProducerStateManager()
    for header in headers:
        state.update(header)
    return producers(state)


def run_in(lineage: Lineage, surviving: list[BatchHeader], first_base: int) -> int | None:
    """Where the surviving batches sit in the lineage (the index of the first), or None."""
    keys = [key(h) for h in lineage.headers]
    if not surviving:
        return next((i for i, h in enumerate(lineage.headers) if h.base_offset >= first_base), len(keys))
    for i, k in enumerate(keys):
        if k == key(surviving[0]):
            return i if keys[i : i + len(surviving)] == [key(h) for h in surviving] else None
    return None


#: how much of the history below the surviving batches the producer state may have lost: none
#: (a process crash), all or none (a crash inside ``truncate_fully``, which deletes every snapshot
#: first), or any older part (a power loss may take the newest snapshots that held it)
EXACT, ALL_OR_NONE, ANY = "exact", "all or none", "any"


def check_against(log: Log, lineage: Lineage, surviving: list[BatchHeader], history_loss: str) -> str | None:
    first_base = log.segments[0].base_offset
    at = run_in(lineage, surviving, first_base)
    if at is None:
        return "the surviving batches are not a contiguous run of the lineage"
    end = lineage.headers[-1].next_offset if lineage.headers else lineage.start
    if not surviving and not lineage.start <= first_base <= end:
        return f"an empty log at {first_base}, outside the lineage's [{lineage.start}, {end}]"
    history = list(lineage.headers[:at])
    loaded = producers(log.producer_state)
    histories = {EXACT: [len(history)], ALL_OR_NONE: [0, len(history)], ANY: range(len(history) + 1)}[
        history_loss
    ]
    if not any(fold(history[:m] + surviving) == loaded for m in histories):
        return (
            f"producer state {loaded} is no fold of the lineage's history and the batches {fold(surviving)}"
        )
    entries = log.leader_epoch_cache.entries
    # The cache's truncateFromStart is durable at once, the log start offset only at its next
    # checkpoint (as in Kafka): after a crash the first entry may start above the log start.
    expected = rebuilt_epochs(surviving, max(log.log_start_offset, entries[0].start_offset if entries else 0))
    empty_log_entry = not surviving and len(entries) == 1 and entries[0].start_offset == log.log_end_offset
    if entries != expected and not empty_log_entry:
        return f"epoch cache {entries}, a rebuild from the batches gives {expected}"
    return None


def check_reload(log: Log, candidates: list[Lineage], history_loss: str) -> str | None:
    """What is wrong with ``log`` (just reloaded) given the lineages it may show, or None."""
    try:
        per_segment = segment_headers(log)
    except (AssertionError, ValueError, struct.error) as e:
        return str(e)
    surviving = [h for headers in per_segment for h in headers]
    problems = index_problems(log, per_segment)
    for before, after, headers in zip(log.segments, log.segments[1:], per_segment, strict=False):
        if not headers:
            problems.append(f"empty segment {before.base_offset} is not the last")
        elif before.next_offset != after.base_offset:
            problems.append(
                f"segment {before.base_offset} ends at {before.next_offset}, the next starts later"
            )
    for a, b in zip(surviving, surviving[1:], strict=False):
        if b.base_offset != a.next_offset:
            problems.append(f"offsets jump from {a.next_offset} to {b.base_offset}")
    leo = log.log_end_offset
    if leo != (surviving[-1].next_offset if surviving else log.segments[-1].base_offset):
        problems.append(f"log end offset {leo} is not where the last batch ends")
    if not log.segments[0].base_offset <= log.log_start_offset <= log.high_watermark <= leo:
        problems.append(f"not first base <= log start <= HW <= LEO: {log}")
    if log.recovery_point > leo:
        problems.append(f"recovery point {log.recovery_point} above the LEO {leo}")
    if problems:
        return "; ".join(problems)
    reasons = [check_against(log, lineage, surviving, history_loss) for lineage in candidates]
    return None if None in reasons else " / ".join(str(r) for r in reasons)


def read_lineage(dir: Path, history: list[BatchHeader], start: int) -> Lineage:
    """The lineage of the log in ``dir`` as it is on disk (a crash-free run), after ``history``."""
    live: list[BatchHeader] = []
    paths = sorted(dir.glob("*.log"))
    for path in paths:
        live.extend(h for _, h in iter_batches(path.read_bytes()))
    first_base = int(paths[0].stem) if paths else start
    return Lineage(tuple([h for h in history if h.last_offset < first_base] + live), start)
