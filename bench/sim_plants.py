"""Planted bugs against today's simulator (issue 35 item 5: "it must find planted bugs by
itself"; docs/benchmarks.md "Planted bugs").

A plant is a small patch to the product code (``bench/plants/<name>.patch``, never sim/ nor
tests/), listed with its class, description and oracle tests in ``bench/plants/plants.toml``. For
each plant this makes a git worktree of HEAD (or ``--commit``) at ``/tmp/wt-plant-<name>``, reset
to that commit, copies the *current* working tree's ``sim/`` and ``tests/sim/`` into it (so the
newest simulator runs, committed or not), applies the patch with ``git apply`` (a patch that does
not apply stops everything), then runs the sweep in a subprocess whose ``PYTHONPATH`` and working
directory are the worktree (as bench/sim_old_commits.py's ``--inside`` does): the bounded sweep's
``ScheduleConfig()`` unless ``--steps``/``--brokers``/``--invariants`` say otherwise, seeds in
order, stopping at the first failing seed unless ``--all-seeds``. One line per plant: caught or
not, the first failing seed, the schedules it took (seeds run up to it), the invariant and the
first line of its message; ``--out`` appends the same as JSON lines.

``--check`` runs no sweep: it proves each plant is a real bug with its oracle tests, which must
pass in the worktree before the patch (HEAD with today's sim/) and fail once it is applied. A
plant without an oracle is reported as a coverage hole (no existing test catches it).

Usage::

    .venv/bin/python bench/sim_plants.py --check --all
    .venv/bin/python bench/sim_plants.py fetch-above-hw --seeds 0..63 --jobs 1 --out /tmp/plants.jsonl
    .venv/bin/python bench/sim_plants.py --all --seeds 0..511 --jobs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PLANTS_DIR = REPO / "bench" / "plants"
PLANTS_TOML = PLANTS_DIR / "plants.toml"
#: the copies of today's simulator each worktree gets, relative to the repository
SIM_TREES = ("sim", "tests/sim")
#: the line of the inside run's stdout that carries its result
RESULT_MARK = "PLANT-RESULT "
_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


# -- the plants --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plant:
    name: str
    klass: str
    description: str
    oracle: tuple[str, ...]
    fix: str | None = None

    @property
    def patch(self) -> Path:
        return PLANTS_DIR / f"{self.name}.patch"

    @property
    def worktree(self) -> Path:
        return Path(f"/tmp/wt-plant-{self.name}")


def load_plants(path: Path = PLANTS_TOML) -> dict[str, Plant]:
    """The plants of ``plants.toml``, in its order."""
    entries = tomllib.loads(path.read_text())["plant"]
    return {
        e["name"]: Plant(e["name"], e["class"], e["description"], tuple(e.get("oracle", ())), e.get("fix"))
        for e in entries
    }


def patch_files(patch: Path) -> list[str]:
    """The files a patch touches (its ``diff --git`` headers)."""
    return sorted({b for _, b in _DIFF_HEADER.findall(patch.read_text())})


def _git(*args: str, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=check)


def prepare(plant: Plant, commit: str) -> Path:
    """The plant's worktree at ``commit``, reset (tracked files as committed, untracked removed),
    with the current working tree's sim/ and tests/sim/ copied in; the patch not yet applied."""
    worktree = plant.worktree
    sha = _git("rev-parse", "--verify", f"{commit}^{{commit}}").stdout.strip()
    if not (worktree / ".git").exists():
        shutil.rmtree(worktree, ignore_errors=True)
        _git("worktree", "prune")  # a registration whose directory went with /tmp
        _git("worktree", "add", "--detach", str(worktree), sha)
    else:
        _git("reset", "-q", "--hard", sha, cwd=worktree)
        _git("clean", "-fdq", cwd=worktree)
    head = _git("rev-parse", "HEAD", cwd=worktree).stdout.strip()
    if head != sha:
        raise SystemExit(f"{worktree} is at {head}, not {sha}")
    for tree in SIM_TREES:
        shutil.rmtree(worktree / tree, ignore_errors=True)
        shutil.copytree(REPO / tree, worktree / tree, ignore=shutil.ignore_patterns("__pycache__"))
    return worktree


def apply_patch(plant: Plant, worktree: Path) -> None:
    """``git apply`` the plant's patch in its worktree; a patch that does not apply stops the run."""
    done = _git("apply", "--whitespace=nowarn", str(plant.patch), cwd=worktree, check=False)
    if done.returncode != 0:
        raise SystemExit(f"plant {plant.name}: {plant.patch} does not apply to {worktree}:\n{done.stderr}")


def sim_digest() -> str:
    """A short digest of the simulator copied in (sim/ and tests/sim/ as they are now), so a
    result names the simulator it was measured with, committed or not."""
    digest = hashlib.sha256()
    for tree in SIM_TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _env(worktree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(worktree))


# -- --check: the oracles --------------------------------------------------------------------------
def run_oracle(plant: Plant, worktree: Path, label: str, timeout_s: float) -> dict[str, str]:
    """Each oracle node's outcome (passed, failed, error, skipped, missing) in ``worktree``."""
    report = worktree / f".oracle-{label}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    try:
        subprocess.run(
            [*command, *plant.oracle],
            cwd=worktree,
            env=_env(worktree),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return dict.fromkeys(plant.oracle, "timeout")
    outcomes: dict[str, str] = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            kinds = {child.tag for child in case}
            outcomes[node] = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
            outcomes[node] = {"failure": "failed"}.get(outcomes[node], outcomes[node])
    return {node: outcomes.get(node, "missing") for node in plant.oracle}


def check(plant: Plant, commit: str, timeout_s: float) -> dict[str, Any]:
    """The plant's oracles without the patch (each must pass) and with it (each must fail)."""
    row: dict[str, Any] = {"plant": plant.name, "class": plant.klass, "files": patch_files(plant.patch)}
    row["oracle"] = list(plant.oracle)
    if not plant.oracle:
        return row | {"ok": None, "verdict": "no oracle: no existing test catches it (a coverage hole)"}
    worktree = prepare(plant, commit)
    without = run_oracle(plant, worktree, "without", timeout_s)
    apply_patch(plant, worktree)
    with_plant = run_oracle(plant, worktree, "with", timeout_s)
    ok = all(v == "passed" for v in without.values()) and all(v == "failed" for v in with_plant.values())
    wrong = [f"{n}: {without[n]} without, {with_plant[n]} with" for n in plant.oracle]
    verdict = "every oracle passes without the plant and fails with it" if ok else "; ".join(wrong)
    return row | {"ok": ok, "without": without, "with": with_plant, "verdict": verdict}


# -- the sweep, inside the worktree ----------------------------------------------------------------
def _sim(name: str) -> Any:
    """A module of the simulator copied into the worktree, imported at run time (bench/ never
    imports sim/ statically: import-linter keeps it out)."""
    return importlib.import_module(f"sim.{name}")


def _seeds(text: str) -> list[int]:
    low, _, high = text.partition("..")
    return list(range(int(low), int(high or low) + 1))


def schedule_config(args: argparse.Namespace) -> Any:
    """The bounded sweep's config (``ScheduleConfig()``) with the flags' changes."""
    config = _sim("sweep").ScheduleConfig()
    changes: dict[str, Any] = {}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.brokers is not None:
        changes["brokers"] = args.brokers
    if args.invariants:
        changes["invariants"] = frozenset(args.invariants.split(","))
    return dataclasses.replace(config, **changes) if changes else config


class _Stop(Exception):
    """The first failing seed was found (raised out of a one-process sweep to stop it)."""


def run_inside(args: argparse.Namespace) -> int:
    import broker.server

    worktree = str(args.worktree)
    if not broker.server.__file__.startswith(worktree) or not _sim("sweep").__file__.startswith(worktree):
        raise SystemExit(f"the code under test comes from {broker.server.__file__}, not {worktree}")
    logging.disable(logging.CRITICAL)
    sweep = _sim("sweep").sweep
    config = schedule_config(args)
    seeds = _seeds(args.seeds)
    failed: list[Any] = []
    ran = 0
    started = time.perf_counter()

    def seen(result: Any) -> None:
        nonlocal ran
        ran += 1
        if not result.ok:
            failed.append(result)
            line = (result.message.splitlines() or [""])[0][:200]
            print(
                f"  {args.plant}: seed {result.seed}: {result.invariant}: {line}", file=sys.stderr, flush=True
            )
            if args.jobs <= 1 and not args.all_seeds:
                raise _Stop

    batch = len(seeds) if args.all_seeds else max(1, args.jobs * 4)
    for start in range(0, len(seeds), batch):
        try:
            sweep(seeds[start : start + batch], config, jobs=args.jobs, on_result=seen)
        except _Stop:
            break
        if failed and not args.all_seeds:
            break
    first = min(failed, key=lambda r: r.seed) if failed else None
    row = {
        "caught": first is not None,
        "seed": first.seed if first else None,
        "schedules": seeds.index(first.seed) + 1 if first else None,
        "invariant": first.invariant if first else None,
        "message": (first.message.splitlines() or [""])[0] if first else "",
        "replay": first.replay if first else "",
        "trace_hash": first.trace_hash if first else "",
        "failed_seeds": sorted(r.seed for r in failed),
        "schedules_run": ran,
        "wall_s": round(time.perf_counter() - started, 1),
        "config": {"steps": config.steps, "brokers": config.brokers, "seeds": args.seeds},
    }
    print(RESULT_MARK + json.dumps(row, default=str), flush=True)
    return 0


def run_plant(plant: Plant, args: argparse.Namespace) -> dict[str, Any]:
    """Prepare the worktree, apply the patch, run the sweep inside it; the result row."""
    worktree = prepare(plant, args.commit)
    apply_patch(plant, worktree)
    command = [sys.executable, str(Path(__file__).resolve()), plant.name, "--inside"]
    command += ["--worktree", str(worktree), "--seeds", args.seeds, "--jobs", str(args.jobs)]
    for flag, value in (
        ("--steps", args.steps),
        ("--brokers", args.brokers),
        ("--invariants", args.invariants),
    ):
        if value is not None:
            command += [flag, str(value)]
    if args.all_seeds:
        command.append("--all-seeds")
    row: dict[str, Any] = {"plant": plant.name, "class": plant.klass, "commit": args.commit}
    row["sim"] = sim_digest()
    try:
        done = subprocess.run(
            command, cwd=worktree, env=_env(worktree), stdout=subprocess.PIPE, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        return row | {"caught": None, "message": f"the sweep did not end within {args.timeout:g} s"}
    results = [line[len(RESULT_MARK) :] for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not results:
        return row | {"caught": None, "message": f"the sweep exited with code {done.returncode}"}
    row |= json.loads(results[-1])
    if row["replay"]:  # the failure again, in the planted worktree (while it is left as it is)
        here = f"cd {worktree} && PYTHONPATH={worktree} {sys.executable} -m cli.main "
        row["replay_here"] = here + row["replay"].removeprefix("floodmark ")
    return row


def summary_line(row: dict[str, Any]) -> str:
    if row.get("caught") is None:
        return f"{row['plant']}: NOT RUN: {row.get('message', '')}"
    if not row["caught"]:
        return f"{row['plant']}: not caught in {row['schedules_run']} schedules ({row['wall_s']} s)"
    failed = len(row["failed_seeds"])
    tally = f"; {failed} of {row['schedules_run']} failed" if failed > 1 else ""
    return (
        f"{row['plant']}: caught at seed {row['seed']} ({row['schedules']} schedules, {row['wall_s']} s"
        f"{tally}): {row['invariant']}: {row['message'][:200]}"
    )


def check_line(row: dict[str, Any]) -> str:
    status = {True: "ok", False: "FAILED", None: "no oracle"}[row["ok"]]
    return f"{row['plant']}: check {status}: {row['verdict']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plants", nargs="*", help="plant names (bench/plants/plants.toml)")
    parser.add_argument("--all", action="store_true", help="every plant of plants.toml")
    parser.add_argument("--commit", default="HEAD", help="the commit the patches apply to [HEAD]")
    parser.add_argument("--seeds", default="0..511", help="A..B inclusive [0..511]")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="steps per schedule [ScheduleConfig's]")
    parser.add_argument("--brokers", type=int, default=None, help="brokers [ScheduleConfig's]")
    parser.add_argument("--invariants", default=None, help="comma-separated; default: every one")
    parser.add_argument(
        "--all-seeds", action="store_true", help="run every seed, not only to the first failure"
    )
    parser.add_argument(
        "--check", action="store_true", help="run each plant's oracle tests instead of a sweep"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="wall seconds per plant's sweep or check"
    )
    parser.add_argument("--out", default=None, help="append each plant's result here as a JSON line")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worktree", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        args.plant = args.plants[0]
        return run_inside(args)
    known = load_plants()
    unknown = [name for name in args.plants if name not in known]
    if unknown or not (args.plants or args.all):
        parser.error(f"unknown plants {unknown}" if unknown else "name a plant, or give --all")
    chosen = list(known.values()) if args.all else [known[name] for name in args.plants]
    status = 0
    for plant in chosen:
        row = check(plant, args.commit, args.timeout) if args.check else run_plant(plant, args)
        print(check_line(row) if args.check else summary_line(row), flush=True)
        if (args.check and row["ok"] is False) or (not args.check and row.get("caught") is None):
            status = 1
        if args.out:
            with open(args.out, "a") as out:
                out.write(json.dumps(row, default=str) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
