"""The consumer group's delivery rules over its small facts (docs/guarantees.md, "Verification";
issue 34): pure functions of the consumer ledger's ``assigned`` and ``committed`` rows (collected
to the driver: a few per member and second) and of the per-assignment summaries that
:mod:`verify.group_delivery` aggregates from the ``consumed`` rows in Spark.

An *assignment* is one member incarnation's partition in one generation, ``(member, generation,
topic, partition)``, as Kafka's classic protocol hands it out (SyncGroup, then the
ConsumerRebalanceListener's ``onPartitionsAssigned``: the ledger's ``assigned`` row). It ends
where the member's next generation begins (its next ``assigned`` rows) or with the member; the
ledger records no revoke, and needs none: every fact carries the generation it happened in.
"Before" is the ledger's order, ``(time_ms, seq)``, as :func:`verify.consumer_checks.commit_went_backwards`
orders commits.

* :func:`resumed_below_commit` - an owner whose lowest consumed offset of an assignment is below
  the highest commit the coordinator acknowledged for that partition before the assignment: the
  group resumed below an acknowledged commit (OffsetFetch answered an offset the coordinator had
  lost; Kafka's consumer resets to ``auto.offset.reset`` only when there is no commit at all);
* :func:`fenced_commit_accepted` - a commit acknowledged under a generation older than the
  partition's newest assignment at its acknowledgement: the coordinator should have refused it
  with ILLEGAL_GENERATION (Kafka's GroupCoordinator fences OffsetCommit by generation);
* :func:`consumed_unassigned` - records a member consumed in a generation whose assignment of it
  does not hold the partition, and the workload's own count of them (``outside_assignment`` in
  the ledger's closing record);
* :func:`commit_probes` / :func:`commit_ahead` - a commit past what its member had consumed of the
  assignment when it was acknowledged: the last record the committed log holds below the commit
  must have been consumed by the member before it (``commitSync`` commits the position: the last
  consumed offset + 1); gaps the log itself has (compaction, control batches) are skipped;
* :func:`skip_candidates` - assignments whose consumed offsets inside the committed log are fewer
  than the log offsets between the lowest and the highest of them: their position may have moved
  past a record never returned (:mod:`verify.group_delivery` names the records).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ledger.consumed import ASSIGNED, COMMITTED, NO_PARTITION

Key = tuple[str, int, str, int]  # an assignment: (member, generation, topic, partition)
TopicPartition = tuple[str, int]
Order = tuple[int, int]  # (time_ms, seq): the ledger's order of facts
KEY_COLUMNS = ("member", "generation", "topic", "partition")


def key_of(row: Mapping[str, Any]) -> Key:
    return (row["member"], row["generation"], row["topic"], row["partition"])


def order_of(row: Mapping[str, Any]) -> Order:
    return (row["time_ms"], row["seq"])


@dataclass(frozen=True)
class Bounds:
    """The committed log of one partition: its lowest and highest offset, and whether every
    offset between them holds a record (no compaction, no control batch)."""

    log_min: int
    log_max: int
    records: int

    @property
    def gapless(self) -> bool:
        return self.records == self.log_max - self.log_min + 1


class GroupFacts:
    """The assignments and commits of the consumer ledger (its ``assigned`` and ``committed``
    rows), indexed for the rules below."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        #: each assignment's first ``assigned`` row, in the ledger's order
        self.assignments: dict[Key, Order] = {}
        assigned: dict[TopicPartition, list[tuple[Order, int, str]]] = defaultdict(list)
        commits: dict[TopicPartition, list[Mapping[str, Any]]] = defaultdict(list)
        joined: dict[str, set[tuple[int, int]]] = defaultdict(set)
        for row in rows:
            tp = (row["topic"], row["partition"])
            if row["kind"] == COMMITTED:
                commits[tp].append(row)
            elif row["kind"] == ASSIGNED:
                joined[row["member"]].add((row["seq"], row["generation"]))
                if row["partition"] != NO_PARTITION:
                    key = key_of(row)
                    self.assignments[key] = min(self.assignments.get(key, order_of(row)), order_of(row))
                    assigned[tp].append((order_of(row), row["generation"], row["member"]))
        #: per partition: (order, generation, member) of each assignment, in the ledger's order
        self.assigned = {tp: sorted(a) for tp, a in assigned.items()}
        #: per partition: its acknowledged commits, in the ledger's order
        self.commits = {tp: sorted(c, key=order_of) for tp, c in commits.items()}
        #: per member: (seq, generation) of each generation it joined (empty assignments too)
        self.joined = {m: sorted(j) for m, j in joined.items()}
        # per partition: the commits' orders and the highest commit up to each; the assignments'
        # orders and the newest generation up to each (for handed and newest_generation)
        self._commit_orders = {tp: [order_of(c) for c in cs] for tp, cs in self.commits.items()}
        self._highest = {
            tp: list(accumulate(cs, lambda best, c: c if c["offset"] > best["offset"] else best))
            for tp, cs in self.commits.items()
        }
        self._assigned_orders = {tp: [o for o, _, _ in a] for tp, a in self.assigned.items()}
        self._newest = {tp: list(accumulate((g for _, g, _ in a), max)) for tp, a in self.assigned.items()}

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> GroupFacts:
        return cls(rows)

    def handed(self, tp: TopicPartition, before: Order) -> Mapping[str, Any] | None:
        """The highest commit of ``tp`` acknowledged before ``before`` (the earliest of equals)."""
        i = bisect_left(self._commit_orders.get(tp, []), before)
        return self._highest[tp][i - 1] if i else None

    def newest_generation(self, tp: TopicPartition, before: Order) -> int | None:
        """The newest generation that assigned ``tp`` before ``before`` (None: none yet)."""
        i = bisect_left(self._assigned_orders.get(tp, []), before)
        return self._newest[tp][i - 1] if i else None


# -- the rules ------------------------------------------------------------------------------------


def resumed_below_commit(facts: GroupFacts, stats: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each assignment whose lowest consumed offset (``stats``' ``first_offset``) is below the
    highest commit acknowledged for its partition before the assignment, with that commit."""
    found = []
    for s in stats:
        at = facts.assignments.get(key_of(s))
        if at is None:
            continue  # consumed_unassigned's
        prior = facts.handed((s["topic"], s["partition"]), at)
        if prior is not None and s["first_offset"] < prior["offset"]:
            found.append(
                {
                    "topic": s["topic"],
                    "partition": s["partition"],
                    "member": s["member"],
                    "generation": s["generation"],
                    "first_offset": s["first_offset"],
                    "assigned_time_ms": at[0],
                    "commit_offset": prior["offset"],
                    "commit_member": prior["member"],
                    "commit_generation": prior["generation"],
                    "commit_time_ms": prior["time_ms"],
                }
            )
    return sorted(found, key=lambda r: (r["topic"], r["partition"], r["generation"], r["member"]))


def fenced_commit_accepted(facts: GroupFacts) -> list[dict[str, Any]]:
    """Each acknowledged commit whose generation is older than its partition's newest
    assignment before the acknowledgement, with that assignment's generation and members."""
    found = []
    for (topic, partition), commits in sorted(facts.commits.items()):
        assigned = facts.assigned.get((topic, partition), [])
        for c in commits:
            current = facts.newest_generation((topic, partition), order_of(c))
            if current is not None and c["generation"] < current:
                owners = [(o, m) for o, g, m in assigned if g == current and o < order_of(c)]
                found.append(
                    {
                        "topic": topic,
                        "partition": partition,
                        "member": c["member"],
                        "generation": c["generation"],
                        "offset": c["offset"],
                        "time_ms": c["time_ms"],
                        "current_generation": current,
                        "current_members": sorted({m for _, m in owners}),
                        "current_time_ms": min(o for o, _ in owners)[0],
                    }
                )
    return found


def consumed_unassigned(
    facts: GroupFacts, stats: Iterable[Mapping[str, Any]], outside_assignment: int | None
) -> list[dict[str, Any]]:
    """Per (member, generation, partition) consumed with no such assignment; and one row more
    when the workload counted more such records than the ledger shows (``outside_assignment``)."""
    found = [
        {
            "topic": s["topic"],
            "partition": s["partition"],
            "member": s["member"],
            "generation": s["generation"],
            "first_offset": s["first_offset"],
            "last_offset": s["last_offset"],
            "records": s["records"],
            "reason": (
                f"consumed in generation {s['generation']}, whose assignment of {s['member']} does not "
                "hold the partition"
                if s["generation"] in {g for _, g in facts.joined.get(s["member"], [])}
                else f"consumed in generation {s['generation']}, which {s['member']} never joined"
            ),
        }
        for s in stats
        if key_of(s) not in facts.assignments
    ]
    found.sort(key=lambda r: (r["topic"], r["partition"], r["generation"], r["member"]))
    seen = sum(r["records"] for r in found)
    if outside_assignment and outside_assignment > seen:
        found.append(
            {
                "topic": None,
                "partition": None,
                "member": None,
                "generation": None,
                "first_offset": None,
                "last_offset": None,
                "records": outside_assignment,
                "reason": (
                    f"the workload counted {outside_assignment} record(s) its members' polls returned from "
                    f"partitions not assigned to them then (the closing record's outside_assignment); "
                    f"the ledger shows {seen}"
                ),
            }
        )
    return found


def commit_probes(facts: GroupFacts, bounds: Mapping[TopicPartition, Bounds]) -> list[dict[str, Any]]:
    """Per acknowledged commit that moves past what its assignment was handed: the offset its
    member must have consumed before it (``probe``: the commit - 1, or, where the committed log
    has gaps, the last log offset below the commit, ``gapped`` then to be looked up).

    A commit needs no probe when it is not above the highest commit acknowledged before its
    assignment (it hands the group nothing new) or when the committed log holds no offset below
    it (everything below is gone: retention)."""
    probes = []
    for tp, commits in sorted(facts.commits.items()):
        b = bounds.get(tp)
        for c in commits:
            key = key_of(c)
            at = facts.assignments.get(key)
            prior = facts.handed(tp, at) if at is not None else None
            target = c["offset"] - 1
            if (prior is not None and c["offset"] <= prior["offset"]) or target < 0:
                continue
            if b is not None and target < b.log_min:
                continue
            gapped = b is not None and not b.gapless and target <= b.log_max
            probes.append(
                {**dict(zip(KEY_COLUMNS, key, strict=True)), "commit": c, "probe": target, "gapped": gapped}
            )
    return probes


def commit_ahead(
    probes: Iterable[Mapping[str, Any]], first_seq: Mapping[tuple[Key, int], int]
) -> list[dict[str, Any]]:
    """The probed commits whose member had not consumed the probed offset before the commit
    (``first_seq``: the seq at which each (assignment, offset) was first consumed)."""
    found = []
    for p in probes:
        c = p["commit"]
        seen = first_seq.get((key_of(p), p["probe"]))
        if seen is None or seen > c["seq"]:
            found.append(
                {
                    "topic": p["topic"],
                    "partition": p["partition"],
                    "member": p["member"],
                    "generation": p["generation"],
                    "offset": c["offset"],
                    "time_ms": c["time_ms"],
                    "seq": c["seq"],
                    "unconsumed": p["probe"],
                }
            )
    return sorted(found, key=lambda r: (r["topic"], r["partition"], r["time_ms"], r["seq"]))


def skip_candidates(facts: GroupFacts, stats: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The assignments whose consumed offsets inside the committed log (``lo``..``hi``,
    ``in_log`` distinct) are fewer than the offsets between: exactly those that skipped a record
    where the partition's log has no gaps, a superset where it has."""
    found = []
    for s in stats:
        if key_of(s) not in facts.assignments or s["lo"] is None:
            continue
        if s["in_log"] < s["hi"] - s["lo"] + 1:
            found.append({k: s[k] for k in (*KEY_COLUMNS, "first_offset", "last_offset", "lo", "hi")})
    return found
