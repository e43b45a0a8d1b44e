"""Issue 25's free-space floor when ``statvfs`` fails (broker/log/disk_space.py; docs/design.md
"Disk space as a budget (issue 25)"): the rule is "no floor until a measurement succeeds", and
that holds for a dir already below its floor too, which must not stay below on the strength of
a measurement it can no longer repeat (a failing disk is KIP-112's to handle, not this rule's)."""

from __future__ import annotations

import logging

from broker.log.disk_space import DiskSpaceMonitor, MiB
from tests.unit.test_disk_space import DIR, Clock, FakeStatvfs


def test_a_dir_below_its_floor_whose_statvfs_then_fails_has_no_floor(caplog):
    """Interleaving: the periodic job measures 5 MiB usable against a 20 MiB floor (below:
    appends refused, the follower pauses); then statvfs starts failing (EIO); the next periodic
    measurement fails. The dir has no floor now: it is no longer below, appends are admitted, and
    the way back is reported like any other."""
    fs, clock = FakeStatvfs(100 * MiB, 5 * MiB), Clock()
    monitor = DiskSpaceMonitor([DIR], 20 * MiB, clock, fs, refresh_ms=1_000)
    assert [t.below for t in monitor.refresh()] == [True] and monitor.below_floor(DIR)
    assert not monitor.admit(DIR, MiB)
    fs.error = OSError(5, "Input/output error")
    clock.now += 1_000
    with caplog.at_level(logging.INFO, logger="broker.log.disk_space"):
        back = monitor.refresh()
    (view,) = monitor.snapshot()
    assert not monitor.below_floor(DIR) and view.floor == 0 and not view.below, (
        f"statvfs failed, so the dir has no floor, yet it stays below (floor {view.floor}, below {view.below})"
    )
    assert [(t.log_dir, t.below, t.floor) for t in back] == [(DIR, False, 0)]
    assert "cannot measure the free space" in caplog.text
    assert monitor.admit(DIR, MiB)
    # a measurement that succeeds again brings the floor back, and with it the refusal
    fs.error = None
    clock.now += 1_000
    assert [t.below for t in monitor.refresh()] == [True] and not monitor.admit(DIR, MiB)
