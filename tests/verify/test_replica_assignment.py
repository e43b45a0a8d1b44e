"""Issue 20 blind spot 1 against a live cluster's metadata (pure logic, no Spark session): a
replica the assignment lists on a broker whose log dir was read but that is absent, or behind
the leader's HW, is a violation; a broker of the assignment whose log dir was not given is a
skipped input (INCOMPLETE unless --allow-missing-log-dirs); a batch that overlaps the one
before it in the committed log read from the leader is out of offset order."""

from __future__ import annotations

from verify.inputs import MISSING_LOG_DIRS, SkippedInputs, log_dir_inputs
from verify.replica_checks import Assignment, replica_incomplete
from verify.scan_facts import OffsetOrder


def extent(broker: int, partition: int, leo: int) -> dict:
    return {"broker": broker, "topic": "t", "partition": partition, "leo": leo}


def test_metadata_assignment_finds_an_absent_and_a_lagging_replica() -> None:
    assignment = Assignment("metadata", {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 4]})
    extents = [extent(1, 0, 30), extent(2, 0, 30), extent(2, 1, 12), extent(3, 1, 30), extent(5, 1, 3)]
    rows = replica_incomplete(extents, {("t", 0): 30, ("t", 1): 30}, assignment, {1, 2, 3, 5}, [])
    assert [(r["broker"], r["partition"], r["reason"].split(":")[0]) for r in rows] == [
        (3, 0, "listed in the assignment, absent from its log dir"),
        (2, 1, "log end offset 12 below the high watermark 30"),
    ]  # broker 4's log dir was not read; broker 5's stray replica is not in the assignment


def test_an_unread_broker_of_the_assignment_is_a_skipped_input() -> None:
    skipped = SkippedInputs()
    log_dir_inputs(skipped, {1, 2, 3, 4}, {1, 2, 3})
    assert list(skipped.skipped) == ["log_dirs"] and "broker(s) 4" in skipped.skipped["log_dirs"]
    allowed = SkippedInputs(frozenset({MISSING_LOG_DIRS}))
    log_dir_inputs(allowed, {1, 2, 3, 4}, {1, 2, 3})
    assert not allowed.skipped and list(allowed.allowed) == ["log_dirs"]


def test_offset_order_counts_overlapping_and_backward_batches() -> None:
    order = OffsetOrder()
    for base, last in ((0, 4), (5, 9), (7, 11), (3, 3), (12, 14)):
        order.see(base, last)
    assert order.count == 2
    assert order.examples == [
        {"base_offset": 7, "last_offset": 11, "previous_last_offset": 9},
        {"base_offset": 3, "last_offset": 3, "previous_last_offset": 11},
    ]
