"""Process supervision for the local runner: starting broker processes, telling whether a
recorded pid is still the process the runner started, signalling and reaping them.

Brokers run as ``<python> -m broker --config FILE`` in their own session, so a signal sent to
one (SIGKILL crash, SIGSTOP pause, SIGTERM controlled shutdown) reaches only that broker. The
state file records the pid of every start; before signalling a pid the runner checks from
``/proc/<pid>/cmdline`` that it still carries the marker of the process it started (a broker's
config path, ZooKeeper's data dir), so a recycled pid is never hit.
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from devcluster.state import BrokerState, ZooKeeperState
from devcluster.zookeeper import pid_alive

SIGNALS = {"KILL": signals.SIGKILL, "TERM": signals.SIGTERM, "STOP": signals.SIGSTOP, "CONT": signals.SIGCONT}
TAIL_LINES = 20
#: The repository root, put on a child's PYTHONPATH so ``-m broker`` finds this checkout.
ROOT = Path(__file__).resolve().parent.parent


def default_broker_command() -> list[str]:
    return [sys.executable, "-m", "broker"]


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat (R, S, T, Z, ...); None when there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    last = text.splitlines()[-lines:]
    return "\n".join(last) if last else "(no output)"


@dataclass
class Processes:
    """The Popen handles of children this runner started in this process (so they are reaped)."""

    children: dict[int, subprocess.Popen] = field(default_factory=dict)

    def track(self, popen: subprocess.Popen) -> int:
        self.children[popen.pid] = popen
        return popen.pid

    def exit_code(self, pid: int, wait_s: float = 0.0) -> int | None:
        """Our child's exit code, waiting up to ``wait_s`` for one that is still exiting (its
        command line already gone, not yet reaped); None for a pid that is not our child."""
        popen = self.children.get(pid)
        if popen is None:
            return None
        try:
            return popen.wait(timeout=wait_s) if wait_s > 0 else popen.poll()
        except subprocess.TimeoutExpired:
            return None

    def running_child(self, pid: int) -> bool | None:
        """Whether our child ``pid`` has not exited yet (its wait status is the whole truth, even
        while it execs); None for a pid that is not our child."""
        popen = self.children.get(pid)
        return None if popen is None else popen.poll() is None

    def exists(self, pid: int) -> bool:
        """True until ``pid`` has fully exited (reaping it when it is our child); a zombie does not count."""
        popen = self.children.get(pid)
        if popen is not None:
            if popen.poll() is not None:
                return False
        else:
            with suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    return False
        state = _proc_state(pid)
        if state is None:
            return pid_alive(pid) if not Path("/proc").is_dir() else False
        return state not in ("Z", "X")

    def alive(self, pid: int | None, marker: str) -> bool:
        """True while ``pid`` runs (or is paused) and its command line still contains ``marker``,
        i.e. it is still the process the runner started (an exiting process no longer is)."""
        return pid is not None and self.exists(pid) and marker in _cmdline(pid)

    def paused(self, pid: int | None) -> bool:
        return pid is not None and _proc_state(pid) in ("T", "t")

    def wait_gone(self, pid: int, timeout: float) -> bool:
        """Wait (bounded) until a pid we signalled has fully exited."""
        deadline = time.monotonic() + timeout
        while self.exists(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def terminate(
        self, pids: Mapping[int, str], timeout: float, signal: signals.Signals = signals.SIGTERM
    ) -> list[int]:
        """Send ``signal`` (then SIGCONT, so a paused process can act on it) to every pid, wait up to
        ``timeout`` for all of them together, SIGKILL the stragglers. Returns the pids that had to be
        killed."""
        live = [pid for pid, marker in pids.items() if self.alive(pid, marker)]
        for pid in live:
            with suppress(ProcessLookupError):
                os.kill(pid, signal)
                os.kill(pid, signals.SIGCONT)
        deadline = time.monotonic() + timeout
        while any(self.exists(pid) for pid in live) and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = [pid for pid in live if self.exists(pid)]
        for pid in killed:
            with suppress(ProcessLookupError):
                os.kill(pid, signals.SIGKILL)
        for pid in killed:
            self.wait_gone(pid, 10)
        return killed


def zookeeper_marker(zk: ZooKeeperState) -> str:
    return zk.data_dir


def broker_marker(broker: BrokerState) -> str:
    return broker.config


def launch_broker(argv: Sequence[str], out_path: Path, banner: str) -> subprocess.Popen:
    """Start one broker process in its own session (stdout and stderr appended to ``out_path``
    after a ``banner`` line), with this checkout on its PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {banner}\n".encode())
        out.flush()
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=out_path.parent,
            env=env,
            start_new_session=True,
        )
