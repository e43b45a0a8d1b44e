"""Seed 001's two failure scenarios, replayed step by step on real logs (SPEC 5.4).

* Figure 6, "数据丢失" (data loss): A leads, B follows, min.insync.replicas=1. m0 and m1 reach
  both logs and A's HW reaches 2, but B crashes before the FETCH round that would bring its own
  HW to 2. Under ``high-watermark`` B truncates to its HW 1 on restart, then A dies, B leads, A
  comes back and is cut back to B's end: the acknowledged m1 is gone from both replicas. Under
  ``leader-epoch`` (figure 8) the same steps keep m1 everywhere.
* Figure 7, "数据不一致/离散" (divergence): A holds m0 m1 (HW 2), B only m0 (HW 1: m1 was in
  its page cache when both machines went down, seed 002's second precondition). B restarts
  first, leads, takes m2 at offset 1. Under ``high-watermark`` A keeps m1 at offset 1: the
  replicas diverge below the HW and keep working that way. Under ``leader-epoch`` (figure 9) A
  asks B for the end of epoch 0, truncates to 1 and fetches m2: the segments are byte-identical.

A last variant of figure 7 has an unclean leader that never saw epoch 0 at all.
"""

from __future__ import annotations

from pathlib import Path

from broker.replica.truncation import TruncationPolicy
from client.protocol.errors import ErrorCode
from tests.scenarios.replica_sim import Cluster, Exchange, assert_identical_below_hw

HW_POLICY = TruncationPolicy.HIGH_WATERMARK
EPOCH_POLICY = TruncationPolicy.LEADER_EPOCH


# ---------------------------------------------------------------------------------------------
# Figure 6: data loss
# ---------------------------------------------------------------------------------------------


def figure_6_until_b_crashes(tmp_path: Path, policy: TruncationPolicy) -> Cluster:
    """Seed 001's first case (FETCH after PRODUCE), twice, then B dies between its blue and
    purple steps: A has LEO 2 HW 2, B has LEO 2 HW 1."""
    c = Cluster.of(tmp_path, "AB", policy)
    a, b = c["A"], c["B"]
    c.become_leader(a, epoch=0, isr=[a, b])
    c.become_follower(b, a)

    # The producer sends m0: A's LEO moves to 1; the HW stays 0 (B's remote LEO is still 0).
    assert c.leader_append(a, b"m0") == 0
    assert (a.leo, a.hw) == (1, 0)

    # FETCH round 1, fetch offset 0: remote LEO := 0, HW = min(1, 0) = 0; B writes m0, HW = min(1, 0).
    c.follower_fetch(b, a)
    assert a.partition.remote_replicas[b.broker_id].log_end_offset == 0
    assert (a.leo, a.hw, b.leo, b.hw) == (1, 0, 1, 0)

    # The producer sends m1 (min.insync.replicas=1: acknowledged once A has written it).
    assert c.leader_append(a, b"m1") == 1
    assert (a.leo, a.hw) == (2, 0)

    # FETCH round 2, fetch offset 1: remote LEO := 1, HW 1; B writes m1: LEO 2, HW = min(2, 1) = 1.
    c.follower_fetch(b, a)
    assert (a.leo, a.hw, b.leo, b.hw) == (2, 1, 2, 1)

    # FETCH round 3, fetch offset 2: A's remote LEO := 2, so the partition HW is 2: m1 is
    # committed (even acks=all would now complete). The response carries HW 2 ...
    response = c.leader_handle_fetch(a, b, fetch_offset=2)
    assert (response.error, response.records, response.high_watermark) == (ErrorCode.NONE, b"", 2)
    assert (a.leo, a.hw) == (2, 2)

    # ... but B's broker crashes before applying it: B's HW on disk is still 1.
    c.crash(b)
    return c


def test_figure_6_high_watermark_truncation_loses_an_acknowledged_write(tmp_path: Path) -> None:
    c = figure_6_until_b_crashes(tmp_path, HW_POLICY)
    a, b = c["A"], c["B"]

    # B restarts: "B会自动把LEO调整到之前的HW值" -- truncated to HW 1, m1 is gone from B.
    c.restart(b)
    assert (b.leo, b.hw) == (2, 1)
    assert c.follow(b, leader=a) == []
    assert (b.leo, b.hw) == (1, 1)
    assert b.values() == [b"m0"]

    # Before B's first FETCH, A's broker dies; B becomes leader of epoch 1 with the ISR {B}.
    c.crash(a)
    c.become_leader(b, epoch=1, isr=[b])
    assert (b.leo, b.hw, b.epochs) == (1, 1, [(0, 0), (1, 1)])

    # A comes back: its own log still has m1 and its checkpointed HW is 2 ...
    c.restart(a)
    assert (a.leo, a.hw, a.values()) == (2, 2, [b"m0", b"m1"])
    assert c.follow(a, leader=b) == []  # truncating to HW 2 removes nothing
    assert (a.leo, a.hw) == (2, 2)

    # ... but it fetches offset 2 from a leader whose log ends at 1: out of range, and A is cut
    # back to the leader's end offset, B's HW 1 ("将HW调整回1").
    c.follower_fetch(a, b)
    assert c.out_of_range_resets == 1
    assert (a.leo, a.hw) == (1, 1)
    c.follower_fetch(a, b)
    assert (a.leo, a.hw, b.leo, b.hw) == (1, 1, 1, 1)

    # m1 was acknowledged (A's HW was 2) and is now on no replica: data loss.
    assert a.values() == b.values() == [b"m0"]
    assert_identical_below_hw(a, b)


def test_figure_8_leader_epoch_truncation_keeps_the_acknowledged_write(tmp_path: Path) -> None:
    c = figure_6_until_b_crashes(tmp_path, EPOCH_POLICY)
    a, b = c["A"], c["B"]

    # B restarts and asks A for the end of its latest epoch, 0: A's latest epoch, so A's LEO 2.
    # min(2, B's LEO 2) = 2: nothing is truncated, although B's HW is still 1.
    c.restart(b)
    assert (b.leo, b.hw) == (2, 1)
    assert c.follow(b, leader=a) == [Exchange(0, 0, 2, 2, True)]
    assert (b.leo, b.hw, b.values()) == (2, 1, [b"m0", b"m1"])

    # A dies; B leads epoch 1 from its LEO 2, alone in the ISR, so the HW becomes 2.
    c.crash(a)
    c.become_leader(b, epoch=1, isr=[b])
    assert (b.leo, b.hw, b.epochs) == (2, 2, [(0, 0), (1, 2)])

    # A comes back as follower and asks B about epoch 0: it ended at 2 (where epoch 1 starts).
    c.restart(a)
    assert c.follow(a, leader=b) == [Exchange(0, 0, 2, 2, True)]
    assert (a.leo, a.hw) == (2, 2)
    c.follower_fetch(a, b)
    assert c.out_of_range_resets == 0
    assert (a.leo, a.hw, b.leo, b.hw) == (2, 2, 2, 2)

    # m1 survived on both replicas, byte for byte.
    assert a.values() == b.values() == [b"m0", b"m1"]
    assert_identical_below_hw(a, b)
    assert a.segment_bytes() == b.segment_bytes()


# ---------------------------------------------------------------------------------------------
# Figure 7: divergence
# ---------------------------------------------------------------------------------------------


def figure_7_until_b_leads_with_m2(tmp_path: Path, policy: TruncationPolicy) -> Cluster:
    """A: m0 m1, HW 2; B: m0, HW 1; both machines die; B restarts first, leads epoch 1 and takes
    m2 at offset 1 (HW 2: it is alone). A is back on disk but not yet truncated."""
    c = Cluster.of(tmp_path, "AB", policy)
    a, b = c["A"], c["B"]
    c.become_leader(a, epoch=0, isr=[a, b])
    c.become_follower(b, a)

    c.leader_append(a, b"m0")
    c.follower_fetch(b, a)
    c.flush(b)  # m0 is on B's disk
    c.leader_append(a, b"m1")
    c.follower_fetch(b, a)  # m1 only reaches B's page cache
    assert (a.leo, a.hw, b.leo, b.hw) == (2, 1, 2, 1)
    c.leader_handle_fetch(a, b, fetch_offset=2)
    c.flush(a)
    assert (a.leo, a.hw) == (2, 2)

    # A and B go down together; B's machine loses the m1 it had not flushed.
    c.crash(a, lose_page_cache=True)
    c.crash(b, lose_page_cache=True)

    # B restarts first: one message, HW 1 -- the figure's starting state for B.
    c.restart(b)
    assert (b.leo, b.hw, b.values()) == (1, 1, [b"m0"])
    c.become_leader(b, epoch=1, isr=[b])
    assert (b.leo, b.hw, b.epochs) == (1, 1, [(0, 0), (1, 1)])

    # The producer sends m2 (the figure's green box): offset 1, and B alone moves the HW to 2.
    assert c.leader_append(b, b"m2") == 1
    assert (b.leo, b.hw) == (2, 2)

    # A restarts with its two messages and its checkpointed HW 2.
    c.restart(a)
    assert (a.leo, a.hw, a.values()) == (2, 2, [b"m0", b"m1"])
    c.become_follower(a, b)
    return c


def test_figure_7_high_watermark_truncation_lets_replicas_diverge(tmp_path: Path) -> None:
    c = figure_7_until_b_leads_with_m2(tmp_path, HW_POLICY)
    a, b = c["A"], c["B"]

    # "发现此时分区HW=2而A之前的HW值也是2,故不做任何调整": A's HW is 2, nothing is truncated.
    assert c.truncate(a, b) == []
    assert (a.leo, a.hw) == (2, 2)
    c.follower_fetch(a, b)
    assert c.out_of_range_resets == 0
    assert (a.leo, a.hw, b.leo, b.hw) == (2, 2, 2, 2)

    # Offset 1 is committed on both replicas and holds different records.
    assert a.records()[1] == (b"m1", 0)
    assert b.records()[1] == (b"m2", 1)
    assert a.batches_below_hw()[1] != b.batches_below_hw()[1]

    # "此后A和B将以这种状态继续正常工作": replication goes on over the divergence.
    assert c.leader_append(b, b"m3") == 2
    c.catch_up(a, b)
    assert (a.leo, a.hw, b.leo, b.hw) == (3, 3, 3, 3)
    assert a.values() == [b"m0", b"m1", b"m3"]
    assert b.values() == [b"m0", b"m2", b"m3"]
    assert a.segment_bytes() != b.segment_bytes()
    # A even records epoch 1 as starting at 2, where its first epoch-1 batch landed.
    assert (a.epochs, b.epochs) == ([(0, 0), (1, 2)], [(0, 0), (1, 1)])


def test_figure_9_leader_epoch_truncation_keeps_replicas_identical(tmp_path: Path) -> None:
    c = figure_7_until_b_leads_with_m2(tmp_path, EPOCH_POLICY)
    a, b = c["A"], c["B"]

    # A asks about its latest epoch, 0. B's latest is 1, so B answers with the start of the first
    # epoch above 0: epoch 1 starts at offset 1. A truncates m1 away (LEO 1, HW 1).
    assert c.truncate(a, b) == [Exchange(0, 0, 1, 1, True)]
    assert (a.leo, a.hw, a.values(), a.epochs) == (1, 1, [b"m0"], [(0, 0)])

    # A fetches m2 from offset 1 and learns epoch 1 from its batch.
    c.follower_fetch(a, b)
    assert (a.leo, a.hw, a.epochs) == (2, 2, [(0, 0), (1, 1)])
    assert a.records()[1] == b.records()[1] == (b"m2", 1)

    assert c.leader_append(b, b"m3") == 2
    c.catch_up(a, b)
    assert c.out_of_range_resets == 0
    assert a.values() == b.values() == [b"m0", b"m2", b"m3"]
    assert_identical_below_hw(a, b)
    assert a.segment_bytes() == b.segment_bytes()
    assert a.epochs == b.epochs == [(0, 0), (1, 1)]


def test_figure_9_variant_unclean_leader_that_never_saw_epoch_0(tmp_path: Path) -> None:
    """Figure 7 with B empty: B was out of the ISR with nothing fetched, and is elected uncleanly
    (``unclean.leader.election.enable``). Its cache starts at epoch 1, so A's epoch 0 is older than
    anything B knows: B must answer with the start of its first epoch, 0 (SPEC 5.4, Kafka's
    LeaderEpochFileCache), and A truncates everything. (Unclean election loses m0 and m1; it must
    not leave A's records at offsets B has rewritten.)"""
    c = Cluster.of(tmp_path, "AB", EPOCH_POLICY)
    a, b = c["A"], c["B"]
    c.become_leader(a, epoch=0, isr=[a])
    c.leader_append(a, b"m0")
    c.leader_append(a, b"m1")
    assert (a.leo, a.hw) == (2, 2)

    c.crash(a)
    c.become_leader(b, epoch=1, isr=[b])
    for value in (b"n0", b"n1", b"n2"):
        c.leader_append(b, value)
    assert (b.leo, b.hw, b.epochs) == (3, 3, [(1, 0)])

    c.restart(a)
    assert c.follow(a, leader=b) == [Exchange(0, 0, 0, 0, True)]
    assert (a.leo, a.hw, a.epochs) == (0, 0, [])
    assert c.catch_up(a, b) == 1
    assert a.values() == b.values() == [b"n0", b"n1", b"n2"]
    assert_identical_below_hw(a, b)
    assert a.segment_bytes() == b.segment_bytes()
