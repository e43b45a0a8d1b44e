"""Disk faults through the local runner (devcluster/disk.py, docs/operations.md "Disk faults"): a real
ZooKeeper, brokers in network namespaces on faultable disks, the ``floodmark cluster disk``
command and the chaos injector's heal-and-restart, with tests/chaos/disk_stand_in_broker.py as
the broker (it writes to its log dir and halts on the first I/O error, as KIP-112 prescribes).
Needs root, /dev/fuse and iproute2; fails with the reason rather than skip. Mounts are removed
at teardown even when a test fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from chaos.faults import LocalBackend
from chaos.injector import FaultInjector
from chaos.schedule import Fault
from cli.main import build_cli
from devcluster.cluster import LocalCluster
from devcluster.disk import mount_type, unavailable_reason
from devcluster.netns import netns_available
from devcluster.ports import free_port_block
from tests.integration.test_local_cluster import wait_for

pytestmark = pytest.mark.integration

STAND_IN = [sys.executable, str(Path(__file__).with_name("disk_stand_in_broker.py"))]
HALT_LINE = "Shutdown broker because all log dirs in"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(build_cli(), list(args))


def segment(cluster_dir: Path, broker_id: int, on_disk: bool = False) -> Path:
    """The stand-in's segment, as the tmpfs holds it (or, after down, the real disk)."""
    home = cluster_dir / f"broker-{broker_id}"
    base = home / "data" if on_disk else home / "disk" / "data"
    return base / "stand-in-0" / "00000000000000000000.log"


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    reason = unavailable_reason() or (None if netns_available() else "network namespaces need iproute2")
    if reason:
        pytest.fail(reason)
    data_dir = tmp_path / "cluster"
    yield data_dir
    if (data_dir / "cluster.json").exists():
        LocalCluster.load(data_dir).down(timeout=5)
    with open("/proc/self/mountinfo") as mountinfo:  # whatever a failed test left
        points = [line.split()[4] for line in mountinfo if line.split()[4].startswith(str(tmp_path))]
    for point in reversed(points):
        subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
        subprocess.run(["umount", "-l", point], capture_output=True)
    assert not points, f"mounts left behind: {points}"


@pytest.mark.timeout(240)
async def test_disk_faults_from_up_through_the_cli_and_the_injector_to_down(cluster_dir: Path) -> None:
    base = free_port_block(2)
    runner = LocalCluster(cluster_dir, broker_command=STAND_IN)
    runner.up(2, zookeeper_port=base - 1, base_port=base, timeout=60, netns=True, disk_size="16M")

    doc = json.loads((cluster_dir / "cluster.json").read_text())
    assert doc["disks"]["size"] == "16m" and all(doc["disks"]["fs_pids"][i] > 0 for i in ("1", "2"))
    for i in (1, 2):
        home = cluster_dir / f"broker-{i}"
        assert mount_type(home / "disk") == "tmpfs" and mount_type(home / "data") == "fuse"
        # the broker runs in its own mount namespace (ip netns exec) and still writes through FUSE
        wait_for(lambda i=i: size(segment(cluster_dir, i)) >= 3 * 4096, 10, f"broker {i} writing")
    status = json.loads(invoke("cluster", "status", "--data-dir", str(cluster_dir), "--json").stdout)
    assert [b["disk"] for b in status["brokers"]] == ["ok", "ok"]

    # disk-error by hand: the broker halts on its next write; heal; start brings it back
    first_pid = runner.state.brokers[1].pid
    result = invoke("cluster", "disk", "1", "--error", "--data-dir", str(cluster_dir))
    assert result.exit_code == 0 and result.stdout == (
        "broker 1: disk failing: every write, fsync, truncate, create and rename now fails with EIO\n"
    )
    wait_for(lambda: runner._procs.exit_code(first_pid) is not None, 10, "broker 1 to halt")
    assert runner._procs.exit_code(first_pid) == 1
    out = (cluster_dir / "broker-1" / "broker.out").read_text()
    assert "Input/output error" in out and HALT_LINE in out
    status = json.loads(invoke("cluster", "status", "--data-dir", str(cluster_dir), "--json").stdout)
    assert [(b["alive"], b["disk"]) for b in status["brokers"]] == [(False, "EIO"), (True, "ok")]
    result = invoke("cluster", "disk", "1", "--heal", "--data-dir", str(cluster_dir))
    assert result.stdout == (
        "broker 1: disk healed (0.0 MiB filler removed, writes pass through); "
        "the broker is not running: `floodmark cluster start 1` brings it back\n"
    )
    runner.start(1, timeout=30)
    before = size(segment(cluster_dir, 1))
    wait_for(lambda: size(segment(cluster_dir, 1)) > before, 10, "broker 1 writing again")

    # disk-full through the chaos injector: its heal frees the disk and restarts the broker
    second_pid = runner.state.brokers[2].pid
    events: list[tuple[str, dict]] = []

    async def leader_of(partition: int) -> int:
        return 2

    injector = FaultInjector(LocalBackend(runner), leader_of, None, lambda k, d: events.append((k, d)))
    await injector.run([Fault(0, "disk-full", 0, 2.0)], time.monotonic())
    assert runner._procs.exit_code(second_pid) == 1
    out = (cluster_dir / "broker-2" / "broker.out").read_text()
    assert "No space left on device" in out and HALT_LINE in out
    assert runner.state.brokers[2].pid != second_pid and runner._broker_alive(runner.state.brokers[2])
    assert [k for k, _ in events] == ["fault", "heal"] and events[0][1]["broker"] == 2
    before = size(segment(cluster_dir, 2))
    wait_for(lambda: size(segment(cluster_dir, 2)) > before, 10, "broker 2 writing again")

    # down: every mount and daemon gone, the data copied back onto the real disk
    fs_pids = json.loads((cluster_dir / "cluster.json").read_text())["disks"]["fs_pids"].values()
    runner.down(timeout=10)
    for i in (1, 2):
        assert mount_type(cluster_dir / f"broker-{i}" / "disk") is None
        assert mount_type(cluster_dir / f"broker-{i}" / "data") is None
        assert segment(cluster_dir, i, on_disk=True).read_bytes().startswith(b"record 0\n")
    assert not any(Path(f"/proc/{pid}/cmdline").exists() and b"faulty_fs" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in fs_pids)  # fmt: skip

    # up again: the disks come back with the data on them
    kept = size(segment(cluster_dir, 1, on_disk=True))
    runner.up(2, timeout=60)
    assert size(segment(cluster_dir, 1)) >= kept and mount_type(cluster_dir / "broker-1" / "data") == "fuse"
    runner.down(timeout=10)


def test_disk_commands_explain_themselves_in_one_line(tmp_path: Path) -> None:
    result = invoke("cluster", "up", "--disk-size", "64m", "--data-dir", str(tmp_path))
    assert result.exit_code == 2 and "--disk-size needs --disk-faults" in result.stderr
    result = invoke("cluster", "up", "--disk-faults", "--disk-size", "lots", "--data-dir", str(tmp_path))
    assert (
        result.exit_code == 1
        and result.stderr == "Error: disk size 'lots' is not a size such as 64m, 512k or 1g\n"
    )
    (tmp_path / "cluster.json").write_text(
        json.dumps(
            {
                "data_dir": str(tmp_path),
                "zookeeper": {"port": 1, "data_dir": str(tmp_path / "zookeeper")},
                "brokers": {"1": {"port": 2, "config": "c", "log_dir": str(tmp_path / "d"), "out": "o"}},
                "broker_command": ["true"],
            }
        )
    )
    result = invoke("cluster", "disk", "1", "--data-dir", str(tmp_path))
    assert result.exit_code == 2 and "--full, --error or --heal" in result.stderr
    result = invoke("cluster", "disk", "1", "--full", "--data-dir", str(tmp_path))
    assert result.exit_code == 1 and result.stderr == (
        "Error: this cluster was not started with --disk-faults: its disks cannot fail\n"
    )
