"""The full checks' incremental reads (sim/log_cursor.py, sim/replica_checks.py) give what reading
every log from its start gives (sim/log_reading.py), through appends, truncations below what was
read followed by other data, a moved log start, compaction, a new Log object and bytes changed
under the log's feet; and the pairwise comparison still finds two replicas that part after they
compared equal, with the message the full comparison gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log import Log, LogConfig
from sim.log_cursor import LogViews
from sim.log_reading import batches_below, first_difference, records_below
from sim.replica_checks import ReplicaChecks
from tests.unit.cleaner_harness import Clock, append, cleaner_for, compact_config, open_log

TP = ("t", 0)


def plain_log(path: Path, clock: Clock, name: str = "t-0") -> Log:
    return open_log(path / name, clock, LogConfig(segment_bytes=400, index_interval_bytes=100))


def write(lg: Log, clock: Clock, values: list[bytes]) -> None:
    for value in values:
        append(lg, clock, [(None, value)])
        clock.now += 1


def write_both(logs: tuple[Log, Log], clock: Clock, values: list[bytes]) -> None:
    """The same batches (timestamps too) to both replicas."""
    for value in values:
        for lg in logs:
            append(lg, clock, [(None, value)])
        clock.now += 1


def same_as_full_reads(views: LogViews, lg: Log, broker: int = 1) -> None:
    """Every end the checks read to gives what the original readers give, in a fresh check."""
    views.begin_check()
    for end in sorted({lg.log_start_offset, lg.high_watermark, lg.log_end_offset, lg.log_end_offset - 1}):
        assert views.batches(broker, TP, lg, end) == batches_below(lg, end), end
        got = [(r.offset, r.value) for r in views.records(broker, TP, lg, end)]
        assert got == [(r.offset, r.value) for r in records_below(lg, end)], end
    full = {r.offset: r.value for r in records_below(lg, lg.log_end_offset)}
    assert views.values(broker, TP, lg) == full


def test_appends_are_read_once_and_give_the_full_reads(tmp_path: Path) -> None:
    clock, views = Clock(), LogViews()
    lg = plain_log(tmp_path, clock)
    same_as_full_reads(views, lg)  # empty: nothing read
    assert views.reads == 0
    for round_ in range(6):
        write(lg, clock, [b"v%d-%d" % (round_, i) for i in range(7)])  # several segments
        lg.update_high_watermark(lg.log_end_offset - 2)
        same_as_full_reads(views, lg)
    assert len(lg.segments) > 3
    assert views.restarts == 0
    reads = views.reads
    views.begin_check()
    views.batches(1, TP, lg, lg.log_end_offset)
    assert views.reads - reads == 1  # nothing new: one read, of the last batch (its fingerprint)


def test_a_truncation_below_what_was_read_then_other_data_is_seen(tmp_path: Path) -> None:
    clock, views = Clock(), LogViews()
    lg = plain_log(tmp_path, clock)
    write(lg, clock, [b"a%d" % i for i in range(10)])
    same_as_full_reads(views, lg)
    lg.truncate_to(4)
    write(lg, clock, [b"b%d" % i for i in range(8)])  # the log end offset passes where it was
    assert lg.log_end_offset > 10
    same_as_full_reads(views, lg)
    assert views.restarts == 1
    assert views.values(1, TP, lg)[5] == b"b1"


def test_bytes_changed_under_the_view_are_read_again(tmp_path: Path) -> None:
    """No truncation the log counts: the last batch read no longer reads back (the fingerprint)."""
    clock, views = Clock(), LogViews()
    lg = plain_log(tmp_path, clock)
    write(lg, clock, [b"x%d" % i for i in range(3)])
    same_as_full_reads(views, lg)
    segment = lg.segments[-1]
    data = bytearray(segment.log_path.read_bytes())
    data[-1] ^= 0xFF  # the last record's value, CRC and all: a different batch of the same length
    segment.log_path.write_bytes(bytes(data))
    views.begin_check()
    with pytest.raises(Exception, match="CRC"):
        views.batches(1, TP, lg, lg.log_end_offset)  # read again from the start, as the full read does
    with pytest.raises(Exception, match="CRC"):
        batches_below(lg, lg.log_end_offset)


def test_a_moved_log_start_inside_a_batch_and_a_new_log_object(tmp_path: Path) -> None:
    clock, views = Clock(), LogViews()
    lg = plain_log(tmp_path, clock)
    for i in range(5):
        append(lg, clock, [(None, b"m%d-%d" % (i, j)) for j in range(3)])  # batches of 3 records
    lg.update_high_watermark(lg.log_end_offset)
    same_as_full_reads(views, lg)
    lg.maybe_increment_log_start_offset(4)  # inside the batch 3..5
    same_as_full_reads(views, lg)
    write(lg, clock, [b"after"])
    lg.update_high_watermark(lg.log_end_offset)
    same_as_full_reads(views, lg)
    lg.close()
    again = Log.open(lg.dir, lg.config, clock, log_start_offset=4)
    same_as_full_reads(views, again)
    assert views.restarts == 2


async def test_a_compacted_log_is_read_again_after_the_cleaner_swaps_its_segments(tmp_path: Path) -> None:
    clock, views = Clock(), LogViews()
    lg = open_log(tmp_path / "t-0", clock, compact_config(segment_bytes=200))
    for round_ in range(4):
        for key in (b"k1", b"k2", b"k3"):
            append(lg, clock, [(key, b"%s-%d" % (key, round_))])
        lg.roll()
    append(lg, clock, [(b"z", b"1")])
    lg.update_high_watermark(lg.log_end_offset)
    same_as_full_reads(views, lg)
    assert await cleaner_for(lg, clock).clean_filthiest_log()
    same_as_full_reads(views, lg)
    assert views.restarts == 1


def test_replicas_that_part_after_comparing_equal_are_found(tmp_path: Path) -> None:
    clock, checks = Clock(), ReplicaChecks()
    a, b = plain_log(tmp_path / "a", clock), plain_log(tmp_path / "b", clock)
    write_both((a, b), clock, [b"same%d" % i for i in range(6)])
    for lg in (a, b):
        lg.update_high_watermark(lg.log_end_offset)
    checks.begin_check()
    assert checks.identical_problem(TP, [(1, a), (2, b)]) is None
    b.truncate_to(2)  # below both HWs, then other data to the same offsets
    write(b, clock, [b"diff%d" % i for i in range(4)])
    b.update_high_watermark(b.log_end_offset)
    checks.begin_check()
    problem = checks.identical_problem(TP, [(1, a), (2, b)])
    left, right = batches_below(a, 6), batches_below(b, 6)
    assert problem == f"brokers 1 and 2 differ below HW 6 of t-0: {first_difference(left, right)}"


def test_replicas_that_stay_equal_are_compared_on_what_they_gained(tmp_path: Path) -> None:
    clock, checks = Clock(), ReplicaChecks()
    a, b = plain_log(tmp_path / "a", clock), plain_log(tmp_path / "b", clock)
    for round_ in range(5):
        write_both((a, b), clock, [b"r%d-%d" % (round_, i) for i in range(3)])
        a.update_high_watermark(a.log_end_offset)
        b.update_high_watermark(b.log_end_offset - 1)  # a follower a little behind
        checks.begin_check()
        assert checks.identical_problem(TP, [(1, a), (2, b)]) is None
    write(a, clock, [b"only-a"])  # above b's HW: not compared
    a.update_high_watermark(a.log_end_offset)
    checks.begin_check()
    assert checks.identical_problem(TP, [(1, a), (2, b)]) is None
    write(b, clock, [b"only-b"])  # both HWs past it, different bytes
    b.update_high_watermark(b.log_end_offset)
    checks.begin_check()
    assert checks.identical_problem(TP, [(1, a), (2, b)]) is not None
