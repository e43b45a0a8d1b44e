"""Where two runs of one seed part (docs/design.md "Simulation", docs/operations.md "Simulation"):
the replay check of the simulator and the tool that finds a leak of the real world into it.

A run's trace (sim/trace.py) is a hash of every callback it ran; a *trace dump* is the same
entries written one per line (``<n> <virtual µs> <callback> | <what it did>``: where a task's step
left it waiting, or which connection a delivery was on). Two runs of one seed must give the same
dump; the first line where two dumps differ is the first callback the two runs did not run alike,
and the lines before it say what ran just before: the place to look for the leak (a thread, a
real clock, an order taken from ``id()`` or from str hashing).

* :func:`first_divergence` compares two dumps;
* :func:`run_in_process` runs schedules in a fresh interpreter with a given ``PYTHONHASHSEED``
  (``python -m sim.trace_hashes``), printing each seed's trace hash and, if asked, writing dumps;
* :func:`replay_check` runs the same seeds in two such processes, under two hash seeds (and
  two heap layouts), and reports every seed whose trace hashes differ, with the first divergence
  of the first of them (that seed run again in both, its traces dumped).
"""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sim.sweep import ScheduleConfig

#: Dump lines shown before the first divergent one.
CONTEXT_LINES = 12
#: Hash seeds of the two processes of :func:`replay_check` (str hashing differs between them).
HASH_SEEDS = ("0", "1")
#: Objects the second process of :func:`replay_check` allocates first, so that object addresses
#: (and any order taken from ``id()``) differ too.
HEAP_SHIFT = 10_007


@dataclass(frozen=True)
class Divergence:
    """The first dump line where two runs differ, and what both ran just before it."""

    line: int  # 1-based
    before: tuple[str, ...]  # the lines both dumps share just before
    first: tuple[str, ...]  # the first dump from the divergent line on (a few lines)
    second: tuple[str, ...]

    def report(self, first_name: str = "first", second_name: str = "second") -> str:
        lines = [f"the runs part at trace entry {self.line}; before it, both ran:"]
        lines += [f"    {entry}" for entry in self.before]
        lines.append(f"  then {first_name}:")
        lines += [f"  < {entry}" for entry in self.first] or ["  < (end of trace)"]
        lines.append(f"  and {second_name}:")
        lines += [f"  > {entry}" for entry in self.second] or ["  > (end of trace)"]
        return "\n".join(lines)


def first_divergence(
    first: Iterable[str], second: Iterable[str], context: int = CONTEXT_LINES, after: int = 8
) -> Divergence | None:
    """The first line where the two dumps differ (one ending early counts), or None."""
    before: list[str] = []
    a, b = iter(first), iter(second)
    for number in itertools.count(1):
        x, y = next(a, None), next(b, None)
        if x is None and y is None:
            return None
        if x != y:
            return Divergence(
                line=number,
                before=tuple(before[-context:]),
                first=_take(x, a, after),
                second=_take(y, b, after),
            )
        before.append(x.rstrip("\n"))  # type: ignore[union-attr]
        if len(before) > 4 * context:
            del before[:-context]
    raise AssertionError("unreachable")


def _take(line: str | None, rest: Iterable[str], count: int) -> tuple[str, ...]:
    if line is None:
        return ()
    return (line.rstrip("\n"), *(entry.rstrip("\n") for entry in itertools.islice(rest, count - 1)))


def diff_files(first: Path, second: Path) -> Divergence | None:
    with first.open() as a, second.open() as b:
        return first_divergence(a, b)


def run_in_process(
    seeds: Sequence[int],
    config: ScheduleConfig,
    hash_seed: str,
    dump_dir: Path | None = None,
    timeout_s: float | None = None,
    heap_shift: int = 0,
) -> dict[int, str]:
    """Run the schedules in a fresh interpreter under ``PYTHONHASHSEED=hash_seed`` (and with
    ``heap_shift`` objects allocated first: sim/trace_hashes.py); their trace hashes by seed
    (and, with ``dump_dir``, a dump per seed: ``<dump_dir>/<seed>.trace``)."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    command = [sys.executable, "-m", "sim.trace_hashes", "--heap-shift", str(heap_shift)]
    if dump_dir is not None:
        command += ["--dump-dir", str(dump_dir)]
    done = subprocess.run(
        command,
        input=pickle.dumps((list(seeds), config)),
        capture_output=True,
        env=env,
        check=False,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"python -m sim.trace_hashes (PYTHONHASHSEED={hash_seed}) exited {done.returncode}:\n"
            + done.stderr.decode(errors="replace")[-4000:]
        )
    hashes = {}
    for line in done.stdout.decode().splitlines():
        seed, trace_hash = line.split()
        hashes[int(seed)] = trace_hash
    return hashes


@dataclass(frozen=True)
class ReplayCheck:
    """Trace hashes of the same seeds in two processes under two hash seeds."""

    hash_seeds: tuple[str, str]
    first: dict[int, str]
    second: dict[int, str]
    divergence: Divergence | None = None  # of the first seed that differs, when dumps were kept
    diverging_seed: int | None = None

    @property
    def differing(self) -> list[int]:
        return sorted(
            s for s in self.first.keys() | self.second.keys() if self.first.get(s) != self.second.get(s)
        )

    def report(self) -> str:
        a, b = self.hash_seeds
        differing = self.differing
        lines = [
            f"{len(self.first)} seeds under PYTHONHASHSEED={a} and {b}: "
            + (f"{len(differing)} differ: {differing}" if differing else "every trace hash equal")
        ]
        for seed in differing:
            lines.append(f"  seed {seed}: {self.first.get(seed)} vs {self.second.get(seed)}")
        if self.divergence is not None:
            lines.append(f"seed {self.diverging_seed}:")
            lines.append(self.divergence.report(f"PYTHONHASHSEED={a}", f"PYTHONHASHSEED={b}"))
        return "\n".join(lines)


def replay_check(
    seeds: Sequence[int],
    config: ScheduleConfig,
    hash_seeds: tuple[str, str] = HASH_SEEDS,
    *,
    explain: bool = True,
    parallel: bool = True,
    timeout_s: float | None = None,
    heap_shift: int = HEAP_SHIFT,
) -> ReplayCheck:
    """Run ``seeds`` in two processes, one per hash seed (the second with its heap shifted by
    ``heap_shift`` objects), at once unless ``parallel`` is False, and compare their trace
    hashes; with ``explain``, the first differing seed runs again in both, dumping its traces,
    to find where its two runs part."""
    shifts = (0, heap_shift)

    def both(chosen: Sequence[int], dumps: tuple[Path, Path] | None) -> tuple[dict[int, str], dict[int, str]]:
        def one(i: int) -> dict[int, str]:
            dump = dumps[i] if dumps is not None else None
            return run_in_process(chosen, config, hash_seeds[i], dump, timeout_s, shifts[i])

        if not parallel:
            return one(0), one(1)
        with ThreadPoolExecutor(max_workers=2) as pool:
            first, second = pool.map(one, (0, 1))
        return first, second

    first, second = both(seeds, None)
    check = ReplayCheck(hash_seeds, first, second)
    if explain and check.differing:
        seed = check.differing[0]
        with tempfile.TemporaryDirectory(prefix="sim-replay-") as tmp:
            dirs = (Path(tmp) / "a", Path(tmp) / "b")
            for d in dirs:
                d.mkdir()
            both([seed], dirs)
            found = diff_files(dirs[0] / f"{seed}.trace", dirs[1] / f"{seed}.trace")
        check = ReplayCheck(hash_seeds, first, second, found, seed)
    return check
