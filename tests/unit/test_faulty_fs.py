"""The disk faults' kernel side, for real (devcluster/faulty_fs.py, devcluster/disk.py): a FUSE passthrough
mounted on a temp dir and a size-limited tmpfs, driven from a separate process the way a broker
meets them. Needs root and /dev/fuse (this machine and CI have both; `make setup` installs
fuse3): without them these tests fail with the reason rather than skip. Every test unmounts
what it mounted, also when it fails.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.disk import BrokerDisk, mount_type, unavailable_reason
from devcluster.faulty_fs import parse_mode, write_mode

ROOT = Path(__file__).resolve().parents[2]

#: A process that stands in for the broker: one command per stdin line, one answer per line
#: ("ok <result>" or "err <ERRNO name>"), so a test drives it step by step between mode switches.
WORKER = r"""
import errno, os, sys
fd = None
for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "open":
            fd = os.open(args[0], os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644); out = ""
        elif cmd == "write":
            out = os.write(fd, args[0].encode() * int(args[1] if len(args) > 1 else 1))
        elif cmd == "fsync":
            os.fsync(fd); out = ""
        elif cmd == "fdatasync":
            os.fdatasync(fd); out = ""
        elif cmd == "ftruncate":
            os.ftruncate(fd, int(args[0])); out = ""
        elif cmd == "read":
            out = os.pread(fd, 1 << 20, 0).decode()
        elif cmd == "create":
            os.close(os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)); out = ""
        elif cmd == "append":
            with open(args[0], "ab", buffering=0) as f:
                out = f.write(b"x" * int(args[1]))
        elif cmd == "rename":
            os.rename(args[0], args[1]); out = ""
        elif cmd == "truncate":
            os.truncate(args[0], int(args[1])); out = ""
        elif cmd == "mkdir":
            os.mkdir(args[0]); out = ""
        elif cmd == "unlink":
            os.unlink(args[0]); out = ""
        elif cmd == "list":
            out = ",".join(sorted(os.listdir(args[0])))
        elif cmd == "stat":
            out = os.stat(args[0]).st_size
        elif cmd == "cat":
            out = open(args[0], "rb").read().decode()
        print("ok", out, flush=True)
    except OSError as exc:
        print("err", errno.errorcode[exc.errno], flush=True)
"""


class Worker:
    """A separate process (optionally under a prefix such as ``ip netns exec NS``) doing file calls."""

    def __init__(self, prefix: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, *command: object) -> str:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(" ".join(str(c) for c in command) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(autouse=True)
def needs_root_and_fuse() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.fail(reason)


@pytest.fixture(autouse=True)
def no_mount_survives(tmp_path: Path) -> Iterator[None]:
    """Whatever a test leaves mounted under its tmp_path goes, lazily, even when it failed."""
    yield
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4] for line in mountinfo if line.split()[4].startswith(str(tmp_path))]
    for point in reversed(points):
        subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
        subprocess.run(["umount", "-l", point], capture_output=True)


@pytest.fixture
def fuse_mount(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(backing, mountpoint, control) with devcluster.faulty_fs serving backing at mountpoint."""
    backing, mountpoint, control = tmp_path / "backing", tmp_path / "mnt", tmp_path / "mode"
    backing.mkdir()
    mountpoint.mkdir()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "devcluster.faulty_fs", backing, mountpoint, "--control", control],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while mount_type(mountpoint) != "fuse":
            assert daemon.poll() is None and time.monotonic() < deadline, "the FUSE filesystem did not mount"
            time.sleep(0.02)
        yield backing, mountpoint, control
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
        try:
            daemon.wait(5)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    assert mount_type(mountpoint) is None


@pytest.fixture
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.close()


def test_the_control_file_holds_ok_or_an_errno_name(tmp_path: Path) -> None:
    assert parse_mode("ok\n") == 0 and parse_mode("") == 0
    assert parse_mode("EIO") == errno.EIO and parse_mode("enospc") == errno.ENOSPC
    with pytest.raises(ValueError, match="unknown mode 'broken'"):
        write_mode(tmp_path / "mode", "broken")


def test_writes_pass_through_then_fail_with_eio_while_reads_work_then_pass_again(fuse_mount, worker):
    backing, mountpoint, control = fuse_mount
    assert worker("open", mountpoint / "00000000000000000000.log") == "ok"
    assert worker("write", "a", 4096) == "ok 4096"
    assert worker("fsync") == "ok"
    assert (backing / "00000000000000000000.log").read_bytes() == b"a" * 4096  # passed through

    write_mode(control, "EIO")
    assert worker("write", "b") == "err EIO"  # the very next call after the switch
    assert worker("fsync") == "err EIO"
    assert worker("fdatasync") == "err EIO"
    assert worker("ftruncate", 0) == "err EIO"
    assert worker("read") == "ok " + "a" * 4096  # reads keep working

    write_mode(control, "ok")
    assert worker("write", "c", 3) == "ok 3"
    assert worker("fsync") == "ok"
    assert worker("fdatasync") == "ok"
    assert (backing / "00000000000000000000.log").read_bytes() == b"a" * 4096 + b"ccc"


def test_error_mode_fails_every_change_to_the_disk_but_no_read(fuse_mount, worker):
    backing, mountpoint, control = fuse_mount
    (backing / "partition-0").mkdir()
    (backing / "partition-0" / "leader-epoch-checkpoint").write_text("0 1 0 0")
    d = mountpoint / "partition-0"

    write_mode(control, "EIO")
    assert worker("create", d / "00000000000000000100.log") == "err EIO"
    assert worker("rename", d / "leader-epoch-checkpoint", d / "renamed") == "err EIO"
    assert worker("truncate", d / "leader-epoch-checkpoint", 0) == "err EIO"
    assert worker("mkdir", mountpoint / "partition-1") == "err EIO"
    assert worker("unlink", d / "leader-epoch-checkpoint") == "err EIO"
    assert worker("list", d) == "ok leader-epoch-checkpoint"
    assert worker("stat", d / "leader-epoch-checkpoint") == "ok 7"
    assert worker("cat", d / "leader-epoch-checkpoint") == "ok 0 1 0 0"
    assert sorted(p.name for p in backing.rglob("*")) == ["leader-epoch-checkpoint", "partition-0"]

    write_mode(control, "ENOSPC")  # any errno: the same filesystem imitates a full disk too
    assert worker("create", d / "00000000000000000100.log") == "err ENOSPC"
    write_mode(control, "ok")
    assert worker("create", d / "00000000000000000100.log") == "ok"
    assert worker("rename", d / "leader-epoch-checkpoint", d / "renamed") == "ok"
    assert (backing / "partition-0" / "renamed").exists()


def test_a_process_in_another_network_namespace_sees_the_mount_and_its_faults(fuse_mount, tmp_path):
    """Brokers run under `ip netns exec`, which makes a new mount namespace: the FUSE mount, made
    before, is copied into it, and error mode reaches it; the lazy unmount still ends the daemon
    once that process is gone."""
    backing, mountpoint, control = fuse_mount
    namespace = f"fmdisk{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    worker = Worker(["ip", "netns", "exec", namespace])
    try:
        assert worker("open", mountpoint / "segment.log") == "ok"
        assert worker("write", "n", 10) == "ok 10"
        assert (backing / "segment.log").read_bytes() == b"n" * 10
        write_mode(control, "EIO")
        assert worker("write", "n") == "err EIO"
        assert worker("fsync") == "err EIO"
        write_mode(control, "ok")
        assert worker("write", "m") == "ok 1"
    finally:
        worker.close()
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def test_fill_makes_the_next_write_fail_with_enospc_and_unfill_frees_it(tmp_path: Path, worker):
    disk = BrokerDisk(tmp_path / "broker-1", tmp_path / "broker-1" / "data")
    pid = disk.set_up("8m")
    try:
        assert mount_type(disk.tmpfs) == "tmpfs" and mount_type(disk.log_dir) == "fuse"
        assert worker("append", disk.log_dir / "a.log", 1 << 20) == f"ok {1 << 20}"
        assert disk.describe() == "ok"

        written = disk.fill()
        assert 6 << 20 < written < 8 << 20  # the rest of the 8 MiB tmpfs
        assert disk.describe() == "full"
        assert worker("append", disk.log_dir / "b.log", 65536) == "err ENOSPC"  # through FUSE
        assert worker("create", disk.log_dir / "c.log") == "ok"  # inodes are not blocks
        with pytest.raises(OSError) as raised:  # straight on the tmpfs as well
            (disk.tmpfs / "direct").write_bytes(b"x" * 65536)
        assert raised.value.errno == errno.ENOSPC

        assert disk.unfill() == written
        assert disk.describe() == "ok"
        assert worker("append", disk.log_dir / "b.log", 65536) == "ok 65536"

        disk.set_mode("EIO")
        assert disk.describe() == "EIO"
        assert worker("append", disk.log_dir / "b.log", 1) == "err EIO"
        disk.set_mode("ok")
    finally:
        disk.tear_down(pid)
    assert mount_type(disk.tmpfs) is None and mount_type(disk.log_dir) is None


def test_tear_down_copies_the_data_back_and_set_up_restores_it(tmp_path: Path, worker):
    disk = BrokerDisk(tmp_path / "broker-2", tmp_path / "broker-2" / "data")
    (disk.log_dir / "t-0").mkdir(parents=True)
    (disk.log_dir / "t-0" / "old.log").write_bytes(b"before")
    pid = disk.set_up("4m")
    try:
        assert worker("cat", disk.log_dir / "t-0" / "old.log") == "ok before"  # restored onto the tmpfs
        assert worker("append", disk.log_dir / "t-0" / "new.log", 100) == "ok 100"
        disk.fill()
        assert disk.set_up("4m", pid) == pid  # idempotent: nothing remounted
    finally:
        disk.tear_down(pid)
    assert mount_type(disk.log_dir) is None and mount_type(disk.tmpfs) is None
    assert sorted(p.name for p in (disk.log_dir / "t-0").iterdir()) == ["new.log", "old.log"]
    assert not any(p.name.startswith(".floodmark") for p in disk.log_dir.rglob("*"))  # the filler stays out


def test_tear_down_ends_a_daemon_that_another_mount_namespace_pins(tmp_path: Path):
    disk = BrokerDisk(tmp_path / "broker-3", tmp_path / "broker-3" / "data")
    pid = disk.set_up("4m")
    holder = subprocess.Popen(  # a process in its own mount namespace holding a file open there
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c",
         f"f = open({str(disk.log_dir / 'held.log')!r}, 'ab'); import time; time.sleep(60)"],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not (disk.backing / "held.log").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = time.monotonic()
        disk.tear_down(pid, timeout=1.0)
        assert time.monotonic() - started < 10
        assert mount_type(disk.log_dir) is None and mount_type(disk.tmpfs) is None
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
