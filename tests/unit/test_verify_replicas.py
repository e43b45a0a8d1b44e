"""The comparison of ``floodmark verify-replicas`` (Kafka's ReplicaVerificationTool's
ReplicaBuffer.verifyCheckSum; docs/operations.md "Verifying replicas (`floodmark verify-replicas`)"),
fed batches per replica by hand.

The oracle is Kafka's loop: replicas in id order, the first the reference; while every replica has
a next batch wholly below its own HW, each must match the reference's offsets and checksum and the
verified offset moves past it; a checksum mismatch is reported and the walk goes on, an offset
mismatch stops it. The lag is the highest HW any replica reported minus the verified offset; the
report names the partition with the largest lag (the first on a tie), its verified offset and the
partition count, when more than the interval has passed since the last report.
"""

from __future__ import annotations

import time

import click
import pytest
from click.testing import CliRunner

from cli.main import build_cli
from cli.verify_replicas import (
    ReplicaBuffer,
    ReplicaDataError,
    ReplicaFetch,
    fetch_answers,
    fetch_request,
    format_time,
    topic_filter,
    verify_partition,
)
from client.protocol.api import ApiKey, validate_request
from client.protocol.records import build_batch, iter_batches

TP = ("t", 0)


def batch(base_offset: int, *values: bytes) -> bytes:
    return build_batch([(None, v, 1000, []) for v in values], base_offset=base_offset)


def crc(records: bytes) -> int:
    return next(iter_batches(records))[1].crc


LOG = batch(0, b"a", b"b") + batch(2, b"c") + batch(3, b"d", b"e", b"f")  # offsets 0-1, 2, 3-5


def same(hw: int = 6, records: bytes = LOG, replicas=(1, 2, 3)) -> dict[int, ReplicaFetch]:
    return {r: ReplicaFetch(hw, records) for r in replicas}


def test_identical_replicas_are_verified_up_to_the_hw():
    check = verify_partition(TP, 0, same())
    assert (check.fetch_offset, check.max_high_watermark, check.mismatches) == (6, 6, ())


def test_only_batches_wholly_below_every_replicas_own_hw_are_verified():
    fetched = same()
    fetched[2] = ReplicaFetch(5, LOG)  # replica 2's HW is inside the batch 3-5
    check = verify_partition(TP, 0, fetched)
    assert (check.fetch_offset, check.max_high_watermark) == (3, 6)  # lag 3
    fetched[3] = ReplicaFetch(-1)  # a failed fetch: nothing, HW -1
    assert verify_partition(TP, 0, fetched).fetch_offset == 0


def test_a_replica_that_has_fewer_batches_stops_the_walk_without_a_mismatch():
    fetched = same()
    fetched[3] = ReplicaFetch(6, LOG[: len(batch(0, b"a", b"b"))])  # fetched only the first batch
    check = verify_partition(TP, 0, fetched)
    assert (check.fetch_offset, check.mismatches) == (2, ())


def test_the_walk_starts_at_the_verified_offset():
    tail = batch(3, b"d", b"e", b"f")
    check = verify_partition(TP, 3, same(records=tail))
    assert check.fetch_offset == 6


def test_a_checksum_mismatch_is_reported_and_the_walk_goes_on():
    forged = batch(0, b"a", b"b") + batch(2, b"X") + batch(3, b"d", b"e", b"f")
    fetched = same()
    fetched[3] = ReplicaFetch(6, forged)
    check = verify_partition(TP, 0, fetched)
    assert check.fetch_offset == 6  # Kafka moves on after a checksum mismatch
    (mismatch,) = check.mismatches
    assert not mismatch.offsets_differ
    assert mismatch.line() == (
        f"partition [t,0] has unmatched checksum at offset 2; replica 1's checksum {crc(batch(2, b'c'))}; "
        f"replica 3's checksum {crc(batch(2, b'X'))}"
    )


def test_the_lowest_replica_id_is_the_reference():
    fetched = same()
    fetched[1] = ReplicaFetch(6, batch(0, b"A", b"b") + LOG[len(batch(0, b"a", b"b")) :])
    lines = [m.line() for m in verify_partition(TP, 0, fetched).mismatches]
    assert [line.split("; ", 1)[1].split("'s")[0] for line in lines] == ["replica 1", "replica 1"]
    assert [line.rsplit("; ", 1)[1].split("'s")[0] for line in lines] == ["replica 2", "replica 3"]


def test_an_offset_mismatch_is_reported_and_stops_the_walk():
    other = batch(0, b"a", b"b", b"c") + batch(3, b"d", b"e", b"f")  # 0-2 where the others have 0-1
    fetched = same()
    fetched[2] = ReplicaFetch(6, other)
    check = verify_partition(TP, 0, fetched)
    assert check.fetch_offset == 0
    (mismatch,) = check.mismatches
    assert mismatch.offsets_differ
    assert mismatch.line() == "partition [t,0]: replica 1's offset 1 doesn't match replica 2's offset 2"


def test_batches_ending_at_the_same_offset_but_starting_apart_are_an_offset_mismatch():
    fetched = {1: ReplicaFetch(3, batch(0, b"a", b"b", b"c")), 2: ReplicaFetch(3, batch(1, b"b", b"c"))}
    (mismatch,) = verify_partition(TP, 0, fetched).mismatches
    assert mismatch.line() == (
        "partition [t,0]: replica 1's offset 2 doesn't match replica 2's offset 2 "
        "(their batches start at 0 and 1)"
    )


def test_bytes_that_are_not_batches_name_the_replica_partition_and_offset():
    fetched = same()
    fetched[2] = ReplicaFetch(6, b"\x00" * 20)
    with pytest.raises(
        ReplicaDataError, match=r"^Error in processing replica 2 in partition \[t,0\] at offset 0"
    ):
        verify_partition(TP, 0, fetched)


# -- ReplicaBuffer: offsets across rounds and the lag report -------------------------------------


def buffer(now_ms: int = 0, interval: int = 1000) -> ReplicaBuffer:
    tps = [("t", 0), ("t", 1), ("u", 0)]
    return ReplicaBuffer(dict.fromkeys(tps, 2), dict.fromkeys(tps, 0), interval, now_ms)


def round_of(hws: dict) -> dict:
    """Each partition: both replicas hold LOG and report the given HW."""
    return {tp: same(hw, replicas=(1, 2)) for tp, hw in hws.items()}


def test_max_lag_is_the_largest_gap_between_the_highest_hw_and_the_verified_offset():
    b = buffer()
    fetched = round_of({("t", 0): 6, ("t", 1): 6, ("u", 0): 6})
    fetched[("t", 1)][2] = ReplicaFetch(2, LOG)  # replica 2 is behind: verified to 2, its leader at 6
    result = b.verify(fetched, now_ms=1001)
    assert result.mismatches == ()
    assert b.fetch_offsets == {("t", 0): 6, ("t", 1): 2, ("u", 0): 6}
    assert (
        result.report
        == f"{format_time(1001)}: max lag is 4 for partition [t,1] at offset 2 among 3 partitions"
    )


def test_a_tie_names_the_first_partition_and_each_round_starts_afresh():
    b = buffer()
    b.verify(round_of({("t", 0): 6, ("t", 1): 6, ("u", 0): 6}), now_ms=10)
    assert (b.max_lag, b.max_lag_partition, b.offset_with_max_lag) == (0, ("t", 0), 6)
    # the next round fetches from 6: nothing new, no lag anywhere
    empty = {tp: {1: ReplicaFetch(6), 2: ReplicaFetch(6)} for tp in b.fetch_offsets}
    b.verify(empty, now_ms=20)
    assert (b.max_lag, b.max_lag_partition, b.offset_with_max_lag) == (0, ("t", 0), 6)


def test_a_report_is_due_only_after_more_than_the_interval():
    b = buffer(now_ms=5000, interval=1000)
    empty = {tp: {1: ReplicaFetch(0), 2: ReplicaFetch(0)} for tp in b.fetch_offsets}
    assert b.verify(empty, now_ms=6000).report is None  # Kafka: now - last > interval
    assert not b.reported_last_round
    line = b.verify(empty, now_ms=6001).report
    assert line == f"{format_time(6001)}: max lag is 0 for partition [t,0] at offset 0 among 3 partitions"
    assert b.reported_last_round and b.verify(empty, now_ms=7001).report is None
    assert b.verify(empty, now_ms=7002).report is not None


def test_mismatches_of_every_partition_in_the_round_are_returned():
    b = buffer()
    fetched = round_of({("t", 0): 6, ("t", 1): 6, ("u", 0): 6})
    fetched[("t", 0)][2] = ReplicaFetch(6, batch(0, b"a", b"B") + LOG[len(batch(0, b"a", b"b")) :])
    fetched[("u", 0)][1] = ReplicaFetch(6, batch(0, b"a"))
    result = b.verify(fetched, now_ms=1)
    assert [m.tp for m in result.mismatches] == [("t", 0), ("u", 0)]
    assert [m.offsets_differ for m in result.mismatches] == [False, True]


def test_a_round_missing_a_replica_is_refused():
    b = buffer()
    fetched = round_of({("t", 0): 6, ("t", 1): 6, ("u", 0): 6})
    del fetched[("t", 1)][2]
    with pytest.raises(ValueError, match=r"fetched 1 replicas for \[t,1\], but expected 2 replicas"):
        b.verify(fetched, now_ms=1)


# -- the rest of the tool's pure parts -------------------------------------------------------------


def test_time_is_printed_as_kafkas_simple_date_format(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert format_time(1_700_000_000_007) == "2023-11-14 22:13:20,007"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_topic_filter_is_kafkas_include_list():
    include = topic_filter(" 'orders, pay.*' ")
    assert [t for t in ["orders", "orders2", "payments", "pay", "xorders"] if include.fullmatch(t)] == [
        "orders",
        "payments",
        "pay",
    ]
    with pytest.raises(click.BadParameter, match=r"\[ is an invalid regex"):
        topic_filter("[")


def test_the_fetch_is_the_debugging_consumers_and_a_refused_partition_is_empty():
    body = fetch_request({("t", 1): 7, ("t", 0): 3, ("u", 0): 0}, fetch_size=4096, max_wait_ms=250)
    assert validate_request(ApiKey.FETCH, 0, body)["replica_id"] == -2
    assert (body["min_bytes"], body["max_wait_ms"]) == (1, 250)
    assert body["topics"][0] == {
        "topic": "t",
        "partitions": [
            {"partition": 0, "fetch_offset": 3, "partition_max_bytes": 4096},
            {"partition": 1, "fetch_offset": 7, "partition_max_bytes": 4096},
        ],
    }
    response = {
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": 0, "error_code": 0, "high_watermark": 6, "records": LOG},
                    {"partition": 1, "error_code": 1, "high_watermark": -1, "records": b""},
                ],
            }
        ]
    }
    answers = fetch_answers(response, [("t", 0), ("t", 1), ("u", 0)])
    assert answers == {("t", 0): ReplicaFetch(6, LOG), ("t", 1): ReplicaFetch(-1), ("u", 0): ReplicaFetch(-1)}


def test_a_bad_regex_is_a_usage_error_before_any_connection():
    result = CliRunner().invoke(
        build_cli(), ["verify-replicas", "--bootstrap-server", "127.0.0.1:1", "--topic-white-list", "a,("]
    )
    assert result.exit_code == 2
    assert "Invalid value for --topic-white-list: a|( is an invalid regex." in result.stderr
