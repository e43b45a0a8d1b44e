"""Offline verification with a lagging high-watermark checkpoint (issue 19/20 leftovers; docs/design.md
"Verification job"): the committed log, offline, runs to the highest HW any replica
checkpointed, or further, over the offsets that every replica read holds identically (which no
leader election among them can lose), up to the lowest log end offset; a record there counts as
committed and the report says how many acknowledged writes that covered.

The two planted cases: brokers that halted before they ever checkpointed an HW of the topic (the
file exists, without the partitions), and brokers that crashed within
``replica.high.watermark.checkpoint.interval.ms`` of their last checkpoint (every checkpoint 10
records behind). Neither may hide a real loss: an acknowledged value absent from every replica
is lost wherever its offset lies, and one that is held by some replicas only, above every
checkpoint, is still lost (offline cannot tell whether it was committed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.log.checkpoint import OffsetCheckpointFile
from ledger.format import value_digest
from tests.verify import scenario as sc
from tests.verify.test_blind_spots import cut, verify
from tests.verify.test_job import assert_only

TOPIC = sc.TOPIC


def test_brokers_that_never_checkpointed_an_hw_lose_nothing_but_a_real_loss(
    tmp_path: Path, spark: Any
) -> None:
    def plant(s: sc.Scenario) -> None:  # two acknowledged values that no replica holds
        s.ledger.ack(TOPIC, 1, 3, b"acknowledged but never written", producer_id=7, sequence=0)
        s.ledger.ack(TOPIC, 1, 500, b"acknowledged far past the end", producer_id=7, sequence=1)

    s = sc.build(tmp_path, plant)
    for broker in s.disk.brokers:  # the file is there, without the topic: no HW ever checkpointed
        OffsetCheckpointFile(s.disk.log_dir(broker) / "replication-offset-checkpoint").write({})
    result = verify(s, spark)
    rows = assert_only(result, "lost", 2)
    assert [(r["partition"], r["offset"], r["reason"]) for r in rows] == [
        (1, 3, "another value at that offset"),
        (1, 500, "offset at or above the high watermark"),
    ]
    assert rows[0]["value_digest"] == value_digest(b"acknowledged but never written")
    assert result.high_watermarks == {"t-0": 30, "t-1": 30}
    assert result.counts["committed"] == 60
    for p in sc.PARTITIONS:
        (note,) = [n for n in result.notes if n.startswith(f"offline: {TOPIC}-{p} ")]
        assert "no replica checkpointed an HW" in note and "committed to offset 30" in note
        acks = 30 + (p == 1)  # the foreign value at t-1 offset 3 is checked too
        assert f"{acks} acknowledged write(s) at offsets 0..29" in note


def test_a_checkpoint_lagging_the_hw_costs_no_acknowledged_write_every_replica_holds(
    tmp_path: Path, spark: Any
) -> None:
    """Every broker crashed 10 records after its last HW checkpoint (20; the LEO is 30). On t-0
    every replica holds 20..29: committed; an ack of a foreign value at 22 is still lost. On t-1
    broker 3 ends at 25 (a follower out of the ISR): 25..29, on brokers 1 and 2 only, stay lost,
    since offline nothing tells whether broker 3 could have been elected."""

    def plant(s: sc.Scenario) -> None:
        s.ledger.ack(TOPIC, 0, 22, b"acknowledged, another value there", producer_id=7, sequence=0)

    lagging = {(b, TOPIC, p): 20 for b in (1, 2, 3) for p in sc.PARTITIONS}
    s = sc.build(tmp_path, plant, hw_overrides=lagging)
    cut(s, 3, 1, 25)
    result = verify(s, spark)
    rows = assert_only(result, "lost", 6)
    assert [(r["partition"], r["offset"], r["reason"]) for r in rows] == [
        (0, 22, "another value at that offset"),
        *[(1, o, "offset at or above the high watermark") for o in range(25, 30)],
    ]
    assert result.high_watermarks == {"t-0": 30, "t-1": 25}
    (t0,) = [n for n in result.notes if n.startswith(f"offline: {TOPIC}-0 ")]
    assert "highest checkpointed HW 20" in t0 and "committed to offset 30" in t0
    assert "11 acknowledged write(s) at offsets 20..29" in t0  # the foreign value's too
    (t1,) = [n for n in result.notes if n.startswith(f"offline: {TOPIC}-1 ")]
    assert "committed to offset 25" in t1 and "5 acknowledged write(s) at offsets 20..24" in t1
