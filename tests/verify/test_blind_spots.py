"""Issue 20, the proof's blind spots: anomalies a buggy broker could leave that the verification
job used to pass with ``ok`` and no note. Each test plants one in the small run of
:mod:`tests.verify.scenario` and asserts that exactly the check meant for it fires (or, for an
input the job could not read in full, that the verdict is INCOMPLETE unless the flag that allows
it is given)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from broker.log.checkpoint import OffsetCheckpointFile
from client.protocol.records import build_batch, set_base_offset, set_partition_leader_epoch
from ledger.format import LEDGER_DIR, LEDGER_FILE, LedgerWriter, value_digest
from tests.verify import scenario as sc
from tests.verify.test_job import assert_only
from verify.job import run_verification
from verify.report import CHECKS

TOPIC = sc.TOPIC


def verify(s: sc.Scenario, spark: Any, **kwargs: Any) -> Any:
    return run_verification(s.report_dir, None, s.log_dirs, spark=spark, **kwargs)


def cut(s: sc.Scenario, broker: int, partition: int, offset: int) -> None:
    """Cut a replica's log at the batch starting at ``offset`` (what a follower truncating too far does)."""
    path, pos, _, _ = next(b for b in s.disk.batch_positions(broker, TOPIC, partition) if b[3] == offset)
    path.write_bytes(path.read_bytes()[:pos])


def epoch_checkpoint(s: sc.Scenario, broker: int, partition: int, entries: list[tuple[int, int]]) -> None:
    lines = "".join(f"{e} {o}\n" for e, o in entries)
    (s.disk.partition_dir(broker, TOPIC, partition) / "leader-epoch-checkpoint").write_text(
        f"0\n{len(entries)}\n{lines}"
    )


# -- 1. a replica behind the HW, or missing ----------------------------------------------------------


def test_a_follower_cut_below_the_hw_is_incomplete(tmp_path: Path, spark: Any) -> None:
    """Broker 3's t-0 cut to 25 below HW 30, its checkpoint lowered with the log (as the broker's
    truncation does): it simply did not span the committed records it lacked."""
    s = sc.build(tmp_path, hw_overrides={(3, TOPIC, 0): 25})
    cut(s, 3, 0, 25)
    (row,) = assert_only(verify(s, spark), "replica_incomplete", 1)
    assert (row["broker"], row["partition"], row["log_end_offset"], row["high_watermark"]) == (3, 0, 25, 30)
    assert row["reason"].startswith("log end offset 25 below the high watermark 30")


def test_a_replica_directory_removed_is_incomplete(tmp_path: Path, spark: Any) -> None:
    """Broker 3's t-0 directory gone (a StopReplica(delete) sent to the wrong broker) after its
    last checkpoint, which still lists t-0: broker 3's replica is missing (issue 34 item 4)."""
    s = sc.build(tmp_path)
    shutil.rmtree(s.disk.partition_dir(3, TOPIC, 0))
    result = verify(s, spark)
    (row,) = assert_only(result, "replica_incomplete", 1)
    assert (row["broker"], row["partition"]) == (3, 0)
    assert row["reason"] == "listed in broker 3's replication-offset-checkpoint, absent from its log dir"
    assert "no recorded assignment" in result.coverage["replica_incomplete"]


def test_a_garbled_batch_header_in_the_active_segment_is_incomplete(tmp_path: Path, spark: Any) -> None:
    """A wrong magic byte at offset 20 on broker 3: the scan stops there, the replica just looked shorter."""
    s = sc.build(tmp_path)
    path, pos, _, base = s.disk.batch_positions(3, TOPIC, 0)[4]
    data = bytearray(path.read_bytes())
    data[pos + 16] = 0x7F  # baseOffset (8) + batchLength (4) + partitionLeaderEpoch (4): magic
    path.write_bytes(bytes(data))
    result = verify(s, spark)
    found = {name: n for name, n in result.counts.items() if name in CHECKS and n}
    # Its HW checkpoint still says 30: above the log end the job now sees, hw_above_leo's finding too.
    assert found == {"replica_incomplete": 1, "hw_above_leo": 1} and not result.ok
    (row,) = result.violations["replica_incomplete"]
    assert (row["broker"], row["partition"], row["log_end_offset"]) == (3, 0, base)
    (note,) = [n for n in result.notes if "frame no batch" in n]
    assert note.startswith(
        f"broker 3 {TOPIC}-0: the last {len(data) - pos} byte(s) of segment 0 frame no batch"
    )


def test_a_leader_that_truncated_while_a_stale_follower_kept_the_data_is_caught(
    tmp_path: Path, spark: Any
) -> None:
    """Offline the committed log comes from the most complete replica (here a follower), not the
    last leader: broker 1, leading in epoch 2, truncated t-0 to 20 (log, HW checkpoint and epoch
    cache, as the broker does) while brokers 2 and 3 kept 20..29. The report says where the
    committed log came from, and the leader's loss is a violation."""
    s = sc.build(tmp_path, hw_overrides={(1, TOPIC, 0): 20})
    cut(s, 1, 0, 20)
    epoch_checkpoint(s, 1, 0, [(0, 0), (1, s.epoch1_start[0])])
    result = verify(s, spark)
    (row,) = assert_only(result, "replica_incomplete", 1)
    assert (row["broker"], row["partition"], row["log_end_offset"], row["high_watermark"]) == (1, 0, 20, 30)
    assert any("not necessarily what the last leader held" in n for n in result.notes)
    assert "not necessarily the last leader" in result.coverage["duplicate"]


# -- 2. producer sequences, and the ledger's producer facts against the log's ----------------------


def test_a_producer_sequence_gap_is_found(tmp_path: Path, spark: Any) -> None:
    """Sequences 0..2 then 10..11 of one epoch: the broker skipped OUT_OF_ORDER_SEQUENCE_NUMBER."""

    def plant(s: sc.Scenario) -> None:
        for base, values in ((0, [b"g0", b"g1", b"g2"]), (10, [b"g10", b"g11"])):
            s.disk.append_unchecked(
                TOPIC, 1, values, epoch=1, producer_id=2000, base_sequence=base, ledger=s.ledger
            )

    (row,) = assert_only(verify(sc.build(tmp_path, plant), spark), "sequence_gap", 1)
    assert (row["partition"], row["producer_id"], row["offset"], row["sequence"]) == (1, 2000, 33, 10)
    assert (row["previous_offset"], row["previous_sequence"], row["expected_sequence"]) == (32, 2, 3)
    assert row["value_digest"] == value_digest(b"g10")


def test_an_ack_whose_record_has_other_producer_facts_key_or_timestamp_is_a_mismatch(
    tmp_path: Path, spark: Any
) -> None:
    """The value is at the acknowledged offset, but the record there is not the one acknowledged:
    another sequence, another key, a timestamp outside send..ack (the broker re-encoded it)."""

    def plant(s: sc.Scenario) -> None:
        (seq_at,) = s.disk.produce(TOPIC, 0, [b"m-seq"], epoch=1, leader=2, producer_id=3000)
        (key_at,) = s.disk.produce(TOPIC, 0, [b"m-key"], epoch=1, leader=2, producer_id=-1, keys=[b"k1"])
        (ts_at,) = s.disk.produce(TOPIC, 0, [b"m-ts"], epoch=1, leader=2, producer_id=-1)
        at = s.disk.clock_ms
        s.ledger.ack(TOPIC, 0, seq_at, b"m-seq", producer_id=3000, sequence=7, time_ms=at)
        s.ledger.ack(TOPIC, 0, key_at, b"m-key", key=b"k2", time_ms=at)
        s.ledger.ack(TOPIC, 0, ts_at, b"m-ts", time_ms=at + 3_600_000, latency_ms=5.0)

    rows = assert_only(verify(sc.build(tmp_path, plant), spark), "ack_mismatch", 3)
    assert [(r["offset"], r["differs"]) for r in rows] == [(30, "sequence"), (31, "key"), (32, "timestamp")]
    assert (rows[0]["sequence"], rows[0]["log_sequence"]) == (7, 0)
    assert (rows[1]["key"], rows[1]["log_key"]) == ("k2", "k1")


# -- 3. batches with no leader epoch ---------------------------------------------------------------


def test_a_batch_without_a_leader_epoch_is_epoch_cache_inconsistent(tmp_path: Path, spark: Any) -> None:
    def plant(s: sc.Scenario) -> None:  # a leader that appended without stamping its epoch
        s.disk.append_unchecked(
            TOPIC, 1, [b"u0", b"u1"], epoch=-1, producer_id=2000, base_sequence=0, ledger=s.ledger
        )

    rows = assert_only(verify(sc.build(tmp_path, plant), spark), "epoch_cache_inconsistent", 3)
    assert [r["broker"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["problems"][0].startswith("batch at offset 30 has no leader epoch (-1)")


# -- 4. two records at one offset --------------------------------------------------------------------


def test_two_records_at_one_offset_are_out_of_offset_order(tmp_path: Path, spark: Any) -> None:
    """Writer 2's batch stamped 27..31 on top of 25..29 on every replica (a leader that assigned
    offsets from a stale LEO), acknowledged, and the HW at 32: lost, duplicate and divergent see
    nothing, since each offset's rows match some ack and every replica holds the same bytes."""
    s = sc.build(tmp_path)
    values = [f"w2-{i}".encode() for i in range(5)]
    batch = bytearray(
        build_batch(
            [(None, v, s.disk.clock_ms, []) for v in values],
            producer_id=2001,
            producer_epoch=0,
            base_sequence=0,
        )
    )
    set_base_offset(batch, 0, 27)
    set_partition_leader_epoch(batch, 0, 1)
    for broker in s.disk.brokers:
        path, *_ = s.disk.batch_positions(broker, TOPIC, 0)[-1]
        with path.open("ab") as f:
            f.write(batch)
        OffsetCheckpointFile(s.disk.log_dir(broker) / "replication-offset-checkpoint").write(
            {(TOPIC, 0): 32, (TOPIC, 1): 30}
        )
    epoch_checkpoint(s, 1, 0, [(0, 0), (1, s.epoch1_start[0])])  # broker 1's (2, 30) no longer at its LEO
    with LedgerWriter(s.report_dir, clock_ms=lambda: s.disk.clock_ms + 3) as ledger:
        for i, v in enumerate(values):
            ledger.ack(TOPIC, 0, 27 + i, v, producer_id=2001, sequence=i)
    rows = assert_only(verify(s, spark), "offset_order", 3)
    assert {(r["broker"], r["base_offset"], r["last_offset"], r["previous_last_offset"]) for r in rows} == {
        (b, 27, 31, 29) for b in (1, 2, 3)
    }


# -- 5. inputs that were not checked -----------------------------------------------------------------


def test_no_ledger_or_nothing_acknowledged_is_incomplete_unless_allowed(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    shutil.rmtree(s.report_dir / LEDGER_DIR)
    result = verify(s, spark)
    assert result.verdict == "INCOMPLETE" and list(result.skipped_inputs) == ["ledger"]
    assert result.counts["unacknowledged"] == 60  # every committed record, none accounted for
    assert verify(s, spark, allow=["empty-ledger"]).ok

    s = sc.build(tmp_path / "wrong-topic")
    result = verify(s, spark, topics=["other"])
    assert (
        result.verdict == "INCOMPLETE"
        and "no acknowledged write of the verified topics" in result.skipped_inputs["ledger"]
    )


def test_an_unclosed_or_damaged_json_lines_ledger_is_incomplete(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path, ledger_format="jsonl")
    path = s.report_dir / LEDGER_FILE
    lines = path.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "closed"
    path.write_text("".join(lines[:-1]) + '{"type":"ack","topic":"t","parti')  # crashed mid-line
    result = verify(s, spark)
    assert result.verdict == "INCOMPLETE" and sorted(result.skipped_inputs) == [
        "ledger_closed",
        "ledger_entries",
    ]
    allowed = verify(s, spark, allow=["unclosed-ledger"])
    assert allowed.ok and sorted(allowed.allowed_inputs) == ["ledger_closed", "ledger_entries"]

    # Closed, but with a malformed line and an ack without an offset in the middle: no flag allows it.
    middle = ['{"not json\n', '{"type":"ack","topic":"t","partition":0,"offset":null,"time_ms":1}\n']
    path.write_text("".join(lines[:5] + middle + lines[5:]))
    result = verify(s, spark, allow=["unclosed-ledger"])
    assert result.verdict == "INCOMPLETE" and list(result.skipped_inputs) == ["ledger_entries"]
    why = result.skipped_inputs["ledger_entries"]
    assert "1 malformed line(s)" in why and "1 ack(s) without topic, partition or offset" in why


def test_a_missing_hw_checkpoint_is_incomplete_unless_allowed(tmp_path: Path, spark: Any) -> None:
    s = sc.build(tmp_path)
    (s.disk.log_dir(2) / "replication-offset-checkpoint").unlink()
    result = verify(s, spark)
    assert result.verdict == "INCOMPLETE" and list(result.skipped_inputs) == ["hw_checkpoints"]
    assert "broker 2: replication-offset-checkpoint absent" in result.skipped_inputs["hw_checkpoints"]
    assert verify(s, spark, allow=["missing-checkpoints"]).ok


def test_failed_writes_that_landed_are_counted_by_whose(tmp_path: Path, spark: Any) -> None:
    """Writes the client saw fail (the error rows carry the value's digest) but that the log holds,
    and a committed record with no ledger entry at all: counted, not violations."""

    def plant(s: sc.Scenario) -> None:
        s.disk.produce(TOPIC, 1, [b"f0", b"f1"], epoch=1, leader=2, producer_id=4000)
        s.disk.produce(TOPIC, 1, [b"nobody"], epoch=1, leader=2, producer_id=4001)
        for v in (b"f0", b"f1", b"never landed"):
            s.ledger.error(TOPIC, -1, "REQUEST_TIMED_OUT", value=v)

    result = verify(sc.build(tmp_path, plant), spark)
    assert result.ok, (result.violations, result.skipped_inputs)
    assert (result.counts["unacknowledged"], result.counts["failed_but_landed"]) == (3, 2)
    assert [(r["producer_id"], r["ledger_entry"], r["records"]) for r in result.unacknowledged] == [
        (4000, "REQUEST_TIMED_OUT", 2),
        (4001, "none", 1),
    ]
    assert "## Committed records no ack accounts for (3; not a violation)" in result.summary_path.read_text()
