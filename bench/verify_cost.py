"""What the verification job (docs/design.md "Verification job") costs: wall time on ``local[2]``
for 1 and 10 million records.

For each size it writes a synthetic, clean chaos run: topic ``bench`` with 8 partitions on 3
brokers, batches of 100 records (values of 40 bytes, unique) built with
:func:`client.protocol.records.build_batch` and stamped like a leader does (base offset, leader
epoch 0 for the first half of each partition and 1 after), idempotent producer ids and
sequences; segment files of at most 256 MiB written straight to broker 1's log dir and copied
byte for byte to brokers 2 and 3 (what followers hold); ``leader-epoch-checkpoint`` per
partition and ``replication-offset-checkpoint`` (HW = LEO) per log dir; and the ledger with one
ack per record, spread over a simulated 100-second run with two faults on the timeline, in the
forms ``--ledger-format`` asks for (:mod:`ledger.format`), each in its own report dir next to
the same log dirs: JSON lines (``report-jsonl/ledger.jsonl``, the same fields as
:class:`ledger.format.LedgerWriter` writes, formatted directly because ``json.dumps`` per line
would dominate generation) and Parquet chunks (``report-parquet/ledger/``, built column by column
with numpy and pyarrow: the per-record work is only the SHA-256 the segments' values need
anyway). Both carry the same digests as the segment records.

Then it runs :func:`verify.job.run_verification` offline (log dirs only; the committed log is
what lies below the checkpointed HW) on each form's report dir, in a fresh ``local[2]`` session
per run (JSON lines first: the baseline), and prints each phase's time and, with both forms,
the ratio of the job's wall times. The job must pass (the data is clean); a failure is a bug and
aborts the script. Stdout carries a markdown section; progress goes to stderr::

    .venv/bin/python bench/verify_cost.py --records 1000000 --records 10000000 > /tmp/verify_cost.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from client.protocol.records import build_batch, set_base_offset, set_partition_leader_epoch
from ledger.columnar import (
    CLOSED_MARKER,
    DEFAULT_CHUNK_RECORDS,
    OPEN_MARKER,
    SCHEMA,
    write_chunk,
    write_marker,
)
from ledger.format import LEDGER_DIR, LEDGER_FILE

TOPIC = "bench"
PARTITIONS = 8
BROKERS = (1, 2, 3)
RECORDS_PER_BATCH = 100
VALUE_BYTES = 40
SEGMENT_BYTES = 256 * 1024 * 1024
RUN_MS = 100_000
T0_MS = 1_700_000_000_000
PRODUCER_ID_BASE = 5000
FORMS = ("jsonl", "parquet")
#: Rows per Parquet chunk of the generated ledger: what the workload writes when acks come faster
#: than 65,536 a second (slower, it writes a chunk a second; ``floodmark ledger convert`` 1 Mi rows).
CHUNK_ROWS = DEFAULT_CHUNK_RECORDS


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Generated:
    records: int
    seconds: float
    segment_bytes: int
    ledger_bytes: dict[str, int]


class ParquetLedger:
    """The columnar ledger of the synthetic run, one partition's columns at a time."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir()
        write_marker(directory, OPEN_MARKER, {"opened_ms": T0_MS})
        self.chunks = 0
        self.rows = 0

    def add_partition(self, partition: int, producer_id: int, digests: bytearray, count: int) -> None:
        offsets = np.arange(count, dtype=np.int64)
        halves = np.frombuffer(bytes(digests), dtype=">i8").astype(np.int64).reshape(-1, 2)
        now = T0_MS + (offsets // RECORDS_PER_BATCH * RECORDS_PER_BATCH * RUN_MS) // max(count, 1)
        columns = {
            "kind": pa.array(["ack"] * count, pa.string()),
            "topic": pa.array([TOPIC] * count, pa.string()),
            "partition": np.full(count, partition, dtype=np.int32),
            "offset": offsets,
            "key": pa.nulls(count, pa.string()),
            "digest_hi": halves[:, 0],
            "digest_lo": halves[:, 1],
            "producer_id": np.full(count, producer_id, dtype=np.int64),
            "sequence": offsets.astype(np.int32),
            "time_ms": now + 5,
            "latency_ms": np.round(2.0 + (offsets % 97) / 10, 3),
            "error": pa.nulls(count, pa.string()),
        }
        table = pa.table(columns, schema=SCHEMA)
        for start in range(0, count, CHUNK_ROWS):
            write_chunk(self.directory, self.chunks, table.slice(start, CHUNK_ROWS))
            self.chunks += 1
        self.rows += count

    def close(self) -> int:
        write_marker(
            self.directory,
            CLOSED_MARKER,
            {"chunks": self.chunks, "acks": self.rows, "errors": 0, "closed_ms": T0_MS + RUN_MS},
        )
        return sum(p.stat().st_size for p in self.directory.glob("part-*.parquet"))


def generate(root: Path, records: int, forms: tuple[str, ...] = FORMS) -> Generated:
    """Write the synthetic run under ``root`` (log dirs ``root/broker-<id>/data``, one report dir
    ``root/report-<form>`` per ledger form)."""
    started = time.perf_counter()
    for form in forms:
        (root / f"report-{form}").mkdir(parents=True)
    lines_path = root / "report-jsonl" / LEDGER_FILE
    columnar = ParquetLedger(root / "report-parquet" / LEDGER_DIR) if "parquet" in forms else None
    leader_dir = root / "broker-1" / "data"
    per_partition = [
        records // PARTITIONS + (1 if p < records % PARTITIONS else 0) for p in range(PARTITIONS)
    ]
    sha = hashlib.sha256
    segment_total = 0
    with (
        open(lines_path, "w", encoding="utf-8", buffering=8 << 20)  # noqa: SIM115
        if "jsonl" in forms
        else open(os.devnull, "w") as ledger  # noqa: SIM115
    ):
        for p, count in enumerate(per_partition):
            pdir = leader_dir / f"{TOPIC}-{p}"
            pdir.mkdir(parents=True)
            epoch1_at = (count // 2) // RECORDS_PER_BATCH * RECORDS_PER_BATCH
            producer_id = PRODUCER_ID_BASE + p
            segment_base, segment = 0, open(pdir / f"{0:020d}.log", "wb")  # noqa: SIM115
            size = 0
            lines: list[str] = []
            digests = bytearray()
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
                heads = [sha(v).digest()[:16] for v in values]
                if columnar is not None:
                    digests += b"".join(heads)
                if "jsonl" in forms:
                    for i, head in enumerate(heads):
                        offset = base + i
                        lines.append(
                            f'{{"type":"ack","topic":"{TOPIC}","partition":{p},"offset":{offset},"key":null,'
                            f'"value_digest":"{head.hex()}","producer_id":{producer_id},'
                            f'"sequence":{offset},"time_ms":{now + 5},"latency_ms":{2.0 + offset % 97 / 10:.3f}}}\n'
                        )
                if len(lines) >= 100_000:
                    ledger.write("".join(lines))
                    lines.clear()
            ledger.write("".join(lines))
            segment.close()
            if columnar is not None:
                columnar.add_partition(p, producer_id, digests, count)
            epochs = [(0, 0)] + ([(1, epoch1_at)] if epoch1_at < count and epoch1_at > 0 else [])
            if epoch1_at == 0 and count:
                epochs = [(1, 0)]
            entries = "".join(f"{e} {s}\n" for e, s in epochs)
            (pdir / "leader-epoch-checkpoint").write_text(f"0\n{len(epochs)}\n{entries}")
    hw_lines = "".join(f"{TOPIC} {p} {count}\n" for p, count in enumerate(per_partition))
    (leader_dir / "replication-offset-checkpoint").write_text(f"0\n{PARTITIONS}\n{hw_lines}")
    for broker in BROKERS[1:]:
        shutil.copytree(leader_dir, root / f"broker-{broker}" / "data")
    events = "".join(
        json.dumps(
            {
                "type": kind,
                "time_ms": T0_MS + at,
                "detail": {"action": action, "broker": i + 1, "id": f"f{i}"},
            }
        )
        + "\n"
        for i, (start, end) in enumerate(((20_000, 30_000), (60_000, 64_000)))
        for kind, at, action in (("fault", start, "SIGKILL"), ("heal", end, "restart"))
    )
    ledger_bytes: dict[str, int] = {}
    for form in forms:
        (root / f"report-{form}" / "events.jsonl").write_text(events)
    if "jsonl" in forms:
        with open(lines_path, "a", encoding="utf-8") as f:  # the closing line LedgerWriter writes
            f.write(
                json.dumps({"type": "closed", "acks": records, "errors": 0, "time_ms": T0_MS + RUN_MS}) + "\n"
            )
        ledger_bytes["jsonl"] = lines_path.stat().st_size
    if columnar is not None:
        ledger_bytes["parquet"] = columnar.close()
    return Generated(records, time.perf_counter() - started, segment_total * len(BROKERS), ledger_bytes)


def _indented(message: str) -> None:
    say("    " + message)


def verify_once(report_dir: Path, log_dirs: str, master: str, fast_start: bool | None) -> dict:
    """One run of the job, as :func:`measure` calls it in a fresh interpreter: pyspark starts
    its JVM once per Python process and keeps it after ``stop()``, so a second job in the same
    process would skip the JVM start (and run JIT-warm) and ignore the JVM settings it asks for."""
    from verify.job import run_verification

    result = run_verification(report_dir, None, log_dirs, master, progress=_indented, fast_start=fast_start)
    return {
        "ok": result.ok,
        "counts": result.counts,
        "jvm": result.inputs["jvm"],
        "timings": result.timings_s,
    }


def measure(
    records: int, master: str, keep: bool, jvm: str = "auto", forms: tuple[str, ...] = FORMS
) -> list[dict]:
    """Generate one run of ``records`` and verify it once per ledger form (a row each), each job
    in its own interpreter (:func:`verify_once`)."""
    root = Path(tempfile.mkdtemp(prefix=f"floodmark-verify-cost-{records}-"))
    rows: list[dict] = []
    try:
        say(
            f"generating {records:,} records x {len(BROKERS)} replicas in {root} (ledger: {', '.join(forms)})"
        )
        gen = generate(root, records, forms)
        os.sync()  # the kernel's write-back of the new files must not compete with the timed job
        say(
            f"  generated in {gen.seconds:.1f}s: {gen.segment_bytes / 1e6:.0f} MB of segments, "
            + ", ".join(f"{b / 1e6:.1f} MB of {form} ledger" for form, b in gen.ledger_bytes.items())
        )
        log_dirs = ",".join(str(root / f"broker-{b}" / "data") for b in BROKERS)
        for form in forms:
            load_before = os.getloadavg()[0]
            started = time.perf_counter()
            fast_start = {"auto": None, "fast-start": True, "throughput": False}[jvm]
            say(f"  verifying with the {form} ledger")
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
                result = fresh.submit(
                    verify_once, root / f"report-{form}", log_dirs, master, fast_start
                ).result()
            wall = time.perf_counter() - started
            counts = result["counts"]
            if not result["ok"] or counts["acknowledged"] != records or counts["committed"] != records:
                raise SystemExit(f"the job did not pass on clean data ({form} ledger): {counts}")
            say(f"  {records:,} records verified in {wall:.1f}s ({form} ledger)")
            rows.append(
                {
                    "form": form,
                    "jvm": result["jvm"],
                    "load": (load_before, os.getloadavg()[0]),
                    "records": records,
                    "wall_s": wall,
                    "generate_s": gen.seconds,
                    "gen": gen,
                    "timings": result["timings"],
                }
            )
        return rows
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
        f"{RECORDS_PER_BATCH} records with {VALUE_BYTES}-byte values, one ledger entry per record, the ledger "
        "as JSON lines (`ledger.jsonl`) or as Parquet chunks (`ledger/`), the same run verified once with each "
        "(JSON lines first), each job in a fresh interpreter and JVM. Every replica's "
        "records are decoded and hashed, so the job reads 3 x N records from the segments plus N ledger entries. "
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, driver memory "
        f"{os.environ.get('FLOODMARK_SPARK_DRIVER_MEMORY', '4g')}. JVM `fast-start` is "
        "`-XX:+UseSerialGC -XX:TieredStopAtLevel=1` with the small-input Spark settings (no whole-stage "
        "codegen, no adaptive execution, 2 shuffle partitions); `throughput` is `-XX:+UseParallelGC` with "
        "the full JIT and Spark's defaults (16 shuffle partitions, adaptive). `floodmark verify` picks "
        "fast-start below 32 MiB of input. The machine is shared: the load average column says how busy "
        "it was.",
        "",
        "| acknowledged records | ledger | JVM | segments (3 replicas) | ledger size | wall time of the job "
        "| records/s (ledger) | slowest phase | load average before / after |",
        "|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        gen = r["gen"]
        phase, seconds = max(((v, k) for k, v in r["timings"].items() if k != "total"), default=(0.0, "-"))[
            ::-1
        ]
        lines.append(
            f"| {r['records']:,} | {r['form']} | {r['jvm']} | {gen.segment_bytes / 1e6:,.0f} MB "
            f"| {gen.ledger_bytes[r['form']] / 1e6:,.1f} MB | {r['wall_s']:.0f} s "
            f"| {r['records'] / r['wall_s']:,.0f} | {phase} ({seconds:.0f} s) "
            f"| {r['load'][0]:.1f} / {r['load'][1]:.1f} |"
        )
    pairs = [
        (j, p)
        for j in results
        for p in results
        if j["form"] == "jsonl" and p["form"] == "parquet" and j["records"] == p["records"]
    ]
    if pairs:
        lines += [
            "",
            "Parquet against JSON lines, the same run (ratio < 1: the columnar ledger is faster):",
            "",
            "| records | job, jsonl | job, parquet | parquet / jsonl | ledger phase, jsonl | ledger phase, parquet "
            "| ledger size, jsonl | ledger size, parquet |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for j, p in pairs:
            lines.append(
                f"| {j['records']:,} | {j['wall_s']:.1f} s | {p['wall_s']:.1f} s | {p['wall_s'] / j['wall_s']:.2f} "
                f"| {j['timings'].get('ledger', 0):.1f} s | {p['timings'].get('ledger', 0):.1f} s "
                f"| {j['gen'].ledger_bytes['jsonl'] / 1e6:,.1f} MB | {p['gen'].ledger_bytes['parquet'] / 1e6:,.1f} MB |"
            )
    lines += [
        "",
        "Time per phase (seconds; Spark evaluates lazily, so reading and caching the inputs lands in the "
        "first phase that needs them):",
        "",
    ]
    lines.append("| records | ledger | JVM | " + " | ".join(phases) + " |")
    lines.append("|---:|---|---|" + "---:|" * len(phases))
    for r in results:
        lines.append(
            f"| {r['records']:,} | {r['form']} | {r['jvm']} | "
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
    parser.add_argument(
        "--ledger-format",
        choices=["parquet", "jsonl", "both"],
        default="both",
        help="The ledger's form; both: the same run verified with each, JSON lines (the baseline) first.",
    )
    args = parser.parse_args(argv)
    forms = FORMS if args.ledger_format == "both" else (args.ledger_format,)
    results = [
        row
        for n in (args.records or [1_000_000, 10_000_000])
        for row in measure(n, args.master, args.keep, args.jvm, forms)
    ]
    print(markdown(results, args.master))


if __name__ == "__main__":
    main()
