"""Reading a replica's log as the simulator's invariants compare it (docs/design.md
"Simulation"): its batches byte for byte, or its records decoded, below an offset (the HW), through
the real :meth:`broker.log.Log.read`, moving batch by batch to each batch's next offset as Kafka's
readers do (``batch.nextOffset``), so compacted batches and the cleaner's empty batches are read once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from client.protocol.records import Record, decode_batches, iter_batches

if TYPE_CHECKING:
    from broker.log import Log

_READ_BYTES = 1 << 20


def batches_below(log_: Log, end: int) -> list[tuple[int, int, bytes]]:
    """(base offset, last offset, bytes) of every batch wholly below ``end``."""
    out: list[tuple[int, int, bytes]] = []
    offset = log_.log_start_offset
    while offset < end:
        data = bytes(log_.read(offset, _READ_BYTES, max_offset=end).records)
        if not data:
            break
        start = offset
        for position, header in iter_batches(data):
            if header.base_offset >= start:
                out.append((header.base_offset, header.last_offset, data[position : position + header.size]))
            offset = max(offset, header.next_offset)
        _check_progress(log_, start, offset)
    return out


def records_below(log_: Log, end: int, start: int = 0) -> Iterator[Record]:
    """Every record from ``start`` (or the log start offset, if later) up to ``end``, read batch
    by batch: the position moves to each batch's next offset, never to its last record + 1, which
    after compaction can point back into the same batch (the cleaner keeps a batch's last offset
    when it removes its last records, and keeps empty batches)."""
    offset = max(start, log_.log_start_offset)
    while offset < end:
        data = log_.read(offset, _READ_BYTES, max_offset=end).records
        if not data:
            return
        start = offset
        for header, records in decode_batches(data):
            yield from (record for record in records if record.offset >= start)
            offset = max(offset, header.next_offset)
        _check_progress(log_, start, offset)


def _check_progress(log_: Log, start: int, offset: int) -> None:
    if offset <= start:
        raise RuntimeError(
            f"a read of {log_.topic}-{log_.partition} at {start} returned no batch ending above it"
        )


def first_difference(left: list[tuple[int, int, bytes]], right: list[tuple[int, int, bytes]]) -> str:
    for x, y in zip(left, right, strict=False):
        if x != y:
            return f"batch {x[0]}..{x[1]} ({len(x[2])} bytes) vs {y[0]}..{y[1]} ({len(y[2])} bytes)"
    return f"{len(left)} batches vs {len(right)}"
