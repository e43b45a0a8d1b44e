"""Regressions found replaying seeds 001/002 and KIP-279 (tests/scenarios): OffsetsForLeaderEpoch
for an epoch older than the leader's cache, and an epoch entry left at the LEO by a leadership
without writes (SPEC 5.4)."""

from __future__ import annotations

from pathlib import Path

from broker.log import EpochEntry, LeaderEpochFileCache, Log, LogConfig
from broker.replica.truncation import TruncationDecision, truncation_by_leader_epoch
from client.protocol.records import build_batch


def test_epoch_older_than_every_entry_is_answered_with_the_first_epoch_start(tmp_path: Path) -> None:
    # An unclean leader that never had epoch 0: its cache starts at (1, 0). A follower asking about
    # epoch 0 must hear "0 ends at 0" (Kafka's LeaderEpochFileCache), not "undefined" -- which made
    # the follower fall back to its HW and keep records the leader has rewritten.
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    assert cache.end_offset_for(0, 3) == (0, 0)
    # The follower (cache (0, 0), LEO 2, HW 2) then truncates everything.
    assert truncation_by_leader_epoch(0, 0, (0, 2), 2, 2) == TruncationDecision(0, True)
    # After retention the first entry starts later; the answer follows it.
    cache.assign(2, 10)
    cache.truncate_from_start(5)
    assert cache.entries == [EpochEntry(1, 5), EpochEntry(2, 10)]
    assert cache.end_offset_for(0, 12) == (0, 5)


def test_truncate_at_the_log_end_drops_an_epoch_entry_that_starts_there(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), lambda: 1_000)
    log.append_as_leader(build_batch([(None, b"m0", 1_000, []), (None, b"m1", 1_000, [])]), leader_epoch=0)
    log.leader_epoch_cache.assign(2, log.log_end_offset)  # led epoch 2 from offset 2, wrote nothing
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 2)]

    log.truncate_to(2)  # KIP-279's intermediate truncation lands on the LEO
    assert log.log_end_offset == 2
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0)]  # the next question asks about 0
    log.truncate_to(5)
    assert (log.log_end_offset, log.leader_epoch_cache.entries) == (2, [EpochEntry(0, 0)])
