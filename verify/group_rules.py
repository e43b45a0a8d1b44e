"""The consumer group's delivery rules over its small facts (docs/guarantees.md, "Verification";
issue 34): pure functions of the consumer ledger's ``assigned`` and ``committed`` rows (collected
to the driver: a few per member and second) and of the per-assignment summaries that
:mod:`verify.group_delivery` aggregates from the ``consumed`` rows in Spark.

An *assignment* is one member incarnation's partition in one generation, ``(member, generation,
topic, partition)``, as Kafka's classic protocol hands it out (SyncGroup, then the
ConsumerRebalanceListener's ``onPartitionsAssigned``: the ledger's ``assigned`` row). It ends
where the member's next generation begins (its next ``assigned`` rows) or with the member; the
ledger records no revoke, and needs none: every fact carries the generation it happened in.
"Before" is :func:`verify.ledger_order.before`: ``(time_ms, seq)`` for one member's facts,
``time_ms`` alone for two members' (two of one millisecond are unordered), as
:func:`verify.consumer_checks.commit_went_backwards` orders commits too.

* :func:`resume_steps` / :func:`resumed_below_commit` - a consumed record below a commit
  acknowledged for its partition before it was consumed: the highest commit before the
  assignment began (the group resumed below it: OffsetFetch answered an offset the coordinator
  had lost; Kafka's consumer resets to ``auto.offset.reset`` only when there is no commit at
  all), or one of the assignment's own (its position went back: Kafka's consumer moves a
  position only forward within an assignment, ``SubscriptionState.position``, and resets it only
  on OFFSET_OUT_OF_RANGE, which a correct broker never answers at or below the HW). A commit
  of another member during the assignment is not one of them: acknowledged from an older
  generation it is :func:`fenced_commit_accepted`'s;
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

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger.consumed import ASSIGNED, COMMITTED, NO_PARTITION
from verify.ledger_order import BestBefore

Key = tuple[str, int, str, int]  # an assignment: (member, generation, topic, partition)
TopicPartition = tuple[str, int]
Order = tuple[int, int]  # (time_ms, seq): the ledger's order of facts
KEY_COLUMNS = ("member", "generation", "topic", "partition")
#: The time of a step before every fact (:func:`resume_steps`: the commit handed to an assignment).
BEFORE_ALL = -(2**62)


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
    rows), indexed for the rules below; "before" is :func:`verify.ledger_order.before`."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        #: each assignment's first ``assigned`` row, in the ledger's order
        self.assignments: dict[Key, Mapping[str, Any]] = {}
        assigned: dict[TopicPartition, list[Mapping[str, Any]]] = defaultdict(list)
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
                    first = self.assignments.get(key)
                    if first is None or order_of(row) < order_of(first):
                        self.assignments[key] = row
                    assigned[tp].append(row)
        #: per partition: its ``assigned`` rows, by the highest generation before a fact
        self.assigned = {tp: BestBefore(a, lambda r: r["generation"]) for tp, a in assigned.items()}
        #: per partition: its acknowledged commits, by the highest offset before a fact
        self.commits = {tp: BestBefore(c, lambda r: r["offset"]) for tp, c in commits.items()}
        #: per member: (seq, generation) of each generation it joined (empty assignments too)
        self.joined = {m: sorted(j) for m, j in joined.items()}

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> GroupFacts:
        return cls(rows)

    def handed(self, tp: TopicPartition, at: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The highest commit of ``tp`` acknowledged before the fact ``at`` (the earliest of equals)."""
        commits = self.commits.get(tp)
        return commits.best(at) if commits is not None else None

    def newest_generation(self, tp: TopicPartition, at: Mapping[str, Any]) -> int | None:
        """The newest generation that assigned ``tp`` before the fact ``at`` (None: none yet)."""
        assigned = self.assigned.get(tp)
        newest = assigned.best(at) if assigned is not None else None
        return None if newest is None else int(newest["generation"])


# -- the rules ------------------------------------------------------------------------------------


def resume_steps(
    facts: GroupFacts, ahead: Collection[tuple[Key, int]] = ()
) -> list[tuple[str, int, str, int, int, int, int]]:
    """What each assignment's consumed records must not go below, as steps in time for
    :func:`verify.group_delivery.below_commit`: ``(member, generation, topic, partition,
    time_ms, seq, offset)``, the highest commit acknowledged before the assignment (at
    :data:`BEFORE_ALL`) and each of the assignment's own acknowledged commits but those
    ``ahead`` of what it had consumed (``(assignment, seq)``: commit_ahead_of_consumed's, no
    position the member had)."""
    steps = []
    for key, at in sorted(facts.assignments.items()):
        tp = (key[2], key[3])
        handed = facts.handed(tp, at)
        if handed is not None:
            steps.append((*key, BEFORE_ALL, -1, int(handed["offset"])))
        commits = facts.commits.get(tp)
        for c in commits.facts if commits is not None else []:
            if key_of(c) == key and (key, c["seq"]) not in ahead:
                steps.append((*key, int(c["time_ms"]), int(c["seq"]), int(c["offset"])))
    return steps


def resumed_below_commit(facts: GroupFacts, below: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per assignment that consumed a record below a commit acknowledged before it (``below``:
    :func:`verify.group_delivery.below_commit`'s first such record of each assignment), with that
    commit: the one handed to the assignment, or one of its own."""
    found = []
    for b in below:
        key = key_of(b)
        at = facts.assignments.get(key)
        if at is None:
            continue  # consumed_unassigned's
        tp = (b["topic"], b["partition"])
        handed = facts.handed(tp, at)
        commit = handed
        if handed is None or handed["offset"] != b["commit_offset"]:
            consumed = {"member": b["member"], "time_ms": b["time_ms"], "seq": b["seq"]}
            own = [c for c in facts.commits[tp].before(consumed) if key_of(c) == key]
            commit = next(c for c in own if c["offset"] == b["commit_offset"])
        assert commit is not None
        found.append(
            {
                "topic": b["topic"],
                "partition": b["partition"],
                "member": b["member"],
                "generation": b["generation"],
                "first_offset": b["offset"],
                "assigned_time_ms": at["time_ms"],
                "commit_offset": commit["offset"],
                "commit_member": commit["member"],
                "commit_generation": commit["generation"],
                "commit_time_ms": commit["time_ms"],
            }
        )
    return sorted(found, key=lambda r: (r["topic"], r["partition"], r["generation"], r["member"]))


def fenced_commit_accepted(facts: GroupFacts) -> list[dict[str, Any]]:
    """Each acknowledged commit whose generation is older than its partition's newest
    assignment before the acknowledgement, with that assignment's generation and members."""
    found = []
    for (topic, partition), commits in sorted(facts.commits.items()):
        assigned = facts.assigned.get((topic, partition))
        for c in commits.facts:
            current = facts.newest_generation((topic, partition), c)
            if current is not None and assigned is not None and c["generation"] < current:
                owners = [a for a in assigned.before(c) if a["generation"] == current]
                found.append(
                    {
                        "topic": topic,
                        "partition": partition,
                        "member": c["member"],
                        "generation": c["generation"],
                        "offset": c["offset"],
                        "time_ms": c["time_ms"],
                        "current_generation": current,
                        "current_members": sorted({a["member"] for a in owners}),
                        "current_time_ms": min(a["time_ms"] for a in owners),
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
        for c in commits.facts:
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
