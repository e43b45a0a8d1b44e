"""The leader's append path in-process (``Log.append_as_leader``), this tree against a baseline
revision, interleaved in one run so the ratio survives a busy machine (docs/benchmarks.md,
"Log append path").

Each sample is a fresh process that opens a Log in a temp dir and appends ``--batches``
batches of 10 records of 100 bytes (what one producer batch per partition per request looks
like at the perf tool's default linger), timing only the appends; the baseline runs from a
``git worktree`` of ``--base``. No network, no replication: this isolates the code that a
change to the storage layer touches.

    .venv/bin/python bench/log_append.py --base d63bd31 [--batches 50000] [--repeat 5] [--segment-bytes N]

The log is opened through a LogManager, as in a broker, so a roll's flush runs where a broker
runs it (its flusher thread, since issue 19).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import baseline_worktree  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = r"""
import sys, tempfile, time
from pathlib import Path
from broker.log import LogConfig, LogManager
from client.protocol.records import build_batch
batches, segment_bytes = int(sys.argv[1]), int(sys.argv[2])
records = [build_batch([(None, bytes(100), 1_000 + i, []) for i in range(10)]) for _ in range(64)]
with tempfile.TemporaryDirectory() as tmp:
    config = LogConfig(segment_bytes=segment_bytes)
    manager = LogManager([Path(tmp)], config, lambda: 1_000)  # as in a broker: its flusher, if any
    log = manager.get_or_create_log("bench", 0, config)
    started = time.perf_counter()
    for n in range(batches):
        log.append_as_leader(records[n % 64], leader_epoch=0)
    elapsed = time.perf_counter() - started
    manager.shutdown()
print(batches / elapsed)
"""


def sample(tree: Path, batches: int, segment_bytes: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", SAMPLE, str(batches), str(segment_bytes)],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the baseline git revision")
    parser.add_argument("--batches", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--segment-bytes",
        type=int,
        default=1 << 30,
        help="segment.bytes of the log (small values roll often: the cost of flushing on roll)",
    )
    args = parser.parse_args()
    with baseline_worktree(args.base) as base_tree:
        base, head = [], []
        for _ in range(args.repeat):
            base.append(sample(base_tree, args.batches, args.segment_bytes))
            head.append(sample(ROOT, args.batches, args.segment_bytes))
    ratio = statistics.median(h / b for h, b in zip(head, base, strict=True))
    print(f"| revision | appends/s (median of {args.repeat}) | records/s |")
    print("|---|---:|---:|")
    print(f"| {args.base} | {statistics.median(base):,.0f} | {statistics.median(base) * 10:,.0f} |")
    print(f"| working tree | {statistics.median(head):,.0f} | {statistics.median(head) * 10:,.0f} |")
    print(f"\nworking tree / {args.base}: {ratio:.3f} (median of the per-pair ratios)")


if __name__ == "__main__":
    main()
