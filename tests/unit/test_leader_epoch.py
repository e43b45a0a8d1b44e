"""The KIP-101 leader epoch cache (SPEC 5.4; seeds 001 and 002)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.checkpoint import CorruptCheckpoint
from broker.log.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "leader-epoch-checkpoint"


def seed_002_cache(path: Path) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(path)
    cache.assign(1, 20)
    cache.assign(2, 80)
    cache.assign(3, 120)
    return cache


def test_empty_cache(path: Path):
    cache = LeaderEpochFileCache(path)
    assert cache.entries == []
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.earliest_entry is None
    assert cache.end_offset_for(0, 10) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.epoch_for_offset(5) == UNDEFINED_EPOCH
    assert not path.exists()


def test_assign_appends_higher_epochs_only(path: Path):
    cache = LeaderEpochFileCache(path)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch: no-op
    cache.assign(2, 10)
    cache.assign(1, 12)  # lower epoch: no-op
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10)]
    assert cache.latest_epoch == 2
    assert cache.earliest_entry == EpochEntry(0, 0)


def test_assign_removes_entries_that_start_at_or_after_the_new_one(path: Path):
    cache = seed_002_cache(path)
    cache.assign(5, 80)
    assert cache.entries == [EpochEntry(1, 20), EpochEntry(5, 80)]
    assert LeaderEpochFileCache(path).entries == cache.entries


def test_only_a_non_trivial_removal_is_warned_of(path: Path, caplog: pytest.LogCaptureFixture):
    """Kafka's maybeTruncateNonMonotonicEntries: a leader re-elected before any append replaces
    the one epoch that started where the new one starts: nothing written, nothing to warn of (a
    failover at scale did it for thousands of partitions at once)."""
    cache = LeaderEpochFileCache(path)
    cache.assign(0, 0)
    with caplog.at_level("WARNING"):
        cache.assign(1, 0)
    assert cache.entries == [EpochEntry(1, 0)] and not caplog.records
    cache.assign(2, 10)
    cache.assign(3, 20)
    with caplog.at_level("WARNING"):
        cache.assign(4, 15)  # epoch 3's entry started after 15: data of it is gone
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 15)]
    assert "removes conflicting entries" in caplog.text


def test_assign_rejects_negative_values(path: Path):
    with pytest.raises(ValueError):
        LeaderEpochFileCache(path).assign(-1, 0)


def test_entries_is_a_copy(path: Path):
    cache = seed_002_cache(path)
    cache.entries.clear()
    assert len(cache.entries) == 3


def test_end_offset_for_seed_002_example(path: Path):
    cache = seed_002_cache(path)
    leo = 150
    assert cache.end_offset_for(1, leo) == (1, 80)  # seed 002: follower at epoch 1 is told 80
    assert cache.end_offset_for(2, leo) == (2, 120)
    assert cache.end_offset_for(3, leo) == (3, leo)  # the latest epoch: the LEO
    assert cache.end_offset_for(0, leo) == (0, 20)  # older than any known epoch: the first epoch's start
    assert cache.end_offset_for(4, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_end_offset_for_an_epoch_missing_between_entries(path: Path):
    cache = LeaderEpochFileCache(path)
    cache.assign(1, 0)
    cache.assign(4, 30)
    cache.assign(6, 50)
    assert cache.end_offset_for(2, 70) == (1, 30)  # largest epoch <= 2 is 1; epoch 4 starts at 30
    assert cache.end_offset_for(5, 70) == (4, 50)


def test_epoch_for_offset(path: Path):
    cache = seed_002_cache(path)
    assert [cache.epoch_for_offset(o) for o in (0, 19, 20, 79, 80, 119, 120, 10_000)] == [
        -1,
        -1,
        1,
        1,
        2,
        2,
        3,
        3,
    ]


def test_truncate_from_end(path: Path):
    cache = seed_002_cache(path)
    cache.truncate_from_end(200)  # beyond every entry: nothing changes
    assert len(cache.entries) == 3
    cache.truncate_from_end(80)
    assert cache.entries == [EpochEntry(1, 20)]
    assert LeaderEpochFileCache(path).entries == [EpochEntry(1, 20)]
    cache.truncate_from_end(0)
    assert cache.entries == []


def test_truncate_from_start(path: Path):
    cache = seed_002_cache(path)
    cache.truncate_from_start(10)  # before every entry: nothing changes
    assert cache.entries == [EpochEntry(1, 20), EpochEntry(2, 80), EpochEntry(3, 120)]
    cache.truncate_from_start(100)
    assert cache.entries == [EpochEntry(2, 100), EpochEntry(3, 120)]
    cache.truncate_from_start(120)
    assert cache.entries == [EpochEntry(3, 120)]
    cache.truncate_from_start(500)
    assert cache.entries == [EpochEntry(3, 500)]
    assert LeaderEpochFileCache(path).entries == [EpochEntry(3, 500)]


def test_clear_persists(path: Path):
    cache = seed_002_cache(path)
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch == -1
    assert path.read_text() == "0\n0\n"


def test_checkpoint_survives_restart_with_exact_text(path: Path):
    seed_002_cache(path)
    assert path.read_text() == "0\n3\n1 20\n2 80\n3 120\n"
    reopened = LeaderEpochFileCache(path)
    assert reopened.entries == [EpochEntry(1, 20), EpochEntry(2, 80), EpochEntry(3, 120)]
    assert reopened.end_offset_for(1, 150) == (1, 80)
    assert sorted(p.name for p in path.parent.iterdir()) == ["leader-epoch-checkpoint"]


@pytest.mark.parametrize("text", ["0\n2\n1 20\n", "0\n2\n2 20\n1 30\n", "0\n1\n1 x\n", "7\n0\n"])
def test_corrupt_checkpoint_is_reported(path: Path, text: str):
    path.write_text(text)
    with pytest.raises(CorruptCheckpoint, match="leader-epoch-checkpoint"):
        LeaderEpochFileCache(path)
