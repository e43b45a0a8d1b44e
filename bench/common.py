"""What the benchmark scripts share: a throw-away local cluster, progress output, machine facts,
and rewriting the generated part of a markdown file between markers."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from devcluster.cluster import LocalCluster
from devcluster.ports import free_port_block

ROOT = Path(__file__).resolve().parent.parent
BROKERS = 3
#: Broker settings of the benchmark cluster, on top of Kafka's defaults (stated in the report).
CLUSTER_SETTINGS: dict[str, str] = {"zookeeper.session.timeout.ms": "6000"}
CLUSTER_UP_TIMEOUT_S = 90.0
CLUSTER_DOWN_TIMEOUT_S = 30.0


def say(message: str) -> None:
    """Progress on stderr (stdout carries only the final markdown)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def floodmark_command() -> list[str]:
    """The ``floodmark`` console script next to this interpreter, else ``python -m cli.main``."""
    script = Path(sys.executable).parent / "floodmark"
    if script.exists():
        return [str(script)]
    found = shutil.which("floodmark")
    return [found] if found else [sys.executable, "-m", "cli.main"]


@contextmanager
def bench_cluster(
    settings: Mapping[str, str] | None = None,
    keep_data: bool = False,
    prefix: str = "floodmark-bench-",
    brokers: int = BROKERS,
) -> Iterator[LocalCluster]:
    """ZooKeeper + ``brokers`` (3) brokers on free loopback ports in a fresh temp dir; always stopped on exit.

    The data dir is removed afterwards unless ``keep_data`` is set or something failed (then its
    path is printed, for the broker.out and state-change.log files)."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    base = free_port_block(brokers)
    cluster = LocalCluster(data_dir, progress=say)
    ok = False
    try:
        say(
            f"starting ZooKeeper on {base - 1} and brokers 1-{brokers} on {base}-{base + brokers - 1} in {data_dir}"
        )
        cluster.up(
            brokers=brokers,
            zookeeper_port=base - 1,
            base_port=base,
            overrides=dict(settings if settings is not None else CLUSTER_SETTINGS),
            timeout=CLUSTER_UP_TIMEOUT_S,
        )
        yield cluster
        ok = True
    finally:
        if cluster.state is not None:
            try:
                cluster.down(timeout=CLUSTER_DOWN_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - report, keep the original error
                say(f"stopping the cluster failed: {exc}")
                ok = False
        if ok and not keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
            say(f"removed {data_dir}")
        else:
            say(f"cluster data kept in {data_dir} (broker-*/broker.out, broker-*/state-change.log)")


# -- machine facts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gb: float
    kernel: str
    python: str
    uvloop: str
    git: str
    date: str

    def lines(self) -> list[str]:
        return [
            f"- CPUs (`nproc`): {self.cpus} ({self.cpu_model}); memory {self.memory_gb:.0f} GiB; Linux {self.kernel}",
            f"- Python {self.python}, uvloop {self.uvloop} (brokers and clients run on uvloop)",
            f"- floodmark at git {self.git}; run on {self.date}",
        ]


def _nproc() -> int:
    try:
        return int(subprocess.run(["nproc"], capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return os.cpu_count() or 0


def _cpu_model() -> str:
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _memory_gb() -> float:
    with suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def _git() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' (with uncommitted changes)' if dirty else ''}" if head else "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> Machine:
    return Machine(
        cpus=_nproc(),
        cpu_model=_cpu_model(),
        memory_gb=_memory_gb(),
        kernel=platform.release(),
        python=platform.python_version(),
        uvloop=_version("uvloop"),
        git=_git(),
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
    )


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


# -- generated sections of markdown files --------------------------------------------------------


def replace_between_markers(path: Path, begin: str, end: str, content: str, skeleton: str) -> None:
    """Put ``content`` between the ``begin`` and ``end`` marker lines of ``path``, keeping all text
    outside them. A missing file is created from ``skeleton`` (which must contain both markers);
    a file without the markers gets them appended."""
    text = path.read_text() if path.exists() else skeleton
    if begin not in text or end not in text:
        text = text.rstrip("\n") + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(f"{head}{begin}\n{content.strip()}\n{end}{tail}")
    os.replace(tmp, path)


@contextmanager
def baseline_worktree(revision: str) -> Iterator[Path]:
    """A ``git worktree`` of ``revision`` in a temp dir, removed afterwards: the A side of the A/B
    benchmarks (bench/ab_perf.py, bench/log_append.py), which run it with ``PYTHONPATH`` or
    ``cwd`` set to it."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(tree), revision], cwd=ROOT, check=True
        )
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
