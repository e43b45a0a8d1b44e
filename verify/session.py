"""The SparkSession the verification job runs in, with this machine's settings
(docs/design.md "Verification job").

What PySpark 4 needs here: Python workers must start the interpreter running the driver
(``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` = ``sys.executable``), the driver binds to loopback
(``SPARK_LOCAL_IP``, ``spark.driver.bindAddress``) unless the master is a cluster on other hosts,
whose executors must reach it (:func:`loopback_master`), the UI is off, shuffles use few partitions
(16, which adaptive execution coalesces further when the data is small),
and ``JAVA_TOOL_OPTIONS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1"`` roughly halves start-up.

That last setting is ``fast_start=True``, right for tests and small inputs, where the job is
many small queries. It is not the default: on a million records it made the job about twice as
slow as ``-XX:+UseParallelGC`` with the full JIT (:data:`THROUGHPUT_JAVA_OPTIONS`), a serial
collector and a C1-only JIT being poor at the joins and aggregations that follow start-up. The
job picks by input size (:data:`verify.session_choice.FAST_START_MAX_INPUT_BYTES`; docs/benchmarks.md,
"Verification cost").
Environment variables already set by the caller win over these defaults, so an operator can
still tune the JVM. Both floodmark data sources are registered on the returned session.
"""

from __future__ import annotations

import os
import sys
from typing import Any

DEFAULT_MASTER = "local[2]"
FAST_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
THROUGHPUT_JAVA_OPTIONS = "-XX:+UseParallelGC"
#: For small inputs (the tests, a short chaos run): the job is then many tiny queries, and
#: compiling whole-stage code or re-planning adaptively costs more than running the plan.
SMALL_INPUT_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
}
SMALL_INPUT_SHUFFLE_PARTITIONS = 2


LOOPBACK = "127.0.0.1"


def loopback_master(master: str) -> bool:
    """Whether every executor of ``master`` runs on this machine's loopback: ``local[...]``, or a
    ``spark://`` URL whose hosts are all loopback. Otherwise the driver must listen on an address
    the workers can reach, which Spark picks (or ``SPARK_LOCAL_IP`` names)."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [hp.rsplit(":", 1)[0] for hp in master.removeprefix("spark://").split(",")]
    return all(h == "localhost" or h.startswith("127.") for h in hosts)


def spark_environment(fast_start: bool = False, loopback: bool = True) -> dict[str, str]:
    """The environment variables the session needs (before the JVM starts)."""
    env = {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "JAVA_TOOL_OPTIONS": FAST_START_JAVA_OPTIONS if fast_start else THROUGHPUT_JAVA_OPTIONS,
        "PYARROW_IGNORE_TIMEZONE": "1",
    }
    if loopback:
        env["SPARK_LOCAL_IP"] = LOOPBACK
    return env


def build_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "floodmark-verify",
    *,
    shuffle_partitions: int = 16,
    driver_memory: str | None = None,
    fast_start: bool = False,
    extra_conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession for ``master`` with the settings above and the floodmark sources."""
    # JAVA_TOOL_OPTIONS is for Spark's JVM only: it is set while the JVM starts and restored
    # after, so JVMs this process starts later (ZooKeeper in the tests) do not inherit it.
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    for name, value in spark_environment(fast_start, loopback_master(master)).items():
        os.environ.setdefault(name, value)
    try:
        return _build(master, app_name, shuffle_partitions, driver_memory, extra_conf)
    finally:
        if before is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = before


def _build(
    master: str,
    app_name: str,
    shuffle_partitions: int,
    driver_memory: str | None,
    extra_conf: dict[str, str] | None,
) -> Any:
    from pyspark.sql import SparkSession

    from verify.sources import register

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", driver_memory or os.environ.get("FLOODMARK_SPARK_DRIVER_MEMORY", "4g"))
    )
    if loopback_master(master):
        builder = builder.config("spark.driver.bindAddress", LOOPBACK).config("spark.driver.host", LOOPBACK)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
