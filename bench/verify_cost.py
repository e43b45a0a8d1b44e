"""What the verification job (docs/design.md "Verification job") costs: wall time on ``local[2]``
for 1 and 10 million records.

For each size it writes a synthetic, clean chaos run: topic ``bench`` with 8 partitions on 3
brokers, batches of 100 records (values of 40 bytes, unique) built with
:func:`client.protocol.records.build_batch` and stamped like a leader does (base offset, leader
epoch 0 for the first half of each partition and 1 after), idempotent producer ids and
sequences; segment files of at most 256 MiB written straight to broker 1's log dir and copied
byte for byte to brokers 2 and 3 (what followers hold); ``leader-epoch-checkpoint`` per
partition and ``replication-offset-checkpoint`` (HW = LEO) per log dir; and the ledger with one
ack line per record (the same fields as :class:`ledger.format.LedgerWriter` writes, formatted
directly because ``json.dumps`` per line would dominate generation), spread over a simulated
100-second run with two faults on the timeline.

Then it runs :func:`verify.job.run_verification` offline (log dirs only; the committed log is
what lies below the checkpointed HW), in a fresh ``local[2]`` session per size, and prints each
phase's time. The job must pass (the data is clean); a failure is a bug and aborts the script.
Stdout carries a markdown section; progress goes to stderr::

    .venv/bin/python bench/verify_cost.py --records 1000000 --records 10000000 > /tmp/verify_cost.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from client.protocol.records import build_batch, set_base_offset, set_partition_leader_epoch

TOPIC = "bench"
PARTITIONS = 8
BROKERS = (1, 2, 3)
RECORDS_PER_BATCH = 100
VALUE_BYTES = 40
SEGMENT_BYTES = 256 * 1024 * 1024
RUN_MS = 100_000
T0_MS = 1_700_000_000_000
PRODUCER_ID_BASE = 5000


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Generated:
    records: int
    seconds: float
    segment_bytes: int
    ledger_bytes: int


def generate(root: Path, records: int) -> Generated:
    """Write the synthetic run under ``root`` (log dirs ``root/broker-<id>/data``, report ``root/report``)."""
    started = time.perf_counter()
    report = root / "report"
    report.mkdir(parents=True)
    leader_dir = root / "broker-1" / "data"
    per_partition = [
        records // PARTITIONS + (1 if p < records % PARTITIONS else 0) for p in range(PARTITIONS)
    ]
    sha = hashlib.sha256
    segment_total = 0
    with open(report / "ledger.jsonl", "w", encoding="utf-8", buffering=8 << 20) as ledger:
        for p, count in enumerate(per_partition):
            pdir = leader_dir / f"{TOPIC}-{p}"
            pdir.mkdir(parents=True)
            epoch1_at = (count // 2) // RECORDS_PER_BATCH * RECORDS_PER_BATCH
            producer_id = PRODUCER_ID_BASE + p
            segment_base, segment = 0, open(pdir / f"{0:020d}.log", "wb")  # noqa: SIM115
            size = 0
            lines: list[str] = []
            for base in range(0, count, RECORDS_PER_BATCH):
                n = min(RECORDS_PER_BATCH, count - base)
                values = [(b"p%02d-o%012d-" % (p, base + i)).ljust(VALUE_BYTES, b"x") for i in range(n)]
                now = T0_MS + (base * RUN_MS) // max(count, 1)
                batch = bytearray(
                    build_batch(
                        [(None, v, now, []) for v in values],
                        producer_id=producer_id,
                        producer_epoch=0,
                        base_sequence=base,
                    )
                )
                set_base_offset(batch, 0, base)
                set_partition_leader_epoch(batch, 0, 0 if base < epoch1_at else 1)
                if size + len(batch) > SEGMENT_BYTES:
                    segment.close()
                    segment_base, size = base, 0
                    segment = open(pdir / f"{segment_base:020d}.log", "wb")  # noqa: SIM115
                segment.write(batch)
                size += len(batch)
                segment_total += len(batch)
                for i, v in enumerate(values):
                    offset = base + i
                    lines.append(
                        f'{{"type":"ack","topic":"{TOPIC}","partition":{p},"offset":{offset},"key":null,'
                        f'"value_digest":"{sha(v).hexdigest()[:32]}","producer_id":{producer_id},'
                        f'"sequence":{offset},"time_ms":{now + 5},"latency_ms":{2.0 + offset % 97 / 10:.3f}}}\n'
                    )
                if len(lines) >= 100_000:
                    ledger.write("".join(lines))
                    lines.clear()
            ledger.write("".join(lines))
            segment.close()
            epochs = [(0, 0)] + ([(1, epoch1_at)] if epoch1_at < count and epoch1_at > 0 else [])
            if epoch1_at == 0 and count:
                epochs = [(1, 0)]
            entries = "".join(f"{e} {s}\n" for e, s in epochs)
            (pdir / "leader-epoch-checkpoint").write_text(f"0\n{len(epochs)}\n{entries}")
    hw_lines = "".join(f"{TOPIC} {p} {count}\n" for p, count in enumerate(per_partition))
    (leader_dir / "replication-offset-checkpoint").write_text(f"0\n{PARTITIONS}\n{hw_lines}")
    for broker in BROKERS[1:]:
        shutil.copytree(leader_dir, root / f"broker-{broker}" / "data")
    with open(report / "events.jsonl", "w", encoding="utf-8") as events:
        for i, (start, end) in enumerate(((20_000, 30_000), (60_000, 64_000))):
            for kind, at, action in (("fault", start, "SIGKILL"), ("heal", end, "restart")):
                detail = {"action": action, "broker": i + 1, "id": f"f{i}"}
                events.write(json.dumps({"type": kind, "time_ms": T0_MS + at, "detail": detail}) + "\n")
    return Generated(
        records,
        time.perf_counter() - started,
        segment_total * len(BROKERS),
        (report / "ledger.jsonl").stat().st_size,
    )


def measure(records: int, master: str, keep: bool, jvm: str = "auto") -> dict:
    from verify.job import run_verification

    root = Path(tempfile.mkdtemp(prefix=f"floodmark-verify-cost-{records}-"))
    try:
        say(f"generating {records:,} records x {len(BROKERS)} replicas in {root}")
        gen = generate(root, records)
        os.sync()  # the kernel's write-back of the new files must not compete with the timed job
        say(
            f"  generated in {gen.seconds:.1f}s: {gen.segment_bytes / 1e6:.0f} MB of segments, "
            f"{gen.ledger_bytes / 1e6:.0f} MB of ledger"
        )
        log_dirs = ",".join(str(root / f"broker-{b}" / "data") for b in BROKERS)
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        fast_start = {"auto": None, "fast-start": True, "throughput": False}[jvm]
        result = run_verification(
            root / "report", None, log_dirs, master, progress=lambda m: say("  " + m), fast_start=fast_start
        )
        wall = time.perf_counter() - started
        if not result.ok or result.counts["acknowledged"] != records or result.counts["committed"] != records:
            raise SystemExit(f"the job did not pass on clean data: {result.counts}")
        say(f"  {records:,} records verified in {wall:.1f}s")
        return {
            "jvm": result.inputs["jvm"],
            "load": (load_before, os.getloadavg()[0]),
            "records": records,
            "wall_s": wall,
            "generate_s": gen.seconds,
            "gen": gen,
            "timings": result.timings_s,
        }
    finally:
        if keep:
            say(f"  data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def markdown(results: list[dict], master: str) -> str:
    phases = [
        "spark_start",
        "ledger",
        "read_segments",
        "committed",
        "acknowledged",
        "lost",
        "duplicate",
        "divergent",
        "out_of_order",
        "hw_above_leo",
        "epoch_cache_inconsistent",
        "timeline",
    ]
    lines = [
        "## Verification cost",
        "",
        f"`bench/verify_cost.py`: the verification job on `{master}`, offline from the log dirs, over a "
        f"clean synthetic run: topic `{TOPIC}`, {PARTITIONS} partitions x {len(BROKERS)} replicas, batches of "
        f"{RECORDS_PER_BATCH} records with {VALUE_BYTES}-byte values, one ledger line per record. Every replica's "
        "records are decoded and hashed, so the job reads 3 x N records from the segments plus N ledger lines. "
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, driver memory "
        f"{os.environ.get('FLOODMARK_SPARK_DRIVER_MEMORY', '4g')}. JVM `fast-start` is "
        "`-XX:+UseSerialGC -XX:TieredStopAtLevel=1` with the small-input Spark settings (no whole-stage "
        "codegen, no adaptive execution, 2 shuffle partitions); `throughput` is `-XX:+UseParallelGC` with "
        "the full JIT and Spark's defaults (16 shuffle partitions, adaptive). `floodmark verify` picks "
        "fast-start below 32 MiB of input. The machine is shared: the load average column says how busy "
        "it was.",
        "",
        "| acknowledged records | JVM | segments (3 replicas) | ledger | wall time of the job | records/s (ledger) "
        "| slowest phase | load average before / after |",
        "|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        gen = r["gen"]
        phase, seconds = max(((v, k) for k, v in r["timings"].items() if k != "total"), default=(0.0, "-"))[
            ::-1
        ]
        lines.append(
            f"| {r['records']:,} | {r['jvm']} | {gen.segment_bytes / 1e6:,.0f} MB | {gen.ledger_bytes / 1e6:,.0f} MB | "
            f"{r['wall_s']:.0f} s | {r['records'] / r['wall_s']:,.0f} | {phase} ({seconds:.0f} s) "
            f"| {r['load'][0]:.1f} / {r['load'][1]:.1f} |"
        )
    lines += [
        "",
        "Time per phase (seconds; Spark evaluates lazily, so reading and caching the inputs lands in the "
        "first phase that needs them):",
        "",
    ]
    lines.append("| records | JVM | " + " | ".join(phases) + " |")
    lines.append("|---:|---|" + "---:|" * len(phases))
    for r in results:
        lines.append(
            f"| {r['records']:,} | {r['jvm']} | "
            + " | ".join(f"{r['timings'].get(ph, 0):.1f}" for ph in phases)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, action="append", help="Sizes to measure (repeatable).")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="Keep the generated data.")
    parser.add_argument(
        "--jvm",
        choices=["auto", "fast-start", "throughput"],
        default="auto",
        help="JVM settings of the job's session (auto: by input size, as floodmark verify does).",
    )
    args = parser.parse_args(argv)
    results = [
        measure(n, args.master, args.keep, args.jvm) for n in (args.records or [1_000_000, 10_000_000])
    ]
    print(markdown(results, args.master))


if __name__ == "__main__":
    main()
