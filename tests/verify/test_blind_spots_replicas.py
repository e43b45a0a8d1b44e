"""Issue 34 items 1, 3 and 4, the replica side of the proof's blind spots: anomalies the
verification job passed with ``verdict=PASSED ok=True`` on the small on-disk run of
:mod:`tests.verify.scenario`.

1. Acknowledged records below every replica's log start offset (Kafka's ``logStartOffset``: a
   fetch below it is OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it) are gone for every
   consumer, though their segment is still on disk: ``lost``, with a reason naming the log start.
2. A follower missing its oldest segment (retention ran on it alone) holds none of the committed
   records below its log start: an election of that broker loses them: ``replica_incomplete``.
3. The replication factor is never inferred from the surviving directories: the assignment comes
   from the run's recorded ZooKeeper state (``R/assignment.json``, Kafka's reassignment-JSON
   shape), else from what each broker's own ``replication-offset-checkpoint`` lists, and the
   report says which (``Assignment.source``) and what that source cannot see.

Every test forces its anomaly with the broker's own log code (``Log.maybe_increment_log_start_offset``,
``Log.delete_old_segments``) or by removing replica directories after the run's last checkpoint,
and asserts that exactly the check meant for it fires.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.log_config import LogConfig
from ledger.assignment import read_assignment, write_assignment
from tests.verify import scenario as sc
from tests.verify.disk_cluster import DiskCluster
from tests.verify.test_blind_spots import verify
from tests.verify.test_job import assert_only
from verify.assignment import CHECKPOINTS, RECORDED, checkpoint_assignment, offline_assignment
from verify.replica_checks import Assignment, replica_incomplete

TOPIC = sc.TOPIC
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
HW_CHECKPOINT = "replication-offset-checkpoint"
#: What the run's controller placed: t-0 on 1, 2, 3 and t-1 on 2, 3, 1 (every broker holds both).
PLACED = {(TOPIC, 0): [1, 2, 3], (TOPIC, 1): [2, 3, 1]}


def move_log_start(s: sc.Scenario, broker: int, partition: int, offset: int, delete: bool = False) -> None:
    """What the broker does when a log start offset moves (DeleteRecords on the leader, copied
    by each follower from its fetch answers; or retention): ``maybe_increment_log_start_offset``
    (which truncates the leader-epoch cache from the start), with ``delete`` the retention pass
    that removes the segments wholly below it, then the log dir's ``log-start-offset-checkpoint``."""
    log = s.disk.log(broker, TOPIC, partition)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(offset)
    if delete:
        assert log.delete_old_segments() > 0
    path = s.disk.log_dir(broker) / LOG_START_CHECKPOINT
    starts = OffsetCheckpointFile(path).read() if path.exists() else {}
    OffsetCheckpointFile(path).write({**starts, (TOPIC, partition): offset})


# -- item 1: acknowledged records below every replica's log start ---------------------------------


def test_acknowledged_records_below_every_replicas_log_start_are_lost(tmp_path: Path, spark: Any) -> None:
    """Every replica of t-0 moved its log start to 25 and checkpointed it, after the HW reached
    30 and before the run's last checkpoints; the segment holding 0..24 is still on disk (it is
    the active one, which retention never deletes). The 25 acknowledged writes below 25 are lost,
    each saying so, and the committed log holds only 25..29 of t-0."""

    def plant(s: sc.Scenario) -> None:
        for broker in s.disk.brokers:
            move_log_start(s, broker, 0, 25)

    s = sc.build(tmp_path, plant)
    for broker in s.disk.brokers:  # the records are still in the segment files
        assert [base for *_, base in s.disk.batch_positions(broker, TOPIC, 0)][:1] == [0]
    result = verify(s, spark)
    rows = assert_only(result, "lost", 25)
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, o) for o in range(25)]
    assert {r["reason"] for r in rows} == {"offset below the log start offset 25"}
    assert result.counts["committed"] == 60 - 25


# -- item 3: a follower missing its oldest segments -------------------------------------------------


@pytest.fixture
def one_batch_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario's brokers roll a segment for every batch (``segment.bytes`` below two batches),
    so retention can delete the oldest batches whole."""
    monkeypatch.setattr(
        sc, "DiskCluster", lambda root: DiskCluster(root, config=LogConfig(segment_bytes=200))
    )


def test_a_follower_that_lost_its_oldest_segments_is_incomplete(
    tmp_path: Path, spark: Any, one_batch_segments: None
) -> None:
    """Retention ran on broker 3 alone: t-0's log start moved to 15 there and the segments of
    0..14 were deleted (brokers 1 and 2 start at 0; every HW checkpoint says 30). Its log spans
    15..29 only, so divergent sees nothing missing and its log end is at the HW; but an election
    of broker 3 loses the committed 0..14. The same layout untouched passes."""
    assert verify(sc.build(tmp_path / "clean"), spark).ok

    s = sc.build(tmp_path / "planted", lambda s: move_log_start(s, 3, 0, 15, delete=True))
    assert [base for *_, base in s.disk.batch_positions(3, TOPIC, 0)] == [15, 20, 25]
    result = verify(s, spark)
    (row,) = assert_only(result, "replica_incomplete", 1)
    assert (row["broker"], row["partition"], row["log_start_offset"], row["high_watermark"]) == (3, 0, 15, 30)
    assert row["reason"] == (
        "log start offset 15 above the committed log's log start offset 0: committed records 0..14 missing: "
        "no retention deletes within a verified run (retention.ms 7 days); a run with retention on is not "
        "verifiable"
    )


def test_cluster_mode_compares_each_replica_with_the_leaders_log_start() -> None:
    """Cluster mode: the committed log's start is ListOffsets earliest from the leader; a replica
    of the metadata's assignment whose own files start above it lacks committed records, one at
    or below it (a follower whose log start lags the leader's) lacks none."""
    assignment = Assignment("metadata", {(TOPIC, 0): [1, 2, 3]})
    extents = [
        {"broker": 1, "topic": TOPIC, "partition": 0, "log_start": 20, "leo": 30},
        {"broker": 2, "topic": TOPIC, "partition": 0, "log_start": 10, "leo": 30},
        {"broker": 3, "topic": TOPIC, "partition": 0, "log_start": 25, "leo": 30},
    ]
    rows = replica_incomplete(
        extents, {(TOPIC, 0): 30}, assignment, {1, 2, 3}, [], log_starts={(TOPIC, 0): 20}
    )
    assert [(r["broker"], r["reason"]) for r in rows] == [
        (
            3,
            "log start offset 25 above the committed log's log start offset 20: committed records 20..24 missing: "
            "no retention deletes within a verified run (retention.ms 7 days); a run with retention on is not "
            "verifiable",
        )
    ]


# -- item 4: the assignment, never inferred from the surviving directories ------------------------


def lose(s: sc.Scenario, replicas: list[tuple[int, int]], forget: bool) -> None:
    """Remove each ``(broker, partition)`` replica's directory after the run's last checkpoint;
    with ``forget`` also drop it from its broker's ``replication-offset-checkpoint``, as the broker
    does at its next checkpoint once it no longer hosts the partition."""
    for broker, partition in replicas:
        shutil.rmtree(s.disk.partition_dir(broker, TOPIC, partition))
        if forget:
            path = s.disk.log_dir(broker) / HW_CHECKPOINT
            listed = OffsetCheckpointFile(path).read()
            del listed[(TOPIC, partition)]
            OffsetCheckpointFile(path).write(listed)


LOSSES = {
    "a broker that lost every replica of the topic": [(3, 0), (3, 1)],
    "each partition losing one replica on a different broker": [(3, 0), (2, 1)],
}


@pytest.mark.parametrize("variant", sorted(LOSSES))
def test_replicas_missing_from_the_recorded_assignment_are_incomplete(
    tmp_path: Path, spark: Any, variant: str
) -> None:
    """The run recorded the assignment it read from ZooKeeper after its final heal; the replicas
    of ``variant`` are gone with their checkpoint entries: only the record can say they are missing."""
    s = sc.build(tmp_path)
    write_assignment(s.report_dir, PLACED, source="zookeeper", recorded="after_heal")
    lose(s, LOSSES[variant], forget=True)
    result = verify(s, spark)
    rows = assert_only(result, "replica_incomplete", 2)
    assert sorted((r["broker"], r["partition"]) for r in rows) == sorted(LOSSES[variant])
    assert {r["reason"] for r in rows} == {"listed in the assignment, absent from its log dir"}
    assert (
        "the assignment the run recorded from zookeeper after_heal" in result.coverage["replica_incomplete"]
    )
    assert result.inputs["assignment"] == "recorded"


@pytest.mark.parametrize("variant", sorted(LOSSES))
def test_replicas_their_brokers_checkpoint_still_lists_are_incomplete(
    tmp_path: Path, spark: Any, variant: str
) -> None:
    """No recorded assignment; the replicas of ``variant`` are gone but each broker's own
    ``replication-offset-checkpoint`` still lists them (the directories went after its last
    checkpoint): a missing replica each, and the report says where the assignment came from."""
    s = sc.build(tmp_path)
    lose(s, LOSSES[variant], forget=False)
    result = verify(s, spark)
    rows = assert_only(result, "replica_incomplete", 2)
    assert sorted((r["broker"], r["partition"]) for r in rows) == sorted(LOSSES[variant])
    for r in rows:
        assert r["reason"] == (f"listed in broker {r['broker']}'s {HW_CHECKPOINT}, absent from its log dir")
    assert "no recorded assignment" in result.coverage["replica_incomplete"]
    assert result.inputs["assignment"] == "checkpoints"


def test_a_run_with_no_recorded_assignment_says_what_it_cannot_see(tmp_path: Path, spark: Any) -> None:
    """A clean run without ``R/assignment.json`` passes, but the report names the assignment's
    source and that a replica lost together with its broker's checkpoint entry is invisible."""
    s = sc.build(tmp_path)
    result = verify(s, spark)
    assert result.ok, result.violations
    coverage = result.coverage["replica_incomplete"]
    assert "no recorded assignment" in coverage and "invisible" in coverage
    assert any(n.startswith("offline: no recorded assignment") for n in result.notes)


def test_without_a_checkpoint_entry_a_partition_short_of_the_topics_replicas_is_still_incomplete() -> None:
    """The last signal of the ``checkpoints`` source: broker 3 lost t-1 and its checkpoint entry,
    so no broker is named, but t-1 has fewer replicas than t-0."""
    extents = [
        {"broker": b, "topic": TOPIC, "partition": p} for b in (1, 2, 3) for p in (0, 1) if (b, p) != (3, 1)
    ]
    assignment = checkpoint_assignment(
        extents, {1: {(TOPIC, 0), (TOPIC, 1)}, 2: {(TOPIC, 0)}, 3: {(TOPIC, 0)}}
    )
    assert assignment.source == CHECKPOINTS and assignment.replication_factor == {TOPIC: 3}
    rows = replica_incomplete(extents, {}, assignment, {1, 2, 3}, [])
    assert [(r["broker"], r["partition"], r["reason"]) for r in rows] == [
        (None, 1, "2 replica(s) in the log dirs, 3 of every other partition of the topic")
    ]


def test_a_record_from_the_start_or_a_damaged_one_is_named(tmp_path: Path) -> None:
    """The source is always named: a record from the run's start (a later reassignment does not
    show), and a file that is no reassignment JSON (the checkpoints stand in, and the note says why)."""
    write_assignment(tmp_path, PLACED, source="metadata", recorded="start")
    notes: list[str] = []
    assignment = offline_assignment(tmp_path, [TOPIC], [], {}, notes)
    assert (assignment.source, assignment.replicas) == (
        RECORDED,
        {(TOPIC, 0): [1, 2, 3], (TOPIC, 1): [1, 2, 3]},
    )
    assert notes == [
        "offline: replica_incomplete holds the replicas against the assignment the run recorded from "
        "metadata start (R/assignment.json) (at the run's start: a reassignment during the run does not show)"
    ]
    (tmp_path / "assignment.json").write_text('{"version": 1, "partitions": [{"topic": "t"}]}')
    notes.clear()
    assert offline_assignment(tmp_path, [TOPIC], [], {}, notes).source == CHECKPOINTS
    assert notes[0].startswith("offline: the recorded assignment cannot be used (") and "KeyError" in notes[0]
    assert notes[1].startswith("offline: no recorded assignment")


def test_the_recorded_assignment_is_kafkas_reassignment_json(tmp_path: Path) -> None:
    path = write_assignment(tmp_path, PLACED, source="zookeeper", recorded="start")
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    assert doc["partitions"] == [
        {"topic": TOPIC, "partition": 0, "replicas": [1, 2, 3]},
        {"topic": TOPIC, "partition": 1, "replicas": [2, 3, 1]},
    ]
    got = read_assignment(tmp_path)
    assert got is not None and (got.replicas, got.source, got.recorded) == (PLACED, "zookeeper", "start")
    assert read_assignment(tmp_path / "nowhere") is None
