"""KIP-279, "fix log divergence between leader and follower after fast leader fail over", replayed
on real logs with three replicas (SPEC 5.4; seeds 001 and 002 extended).

Leadership moves twice in quick succession, so the follower's latest epoch is one the new
leader never saw. The leader answers OffsetsForLeaderEpoch with the largest epoch it knows
below the asked one; the follower does not know that epoch either, so it truncates to its own
end offset for the epoch the leader named and asks again, until both name the same epoch.
KIP-101's rule alone (truncate to min(leader's end offset, LEO)) would keep a divergent record.

The elections after a double failure pick a replica outside the last ISR: they need
``unclean.leader.election.enable`` (or a controller acting on a stale ISR), so acknowledged
records may be lost; what the leader-epoch policy guarantees is that no replica keeps a record
the leader does not have at the same offset.
"""

from __future__ import annotations

from pathlib import Path

from broker.replica.truncation import TruncationPolicy
from tests.scenarios.replica_sim import Cluster, Exchange, Replica, assert_identical_below_hw

HW_POLICY = TruncationPolicy.HIGH_WATERMARK
EPOCH_POLICY = TruncationPolicy.LEADER_EPOCH


def replicate(sim: Cluster, leader: Replica, *followers: Replica, rounds: int = 3) -> None:
    """Every follower fetches in turn, ``rounds`` times."""
    for _ in range(rounds):
        for follower in followers:
            sim.follower_fetch(follower, leader)


def double_failover(tmp_path: Path, policy: TruncationPolicy) -> Cluster:
    """Epoch 0: A leads, m0 is everywhere. Epoch 1: B leads and writes b1; nobody fetches it.
    Epoch 2: C leads and writes c1. Epoch 3: B leads again and writes b2. C is still down."""
    sim = Cluster.of(tmp_path, "ABC", policy)
    a, b, c = sim["A"], sim["B"], sim["C"]
    sim.become_leader(a, epoch=0, isr=[a, b, c])
    sim.become_follower(b, a)
    sim.become_follower(c, a)
    sim.leader_append(a, b"m0")
    replicate(sim, a, b, c)
    assert [(r.leo, r.hw) for r in (a, b, c)] == [(1, 1)] * 3

    sim.crash(a)
    sim.become_leader(b, epoch=1, isr=[b, c])
    sim.become_follower(c, b)
    assert sim.leader_append(b, b"b1") == 1
    assert (b.leo, b.hw, b.epochs) == (2, 1, [(0, 0), (1, 1)])  # C has not fetched b1

    sim.crash(b)
    sim.become_leader(c, epoch=2, isr=[c])
    assert sim.leader_append(c, b"c1") == 1
    assert (c.leo, c.hw, c.epochs) == (2, 2, [(0, 0), (2, 1)])

    sim.crash(c)
    sim.restart(b)
    sim.become_leader(b, epoch=3, isr=[b])
    assert sim.leader_append(b, b"b2") == 2
    assert (b.leo, b.hw, b.epochs) == (3, 3, [(0, 0), (1, 1), (3, 2)])

    sim.restart(c)
    assert (c.leo, c.hw, c.epochs) == (2, 2, [(0, 0), (2, 1)])  # epoch 2 is unknown to B
    return sim


def test_follower_whose_epoch_the_leader_never_saw_asks_again(tmp_path: Path) -> None:
    sim = double_failover(tmp_path, EPOCH_POLICY)
    a, b, c = sim["A"], sim["B"], sim["C"]

    exchanges = sim.follow(c, b)
    # Round 1: C asks about epoch 2. B never had it: its largest epoch <= 2 is 1, which ends at 2
    # (where epoch 3 starts). KIP-101 alone would truncate to min(2, C's LEO 2) = 2 and keep c1.
    # C does not know epoch 1 either: its largest epoch <= 1 is 0, ending at 1, so it truncates
    # to 1 and asks again. Round 2: C's latest epoch is now 0; B says epoch 0 ends at 1. Done.
    assert exchanges == [Exchange(2, 1, 2, 1, False), Exchange(0, 0, 1, 1, True)]
    assert min(exchanges[0].leader_end_offset, 2) == 2  # what KIP-101's rule would have kept
    assert (c.leo, c.hw, c.epochs, c.values()) == (1, 1, [(0, 0)], [b"m0"])

    assert sim.catch_up(c, b) == 1
    assert c.records() == b.records() == {0: (b"m0", 0), 1: (b"b1", 1), 2: (b"b2", 3)}

    # A comes back too: its epoch 0 ends at 1 on B, which is its LEO: nothing to truncate.
    assert sim.restart_and_truncate(a, leader=b) == [Exchange(0, 0, 1, 1, True)]
    sim.catch_up(a, b)

    assert sim.out_of_range_resets == 0
    assert [(r.leo, r.hw) for r in (a, b, c)] == [(3, 3)] * 3
    assert a.epochs == b.epochs == c.epochs == [(0, 0), (1, 1), (3, 2)]
    assert_identical_below_hw(a, b, c)
    assert a.segment_bytes() == b.segment_bytes() == c.segment_bytes()


def test_high_watermark_policy_keeps_the_divergent_record(tmp_path: Path) -> None:
    sim = double_failover(tmp_path, HW_POLICY)
    b, c = sim["B"], sim["C"]

    assert sim.follow(c, b) == []  # C's HW is 2: nothing is truncated
    sim.catch_up(c, b)
    assert (c.leo, c.hw, b.leo, b.hw) == (3, 3, 3, 3)
    assert c.records()[1] == (b"c1", 2)
    assert b.records()[1] == (b"b1", 1)
    assert c.batches_below_hw()[1] != b.batches_below_hw()[1]
    assert c.batches_below_hw()[2] == b.batches_below_hw()[2]  # b2 was copied, byte for byte


def test_epoch_started_without_writes_does_not_stall_truncation(tmp_path: Path) -> None:
    """A follower whose latest epoch is one it led without writing a record: its cache ends with
    (epoch, LEO). When the new leader names an older epoch the follower does not know, KIP-279's
    intermediate truncation lands on the LEO itself: no record is removed, but the dangling
    entry must go (as Kafka's Log.truncateTo does), or the follower asks the same question
    forever."""
    sim = Cluster.of(tmp_path, "ABC", EPOCH_POLICY)
    a, b, c = sim["A"], sim["B"], sim["C"]
    sim.become_leader(a, epoch=0, isr=[a, b, c])
    sim.become_follower(b, a)
    sim.become_follower(c, a)
    sim.leader_append(a, b"m0")
    replicate(sim, a, b, c)
    sim.leader_append(a, b"m1")
    sim.follower_fetch(b, a)
    assert (b.leo, c.leo) == (2, 1)

    # Epoch 1: C leads and writes c1. Epoch 2: B leads but writes nothing before it stalls (a
    # long GC pause); epoch 3: C, back from a restart, is elected again and writes c2.
    sim.crash(a)
    sim.become_leader(c, epoch=1, isr=[b, c])
    assert sim.leader_append(c, b"c1") == 1
    sim.crash(c)
    sim.become_leader(b, epoch=2, isr=[b])
    assert (b.leo, b.epochs) == (2, [(0, 0), (2, 2)])
    sim.restart(c)
    sim.become_leader(c, epoch=3, isr=[c])
    assert sim.leader_append(c, b"c2") == 2
    assert c.epochs == [(0, 0), (1, 1), (3, 2)]

    # B resumes and is told to follow C in epoch 3, without a restart.
    exchanges = sim.follow(b, c)
    assert exchanges == [Exchange(2, 1, 2, 2, False), Exchange(0, 0, 1, 1, True)]
    assert (b.leo, b.epochs, b.values()) == (1, [(0, 0)], [b"m0"])
    sim.catch_up(b, c)
    assert b.values() == c.values() == [b"m0", b"c1", b"c2"]
    assert b.epochs == c.epochs == [(0, 0), (1, 1), (3, 2)]
    assert_identical_below_hw(b, c)
    assert b.segment_bytes() == c.segment_bytes()
