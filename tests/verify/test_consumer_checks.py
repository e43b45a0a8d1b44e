"""The consumer group's checks (verify/consumer_checks.py; docs/guarantees.md) against planted
anomalies: one small run (:mod:`tests.verify.scenario`: topic ``t``, partitions 0 and 1, offsets
0-29 each) and a consumer ledger beside it (``R/consumed/``, :mod:`ledger.consumed`) in which two
members read both partitions through two generations, broken in four ways at once, so one Spark
job covers all four checks:

* a record the group skipped (t-1 offset 17 is consumed by nobody): ``group_missed``;
* a consumed value that differs from the committed log's (t-0 offset 4), and an offset consumed
  that the committed log does not hold (t-0 offset 500): ``consumed_value_mismatch``;
* a commit below an earlier one (t-0: 10, 20, then 15 by the next generation's owner):
  ``commit_went_backwards``;
* generation 2 giving t-1 to both members: ``owned_twice``.

Two of the plantings are also what issue 34's per-assignment checks look for (their own planted
tests are tests/verify/test_consumer_blind_spots.py): generation 2's owner of t-0 starts at 15,
below the 20 acknowledged before its assignment (``resumed_below_commit``), and c1-0's position
passed t-1 offset 17 in generation 1 without consuming it (``position_skipped``).

Every produce-side check stays at 0 (the consumer ledger leaves the produce ledger untouched).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.consumed import ConsumerLedgerWriter
from ledger.format import value_digest
from tests.verify import scenario as sc
from verify.job import run_verification
from verify.report import CHECKS, CONSUMER_CHECKS

TOPIC = sc.TOPIC
T0 = 1_700_000_100_000


def write_consumer_ledger(s: sc.Scenario) -> None:
    """Generation 1: c0-0 owns t-0, c1-0 owns t-1; generation 2: c1-0 owns t-0, and t-1 is
    (wrongly) given to both. Everything is consumed once, but for the plantings."""
    values = {(w.partition, w.offset): w.value for w in s.disk.written}
    ledger = ConsumerLedgerWriter(s.report_dir, clock_ms=lambda: T0)
    ledger.assigned("c0-0", "m0", 1, [(TOPIC, 0)], time_ms=T0)
    ledger.assigned("c1-0", "m1", 1, [(TOPIC, 1)], time_ms=T0)
    for offset in range(20):
        value = b"not what was written" if offset == 4 else values[(0, offset)]
        ledger.consumed("c0-0", "m0", 1, TOPIC, 0, offset, value, time_ms=T0 + offset)
        if offset in (9, 19):
            ledger.committed("c0-0", "m0", 1, [(TOPIC, 0, offset + 1)], time_ms=T0 + 100 + offset)
    for offset in range(30):
        if offset != 17:  # skipped by every member
            ledger.consumed("c1-0", "m1", 1, TOPIC, 1, offset, values[(1, offset)], time_ms=T0 + offset)
    ledger.committed("c1-0", "m1", 1, [(TOPIC, 1, 30)], time_ms=T0 + 150)
    ledger.assigned("c1-0", "m1", 2, [(TOPIC, 0), (TOPIC, 1)], time_ms=T0 + 200)
    ledger.assigned("c0-0", "m0", 2, [(TOPIC, 1)], time_ms=T0 + 200)
    for offset in range(15, 30):
        ledger.consumed("c1-0", "m1", 2, TOPIC, 0, offset, values[(0, offset)], time_ms=T0 + 300 + offset)
    ledger.consumed("c1-0", "m1", 2, TOPIC, 0, 500, b"from nowhere", time_ms=T0 + 340)
    ledger.committed("c1-0", "m1", 2, [(TOPIC, 0, 15)], time_ms=T0 + 320)  # below 20: backwards
    ledger.committed("c1-0", "m1", 2, [(TOPIC, 0, 30)], time_ms=T0 + 350)
    ledger.close({"drained": True})


def test_four_planted_consumer_anomalies_are_each_found(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    write_consumer_ledger(s)
    result = run_verification(s.report_dir, None, s.log_dirs, spark=spark)

    assert {c: result.counts[c] for c in CHECKS} == dict.fromkeys(CHECKS, 0)
    assert {c: result.counts[c] for c in CONSUMER_CHECKS} == {
        "group_missed": 1,
        "commit_went_backwards": 1,
        "consumed_value_mismatch": 2,
        "owned_twice": 1,
        "resumed_below_commit": 1,
        "fenced_commit_accepted": 0,
        "consumed_unassigned": 0,
        "commit_ahead_of_consumed": 0,
        "position_skipped": 1,
    }
    assert result.verdict == "FAILED" and not result.ok and result.violation_count == 7
    assert result.counts["consumed"] == 20 + 29 + 15 + 1 and result.counts["consumed_offsets"] == 60
    v = result.violations
    assert v["group_missed"] == [{"topic": TOPIC, "partition": 1, "offset": 17}]
    (back,) = v["commit_went_backwards"]
    assert (back["partition"], back["offset"], back["member"], back["generation"]) == (0, 15, "c1-0", 2)
    assert (back["previous_offset"], back["previous_member"], back["previous_generation"]) == (20, "c0-0", 1)
    wrong, nowhere = v["consumed_value_mismatch"]
    assert (wrong["offset"], wrong["members"], wrong["times"]) == (4, ["c0-0"], 1)
    assert wrong["reason"] == "another value at that offset in the committed log"
    assert wrong["consumed_digest"] == value_digest(b"not what was written")
    assert wrong["log_digest"] == value_digest(sc.value(0, 0, 4))
    assert (nowhere["offset"], nowhere["reason"], nowhere["log_digest"]) == (
        500,
        "offset not in the committed log",
        None,
    )
    assert v["owned_twice"] == [
        {"generation": 2, "topic": TOPIC, "partition": 1, "members": ["c0-0", "c1-0"]}
    ]

    report = json.loads(result.report_path.read_text())
    assert report["verdict"] == "FAILED" and report["counts"]["owned_twice"] == 1
    assert (
        report["coverage"]["group_missed"]
        == "65 consumed record(s) (60 distinct offsets) against 60 committed record(s)"
    )
    summary = result.summary_path.read_text()
    assert summary.startswith("# Verification FAILED: 7 violation(s)")
    assert "| owned_twice | 1 | partitions one generation assigned to more than one member |" in summary
    assert "- t-1 offset 17: committed, never consumed by the group" in summary
    assert "- t-0: c1-0 (generation 2) committed 15 at" in summary
    assert "- t-1 in generation 2: assigned to c0-0, c1-0" in summary
