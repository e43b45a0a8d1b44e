"""The ``fd-pressure`` fault: a broker's open-file limit lowered at run time to just above what it
holds, then restored (docs/operations.md "Chaos runs and verification"; issue 25, "What it must
show": under file pressure the broker degrades, never dies).

A broker raises its soft ``RLIMIT_NOFILE`` to the hard limit at start (broker/file_budget.py) and
sizes its file budget from it; this fault takes that room away from outside, as prlimit(1) does
(``prlimit --pid PID --nofile=SOFT:HARD``, here :func:`resource.prlimit`: prlimit(2) on another
process needs CAP_SYS_RESOURCE or the same user). It reads the descriptors the process holds
(``/proc/<pid>/fd``) and sets the soft limit just above them: to the number below which exactly
:data:`FD_MARGIN` descriptor numbers are free (:func:`limit_leaving`: the kernel gives a new
descriptor the lowest free number and fails with EMFILE when that number reaches the limit, so
holes left by closed descriptors are room too), keeping the hard limit; the heal puts the soft
limit back to what it was, on the same process.

Why a margin of 0: the broker's working set does not grow under a chaos workload. It holds some
35 descriptors and needs at most one more at a time (a checkpoint's temporary file, a client's
connection, a fetcher's reconnect), so with 16 free, or even 1, a 35 s run with two such faults
never met EMFILE (measured): the fault tested nothing. With none free, whatever the broker opens
during the fault meets EMFILE: the acceptor's next connection, the next high-watermark or
leader-epoch checkpoint, a fetcher's or the controller's reconnect, ZooKeeper's. The descriptors it
holds stay open, so it serves what it serves; the fault asks that it degrades and recovers,
never halts. ``--faults`` cannot set another margin; :class:`FdPressure` takes one (tests).

A pid is not a process: the limit is applied to the process seen when the fault fired (its pid
and start time, ``/proc/<pid>/stat`` field 22), and the heal says so when that process has gone
(:class:`ProcessGone`: the broker died under the fault) instead of touching another.

The ``/proc`` root and the prlimit call are injected, so the rules are tested on a fake tree.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

#: Descriptor numbers left free below the lowered limit (the module docstring says why none).
FD_MARGIN = 0
PROC = Path("/proc")

#: ``resource.prlimit(pid, RLIMIT_NOFILE[, (soft, hard)])``: returns the limits before the call.
Prlimit = Callable[..., tuple[int, int]]


class ProcessGone(RuntimeError):
    """The process the fault lowered is no longer running (or its pid now names another)."""


@dataclass(frozen=True)
class FdLimit:
    """The limit one fault put in force on one process, and what was there before it."""

    pid: int
    start_time: int  # /proc/<pid>/stat field 22, in clock ticks since boot: the process's identity
    held: int  # descriptors the process held when the limit was lowered
    soft: int  # the soft RLIMIT_NOFILE before the fault (what the heal restores)
    hard: int  # the hard limit, left as it was
    limit: int  # the soft limit in force during the fault (:func:`limit_leaving`)
    room: int  # descriptor numbers free below ``limit`` when it was set: the margin

    def detail(self) -> dict:
        """The fault's facts for the run's events (``events.jsonl``)."""
        return {
            "pid": self.pid,
            "fds_held": self.held,
            "nofile_soft": self.soft,
            "nofile_hard": self.hard,
            "nofile_limit": self.limit,
            "room": self.room,
        }

    def as_dict(self) -> dict:
        return asdict(self)


def start_time(pid: int, proc: Path = PROC) -> int:
    """The process's start time (``/proc/<pid>/stat`` field 22); ProcessGone when it has none."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessGone(f"process {pid} is not running") from exc
    # the command name (field 2) is in parentheses and may hold spaces: count after its end
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # fields[0] is field 3 (the state), so field 22 is fields[19]


def open_descriptors(pid: int, proc: Path = PROC) -> list[int]:
    """The descriptors the process holds now (the entries of ``/proc/<pid>/fd``), in order."""
    try:
        return sorted(int(entry.name) for entry in (proc / str(pid) / "fd").iterdir())
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessGone(f"process {pid} is not running") from exc


def count_open_files(pid: int, proc: Path = PROC) -> int:
    """How many descriptors the process holds now."""
    return len(open_descriptors(pid, proc))


def limit_leaving(held: list[int], room: int) -> int:
    """The lowest soft limit under which exactly ``room`` descriptor numbers are free: a new
    descriptor takes the lowest free number and EMFILE is met when that number reaches the limit,
    so the room is the free numbers below it (holes left by closed descriptors included; the
    descriptors at or above it stay open and usable). ``held`` is sorted."""
    limit = room
    for fd in held:
        if fd > limit:
            break
        limit += 1  # a number at or below the limit that is taken: one more to leave the same room
    return limit


def lower_open_files(
    pid: int, margin: int = FD_MARGIN, prlimit: Prlimit = resource.prlimit, proc: Path = PROC
) -> FdLimit:
    """Set the process's soft RLIMIT_NOFILE so that ``margin`` descriptor numbers are free below
    it (what it holds plus ``margin`` when its descriptors have no holes; never above the limits
    in force); the limits before and the one set."""
    started = start_time(pid, proc)
    held = open_descriptors(pid, proc)
    try:
        soft, hard = prlimit(pid, resource.RLIMIT_NOFILE)
    except ProcessLookupError as exc:
        raise ProcessGone(f"process {pid} is not running") from exc
    limit = limit_leaving(held, margin)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
    return FdLimit(pid, started, len(held), soft, hard, limit, margin)


def restore_open_files(fault: FdLimit, prlimit: Prlimit = resource.prlimit, proc: Path = PROC) -> dict:
    """Put the soft limit back on the process the fault lowered; the heal's facts (what it held
    just before: did it use the room?). ProcessGone when that process is not running any more."""
    try:
        if start_time(fault.pid, proc) != fault.start_time:
            raise ProcessGone(f"process {fault.pid} exited (its pid now names another process)")
        held = count_open_files(fault.pid, proc)
        prlimit(fault.pid, resource.RLIMIT_NOFILE, (fault.soft, fault.hard))
    except ProcessLookupError as exc:
        raise ProcessGone(f"process {fault.pid} is not running") from exc
    return {"pid": fault.pid, "fds_held": held, "nofile_soft": fault.soft}


class FdPressure:
    """The fd-pressure faults in force, by broker id, on processes found by ``pid_of`` (a
    backend's: the local cluster's recorded pid, a container's broker process)."""

    def __init__(
        self,
        pid_of: Callable[[int], int],
        margin: int = FD_MARGIN,
        prlimit: Prlimit = resource.prlimit,
        proc: Path = PROC,
    ) -> None:
        self.pid_of = pid_of
        self.margin = margin
        self.prlimit = prlimit
        self.proc = proc
        self.in_force: dict[int, FdLimit] = {}

    def lower(self, broker_id: int) -> dict:
        """Lower the broker's limit; the fault's facts (:meth:`FdLimit.detail`)."""
        fault = lower_open_files(self.pid_of(broker_id), self.margin, self.prlimit, self.proc)
        self.in_force[broker_id] = fault
        return fault.detail()

    def restore(self, broker_id: int) -> dict:
        """Restore the broker's limit; the heal's facts ({} when no fault is in force on it).
        ProcessGone when the process lowered has exited (the fault is then forgotten: a new
        process starts with the limits it is given); any other error leaves it to retry."""
        fault = self.in_force.get(broker_id)
        if fault is None:
            return {}
        try:
            healed = restore_open_files(fault, self.prlimit, self.proc)
        except ProcessGone:
            del self.in_force[broker_id]
            raise
        del self.in_force[broker_id]
        return healed


def child_with(pid: int, needle: str, proc: Path = PROC) -> int | None:
    """``pid`` or one of its children (``/proc/<pid>/task/*/children``) whose command line holds
    ``needle``: a container's broker under docker-init (compose's ``init: true``)."""
    candidates = [pid]
    for task in sorted((proc / str(pid) / "task").glob("*")):
        try:
            candidates += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    for candidate in candidates:
        try:
            cmdline = (proc / str(candidate) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmdline:
            return candidate
    return None
