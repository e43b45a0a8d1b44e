"""Which brokers should hold a replica of each partition (docs/design.md "Verification job"): the
replica assignment Kafka keeps in ZooKeeper's ``/brokers/topics/<topic>`` and the controller
hands every broker in UpdateMetadata. ``replica_incomplete`` (:mod:`verify.replica_checks`)
holds every replica on disk against it; it is never inferred from the replicas that survived.

The sources, best first (``Assignment.source``):

* ``metadata`` - against a live cluster, the Metadata response's replicas (exact);
* ``recorded`` - offline, the assignment the chaos run recorded from ZooKeeper (or the metadata)
  at its start and after its final heal, ``R/assignment.json`` (:mod:`ledger.assignment`); the
  last one recorded (exact, as of when it was recorded);
* ``checkpoints`` - offline without a readable record (a record that cannot be read is a skipped
  input, so the verdict is at best INCOMPLETE): the replicas on disk, plus every partition a
  broker's own ``replication-offset-checkpoint`` lists (the broker writes every partition it
  hosts there, ``ReplicaManager.checkpointHighWatermarks``), so a directory gone since the last
  checkpoint is a missing replica of that broker. Each partition should then also have as many
  replicas as the topic's most replicated one. What it cannot see: a replica lost together with
  its checkpoint entry (a broker whose disk was replaced), on every broker alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.assignment import ASSIGNMENT_FILE, AssignmentFileError, RecordedAssignment, read_assignment
from verify.inputs import SkippedInputs, assignment_inputs

TopicPartition = tuple[str, int]
METADATA, RECORDED, CHECKPOINTS = "metadata", "recorded", "checkpoints"


@dataclass
class Assignment:
    """The replicas each partition should have. ``replicas`` lists them per partition: exact for
    ``metadata`` and ``recorded``; for ``checkpoints`` the brokers holding a directory or listing
    the partition in their checkpoint, ``checkpoint_only`` those of them lacking the directory,
    and ``replication_factor`` the most any partition of the topic has."""

    source: str
    replicas: dict[TopicPartition, list[int]] = field(default_factory=dict)
    replication_factor: dict[str, int] = field(default_factory=dict)
    #: checkpoints: per partition, the brokers whose checkpoint lists it but whose log dir lacks it
    checkpoint_only: dict[TopicPartition, list[int]] = field(default_factory=dict)
    #: recorded: where and when the run read it ("zookeeper after_heal"); checkpoints: why the
    #: run's recorded assignment could not be read ("" when it recorded none)
    detail: str = ""

    @property
    def exact(self) -> bool:
        return self.source in (METADATA, RECORDED)

    def describe(self) -> str:
        """What it was read from and what that cannot see, for the report's coverage."""
        if self.source == METADATA:
            return "the metadata's assignment"
        if self.source == RECORDED:
            return f"the assignment the run recorded from {self.detail} (R/assignment.json)"
        why = (
            f"the recorded assignment unreadable ({self.detail})" if self.detail else "no recorded assignment"
        )
        return (
            f"{why}: the replicas on disk and the partitions each broker's "
            "replication-offset-checkpoint lists (a replica lost with its checkpoint entry is invisible)"
        )


def recorded_assignment(recorded: RecordedAssignment, topics: Iterable[str]) -> Assignment:
    wanted = set(topics)
    replicas = {tp: sorted(brokers) for tp, brokers in recorded.replicas.items() if tp[0] in wanted}
    return Assignment(RECORDED, replicas, detail=f"{recorded.source} {recorded.recorded}")


def checkpoint_assignment(
    extents: Iterable[Mapping[str, Any]], checkpointed: Mapping[int, Iterable[TopicPartition]]
) -> Assignment:
    """From the replicas on disk (``extents``: broker, topic, partition) and what each broker's
    ``replication-offset-checkpoint`` lists (``checkpointed``: broker -> partitions)."""
    on_disk: dict[TopicPartition, set[int]] = defaultdict(set)
    for r in extents:
        on_disk[(r["topic"], r["partition"])].add(r["broker"])
    listed: dict[TopicPartition, set[int]] = defaultdict(set)
    for broker, tps in checkpointed.items():
        for tp in tps:
            listed[tp].add(broker)
    assignment = Assignment(CHECKPOINTS)
    for tp in sorted(set(on_disk) | set(listed)):
        brokers = on_disk.get(tp, set()) | listed.get(tp, set())
        assignment.replicas[tp] = sorted(brokers)
        if only := sorted(listed.get(tp, set()) - on_disk.get(tp, set())):
            assignment.checkpoint_only[tp] = only
        rf = assignment.replication_factor.get(tp[0], 0)
        assignment.replication_factor[tp[0]] = max(rf, len(brokers))
    for topic in assignment.replication_factor:  # a partition with no replica anywhere
        highest = max(p for t, p in assignment.replicas if t == topic)
        for partition in range(highest + 1):
            assignment.replicas.setdefault((topic, partition), [])
    return assignment


def offline_assignment(
    report_dir: Path,
    topics: Iterable[str],
    extents: Iterable[Mapping[str, Any]],
    checkpointed: Mapping[int, Iterable[TopicPartition]],
    notes: list[str],
    skipped: SkippedInputs | None = None,
) -> Assignment:
    """Offline: the run's recorded assignment when it has one, else :func:`checkpoint_assignment`;
    a note either way, naming the source and what it cannot see. A record that exists but cannot
    be read is the skipped input ``assignment`` (INCOMPLETE, :mod:`verify.inputs`): the
    checkpoints stand in for what they can show, and cannot pass the replicas the record would
    have listed."""
    damaged = None
    try:
        recorded = read_assignment(report_dir)
    except AssignmentFileError as e:
        notes.append(
            f"offline: the recorded assignment cannot be used ({e}): falling back on the checkpoints"
        )
        recorded, damaged = None, str(e)
        if skipped is not None:
            assignment_inputs(skipped, damaged)
    if recorded is not None:
        assignment = recorded_assignment(recorded, topics)
        when = (
            " (at the run's start: a reassignment during the run does not show)"
            if recorded.recorded == "start"
            else ""
        )
        notes.append(f"offline: replica_incomplete holds the replicas against {assignment.describe()}{when}")
        return assignment
    notes.append(
        f"offline: no recorded assignment ({ASSIGNMENT_FILE} in the report dir): replica_incomplete takes it "
        "from the replicas on disk and the partitions each broker's replication-offset-checkpoint lists; a "
        "replica lost together with its broker's checkpoint entry (a replaced disk) is invisible"
    )
    assignment = checkpoint_assignment(extents, checkpointed)
    assignment.detail = damaged or ""
    return assignment
