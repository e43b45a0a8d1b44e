"""The verification job on a real Spark standalone cluster (SPEC 8; docs/operations.md).

A master and two one-core workers start from the pyspark distribution's own classes, bound to
loopback. ``floodmark verify`` then runs on one planted-anomaly input twice, in its own process
each time (a process has one SparkContext, and the tests' shared session is local): once with
``--master local[2]`` and once with the cluster's ``spark://`` URL. The two reports must agree and
find exactly the planted anomaly, so executors in other JVMs read the segments and the ledger
the same way the local ones do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.ports import HOST, free_port
from ledger.format import value_digest
from tests.verify import scenario as sc
from verify.report import CHECKS
from verify.session import loopback_master

pytestmark = pytest.mark.integration

WORKERS = 2
START_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 120.0
FLOODMARK = Path(sys.executable).with_name("floodmark")


def _pyspark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _scala_version(spark_home: str) -> str:
    """What bin/load-spark-env.sh exports: the workers' launcher needs it to build executors' classpath."""
    (core,) = Path(spark_home, "jars").glob("spark-core_*.jar")
    return core.name.removeprefix("spark-core_").split("-")[0]


def _spark_env(tmp: Path) -> dict[str, str]:
    home = _pyspark_home()
    env = dict(os.environ)
    env.update(
        SPARK_HOME=home,
        SPARK_SCALA_VERSION=_scala_version(home),
        SPARK_LOCAL_IP=HOST,
        SPARK_LOCAL_DIRS=str(tmp / "local"),
        SPARK_WORKER_DIR=str(tmp / "work"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        JAVA_TOOL_OPTIONS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    )
    return env


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"({path}: {exc})"
    return f"--- {path.name} ---\n" + "\n".join(text.splitlines()[-lines:])


class StandaloneCluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.webui_port = free_port()
        self.url = f"spark://{HOST}:{self.port}"
        self.env = _spark_env(tmp)
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def _java(self, name: str, *args: str) -> None:
        log = self.tmp / f"{name}.log"
        classpath = os.path.join(self.env["SPARK_HOME"], "jars", "*")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", classpath, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.tmp,
            )
        self.procs.append((proc, log))

    def logs(self) -> str:
        return "\n".join(_tail(log) for _, log in self.procs)

    def start(self) -> None:
        for d in ("local", "work"):
            (self.tmp / d).mkdir(parents=True, exist_ok=True)
        self._java(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        )
        for i in range(WORKERS):
            self._java(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                HOST,
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(self.tmp / "work"),
                self.url,
            )
        self._wait_for_workers()

    def alive_workers(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.webui_port}/json/", timeout=2) as resp:
                return int(json.load(resp).get("aliveworkers", 0))
        except (OSError, ValueError):
            return None

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        alive = None
        while time.monotonic() < deadline:
            dead = [log.stem for proc, log in self.procs if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"Spark {', '.join(dead)} exited during start-up\n{self.logs()}")
            alive = self.alive_workers()
            if alive == WORKERS:
                return
            time.sleep(0.25)
        raise RuntimeError(
            f"{alive} of {WORKERS} Spark workers registered within {START_TIMEOUT_S:.0f} s\n{self.logs()}"
        )

    def stop(self) -> None:
        for proc, _ in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def flip_a_byte_on_broker_3(s: sc.Scenario) -> int:
    """The anomaly of test_job's flipped-byte test: broker 3's copy of t-0 offsets 5..9 is corrupt."""
    path, pos, size, base = s.disk.batch_positions(3, sc.TOPIC, 0)[1]
    data = bytearray(path.read_bytes())
    data[pos + size - 2] ^= 0x01
    path.write_bytes(bytes(data))
    return base


def run_cli(s: sc.Scenario, master: str, cluster: StandaloneCluster) -> dict[str, Any]:
    report = s.report_dir / "verification.json"
    report.unlink(missing_ok=True)
    env = dict(cluster.env, FLOODMARK_SPARK_DRIVER_MEMORY="1g")
    env.pop("JAVA_TOOL_OPTIONS")  # the job picks its own JVM settings
    proc = subprocess.run(
        [str(FLOODMARK), "verify", "--report-dir", str(s.report_dir), "--offline"]
        + ["--log-dirs", s.log_dirs, "--master", master],
        capture_output=True,
        text=True,
        env=env,
        cwd=s.root,
        timeout=JOB_TIMEOUT_S,
    )
    (s.root / f"verify-{'cluster' if master.startswith('spark:') else 'local'}.stderr").write_text(
        proc.stderr
    )
    assert proc.returncode == 3, (
        f"floodmark verify --master {master} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}\n{cluster.logs()}"
    )
    assert f"starting Spark ({master})" in proc.stderr
    return json.loads(report.read_text())


def test_only_loopback_masters_bind_the_driver_to_loopback() -> None:
    assert loopback_master("local[2]") and loopback_master("spark://127.0.0.1:7077")
    assert loopback_master("spark://localhost:7077,127.0.0.2:7077")
    assert not loopback_master("spark://spark-master:7077") and not loopback_master("yarn")


def test_a_standalone_cluster_finds_what_local_mode_finds(
    tmp_path: Path, standalone: StandaloneCluster
) -> None:
    s = sc.build(tmp_path)
    base = flip_a_byte_on_broker_3(s)

    local = run_cli(s, "local[2]", standalone)
    clustered = run_cli(s, standalone.url, standalone)

    assert standalone.alive_workers() == WORKERS
    assert clustered["counts"] == local["counts"]
    assert clustered["violations"] == local["violations"]
    assert clustered["ok"] is local["ok"] is False
    for report in (local, clustered):
        assert {c: report["counts"][c] for c in CHECKS} == {c: (5 if c == "divergent" else 0) for c in CHECKS}
        assert report["counts"]["acknowledged"] == report["counts"]["committed"] == s.total
        rows = report["violations"]["divergent"]
        assert [(r["partition"], r["offset"]) for r in rows] == [(0, o) for o in range(base, base + 5)]
        for row in rows:
            by_broker = {c["broker"]: c for c in row["copies"]}
            assert [by_broker[b]["crc_valid"] for b in (1, 2, 3)] == [True, True, False]
        digests = {c["broker"]: c["value_digest"] for c in rows[-1]["copies"]}
        assert digests[1] == digests[2] == value_digest(sc.value(0, 1, 4)) != digests[3]
