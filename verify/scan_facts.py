"""What the data sources' readers saw beside the rows: batches out of offset order and segment
bytes that frame no batch (docs/design.md "Verification job").

A log's batches must follow one another in offset order, each starting past the last offset of
the one before (Kafka's ``LogSegment`` appends only at the log end offset; the leader assigns
offsets from it, ``LogValidator`` style): two batches claiming one offset, or a batch below the
one before it, is a log that a consumer would read twice or out of order. Rows in Spark have no
file order, so the readers check it where they see it, batch by batch (:class:`OffsetOrder`,
a comparison per batch), and also note where a segment's bytes stop framing batches (a torn or
garbled header: :func:`verify.segments.scan_segment` stops there, and everything after it is
unread).

Each reader task writes what it found as one small JSON file (:func:`write_facts`) under a
directory the driver and the executors share (the job's staging directory); the driver reads
them all (:func:`read_facts`) and the checks of :mod:`verify.replica_checks` turn them into
report rows. A task that found nothing writes nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Examples kept per replica (the count is exact).
MAX_EXAMPLES = 20


@dataclass
class OffsetOrder:
    """Batches in the order read: each must start past the previous batch's last offset."""

    previous_last: int | None = None
    count: int = 0
    examples: list[dict[str, int]] = field(default_factory=list)

    def see(self, base_offset: int, last_offset: int) -> None:
        previous = self.previous_last
        if previous is not None and base_offset <= previous:
            self.count += 1
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(
                    {"base_offset": base_offset, "last_offset": last_offset, "previous_last_offset": previous}
                )
        self.previous_last = last_offset if previous is None else max(previous, last_offset)


def write_facts(
    facts_dir: str | None,
    name: str,
    identity: dict[str, Any],
    order: OffsetOrder,
    unframed: list[dict[str, int]],
) -> None:
    """``facts_dir/<name>.json`` when anything was found (written under a dot name, renamed)."""
    if facts_dir is None or (order.count == 0 and not unframed):
        return
    doc = {
        **identity,
        "out_of_order_batches": order.count,
        "examples": order.examples,
        "unframed": unframed,
    }
    final = Path(facts_dir) / f"{name}.json"
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.with_name(f".{final.name}.{os.getpid()}")
    temporary.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(temporary, final)


def read_facts(facts_dir: Path) -> list[dict[str, Any]]:
    """Every facts file under ``facts_dir`` (none when it does not exist)."""
    if not facts_dir.is_dir():
        return []
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(facts_dir.glob("*.json"))]
