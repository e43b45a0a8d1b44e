"""The ``producer-order`` invariant (docs/guarantees.md "Idempotent producer"; KIP-98): an
idempotent producer's records stand in a partition's committed log in the order the producer
took them, and a record whose send failed may be in the log, but never after a later one of the
same producer. Issue 18's window 10 broke it: a producer that took a new producer id after a
failed batch (instead of bumping its epoch, KIP-360) let the failed batch's late request land
after the later records, since nothing fenced the old id.

The simulator's ledger (sim/workload.py) ranks every record by its producer's append order;
the check reads the committed records of one partition in offset order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class _Ranks(Protocol):
    ranks: dict[bytes, tuple[int, int]]
    failures: list[tuple[str, int | None, bytes, str]]


def out_of_send_order(records: Iterable[tuple[int, bytes | None]], ledger: _Ranks) -> str | None:
    """What breaks the order among ``(offset, value)`` in offset order, or None."""
    last: dict[int, tuple[int, int, bytes]] = {}  # producer -> (rank, offset, value) of its latest
    for offset, value in records:
        found = ledger.ranks.get(bytes(value)) if value is not None else None
        if found is None:
            continue
        producer, rank = found
        before = last.get(producer)
        if before is not None and rank < before[0]:
            failed = {v for _, _, v, _ in ledger.failures}
            return (
                f"producer {producer}'s record {bytes(value)!r} (sent #{rank}"
                f"{', its send failed' if bytes(value) in failed else ''}) is at offset {offset}, "
                f"after its later record {before[2]!r} (sent #{before[0]}) at offset {before[1]}"
            )
        last[producer] = (rank, offset, bytes(value))
    return None
