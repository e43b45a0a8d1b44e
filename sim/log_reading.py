"""Reading a replica's log as the simulator's invariants compare it (docs/design.md
"Simulation"): its batches byte for byte, or its records decoded, below an offset (the HW), through
the real :meth:`broker.log.Log.read`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from client.protocol.records import decode_records, iter_batches

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
        for position, header in iter_batches(data):
            last = header.base_offset + header.last_offset_delta
            if header.base_offset >= offset:
                out.append((header.base_offset, last, data[position : position + header.size]))
            offset = last + 1
    return out


def records_below(log_: Log, end: int) -> Iterable[Any]:
    offset = log_.log_start_offset
    while offset < end:
        data = log_.read(offset, _READ_BYTES, max_offset=end).records
        if not data:
            return
        last = offset
        for _, record in decode_records(data):
            if record.offset >= offset:
                yield record
            last = record.offset
        offset = last + 1


def first_difference(left: list[tuple[int, int, bytes]], right: list[tuple[int, int, bytes]]) -> str:
    for x, y in zip(left, right, strict=False):
        if x != y:
            return f"batch {x[0]}..{x[1]} ({len(x[2])} bytes) vs {y[0]}..{y[1]} ({len(y[2])} bytes)"
    return f"{len(left)} batches vs {len(right)}"
