"""``floodmark perf produce`` with RF 3 and acks=all, this tree against a baseline revision, side
by side in one run (docs/benchmarks.md, "A/B: produce with RF 3 and acks=all").

For each round, each tree in turn starts its own 3-broker cluster (its own broker code: the
runner and the brokers run with ``PYTHONPATH`` set to that tree, the baseline being a ``git
worktree`` of ``--base``), creates a 6-partition RF 3 topic with ``min.insync.replicas=2``,
runs ``perf produce --acks all`` unthrottled with 100-byte records, and stops the cluster. The
rounds alternate A and B so a busy machine hurts both alike; the report gives each side's
median and the median of the per-round ratios.

    .venv/bin/python bench/ab_perf.py --base 674d88d [--records 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import baseline_worktree  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

ROUND = r"""
import json, subprocess, sys
from pathlib import Path
from bench.common import bench_cluster, floodmark_command
records = int(sys.argv[1])
# The CLI moved from client/cli/ to cli/: a baseline from before that still has the old path.
main = "cli.main" if Path("cli/main.py").exists() else "client.cli.main"
with bench_cluster() as cluster:
    cli = [sys.executable, "-m", main]
    boot = ["--bootstrap-server", cluster.bootstrap_servers]
    subprocess.run(cli + ["topics", "create", "--topic", "ab", "--partitions", "6",
                          "--replication-factor", "3", "--config", "min.insync.replicas=2"] + boot,
                   check=True, capture_output=True, timeout=120)
    out = subprocess.run(cli + ["perf", "produce", "--topic", "ab", "--num-records", str(records),
                                "--record-size", "100", "--acks", "all", "--json"] + boot,
                         check=True, capture_output=True, text=True, timeout=600).stdout
print(out.strip().splitlines()[-1])
"""


def one_round(tree: Path, records: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-c", ROUND, str(records)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"round in {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the baseline git revision")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with baseline_worktree(args.base) as base_tree:
        rows: list[tuple[dict, dict]] = []
        for i in range(args.repeat):
            a = one_round(base_tree, args.records)
            b = one_round(ROOT, args.records)
            print(
                f"round {i + 1}: base {a['records_per_sec']:,.0f}/s, tree {b['records_per_sec']:,.0f}/s",
                file=sys.stderr,
            )
            rows.append((a, b))
    rate = [(a["records_per_sec"], b["records_per_sec"]) for a, b in rows]
    p99 = [(a.get("p99_ms"), b.get("p99_ms")) for a, b in rows]
    print(f"| revision | records/s (median of {args.repeat}) | p99 ms (median) |")
    print("|---|---:|---:|")
    print(
        f"| {args.base} | {statistics.median(r[0] for r in rate):,.0f} | {statistics.median(p[0] for p in p99)} |"
    )
    print(
        f"| working tree | {statistics.median(r[1] for r in rate):,.0f} | {statistics.median(p[1] for p in p99)} |"
    )
    ratio = statistics.median(b / a for a, b in rate)
    print(
        f"\nworking tree / {args.base}: {ratio:.3f} (median of the per-round ratios; rounds: "
        + ", ".join(f"{b / a:.3f}" for a, b in rate)
        + ")"
    )


if __name__ == "__main__":
    main()
