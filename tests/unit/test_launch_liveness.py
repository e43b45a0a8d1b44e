"""The runner's wait for a starting broker (devcluster/launch.py): a broker that is still
starting is never reported dead, one that exited is reported with its exit code, and the bound
grows with the logs the broker must load (docs/operations.md "Local cluster layout")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devcluster.errors import ClusterError
from devcluster.launch import LOAD_S_PER_PARTITION, Launcher, log_load_allowance
from devcluster.processes import Processes
from devcluster.state import BrokerState


def _broker(tmp_path: Path, pid: int | None) -> BrokerState:
    log_dir = tmp_path / "logs"
    log_dir.mkdir(exist_ok=True)
    out = tmp_path / "broker.out"
    out.write_text("loading logs\n")
    return BrokerState(1, 9092, str(tmp_path / "server.properties"), str(log_dir), str(out), pid=pid)


def test_a_child_whose_command_line_does_not_show_its_marker_yet_is_still_starting(tmp_path: Path) -> None:
    """The interleaving of a chaos run's false "heal FAILED": the runner looked at a broker while
    ``ip netns exec`` was becoming python, when /proc/<pid>/cmdline does not carry the broker's
    config path. Stood in for by a live child whose command line never carries it: judged by its
    wait status, it is running (before, ``broker 1 is not running before registering``)."""
    procs = Processes()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pid = procs.track(child)
        launcher = Launcher(procs, lambda _line: None)
        broker = _broker(tmp_path, pid)
        assert not launcher.broker_alive(broker)  # the marker is not in its command line
        launcher._check_not_exited(broker)  # and yet it is not reported dead
    finally:
        child.kill()
        child.wait()


def test_a_child_that_exited_is_reported_with_its_exit_code(tmp_path: Path) -> None:
    procs = Processes()
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait()
    launcher = Launcher(procs, lambda _line: None)
    broker = _broker(tmp_path, procs.track(child))
    with pytest.raises(ClusterError, match="broker 1 exited with code 3 before registering") as err:
        launcher._check_not_exited(broker)
    assert "loading logs" in str(err.value)


def test_a_process_of_another_runner_that_is_gone_is_not_running(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    launcher = Launcher(Processes(), lambda _line: None)  # not this runner's child
    with pytest.raises(ClusterError, match="broker 1 is not running before registering"):
        launcher._check_not_exited(_broker(tmp_path, child.pid))


def test_the_start_bound_grows_with_the_partitions_and_bytes_to_load(tmp_path: Path) -> None:
    broker = _broker(tmp_path, None)
    assert log_load_allowance(broker) == 0.0
    for i in range(50):
        part = Path(broker.log_dir) / f"t-{i}"
        part.mkdir()
        (part / "00000000000000000000.log").write_bytes(b"x" * 1024)
    small = log_load_allowance(broker)
    assert small >= 50 * LOAD_S_PER_PARTITION
    (Path(broker.log_dir) / "t-0" / "00000000000000000000.log").write_bytes(b"x" * (64 << 20))
    assert log_load_allowance(broker) > small
