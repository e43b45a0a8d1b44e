"""Adversarial review of the verification job after issue 34: each test plants, in the job's own
harness (:mod:`tests.verify.scenario`'s small on-disk run; consumer ledgers written by
:class:`ledger.consumed.ConsumerLedgerWriter`, or by :func:`chaos.kafka_consumers.apply_line` as
the ``--client kafka`` run writes them), a case the job answers wrongly today: an anomaly it
passes, a clean run it fails, or an input it cannot read that leaves the verdict PASSED.
Every test here fails on today's main for the reason its docstring names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.consumers import GroupStats
from chaos.kafka_consumers import apply_line
from ledger.assignment import write_assignment
from ledger.consumed import ConsumerLedgerWriter
from tests.verify import scenario as sc
from tests.verify.test_blind_spots_replicas import LOG_START_CHECKPOINT, LOSSES, PLACED, lose, move_log_start
from tests.verify.test_consumer_blind_spots import T0, Group, consumer_counts, verify

TOPIC = sc.TOPIC


def said(result: Any) -> str:
    return (
        f"verdict={result.verdict} ok={result.ok} skipped_inputs={result.skipped_inputs} "
        f"counts={ {k: v for k, v in result.counts.items() if v and k not in ('acknowledged', 'committed', 'consumed', 'consumed_offsets')} } "
        f"notes={result.notes}"
    )


# -- (c) inputs the job cannot read that leave the verdict PASSED ---------------------------------


@pytest.mark.parametrize("variant", sorted(LOSSES))
def test_a_damaged_recorded_assignment_does_not_pass_the_replicas_it_would_have_missed(
    tmp_path: Path, spark: Any, variant: str
) -> None:
    """The run recorded its assignment (R/assignment.json, chaos/assignment.py) and replicas were
    lost with their checkpoint entries (issue 34 item 4). The record is then damaged (a torn
    write: it is no reassignment JSON). verify.assignment.offline_assignment falls back on the
    checkpoints with a note only, whose inferred replication factor (2) hides both losses, and
    answers PASSED. An input the run wrote and the job could not read must make the verdict
    INCOMPLETE (verify/inputs.py), not silently degrade to the source item 4 says must never be
    trusted: Kafka's replica set is the controller's (KafkaZkClient.getReplicaAssignmentForTopics),
    not what survived on disk."""
    s = sc.build(tmp_path)
    write_assignment(s.report_dir, PLACED, source="zookeeper", recorded="after_heal")
    lose(s, LOSSES[variant], forget=True)
    (s.report_dir / "assignment.json").write_text('{"version": 1, "partitions": [{"topic": "t"')
    result = verify(s, spark)
    assert result.verdict != "PASSED", said(result)


def test_unreadable_log_start_checkpoints_do_not_pass_records_below_the_log_start(
    tmp_path: Path, spark: Any
) -> None:
    """Issue 34 item 1 planted (every replica of t-0 moved its log start to 25; the segment with
    0..24 is still on disk), then every broker's log-start-offset-checkpoint is unreadable (a disk
    fault). verify.replicas.list_replicas turns each into a note and an empty map, so every
    replica's log start falls back to its first segment's base (0): the 25 acknowledged records no
    consumer can fetch (UnifiedLog.read below logStartOffset is OFFSET_OUT_OF_RANGE; ListOffsets
    earliest answers 25) count as committed and the job answers PASSED. An unreadable
    replication-offset-checkpoint is the skipped input hw_checkpoints (INCOMPLETE); the checkpoint
    the item-1 check rests on must be one too. (The verdict is FAILED today only because each
    replica's leader-epoch-checkpoint, truncated from the start with the log start, now
    disagrees with its batches: the wrong check, lost=0, and no input named.)"""

    def plant(s: sc.Scenario) -> None:
        for broker in s.disk.brokers:
            move_log_start(s, broker, 0, 25)

    s = sc.build(tmp_path, plant)
    for broker in s.disk.brokers:
        (s.disk.log_dir(broker) / LOG_START_CHECKPOINT).write_text("garbage\n")
    result = verify(s, spark)
    # Today: FAILED only through epoch_cache_inconsistent (each epoch cache was truncated to 25,
    # which the batches from 0 no longer match), lost=0 and no skipped input: the user is told
    # the epoch caches are wrong, not that 25 acknowledged records are gone or that an input
    # could not be read.
    assert result.verdict == "INCOMPLETE" or result.counts["lost"] == 25, said(result)


def test_a_run_with_consumers_but_no_consumer_ledger_is_not_passed(tmp_path: Path, spark: Any) -> None:
    """run.json (chaos/run.py, settings.consumers) says the run had a consumer group of 2, but
    R/consumed/ is gone (deleted, or never written by a broken workload). The job skips every
    consumer check without a word (verify/job.py runs them only when consumer_ledger_present) and
    answers PASSED: the group's at-least-once delivery and Kafka's group rules were never checked.
    A ledger the run says it wrote and the job cannot read is an INCOMPLETE input."""
    s = sc.build(tmp_path)
    (s.report_dir / "run.json").write_text(
        json.dumps({"settings": {"topic": TOPIC, "consumers": 2, "client": "floodmark"}}) + "\n"
    )
    result = verify(s, spark)
    assert result.verdict != "PASSED", said(result)


# -- (a) a group delivering wrongly that passes -----------------------------------------------------


def test_a_member_rewinding_below_its_own_acknowledged_commit_is_found(tmp_path: Path, spark: Any) -> None:
    """Within one assignment, c0-0 consumes t-0 0..19, commits 20 (acknowledged), and then its
    position goes back to 10 (a client resetting to a stale offset, or a broker answering a valid
    fetch with OFFSET_OUT_OF_RANGE so auto.offset.reset rewinds it): it re-reads 10..29 and
    commits 30. Kafka's consumer moves a position only forward within an assignment
    (FetchCollector/SubscriptionState.position; a reset is for an out-of-range position, which a
    correct broker never answers below the HW), so this is a resume below an acknowledged commit.
    resumed_below_commit (verify/group_rules.py:resumed_below_commit) compares only each
    assignment's lowest consumed offset with the commits before the assignment began, so it and
    every other check answer 0: PASSED."""
    s = sc.build(tmp_path)
    g = Group(s)
    g.assign("c0-0", 1, [0], T0)
    g.assign("c1-0", 1, [1], T0)
    g.consume("c0-0", 1, 0, range(20), T0 + 1)
    g.commit("c0-0", 1, 0, 20, T0 + 30)
    g.consume("c0-0", 1, 0, range(10, 30), T0 + 31)  # back below its own acknowledged 20
    g.commit("c0-0", 1, 0, 30, T0 + 60)
    g.consume("c1-0", 1, 1, range(30), T0 + 61)
    g.commit("c1-0", 1, 1, 30, T0 + 100)
    g.close()
    result = verify(s, spark)
    assert result.verdict == "FAILED", f"{said(result)} consumer={consumer_counts(result)}"


# -- (b) clean runs answered FAILED ------------------------------------------------------------------


def kafka_line(kind: str, t: int, g: int, **fields: Any) -> bytes:
    """One line of a chaos.kafka_member process's stdout (Out.emit)."""
    return (json.dumps({"k": kind, "t": t, "g": g, "topic": TOPIC, **fields}) + "\n").encode()


def test_kafka_members_lines_of_one_millisecond_read_out_of_order_are_no_fenced_commit(
    tmp_path: Path, spark: Any
) -> None:
    """--client kafka: each member is its own process (chaos/kafka_member.py) stamping its lines
    with its own clock; the parent (chaos/kafka_consumers.py:apply_line) gives them the ledger's
    seq in the order it happens to read the pipes. c0-0's on_revoke commits 20 under generation 1
    (GroupCoordinator.doCommitOffsets accepts it: the group is PreparingRebalance and the
    generation matches), then it rejoins; generation 2 forms and c1-0's on_assign takes t-0 and
    t-1 within the same millisecond; the parent reads c1-0's pipe first. c1-0 resumes t-0 at 20
    (OffsetFetch saw the commit). Every rule of Kafka held; but the ledger's order (time_ms, then
    seq) puts the commit after generation 2's assignment and
    verify/group_rules.py:fenced_commit_accepted reports it: FAILED. seq orders facts of one
    millisecond only within one process (ledger/consumed.py says "every member runs in the one
    workload process", which --client kafka does not)."""
    s = sc.build(tmp_path)
    values = {(w.partition, w.offset): w.value for w in s.disk.written}
    ledger = ConsumerLedgerWriter(s.report_dir, clock_ms=lambda: T0)
    stats = GroupStats()

    def read(member: str, line: bytes) -> None:
        assert apply_line(line, member, ledger, stats, lambda tp, n: None) is not None

    def rows(p: int, offsets: range) -> list[list[Any]]:
        return [[p, o, values[(p, o)].hex()] for o in offsets]

    read("c0-0", kafka_line("assigned", T0, 1, m="m0", p=[0]))
    read("c1-0", kafka_line("assigned", T0, 1, m="m1", p=[1]))
    read("c0-0", kafka_line("consumed", T0 + 10, 1, m="m0", r=rows(0, range(20)), x=0))
    read("c1-0", kafka_line("consumed", T0 + 10, 1, m="m1", r=rows(1, range(30)), x=0))
    read("c0-0", kafka_line("committed", T0 + 20, 1, m="m0", o=[[0, 10]]))
    read("c1-0", kafka_line("committed", T0 + 20, 1, m="m1", o=[[1, 30]]))
    # the rebalance: c0-0's revoke commit and c1-0's on_assign of generation 2, both at T0 + 100,
    # c1-0's line read first
    read("c1-0", kafka_line("assigned", T0 + 100, 2, m="m1", p=[0, 1]))
    read("c0-0", kafka_line("committed", T0 + 100, 1, m="m0", o=[[0, 20]]))
    read("c0-0", kafka_line("assigned", T0 + 101, 2, m="m0", p=[]))
    read("c1-0", kafka_line("consumed", T0 + 110, 2, m="m1", r=rows(0, range(20, 30)), x=0))
    read("c1-0", kafka_line("committed", T0 + 120, 2, m="m1", o=[[0, 30]]))
    ledger.close({**stats.as_dict(), "drained": True, "drain_s": 1.0})
    result = verify(s, spark)
    assert result.verdict == "PASSED", (
        f"{said(result)} fenced_commit_accepted={result.violations.get('fenced_commit_accepted')}"
    )
