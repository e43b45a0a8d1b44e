"""Which of two consumer-ledger facts came first, as the consumer group's rules compare them
(docs/guarantees.md, "A consumer group under chaos"; :mod:`ledger.consumed`).

Every fact carries ``time_ms``, the clock of the process that recorded it, and ``seq``, the
writer's running count, in the order the writer was handed the facts. Facts of one member
incarnation come from one process, in its order (floodmark's consumer, or one
``chaos.kafka_member`` process whose pipe the parent reads line by line): ``(time_ms, seq)``
orders them. Facts of two different members do not: with ``--client kafka`` each member is a
process of its own stamping its own clock, and ``seq`` is only the order in which
``chaos/kafka_consumers.py:apply_line`` happened to read the pipes. So two members' facts are
ordered by ``time_ms`` alone, and two of one millisecond are unordered: neither is before the
other, and no rule calls a violation on the strength of such a tie.

* :func:`before` - the order above;
* :class:`BestBefore` - facts of one partition, and the best of them (the highest ``value``;
  the earliest of equals) before a given fact: the highest commit acknowledged before an
  assignment or a commit, the newest generation assigned before a commit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any

Fact = Mapping[str, Any]  # needs member, time_ms, seq


def before(a: Fact, b: Fact) -> bool:
    """Whether ``a`` was recorded before ``b``: by ``(time_ms, seq)`` for one member's facts, by
    ``time_ms`` alone for two members' (a tie is no order)."""
    if a["member"] == b["member"]:
        return (a["time_ms"], a["seq"]) < (b["time_ms"], b["seq"])
    return bool(a["time_ms"] < b["time_ms"])


class BestBefore:
    """``facts`` (of one partition) and, for any fact, the best of them :func:`before` it."""

    def __init__(self, facts: Iterable[Fact], value: Callable[[Fact], int]) -> None:
        self.facts = sorted(facts, key=lambda f: (f["time_ms"], f["seq"]))
        self._value = value
        self._times = [f["time_ms"] for f in self.facts]
        # the best of the first i facts (the earliest of equals)
        self._best = list(accumulate(self.facts, lambda best, f: f if value(f) > value(best) else best))

    def best(self, at: Fact) -> Fact | None:
        """The fact with the highest value before ``at`` (None: none is)."""
        t = at["time_ms"]
        i = bisect_left(self._times, t)
        found = self._best[i - 1] if i else None  # every fact of an earlier millisecond
        for f in self.facts[i : bisect_right(self._times, t)]:  # of the same one: only ``at``'s member's
            if before(f, at) and (found is None or self._value(f) > self._value(found)):
                found = f
        return found

    def before(self, at: Fact) -> list[Fact]:
        """Every fact before ``at``, in the ledger's order."""
        t = at["time_ms"]
        return [f for f in self.facts[: bisect_right(self._times, t)] if before(f, at)]
