"""Faultable disks under a local cluster's brokers (docs/operations.md, "Disk faults").

What they exercise is Kafka's log-dir failure handling (KIP-112, ``LogDirFailureChannel``): an
I/O error in a log dir takes the dir offline, and a broker whose every log dir is offline halts.
``floodmark cluster up --disk-faults`` gives every broker a disk that can be made to fail, laid
out as::

    DIR/broker-<i>/disk/                   a tmpfs of --disk-size (64m): the broker's "disk"
    DIR/broker-<i>/disk/data/              the FUSE filesystem's backing dir (on that tmpfs)
    DIR/broker-<i>/disk/.floodmark-disk-filler    present while the disk is full
    DIR/broker-<i>/data/                   devcluster/faulty_fs.py mounted here: the broker's log.dirs
    DIR/broker-<i>/disk-mode               its control file: "ok" or "EIO"
    DIR/broker-<i>/faulty-fs.out           the FUSE daemon's log

One tmpfs per broker is the FUSE passthrough's backing store, and the FUSE mountpoint is the
log dir, so both faults hit the same files and the log dir keeps the path it has without
``--disk-faults``:

* **disk-full** (``fill``): write the filler file on the tmpfs until ENOSPC. Every page is
  then taken, so the broker's next write that needs a new page fails with ENOSPC (passed back
  through FUSE); a write that still fits in a file's last, partly used page succeeds, as on a
  real full disk. ``unfill`` deletes the filler.
* **disk-error** (``break``): switch the FUSE filesystem to error mode: every call that would
  change the disk (write, fsync, fdatasync, truncate, create, rename, mkdir, unlink, ...) fails
  with EIO; reads keep working. ``fix`` switches it back to pass through.

Neither fault restarts anything: the broker halts on its own (all its log dirs offline), and
the operator brings it back with ``floodmark cluster start ID`` after the heal, as Kafka's
operator restarts a broker after replacing the disk.

Mounts: both are made in the runner's mount namespace *before* the broker starts. A broker run
under ``ip netns exec`` (``--netns``) gets a new mount namespace holding a copy of every mount
that exists at that moment, so it sees both; a mount made after it started would not reach it.
That copy also pins the FUSE connection, so teardown (after the brokers stopped) detaches
lazily (``fusermount3 -u -z``, ``umount -l``) and kills the daemon if it does not exit. On
teardown the tmpfs's data is copied back into ``DIR/broker-<i>/data`` on the real disk, and set
up copies it into the new tmpfs, so ``cluster down`` / ``up`` keeps the data as it does without
disk faults. Root only (``mount``, ``/dev/fuse``), like the network namespaces.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster.faulty_fs import OK, read_mode, write_mode

DEFAULT_SIZE = "64m"
FILLER = ".floodmark-disk-filler"
ACTIONS = ("fill", "unfill", "break", "fix", "heal")
_SIZE = re.compile(r"^[1-9][0-9]*[kmg]?$", re.IGNORECASE)
_CHUNK = 1 << 20
_MOUNT_WAIT_S = 10.0


class DiskError(RuntimeError):
    """A disk fault that cannot be set up, injected or removed; the message says what to do."""


def unavailable_reason() -> str | None:
    """Why disk faults cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "disk faults need root: they mount a tmpfs and a FUSE filesystem under every broker"
    if not Path("/dev/fuse").exists():
        return "disk faults need /dev/fuse (FUSE), which this machine or container does not have"
    if shutil.which("fusermount3") is None:
        return "disk faults need fusermount3: install the Debian packages fuse3 and libfuse3-3 (`make setup`)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"disk faults need mfusepy over libfuse3 ({exc}): `make setup` installs both"
    return None


def check_available() -> None:
    reason = unavailable_reason()
    if reason:
        raise DiskError(reason)


def check_size(size: str) -> str:
    """A tmpfs size such as ``64m``, ``512k`` or ``1g``; anything else is a DiskError."""
    if not _SIZE.match(size.strip()):
        raise DiskError(f"disk size {size!r} is not a size such as 64m, 512k or 1g")
    return size.strip().lower()


def size_bytes(size: str) -> int:
    """The bytes of a size :func:`check_size` accepts (``64m`` -> 67108864)."""
    size = check_size(size)
    unit = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(size[-1], 1)
    return int(size.rstrip("kmg")) * unit


def mount_type(path: Path) -> str | None:
    """The filesystem type mounted at ``path`` in this mount namespace (``tmpfs``, ``fuse``), or None."""
    target = str(path.resolve())
    found = None
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == target:
                found = fields[fields.index("-") + 1]  # the last mount on a path is the visible one
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def _pid_is(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return marker in cmdline and state not in ("Z", "X")


def _tail(path: Path, lines: int = 10) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(no output)"
    except OSError:
        return "(no output)"


@dataclass(frozen=True)
class BrokerDisk:
    """The paths and operations of one broker's faultable disk (see the module docstring)."""

    home: Path  # DIR/broker-<i>
    log_dir: Path  # DIR/broker-<i>/data: the FUSE mountpoint and the broker's log.dirs

    @property
    def tmpfs(self) -> Path:
        return self.home / "disk"

    @property
    def backing(self) -> Path:
        return self.tmpfs / "data"

    @property
    def filler(self) -> Path:
        return self.tmpfs / FILLER

    @property
    def control(self) -> Path:
        return self.home / "disk-mode"

    @property
    def fs_out(self) -> Path:
        return self.home / "faulty-fs.out"

    # -- set-up and teardown -------------------------------------------------------------------
    def set_up(self, size: str, fs_pid: int | None = None) -> int:
        """Mount the tmpfs (copying the log dir's data in) and start the FUSE daemon over the log
        dir; idempotent: what is already mounted and served is kept. Returns the daemon's pid."""
        check_available()
        if self._served(fs_pid):
            return fs_pid
        if mount_type(self.log_dir) is not None:  # a FUSE mount whose daemon is gone
            _run(["fusermount3", "-u", "-z", str(self.log_dir)])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_mode(self.control, OK)
        if mount_type(self.tmpfs) != "tmpfs":
            self.tmpfs.mkdir(parents=True, exist_ok=True)
            done = _run(
                ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "floodmark-disk", str(self.tmpfs)]
            )
            if done.returncode != 0:
                raise DiskError(f"mount -t tmpfs on {self.tmpfs} failed: {done.stderr.strip()}")
            try:
                shutil.copytree(self.log_dir, self.backing, dirs_exist_ok=True)
            except (OSError, shutil.Error) as exc:
                _run(["umount", "-l", str(self.tmpfs)])  # not torn down: a partial copy must not be saved
                raise DiskError(
                    f"cannot copy {self.log_dir} onto its {size} tmpfs ({exc}): use a larger --disk-size"
                ) from None
        return self._start_daemon()

    def _start_daemon(self) -> int:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        argv = [sys.executable, "-m", "devcluster.faulty_fs", str(self.backing.resolve())]
        argv += [str(self.log_dir.resolve()), "--control", str(self.control.resolve())]
        with open(self.fs_out, "ab") as out:
            daemon = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + _MOUNT_WAIT_S
        while mount_type(self.log_dir) != "fuse":
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                daemon.wait()
                raise DiskError(
                    f"the FUSE filesystem did not mount on {self.log_dir}; last lines of {self.fs_out}:\n"
                    + _tail(self.fs_out)
                )
            time.sleep(0.02)
        return daemon.pid

    def _served(self, fs_pid: int | None) -> bool:
        return (
            mount_type(self.tmpfs) == "tmpfs"
            and mount_type(self.log_dir) == "fuse"
            and _pid_is(fs_pid, str(self.log_dir.resolve()))
        )

    def tear_down(self, fs_pid: int | None, timeout: float = 5.0) -> None:
        """Unmount the FUSE filesystem (lazily) and stop its daemon, copy the tmpfs's data back
        into the log dir on the real disk, unmount the tmpfs. Idempotent. Call it after the
        broker has stopped."""
        if mount_type(self.log_dir) is not None:
            _run(["fusermount3", "-u", "-z", str(self.log_dir)])
        deadline = time.monotonic() + timeout
        while _pid_is(fs_pid, str(self.log_dir.resolve())) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid_is(fs_pid, str(self.log_dir.resolve())):  # a copy of the mount elsewhere pins it
            os.kill(fs_pid, signal.SIGKILL)
        if mount_type(self.log_dir) is not None:
            _run(["umount", "-l", str(self.log_dir)])
        if mount_type(self.log_dir) is not None:
            raise DiskError(f"{self.log_dir} is still mounted: data left on the tmpfs {self.tmpfs}")
        if mount_type(self.tmpfs) == "tmpfs":
            self._save()
            if _run(["umount", str(self.tmpfs)]).returncode != 0:
                _run(["umount", "-l", str(self.tmpfs)])
        self.control.unlink(missing_ok=True)

    def _save(self) -> None:
        """The tmpfs's data replaces the log dir's (written aside first, then swapped in)."""
        if not self.backing.is_dir():
            return
        aside = self.log_dir.with_name(self.log_dir.name + ".saving")
        shutil.rmtree(aside, ignore_errors=True)
        shutil.copytree(self.backing, aside)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        os.replace(aside, self.log_dir)

    # -- faults --------------------------------------------------------------------------------
    def fill(self) -> int:
        """Write the filler until the tmpfs says ENOSPC; returns the bytes written."""
        self._require_mounted()
        written = 0
        chunk = b"\0" * _CHUNK
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                try:
                    written += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        return written
                    raise
        finally:
            os.close(fd)

    def unfill(self) -> int:
        """Delete the filler; returns the bytes it held."""
        self._require_mounted()
        try:
            size = self.filler.stat().st_size
        except FileNotFoundError:
            return 0
        self.filler.unlink()
        return size

    def set_mode(self, mode: str) -> None:
        """``EIO`` (or another errno name): fail every write; ``ok``: pass through."""
        self._require_mounted()
        write_mode(self.control, mode)

    def _require_mounted(self) -> None:
        if mount_type(self.tmpfs) != "tmpfs" or mount_type(self.log_dir) != "fuse":
            raise DiskError(
                f"{self.log_dir} is not on a faultable disk now (is the cluster running? `floodmark cluster up`)"
            )

    def describe(self) -> str:
        """``ok``, ``full``, ``EIO`` or ``full+EIO``; ``unmounted`` when the disk is not set up."""
        if mount_type(self.tmpfs) != "tmpfs":
            return "unmounted"
        faults = (["full"] if self.filler.exists() else []) + (
            [read_mode(self.control)] if read_mode(self.control) != OK else []
        )
        return "+".join(faults) or OK


@dataclass
class DiskState:
    """What the cluster's state file records of its disks: the tmpfs size and each FUSE daemon."""

    size: str = DEFAULT_SIZE
    fs_pids: dict[int, int | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "fs_pids": {str(i): pid for i, pid in self.fs_pids.items()}}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> DiskState | None:
        if not doc:
            return None
        return cls(doc["size"], {int(i): pid for i, pid in doc.get("fs_pids", {}).items()})

    def set_up(self, broker_id: int, disk: BrokerDisk) -> None:
        self.fs_pids[broker_id] = disk.set_up(self.size, self.fs_pids.get(broker_id))

    def tear_down(self, broker_id: int, disk: BrokerDisk) -> None:
        disk.tear_down(self.fs_pids.get(broker_id))
        self.fs_pids[broker_id] = None

    def apply(self, action: str, disk: BrokerDisk) -> str:
        """Carry out one of ACTIONS; returns what happened, for the operator."""
        if action == "fill":
            return f"disk full ({disk.fill() / 2**20:.1f} MiB filler written): writes now fail with ENOSPC"
        if action == "unfill":
            return f"disk no longer full ({disk.unfill() / 2**20:.1f} MiB filler removed)"
        if action == "break":
            disk.set_mode("EIO")
            return "disk failing: every write, fsync, truncate, create and rename now fails with EIO"
        if action == "fix":
            disk.set_mode(OK)
            return "disk fixed: writes pass through again"
        if action == "heal":
            freed = disk.unfill()
            disk.set_mode(OK)
            return f"disk healed ({freed / 2**20:.1f} MiB filler removed, writes pass through)"
        raise DiskError(f"unknown disk action {action!r}: one of {', '.join(ACTIONS)}")
