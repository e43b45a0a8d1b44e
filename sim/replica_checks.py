"""The full checks' comparisons of replicas' logs (``acked-on-leader``'s values,
``replicas-identical``, ``producer-order``; sim/invariants.py has their statements), made on the
incremental reads of :mod:`sim.log_cursor` (issue 35): each check reads and decodes only what the
logs gained since the last one, and compares only what two replicas gained since they last
compared equal, with the verdicts and messages of reading everything from the log start.

Two replicas compared equal up to some number of leading batches stay equal there for as long as
neither log's view starts again (a view's token names it): their batches are only appended to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.log_cursor import LogViews
from sim.log_reading import first_difference
from sim.producer_order import out_of_send_order

if TYPE_CHECKING:
    from broker.log import Log
    from sim.producer_order import _Ranks

Hosted = dict[tuple[str, int], list[tuple[int, "Log"]]]


class ReplicaChecks:
    """The comparisons, and what they remember between checks."""

    def __init__(self) -> None:
        self.views = LogViews()
        #: (partition, broker a, broker b) -> (a's view token, b's, leading batches known equal)
        self._equal: dict[tuple[tuple[str, int], int, int], tuple[int, int, int]] = {}

    def begin_check(self) -> None:
        self.views.begin_check()

    def values_problem(
        self, tp: tuple[str, int], leader: int, log_: Log, offsets: dict[int, bytes]
    ) -> str | None:
        """The first acknowledged offset whose value the leader's log does not hold, or None."""
        held = self.views.values(leader, tp, log_)
        if all(held.get(offset) == value for offset, value in offsets.items()):
            return None
        for offset, value in sorted(offsets.items()):
            if held.get(offset) != value:
                return (
                    f"{tp[0]}-{tp[1]} offset {offset} was acknowledged as {value!r}; leader {leader} "
                    f"holds {held.get(offset)!r}"
                )
        return None

    def identical_problem(self, tp: tuple[str, int], replicas: list[tuple[int, Log]]) -> str | None:
        """Two replicas whose batches below the lower of their HWs differ, or None."""
        views = self.views
        rows = [
            (broker_id, log_.high_watermark, *views.batch_count(broker_id, tp, log_, log_.high_watermark))
            for broker_id, log_ in replicas
        ]
        for i, (a, hw_a, view_a, _) in enumerate(rows):
            for b, hw_b, view_b, _ in rows[i + 1 :]:
                bound = min(hw_a, hw_b)
                count_a = view_a.count_below(bound) if view_a is not None else 0
                count_b = view_b.count_below(bound) if view_b is not None else 0
                if count_a == count_b == 0:
                    continue
                tokens = (view_a.token if view_a else 0, view_b.token if view_b else 0)
                known = self._known(tp, a, b, tokens)
                if count_a == count_b and count_a <= known:
                    continue
                left = view_a.batches[:count_a] if view_a is not None else []
                right = view_b.batches[:count_b] if view_b is not None else []
                if count_a != count_b or left[known:] != right[known:]:
                    return (
                        f"brokers {a} and {b} differ below HW {bound} of {tp[0]}-{tp[1]}: "
                        f"{first_difference(left, right)}"
                    )
                self._equal[(tp, a, b)] = (*tokens, count_a)
        return None

    def _known(self, tp: tuple[str, int], a: int, b: int, tokens: tuple[int, int]) -> int:
        """How many leading batches of a and b were found equal, while both views last."""
        found = self._equal.get((tp, a, b))
        return found[2] if found is not None and found[:2] == tokens else 0

    def order_problem(self, tp: tuple[str, int], leader: int, log_: Log, ledger: _Ranks) -> str | None:
        """``out_of_send_order`` over the leader's records below its HW."""
        records = self.views.records(leader, tp, log_, log_.high_watermark)
        return out_of_send_order(((r.offset, r.value) for r in records), ledger)
