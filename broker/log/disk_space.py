"""Free space of a log dir as a budget (docs/design.md "Disk space as a budget (issue 25)").

Kafka has no such rule: an append that meets ENOSPC is an IOException, the log dir goes offline
(KIP-112, ``LogDirFailureChannel``) and a broker whose every dir is offline halts, so a disk
that fills on every broker at once stops the cluster. Redpanda's ``storage_min_free_bytes`` is
the model here: below a configured floor of free space, a log dir takes no more appends
(a leader refuses them with a retriable error, a follower pauses its fetches for the dir), and
both resume by themselves once space returns (retention, a deleted topic, an operator).

The rule, per log dir (:class:`LogDirSpace`, sans-IO: figures and times in, decisions out):

* the floor is :func:`free_space_floor` of ``log.dir.min.free.bytes`` and the filesystem's size
  (-1, the default: 1% of the filesystem, at most 1 GiB, and none on a filesystem too small for
  that to reach 16 MiB; 0: no floor, Kafka's behaviour; more: that many bytes);
* the dir goes *below its floor* when a measurement finds fewer usable bytes than the floor, and
  comes back only when one finds at least :func:`resume_threshold` (the floor plus a tenth of
  it, at least 1 MiB): the hysteresis that keeps it from flapping on every segment deleted;
* a measurement that fails (``statvfs`` raises) leaves the dir with no floor until one succeeds,
  so a dir below its floor comes back (a failing disk is KIP-112's to handle, not this rule's);
* between measurements the usable bytes are estimated as the last measurement minus the bytes
  appended since (no syscall per append); when this broker's own appends bring the estimate
  under the floor, the dir is measured at once, before anything is refused.

:class:`DiskSpaceMonitor` holds one rule per log dir and is the only part that does I/O: it
calls the injected ``statvfs`` (at most every ``refresh_ms`` from the broker's periodic job,
plus the crossings above) and logs each transition. The replica manager asks it on the append
path and the replica fetchers before each FETCH; ``/metrics`` reads its :meth:`snapshot`.
``log.dir.min.free.bytes`` is also a dynamic broker config (KIP-226's way, as Redpanda's
``storage_min_free_bytes`` is a live cluster property): :meth:`reconfigure` applies a new value
at once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30
#: ``log.dir.min.free.bytes`` = -1: the floor is this share of the filesystem ...
DERIVED_FLOOR_DIVISOR = 100
#: ... at most this (Redpanda's default is 5 GiB; 1 GiB leaves a CI runner with a few GiB free alone) ...
DERIVED_FLOOR_MAX = GiB
#: ... and none when that comes under this: a filesystem under 1.6 GiB (a test disk, a tmpfs) has
#: no floor unless one is configured, since 1% of it is less than one segment's indexes.
DERIVED_FLOOR_MIN = 16 * MiB
#: Hysteresis: a dir below its floor comes back at floor + max(floor // 10, this).
MIN_RESUME_MARGIN = MiB
#: The broker's periodic job measures each log dir at most this often.
REFRESH_INTERVAL_MS = 1_000


class StatvfsResult(Protocol):
    """What :func:`os.statvfs` answers that the rule reads."""

    @property
    def f_frsize(self) -> int: ...

    @property
    def f_blocks(self) -> int: ...

    @property
    def f_bavail(self) -> int: ...


Statvfs = Callable[[str], StatvfsResult]


@dataclass(frozen=True)
class DiskUsage:
    """A filesystem's size and the bytes an unprivileged writer may still use (``f_bavail``, what
    KIP-827's DescribeLogDirs calls UsableBytes)."""

    total_bytes: int
    usable_bytes: int

    @classmethod
    def of(cls, st: StatvfsResult) -> DiskUsage:
        return cls(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def free_space_floor(configured: int, total_bytes: int) -> int:
    """The floor of a filesystem of ``total_bytes`` for ``log.dir.min.free.bytes`` = ``configured``."""
    if configured >= 0:
        return configured
    derived = min(DERIVED_FLOOR_MAX, total_bytes // DERIVED_FLOOR_DIVISOR)
    return derived if derived >= DERIVED_FLOOR_MIN else 0


def resume_threshold(floor: int) -> int:
    """The usable bytes a dir below ``floor`` needs to take appends again."""
    return floor + max(floor // 10, MIN_RESUME_MARGIN) if floor > 0 else 0


@dataclass(frozen=True)
class Transition:
    """A dir went below its floor (``below``) or came back above its resume threshold."""

    log_dir: Path
    below: bool
    usage: DiskUsage
    floor: int


@dataclass(frozen=True)
class LogDirSpaceView:
    """What ``/metrics`` shows of one log dir (at its last measurement)."""

    log_dir: Path
    total_bytes: int
    usable_bytes: int
    floor: int
    below: bool
    refused_appends: int


@dataclass
class LogDirSpace:
    """The free-space rule of one log dir. ``measured_at_ms`` -1: never measured (no floor yet)."""

    log_dir: Path
    configured_floor: int
    usage: DiskUsage = DiskUsage(0, 0)
    floor: int = 0
    measured_at_ms: int = -1
    appended_since: int = 0  # bytes appended to the dir since the last measurement
    below: bool = False
    refused_appends: int = 0

    @property
    def estimated_usable(self) -> int:
        return self.usage.usable_bytes - self.appended_since

    def due(self, now_ms: int, refresh_ms: int) -> bool:
        return self.measured_at_ms < 0 or now_ms - self.measured_at_ms >= refresh_ms

    def crosses(self, nbytes: int) -> bool:
        """Whether appending ``nbytes`` more would take the estimate under the floor (or nothing is
        measured yet): the dir must be measured before the append is admitted."""
        return self.measured_at_ms < 0 or (not self.below and self.estimated_usable - nbytes < self.floor)

    def measured(self, usage: DiskUsage, now_ms: int) -> Transition | None:
        """Take a measurement; returns the transition it makes, if any."""
        self.usage = usage
        self.floor = free_space_floor(self.configured_floor, usage.total_bytes)
        self.measured_at_ms = now_ms
        self.appended_since = 0
        if self.below and usage.usable_bytes >= resume_threshold(self.floor):
            self.below = False
            return Transition(self.log_dir, False, usage, self.floor)
        if not self.below and usage.usable_bytes < self.floor:
            self.below = True
            return Transition(self.log_dir, True, usage, self.floor)
        return None

    def unmeasurable(self, now_ms: int) -> Transition | None:
        """A measurement failed: no floor until one succeeds. A dir below its floor comes back
        (the transition returned): the refusal rested on a floor it no longer has."""
        self.floor, self.measured_at_ms, self.appended_since = 0, now_ms, 0
        if not self.below:
            return None
        self.below = False
        return Transition(self.log_dir, False, self.usage, self.floor)

    def view(self) -> LogDirSpaceView:
        u = self.usage
        return LogDirSpaceView(
            self.log_dir, u.total_bytes, u.usable_bytes, self.floor, self.below, self.refused_appends
        )


class DiskSpaceMonitor:
    """Every log dir's rule, measured through ``statvfs``; see the module docstring."""

    def __init__(
        self,
        log_dirs: Iterable[Path],
        configured_floor: int,
        time_ms: Callable[[], int],
        statvfs: Statvfs = os.statvfs,
        refresh_ms: int = REFRESH_INTERVAL_MS,
    ) -> None:
        self._dirs = {Path(d): LogDirSpace(Path(d), configured_floor) for d in log_dirs}
        self.time_ms = time_ms
        self.statvfs = statvfs
        self.refresh_ms = refresh_ms

    # -- the append and fetch paths ---------------------------------------------------------------
    def admit(self, log_dir: Path, nbytes: int) -> bool:
        """A leader's append of ``nbytes`` to a log in ``log_dir``: False (refused) while the dir
        is below its floor; else the bytes are counted against the estimate."""
        space = self._dirs.get(log_dir)
        if space is None:
            return True
        if space.crosses(nbytes):
            self._measure(space)
        if space.below:
            space.refused_appends += 1
            return False
        space.appended_since += nbytes
        return True

    def appended(self, log_dir: Path, nbytes: int) -> None:
        """Bytes written that were not asked for (a follower's, an internal topic's): counted, and
        the dir measured if they take the estimate under the floor."""
        space = self._dirs.get(log_dir)
        if space is None:
            return
        if space.crosses(nbytes):
            self._measure(space)
        space.appended_since += nbytes

    def below_floor(self, log_dir: Path) -> bool:
        """Whether ``log_dir`` is below its floor now (a follower pauses its fetches for it)."""
        space = self._dirs.get(log_dir)
        if space is None:
            return False
        if space.measured_at_ms < 0:
            self._measure(space)
        return space.below

    def describe(self, log_dir: Path) -> str:
        """For an error message: the dir's usable bytes and floor at its last measurement."""
        space = self._dirs.get(log_dir)
        if space is None:
            return f"log dir {log_dir}"
        return (
            f"log dir {log_dir} has {space.usage.usable_bytes} usable bytes, below its floor of "
            f"{space.floor} (log.dir.min.free.bytes); appends resume at {resume_threshold(space.floor)}"
        )

    # -- the periodic job and /metrics ---------------------------------------------------------------
    def refresh(self) -> list[Transition]:
        """Measure every dir not measured within ``refresh_ms`` (the broker's periodic job)."""
        now = self.time_ms()
        done = []
        for space in self._dirs.values():
            if space.due(now, self.refresh_ms):
                transition = self._measure(space, now)
                if transition is not None:
                    done.append(transition)
        return done

    def snapshot(self) -> list[LogDirSpaceView]:
        return [space.view() for space in list(self._dirs.values())]

    @property
    def configured_floor(self) -> int:
        """``log.dir.min.free.bytes`` in force (every dir has the same)."""
        return next(iter(self._dirs.values())).configured_floor if self._dirs else 0

    def reconfigure(self, configured_floor: int) -> list[Transition]:
        """A new ``log.dir.min.free.bytes`` (a dynamic broker config): every dir is measured at
        once against its new floor, so a lowered floor lets appends resume and a raised one stops
        them without waiting for the periodic job."""
        if configured_floor == self.configured_floor:
            return []
        log.info("log.dir.min.free.bytes is now %d (was %d)", configured_floor, self.configured_floor)
        now = self.time_ms()
        done = []
        for space in self._dirs.values():
            space.configured_floor = configured_floor
            transition = self._measure(space, now)
            if transition is not None:
                done.append(transition)
        return done

    def _measure(self, space: LogDirSpace, now_ms: int | None = None) -> Transition | None:
        now = self.time_ms() if now_ms is None else now_ms
        try:
            usage = DiskUsage.of(self.statvfs(str(space.log_dir)))
        except OSError as exc:
            # Unreadable (the dir is gone or its filesystem fails): no floor until a measurement
            # succeeds; a failing disk is KIP-112's to handle, not this rule's.
            transition = space.unmeasurable(now)
            log.warning(
                "cannot measure the free space of log dir %s: %s; no floor until a measurement succeeds%s",
                space.log_dir,
                exc,
                "; appends and fetches resume" if transition is not None else "",
            )
            return transition
        transition = space.measured(usage, now)
        if transition is not None:
            _log_transition(transition)
        return transition


def _log_transition(t: Transition) -> None:
    total, usable = t.usage.total_bytes, t.usage.usable_bytes
    if t.below:
        log.warning(
            "log dir %s is below its free-space floor: %d of %d bytes usable, floor %d "
            "(log.dir.min.free.bytes); refusing appends to the partitions it leads and pausing "
            "fetches for those it follows until %d bytes are usable",
            t.log_dir, usable, total, t.floor, resume_threshold(t.floor),
        )  # fmt: skip
    else:
        log.info(
            "log dir %s has recovered free space: %d of %d bytes usable (floor %d); appends and "
            "fetches resume",
            t.log_dir, usable, total, t.floor,
        )  # fmt: skip
