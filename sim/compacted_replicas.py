"""``replicas-identical`` for compacted logs (docs/design.md "Log compaction"; Kafka's cleaner
runs on each broker on its own, so two replicas of a compacted partition hold different batches:
one may have dropped a superseded record the other still keeps, or kept an empty batch).

What must agree is every record both replicas hold: below the lower of their HWs, a record at
an offset is the same record (key, value, timestamp) on both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.types import TopicPartition
from sim.log_reading import records_below

if TYPE_CHECKING:
    from broker.log import Log


def compacted_difference(tp: TopicPartition, replicas: list[tuple[int, Log]]) -> str | None:
    """The first record two replicas of a compacted partition hold differently, or None."""
    held = [
        (
            broker,
            log_.high_watermark,
            {r.offset: (r.key, r.value, r.timestamp) for r in records_below(log_, log_.high_watermark)},
        )
        for broker, log_ in replicas
    ]
    for i, (a, hw_a, records_a) in enumerate(held):
        for b, hw_b, records_b in held[i + 1 :]:
            bound = min(hw_a, hw_b)
            for offset in sorted(set(records_a) & set(records_b)):
                if offset < bound and records_a[offset] != records_b[offset]:
                    return (
                        f"brokers {a} and {b} hold different records at offset {offset} of compacted "
                        f"{tp.topic}-{tp.partition} below HW {bound}: {records_a[offset]!r} vs {records_b[offset]!r}"
                    )
    return None
