"""Which SparkSession the verification job runs in (docs/design.md "Verification job";
docs/benchmarks.md "Verification cost"): the caller's active one if there is one (used as is,
left running), else one built here: the fast-start JVM with the small-input Spark settings below
:data:`FAST_START_MAX_INPUT_BYTES` of input (ledger + segments, about 100,000 records), the
throughput JVM with Spark's defaults above. Around that size the two took about as long here;
far below it fast-start wins, far above throughput does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ledger.columnar import inspect as inspect_chunks
from ledger.format import LEDGER_DIR, LEDGER_FILE
from verify.progress import Timings
from verify.session import SMALL_INPUT_CONF, SMALL_INPUT_SHUFFLE_PARTITIONS, build_session

#: Input size (ledger + segments) up to which the fast-start JVM is the faster choice.
FAST_START_MAX_INPUT_BYTES = 32 * 1024 * 1024
Progress = Callable[[str], None]


def choose_session(
    spark: Any, master: str, fast_start: bool | None, small_input: bool, say: Progress, timings: Timings
) -> tuple[Any, bool, str]:
    """(session, whether the job owns it, which JVM): the caller's active one if any, else one
    built here (see the module docstring)."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # inside a test or a notebook: use theirs, leave it running
    if spark is not None:
        from verify.sources import register

        register(spark)
        return spark, False, "the caller's session"
    say(f"starting Spark ({master})")
    with timings.measure("spark_start"):
        if fast_start is None:
            # the fast-start JVM wins below the line, the throughput JVM above it
            # (docs/benchmarks.md "Verification cost")
            fast_start = small_input
        say(f"session settings: {'small input, fast-start JVM' if fast_start else 'throughput JVM'}")
        if fast_start:
            spark = build_session(
                master,
                fast_start=True,
                shuffle_partitions=SMALL_INPUT_SHUFFLE_PARTITIONS,
                extra_conf=SMALL_INPUT_CONF,
            )
        else:
            spark = build_session(master)
    return spark, True, "fast-start" if fast_start else "throughput"


def input_bytes(report_dir: Path, log_dirs: Sequence[str]) -> int:
    """The ledger's size (either form) plus every segment file's in the log dirs (a stat each,
    nothing read)."""
    total = 0
    for path in [
        report_dir / LEDGER_FILE,
        *inspect_chunks(report_dir / LEDGER_DIR).chunks,
        *(p for d in log_dirs for p in Path(d).glob("*-*/*.log")),
    ]:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total
