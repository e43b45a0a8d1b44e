"""What each consumer group check read, and what it cannot see (the report's ``coverage``;
docs/guarantees.md, "Verification"; issue 34): a zero says as much as its inputs, so the report
names them beside it, and names what no check over the consumer ledger can know.

Every consumer check reads the consumer ledger (:mod:`ledger.consumed`), so none of them sees a
fact a member never recorded: a record its poll returned or a commit the coordinator answered
after the member was killed and before it wrote the fact down.
"""

from __future__ import annotations

from dataclasses import dataclass

from verify.report import CONSUMER_CHECKS


@dataclass(frozen=True)
class Seen:
    """The sizes of what the consumer checks read."""

    consumed: int  # consumed rows of the verified topics
    consumed_offsets: int  # distinct (topic, partition, offset) among them
    committed: int | None  # records of the committed log (None: not counted)
    commits: int  # acknowledged commits (one per partition)
    generations: int
    members: int  # member incarnations
    outside_assignment: int | None  # the workload's own count (None: not in the closing record)
    assignments: int = 0  # (member, generation, partition) assigned that consumed something
    probes: int = 0  # commits that moved past what their assignment was handed
    gapped_partitions: int = 0  # partitions whose committed log has gaps


def coverage(seen: Seen) -> dict[str, str]:
    """Per consumer check, what it read; and after "cannot see", what lies outside it."""
    consumed = f"{seen.consumed} consumed record(s) ({seen.consumed_offsets} distinct offsets)"
    log = "the committed log" if seen.committed is None else f"{seen.committed} committed record(s)"
    who = f"{seen.members} member incarnation(s)"
    workload = (
        "the closing record has no outside_assignment count"
        if seen.outside_assignment is None
        else f"the workload's own outside_assignment count ({seen.outside_assignment})"
    )
    gaps = f"; {seen.gapped_partitions} partition(s) with gaps looked up record by record" * bool(
        seen.gapped_partitions
    )
    texts = {
        "group_missed": f"{consumed} against {log}",
        "commit_went_backwards": (
            f"{seen.commits} committed offset(s) of {who}; cannot see a commit acknowledged after its "
            "member was killed"
        ),
        "consumed_value_mismatch": (
            f"{consumed} against {log}; cannot see a record its member was killed before recording"
        ),
        "owned_twice": (
            f"the assignments of {seen.generations} generation(s), {who}; cannot see an assignment "
            "its member was killed before recording"
        ),
        "resumed_below_commit": (
            f"{consumed} of {seen.assignments} assignment(s), each against the highest of "
            f"{seen.commits} acknowledged commit(s) before its assignment and its own before it "
            "(two members' facts of one millisecond unordered); cannot see an owner that consumed "
            "nothing, nor a rewind above every commit"
        ),
        "fenced_commit_accepted": (
            f"{seen.commits} acknowledged commit(s) against the assignments of {seen.generations} "
            "generation(s); cannot see a generation before a member recorded its assignment "
            "(onPartitionsAssigned runs after SyncGroup)"
        ),
        "consumed_unassigned": (
            f"{consumed} against the assignments of {seen.generations} generation(s), and {workload}"
        ),
        "commit_ahead_of_consumed": (
            f"{seen.probes} commit(s) that moved past what their assignment was handed, each against "
            f"when its member consumed the last committed record below it{gaps}; cannot see a gap "
            "the log has past its last committed record"
        ),
        "position_skipped": (
            f"the consumed offsets of {seen.assignments} assignment(s) between their lowest and "
            f"highest, inside {log}{gaps}; cannot see a skip past a member's last consumed offset "
            "(group_missed's) nor above the committed log"
        ),
    }
    assert set(texts) == set(CONSUMER_CHECKS)
    return texts
