"""Seed 002's leader epoch walk-through, replayed on real logs (SPEC 5.4; KIP-101).

* "Lider çağının spesifik çalışma mekanizması": a follower whose last epoch is 1 sends
  OffsetsForLeaderEpoch to a leader whose cache is (1, 20) (2, 80) (3, 120); the leader answers
  LastOffset = 80; the follower's LEO is above 80, so it truncates at 80, then fetches.
* "(1) Veri kaybını çözün" (data loss solved), with seed 002's roles -- B leads, A follows and
  crashes before its HW reaches 2: A asks B, is told LastOffset = LEO = 2 and keeps both
  messages; B dies, A leads, B comes back and keeps them too.
* "(2) Veri tutarsızlığını çözün" (divergence solved): B restarts first and leads epoch 1 with a
  new message at offset 1; A asks with epoch 0, is told 1 (the start of epoch 1), truncates
  there and fetches: no divergent message is left.
"""

from __future__ import annotations

from pathlib import Path

from broker.replica.truncation import TruncationPolicy
from tests.scenarios.replica_sim import Cluster, Exchange, Replica, assert_identical_below_hw

EPOCH_POLICY = TruncationPolicy.LEADER_EPOCH


def write(c: Cluster, leader: Replica, first: int, last: int, per_batch: int = 10) -> None:
    """The producer writes offsets [first, last) in batches; each value names its epoch and offset."""
    epoch = leader.partition.leader_epoch
    for base in range(first, last, per_batch):
        values = [f"e{epoch}-{offset}".encode() for offset in range(base, min(base + per_batch, last))]
        assert c.leader_append(leader, *values) == base


def test_offsets_for_leader_epoch_walk_with_seed_002_cache(tmp_path: Path) -> None:
    c = Cluster.of(tmp_path, ["L", "F"], EPOCH_POLICY)
    leader, follower = c["L"], c["F"]
    # Seed 002's cache starts at (1, 20): what came before is gone (log start offset 20).
    for replica in (leader, follower):
        replica.log.truncate_fully_and_start_at(20)

    # Epoch 1: F leads from offset 20 and writes [20, 80); L replicates all of it.
    c.become_leader(follower, epoch=1, isr=[follower, leader])
    c.become_follower(leader, follower)
    write(c, follower, 20, 80)
    c.catch_up(leader, follower)
    assert (leader.leo, leader.hw, follower.hw) == (80, 80, 80)
    # F writes [80, 90) and its broker dies before L fetches them.
    write(c, follower, 80, 90)
    assert (follower.leo, follower.hw) == (90, 80)
    c.crash(follower)

    # Epoch 2: L leads from 80 and writes [80, 120). Epoch 3: L is elected again from 120 and
    # writes [120, 150).
    c.become_leader(leader, epoch=2, isr=[leader])
    write(c, leader, 80, 120)
    c.become_leader(leader, epoch=3, isr=[leader])
    write(c, leader, 120, 150)
    assert leader.epochs == [(1, 20), (2, 80), (3, 120)]  # seed 002's example
    assert (leader.leo, leader.hw) == (150, 150)

    # The leader's answers: LEO for its latest epoch, else the start of the next epoch.
    assert c.offsets_for_leader_epoch(leader, 1) == (1, 80)
    assert c.offsets_for_leader_epoch(leader, 2) == (2, 120)
    assert c.offsets_for_leader_epoch(leader, 3) == (3, 150)

    # Step 1: F comes back; its last epoch is 1 ("follower last epoch = 1").
    c.restart(follower)
    assert (follower.leo, follower.hw, follower.epochs) == (90, 80, [(1, 20)])
    # Steps 2-3: it sends OffsetsForLeaderEpoch(1); LastOffset = 80; its LEO 90 > 80, so it
    # truncates at 80 ("log LastOffset'ten kesilecektir").
    assert c.follow(follower, leader) == [Exchange(1, 1, 80, 80, True)]
    assert (follower.leo, follower.hw, follower.epochs) == (80, 80, [(1, 20)])
    assert follower.records()[79] == (b"e1-79", 1)
    # Step 4: it fetches from 80 and ends with the leader's log and epochs.
    c.catch_up(follower, leader)
    assert (follower.leo, follower.hw) == (150, 150)
    assert follower.epochs == leader.epochs == [(1, 20), (2, 80), (3, 120)]
    assert follower.records()[85] == (b"e2-85", 2)  # not F's own e1-85 from the lost epoch-1 tail
    assert follower.values() == leader.values()
    assert_identical_below_hw(follower, leader)
    assert follower.segment_bytes() == leader.segment_bytes()


def test_seed_002_data_loss_solved(tmp_path: Path) -> None:
    c = Cluster.of(tmp_path, "BA", EPOCH_POLICY)
    a, b = c["A"], c["B"]
    c.become_leader(b, epoch=0, isr=[b, a])
    c.become_follower(a, b)
    c.leader_append(b, b"m0")
    c.follower_fetch(a, b)
    c.leader_append(b, b"m1")
    c.follower_fetch(a, b)
    c.leader_handle_fetch(b, a, fetch_offset=2)
    assert (b.leo, b.hw, a.leo, a.hw) == (2, 2, 2, 1)
    c.crash(a)  # before A updates its HW to 2

    # A restarts and asks B about epoch 0; B's latest epoch is 0, so LastOffset = B's LEO = 2,
    # equal to A's LEO: no truncation.
    assert c.restart_and_truncate(a, leader=b) == [Exchange(0, 0, 2, 2, True)]
    assert (a.leo, a.hw) == (2, 1)

    # B goes down; A becomes leader; B comes back and repeats A's steps, again without truncation.
    c.crash(b)
    c.become_leader(a, epoch=1, isr=[a])
    assert (a.leo, a.hw, a.epochs) == (2, 2, [(0, 0), (1, 2)])
    assert c.restart_and_truncate(b, leader=a) == [Exchange(0, 0, 2, 2, True)]
    c.follower_fetch(b, a)
    assert (a.leo, a.hw, b.leo, b.hw) == (2, 2, 2, 2)
    assert a.values() == b.values() == [b"m0", b"m1"]
    assert_identical_below_hw(a, b)


def test_seed_002_divergence_solved(tmp_path: Path) -> None:
    c = Cluster.of(tmp_path, "AB", EPOCH_POLICY)
    a, b = c["A"], c["B"]
    c.become_leader(a, epoch=0, isr=[a, b])
    c.become_follower(b, a)
    c.leader_append(a, b"m0")
    c.follower_fetch(b, a)
    c.flush(b)
    c.leader_append(a, b"m1")
    c.follower_fetch(b, a)
    c.leader_handle_fetch(a, b, fetch_offset=2)
    c.flush(a)
    assert (a.leo, a.hw) == (2, 2)
    c.crash(a, lose_page_cache=True)
    c.crash(b, lose_page_cache=True)

    # B restarts and leads; the producer's message makes the leader epoch 1 at offset 1.
    assert c.restart_and_truncate(b, leader=None) == []
    c.become_leader(b, epoch=1, isr=[b])
    assert c.leader_append(b, b"m2") == 1
    assert (b.leo, b.hw, b.epochs) == (2, 2, [(0, 0), (1, 1)])

    # A sends OffsetsForLeaderEpoch(0); 0 is not B's latest, so B answers with the start of the
    # smallest epoch above 0: LastOffset = 1. A's LEO 2 > 1: it truncates at 1, then fetches.
    assert c.restart_and_truncate(a, leader=b) == [Exchange(0, 0, 1, 1, True)]
    assert (a.leo, a.values()) == (1, [b"m0"])
    c.catch_up(a, b)
    assert a.values() == b.values() == [b"m0", b"m2"]
    assert_identical_below_hw(a, b)
    assert a.segment_bytes() == b.segment_bytes()
