"""The local cluster runner: one ZooKeeper and N broker processes on loopback (SPEC 8, first bullet).

``LocalCluster(DIR)`` owns a data directory laid out as::

    DIR/cluster.json                  the state file (ports, pids, configs, bootstrap string)
    DIR/zookeeper/                    ZooKeeper's data and zookeeper.out
    DIR/broker-<i>/server.properties  Kafka property names (SPEC 2)
    DIR/broker-<i>/data/              the broker's log.dirs
    DIR/broker-<i>/broker.out         the broker's stdout and stderr

With ``up(disk_size=...)`` (``--disk-faults``) each broker's data dir is a FUSE filesystem over
a tmpfs of that size, so its disk can be filled or made to fail (chaos/disk.py).

Brokers run as ``<python> -m broker --config FILE`` in their own session, so a signal sent to
one (SIGKILL crash, SIGSTOP pause, SIGTERM controlled shutdown) reaches only that broker. The
state file records the pid of every start; faults are ``os.kill`` on that pid, after checking
from ``/proc/<pid>/cmdline`` that the pid still belongs to the process this runner started.
Health comes from ZooKeeper itself: a broker is registered when ``/brokers/ids/<id>`` exists,
and the controller is whoever ``/controller`` names (SPEC 3).

Only the operator's composition root (the ``floodmark cluster`` commands, tests, the chaos
runner) imports this module; client library code never imports ``chaos``.
"""

from __future__ import annotations

import json
import logging
import os
import signal as signals
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.disk import BrokerDisk, DiskError, DiskState, check_available, check_size
from chaos.netns import NetnsLayout, layout_for, netns_available
from chaos.zookeeper import ZooKeeperProcess, ZooKeeperUnavailable, pid_alive, ruok

log = logging.getLogger(__name__)

STATE_FILE = "cluster.json"
HOST = "127.0.0.1"
DEFAULT_SESSION_TIMEOUT_MS = "6000"  # ZooKeeperServerMain's tickTime is 3000 ms: 6000 is the minimum
#: Keys the runner owns: they differ per broker and are derived from the layout above.
RUNNER_KEYS = ("broker.id", "listeners", "log.dirs", "zookeeper.connect")
SIGNALS = {"KILL": signals.SIGKILL, "TERM": signals.SIGTERM, "STOP": signals.SIGSTOP, "CONT": signals.SIGCONT}
TAIL_LINES = 20
POLL_S = 0.2


class ClusterError(RuntimeError):
    """Anything the operator must act on: a dead broker, a timeout, a missing state file."""


class PortInUse(ClusterError):
    def __init__(self, port: int, owner: str) -> None:
        self.port = port
        super().__init__(f"port {port} on {HOST} (wanted for {owner}) is already in use")


# ---------------------------------------------------------------------------------------------
# The state file
# ---------------------------------------------------------------------------------------------


@dataclass
class ZooKeeperState:
    port: int
    data_dir: str
    pid: int | None = None


@dataclass
class BrokerState:
    id: int
    port: int
    config: str
    log_dir: str
    out: str
    pid: int | None = None
    started_at: float | None = None
    #: JBOD: log dirs after the first (``up(log_dirs_per_broker=N)``), on the real disk even
    #: with disk faults, so a failing first dir takes only that dir offline (KIP-112).
    extra_log_dirs: list[str] = field(default_factory=list)

    @property
    def log_dirs(self) -> list[str]:
        return [self.log_dir, *self.extra_log_dirs]


@dataclass
class ClusterState:
    """What ``DIR/cluster.json`` holds. ``status`` is "running" after up, "stopped" after down."""

    data_dir: str
    zookeeper: ZooKeeperState
    brokers: dict[int, BrokerState]
    broker_command: list[str]
    overrides: dict[str, str] = field(default_factory=dict)
    status: str = "running"
    #: Set when every broker runs in its own network namespace (chaos/netns.py), so network
    #: partitions can be injected; None for the plain loopback layout.
    netns_index: int | None = None
    #: Set when every broker's log dir sits on a faultable disk (chaos/disk.py); None otherwise.
    disks: DiskState | None = None

    @property
    def layout(self) -> NetnsLayout | None:
        return NetnsLayout(self.netns_index) if self.netns_index is not None else None

    def broker_host(self, broker_id: int) -> str:
        return self.layout.host(broker_id) if self.layout else HOST

    @property
    def zookeeper_host(self) -> str:
        """Where brokers reach ZooKeeper: loopback, or the bridge when they live in namespaces."""
        return self.layout.gateway if self.layout else HOST

    @property
    def bootstrap(self) -> str:
        return ",".join(
            f"{self.broker_host(b.id)}:{b.port}" for b in sorted(self.brokers.values(), key=lambda b: b.id)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "status": self.status,
            "data_dir": self.data_dir,
            "bootstrap": self.bootstrap,
            "zookeeper": asdict(self.zookeeper),
            "brokers": {
                str(i): {k: v for k, v in asdict(b).items() if k != "id"} for i, b in self.brokers.items()
            },
            "broker_command": self.broker_command,
            "overrides": self.overrides,
            "netns_index": self.netns_index,
            "disks": self.disks.to_json() if self.disks else None,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClusterState:
        return cls(
            data_dir=doc["data_dir"],
            zookeeper=ZooKeeperState(**doc["zookeeper"]),
            brokers={int(i): BrokerState(id=int(i), **b) for i, b in doc["brokers"].items()},
            broker_command=list(doc["broker_command"]),
            overrides=dict(doc.get("overrides", {})),
            status=doc.get("status", "running"),
            netns_index=doc.get("netns_index"),
            disks=DiskState.from_json(doc.get("disks")),
        )


def render_properties(
    broker_id: int,
    port: int,
    log_dir: Path | list[Path],
    zookeeper_port: int,
    overrides: Mapping[str, str],
    host: str = HOST,
    zookeeper_host: str = HOST,
) -> str:
    """A broker's server.properties: the runner's keys, a short session timeout, then the user's."""
    clash = sorted(set(overrides) & set(RUNNER_KEYS))
    if clash:
        raise ClusterError(
            f"--config {clash[0]} is set by the cluster runner per broker and cannot be overridden"
        )
    props = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{host}:{port}",
        "log.dirs": ",".join(str(d) for d in (log_dir if isinstance(log_dir, list) else [log_dir])),
        "zookeeper.connect": f"{zookeeper_host}:{zookeeper_port}",
        "zookeeper.session.timeout.ms": DEFAULT_SESSION_TIMEOUT_MS,
        **overrides,
    }
    lines = ["# written by floodmark's local cluster runner (chaos/local_cluster.py)"]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


def default_broker_command() -> list[str]:
    return [sys.executable, "-m", "broker"]


def check_port_free(port: int, owner: str) -> None:
    """Raise PortInUse when something listens on ``port`` (SO_REUSEADDR, as asyncio servers bind)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            raise PortInUse(port, owner) from None


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


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(no output)"


@dataclass
class _Processes:
    """The Popen handles of children this runner started in this process (so they are reaped)."""

    children: dict[int, subprocess.Popen] = field(default_factory=dict)

    def track(self, popen: subprocess.Popen) -> int:
        self.children[popen.pid] = popen
        return popen.pid

    def exit_code(self, pid: int) -> int | None:
        popen = self.children.get(pid)
        return popen.poll() if popen is not None else None

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


def _zookeeper_marker(zk: ZooKeeperState) -> str:
    return zk.data_dir


def _broker_marker(broker: BrokerState) -> str:
    return broker.config


# ---------------------------------------------------------------------------------------------
# ZooKeeper views
# ---------------------------------------------------------------------------------------------


@contextmanager
def _zk_session(port: int, timeout: float = 30.0) -> Iterator[Any]:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=f"{HOST}:{port}", timeout=timeout)
    try:
        client.start(timeout)
    except Exception as exc:  # kazoo raises its own timeout class
        client.close()
        raise ClusterError(f"cannot open a ZooKeeper session on {HOST}:{port}: {exc}") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _registered_ids(client: Any) -> set[int]:
    from kazoo.exceptions import NoNodeError

    try:
        return {int(child) for child in client.get_children("/brokers/ids") if child.isdigit()}
    except NoNodeError:
        return set()


def _controller(client: Any) -> tuple[int | None, int | None]:
    """(controller broker id, controller epoch) as ZooKeeper holds them; None where missing."""
    from kazoo.exceptions import NoNodeError

    controller_id = epoch = None
    with suppress(NoNodeError, ValueError, KeyError, TypeError):
        controller_id = int(json.loads(client.get("/controller")[0])["brokerid"])
    with suppress(NoNodeError, ValueError):
        epoch = int(client.get("/controller_epoch")[0])
    return controller_id, epoch


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------


class LocalCluster:
    """Start, inspect, fault and stop a local cluster whose state lives in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path | str,
        broker_command: Sequence[str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.state_file = self.data_dir / STATE_FILE
        self._broker_command = list(broker_command) if broker_command else None
        self._progress_sink = progress
        self._procs = _Processes()
        self.state: ClusterState | None = self._read_state()

    @classmethod
    def load(cls, data_dir: Path | str, progress: Callable[[str], None] | None = None) -> LocalCluster:
        cluster = cls(data_dir, progress=progress)
        if cluster.state is None:
            raise ClusterError(
                f"no cluster in {cluster.data_dir} (no {STATE_FILE}): run `floodmark cluster up`"
            )
        return cluster

    @property
    def bootstrap_servers(self) -> str:
        return self._require_state().bootstrap

    @property
    def zookeeper_connect(self) -> str:
        """The brokers' ``zookeeper.connect``: ``127.0.0.1:<port>`` of this cluster's ZooKeeper."""
        return f"{HOST}:{self._require_state().zookeeper.port}"

    # -- up ------------------------------------------------------------------------------------
    def up(
        self,
        brokers: int,
        zookeeper_port: int = 2181,
        base_port: int = 9092,
        overrides: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        netns: bool = False,
        disk_size: str | None = None,
        log_dirs_per_broker: int = 1,
    ) -> ClusterState:
        """Start ZooKeeper and brokers 1..N, wait until all are registered and a controller is elected.
        With ``netns`` (root only) every broker runs in its own network namespace on a bridge, so
        ``isolate`` can cut it off the network (chaos/netns.py). With ``disk_size`` (root only) every
        broker's log dir is a FUSE filesystem over a tmpfs of that size, so ``disk`` can fill it or
        make it fail (chaos/disk.py); a stopped cluster can be given disks this way too.

        On a directory whose cluster already exists, the recorded ports and configs are reused and
        only what is not running is started; a fully running cluster is just reported.
        """
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        if disk_size is not None:
            check_available()
            disk_size = check_size(disk_size)
        state = self.state
        if state is None:
            if netns and not netns_available():
                raise ClusterError("network namespaces need root and iproute2 (`ip`)")
            state = self._new_state(
                brokers, zookeeper_port, base_port, dict(overrides or {}), netns, log_dirs_per_broker
            )
        elif len(state.brokers) != brokers:
            raise ClusterError(
                f"{self.data_dir} already holds a {len(state.brokers)}-broker cluster; "
                f"use another --data-dir for a {brokers}-broker one"
            )
        elif overrides and dict(overrides) != state.overrides:
            self._progress(
                f"note: {self.data_dir} keeps its recorded configs; --config is ignored for an existing cluster"
            )
        self.state = state
        if disk_size is not None and state.disks is None:
            if any(self._broker_alive(b) for b in state.brokers.values()):
                raise ClusterError(f"the cluster in {self.data_dir} runs without disk faults: stop it first")
            state.disks = DiskState(disk_size)

        zk_up = self._zookeeper_alive(state)
        to_start = [b for b in state.brokers.values() if not self._broker_alive(b)]
        if zk_up and not to_start:
            self._progress(f"cluster in {self.data_dir} is already running")
            state.status = "running"
            self._save()
            return state

        if not zk_up:
            check_port_free(state.zookeeper.port, "ZooKeeper")
        if state.layout is not None:
            state.layout.create(sorted(state.brokers))
        else:
            for broker in to_start:
                check_port_free(broker.port, f"broker {broker.id}")

        started: list[int] = []
        zk_started = False
        try:
            if not zk_up:
                self._start_zookeeper(state)
                zk_started = True
            for broker in to_start:
                self._spawn_broker(broker, state)
                started.append(broker.id)
            state.status = "running"
            self._save()
            self._progress(
                f"waiting for {len(state.brokers)} brokers to register and a controller to be elected"
            )
            self._wait_registered(sorted(state.brokers), timeout, need_controller=True)
        except BaseException:
            self._progress("start-up failed: stopping what this run started")
            self._procs.terminate(
                {state.brokers[i].pid: _broker_marker(state.brokers[i]) for i in started}, 10
            )
            for i in started:
                state.brokers[i].pid = None
            self._tear_down_disks(state, [b.id for b in state.brokers.values() if not self._broker_alive(b)])
            if zk_started:
                self._procs.terminate({state.zookeeper.pid: _zookeeper_marker(state.zookeeper)}, 10)
                state.zookeeper.pid = None
            if zk_started or not any(self._broker_alive(b) for b in state.brokers.values()):
                state.status = "stopped"
            self._save()
            raise
        controller_id, epoch = self.controller()
        self._progress(f"controller: broker {controller_id} (epoch {epoch})")
        return state

    def _new_state(
        self,
        brokers: int,
        zookeeper_port: int,
        base_port: int,
        overrides: dict[str, str],
        netns: bool = False,
        log_dirs_per_broker: int = 1,
    ) -> ClusterState:
        if log_dirs_per_broker < 1:
            raise ClusterError("a broker needs at least one log dir")
        ports = [base_port + i for i in range(brokers)]
        if zookeeper_port in ports:
            raise ClusterError(
                f"ZooKeeper port {zookeeper_port} collides with the broker ports {ports[0]}-{ports[-1]}"
            )
        if ports[-1] > 65535:
            raise ClusterError(f"broker ports {ports[0]}-{ports[-1]} run past 65535")
        zk = ZooKeeperState(port=zookeeper_port, data_dir=str(self.data_dir / "zookeeper"))
        state = ClusterState(
            data_dir=str(self.data_dir),
            zookeeper=zk,
            brokers={},
            broker_command=self._broker_command or default_broker_command(),
            overrides=overrides,
            status="stopped",
            netns_index=layout_for(zookeeper_port).index if netns else None,
        )
        for broker_id, port in enumerate(ports, start=1):
            home = self.data_dir / f"broker-{broker_id}"
            state.brokers[broker_id] = BrokerState(
                id=broker_id,
                port=port,
                config=str(home / "server.properties"),
                log_dir=str(home / "data"),
                out=str(home / "broker.out"),
                extra_log_dirs=[str(home / f"data-{k}") for k in range(2, log_dirs_per_broker + 1)],
            )
        # Validate every config before anything starts, then write them.
        texts = {
            b.id: render_properties(
                b.id,
                b.port,
                [Path(d) for d in b.log_dirs],
                zookeeper_port,
                overrides,
                state.broker_host(b.id),
                state.zookeeper_host,
            )
            for b in state.brokers.values()
        }
        for broker in state.brokers.values():
            for d in broker.log_dirs:
                Path(d).mkdir(parents=True, exist_ok=True)
            Path(broker.config).write_text(texts[broker.id])
        return state

    # -- status --------------------------------------------------------------------------------
    def running(self) -> bool:
        """True when the state file says running and ZooKeeper and every broker process are up."""
        state = self.state
        return (
            state is not None
            and state.status == "running"
            and self._zookeeper_alive(state)
            and all(self._broker_alive(b) for b in state.brokers.values())
        )

    def status(self) -> dict[str, Any]:
        """Per broker: process alive / paused, registered in ZooKeeper, controller; ZooKeeper health;
        the controller id and epoch. A plain dict, ready for ``json.dumps``."""
        state = self._require_state()
        zk = state.zookeeper
        zk_ok = ruok(HOST, zk.port)
        registered: set[int] = set()
        controller_id = epoch = None
        if zk_ok:
            with _zk_session(zk.port) as client:
                registered = _registered_ids(client)
                controller_id, epoch = _controller(client)
        brokers = []
        for broker in sorted(state.brokers.values(), key=lambda b: b.id):
            alive = self._broker_alive(broker)
            brokers.append(
                {
                    "id": broker.id,
                    "port": broker.port,
                    "pid": broker.pid,
                    "alive": alive,
                    "paused": alive and self._procs.paused(broker.pid),
                    "registered": broker.id in registered,
                    "controller": broker.id == controller_id,
                    "config": broker.config,
                    "log_dir": broker.log_dir,
                    "disk": self._disk(broker).describe() if state.disks else None,
                }
            )
        return {
            "data_dir": state.data_dir,
            "status": state.status,
            "bootstrap": state.bootstrap,
            "zookeeper": {
                "port": zk.port,
                "pid": zk.pid,
                "alive": self._zookeeper_alive(state, check_ruok=False),
                "ok": zk_ok,
                "data_dir": zk.data_dir,
            },
            "controller": {"id": controller_id, "epoch": epoch},
            "brokers": brokers,
        }

    def controller(self) -> tuple[int | None, int | None]:
        """(controller id, controller epoch) from ZooKeeper; (None, None) when ZooKeeper is down."""
        state = self._require_state()
        if not ruok(HOST, state.zookeeper.port):
            return None, None
        with _zk_session(state.zookeeper.port) as client:
            return _controller(client)

    # -- down ----------------------------------------------------------------------------------
    def down(self, timeout: float = 30.0) -> None:
        """SIGINT every broker (a clean shutdown without the controlled-shutdown hand-over: with every
        broker stopping there is nowhere to move leadership, so asking would only wait out its
        retries), SIGKILL those still there after ``timeout``, then stop ZooKeeper. Data stays;
        the state file says "stopped". SIGTERM (``kill ID --signal TERM``) is the controlled one."""
        state = self._require_state()
        live = {b.pid: _broker_marker(b) for b in state.brokers.values() if self._broker_alive(b)}
        if live:
            self._progress(f"stopping {len(live)} broker(s) with SIGINT (up to {timeout:g}s)")
        for pid in self._procs.terminate(live, timeout, signals.SIGINT):
            broker_id = next(b.id for b in state.brokers.values() if b.pid == pid)
            self._progress(f"broker {broker_id} (pid {pid}) ignored SIGINT for {timeout:g}s: sent SIGKILL")
        for broker in state.brokers.values():
            broker.pid = None
        if state.disks is not None:
            self._progress("unmounting the brokers' disks (their data is copied back to broker-<i>/data)")
            self._tear_down_disks(state, sorted(state.brokers))
        if self._zookeeper_alive(state, check_ruok=False):
            self._progress(f"stopping ZooKeeper (pid {state.zookeeper.pid})")
            self._procs.terminate({state.zookeeper.pid: _zookeeper_marker(state.zookeeper)}, 10)
        state.zookeeper.pid = None
        if state.layout is not None:
            self._progress(f"removing the network namespaces of bridge {state.layout.bridge}")
            state.layout.destroy(sorted(state.brokers))
        state.status = "stopped"
        self._save()
        self._progress(f"cluster stopped; data kept in {self.data_dir}")

    # -- faults and restarts -------------------------------------------------------------------
    def kill(self, broker_id: int, signal: str = "KILL") -> int:
        """Send SIGKILL, SIGTERM, SIGSTOP or SIGCONT to a broker's recorded pid; returns that pid.
        After SIGKILL, waits (bounded) until the process is gone, so a status right after is true."""
        name = signal.upper().removeprefix("SIG")
        if name not in SIGNALS:
            raise ClusterError(f"unknown signal {signal!r}: use one of {', '.join(SIGNALS)}")
        broker = self._broker(broker_id)
        if not self._broker_alive(broker):
            raise ClusterError(f"broker {broker_id} is not running")
        os.kill(broker.pid, SIGNALS[name])
        self._progress(f"sent SIG{name} to broker {broker_id} (pid {broker.pid})")
        if name == "KILL" and not self._procs.wait_gone(broker.pid, 10):
            raise ClusterError(f"broker {broker_id} (pid {broker.pid}) still exists 10s after SIGKILL")
        return broker.pid

    def pause_zookeeper(self) -> int:
        """SIGSTOP the ZooKeeper server (the chaos fault ``zk-pause``); returns its pid."""
        return self._signal_zookeeper("STOP")

    def resume_zookeeper(self) -> int:
        """SIGCONT the ZooKeeper server (a no-op when it is not paused); returns its pid."""
        return self._signal_zookeeper("CONT")

    def _signal_zookeeper(self, name: str) -> int:
        zk = self._require_state().zookeeper
        if zk.pid is None or not self._procs.alive(zk.pid, _zookeeper_marker(zk)):
            raise ClusterError(f"ZooKeeper (pid {zk.pid}) is not running")
        os.kill(zk.pid, SIGNALS[name])
        self._progress(f"sent SIG{name} to ZooKeeper (pid {zk.pid})")
        return zk.pid

    def stop(self, broker_id: int, timeout: float = 60.0) -> bool:
        """SIGTERM one broker (a controlled shutdown: its leaderships move away first) and wait,
        bounded, until it has exited; SIGKILL it after ``timeout``. True when it exited by itself."""
        broker = self._broker(broker_id)
        if not self._broker_alive(broker):
            raise ClusterError(f"broker {broker_id} is not running")
        self._progress(f"stopping broker {broker_id} (pid {broker.pid}) with SIGTERM")
        killed = self._procs.terminate({broker.pid: _broker_marker(broker)}, timeout)
        return not killed

    def isolate(self, broker_id: int, cut: bool = True) -> None:
        """Cut a broker off the network (its namespace's link down), or reconnect it (cut=False)."""
        state = self._require_state()
        self._broker(broker_id)
        if state.layout is None:
            raise ClusterError("this cluster was not started with --netns: it cannot be partitioned")
        state.layout.isolate(broker_id, cut)
        self._progress(
            f"{'isolated' if cut else 'reconnected'} broker {broker_id} ({state.broker_host(broker_id)})"
        )

    def disk(self, broker_id: int, action: str, restart_hint: bool = True) -> str:
        """Fill, unfill, break, fix or heal a broker's disk (chaos/disk.py ACTIONS); returns the line
        it reported. Nothing is restarted: a broker whose log dir failed has halted by itself."""
        state = self._require_state()
        broker = self._broker(broker_id)
        if state.disks is None:
            raise ClusterError("this cluster was not started with --disk-faults: its disks cannot fail")
        message = f"broker {broker_id}: {state.disks.apply(action, self._disk(broker))}"
        if restart_hint and action in ("unfill", "fix", "heal") and not self._broker_alive(broker):
            message += f"; the broker is not running: `floodmark cluster start {broker_id}` brings it back"
        self._progress(message)
        return message

    def start(self, broker_id: int, timeout: float = 60.0) -> int:
        """Restart a stopped or killed broker with its config and data; waits until it is registered.
        Returns its pid (the running one when it was already up)."""
        state = self._require_state()
        broker = self._broker(broker_id)
        if self._broker_alive(broker):
            self._progress(f"broker {broker_id} is already running (pid {broker.pid})")
            return broker.pid
        if not ruok(HOST, state.zookeeper.port):
            raise ClusterError(
                f"ZooKeeper on port {state.zookeeper.port} is not running: start the cluster with `floodmark cluster up`"
            )
        if state.layout is None:
            check_port_free(broker.port, f"broker {broker_id}")
        self._spawn_broker(broker, state)
        self._save()
        self._wait_registered([broker_id], timeout, need_controller=False)
        return broker.pid

    def wait_registered(self, broker_id: int, registered: bool = True, timeout: float = 30.0) -> None:
        """Wait (bounded) until ``/brokers/ids/<id>`` exists (or, with registered=False, is gone,
        which after a crash takes the ZooKeeper session timeout)."""
        state = self._require_state()
        deadline = time.monotonic() + timeout
        with _zk_session(state.zookeeper.port) as client:
            while (broker_id in _registered_ids(client)) != registered:
                if time.monotonic() >= deadline:
                    verb = "register" if registered else "unregister"
                    raise ClusterError(f"broker {broker_id} did not {verb} in ZooKeeper within {timeout:g}s")
                time.sleep(POLL_S)

    # -- internals -----------------------------------------------------------------------------
    def _progress(self, message: str) -> None:
        log.info("%s", message)
        if self._progress_sink is not None:
            self._progress_sink(message)

    def _read_state(self) -> ClusterState | None:
        try:
            doc = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {self.state_file}: {exc}") from None
        try:
            return ClusterState.from_json(doc)
        except (KeyError, TypeError) as exc:
            raise ClusterError(f"{self.state_file} is not a floodmark cluster state file ({exc})") from None

    def _save(self) -> None:
        state = self._require_state()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    def _require_state(self) -> ClusterState:
        if self.state is None:
            raise ClusterError(f"no cluster in {self.data_dir} (no {STATE_FILE}): run `floodmark cluster up`")
        return self.state

    def _broker(self, broker_id: int) -> BrokerState:
        state = self._require_state()
        if broker_id not in state.brokers:
            known = ",".join(str(i) for i in sorted(state.brokers))
            raise ClusterError(f"no broker {broker_id} in the cluster at {self.data_dir} (brokers: {known})")
        return state.brokers[broker_id]

    def _broker_alive(self, broker: BrokerState) -> bool:
        return self._procs.alive(broker.pid, _broker_marker(broker))

    def _zookeeper_alive(self, state: ClusterState, check_ruok: bool = True) -> bool:
        alive = self._procs.alive(state.zookeeper.pid, _zookeeper_marker(state.zookeeper))
        return alive and (not check_ruok or ruok(HOST, state.zookeeper.port))

    def _start_zookeeper(self, state: ClusterState) -> None:
        zk = state.zookeeper
        self._progress(f"starting ZooKeeper on {HOST}:{zk.port} (data in {zk.data_dir})")
        server = ZooKeeperProcess(zk.port, Path(zk.data_dir))
        try:
            server.start()
        except ZooKeeperUnavailable as exc:
            raise ClusterError(
                f"{exc}; last lines of {zk.data_dir}/zookeeper.out:\n{_tail(Path(zk.data_dir) / 'zookeeper.out')}"
            ) from None
        zk.pid = self._procs.track(server.process)

    def _disk(self, broker: BrokerState) -> BrokerDisk:
        return BrokerDisk(Path(broker.out).parent, Path(broker.log_dir))

    def _tear_down_disks(self, state: ClusterState, broker_ids: list[int]) -> None:
        for broker_id in broker_ids if state.disks is not None else []:
            try:
                state.disks.tear_down(broker_id, self._disk(state.brokers[broker_id]))
            except DiskError as exc:
                self._progress(f"broker {broker_id}'s disk: {exc}")

    def _spawn_broker(self, broker: BrokerState, state: ClusterState) -> None:
        if state.disks is not None:  # mounted before the broker starts, so its namespace sees them
            state.disks.set_up(broker.id, self._disk(broker))
            self._progress(
                f"broker {broker.id}'s log dir is a FUSE filesystem over a {state.disks.size} tmpfs"
            )
        host = state.broker_host(broker.id)
        self._progress(f"starting broker {broker.id} on {host}:{broker.port} (log in {broker.out})")
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        out_path = Path(broker.out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with open(out_path, "ab") as out:
            out.write(
                f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} floodmark cluster: starting broker {broker.id}\n".encode()
            )
            out.flush()
            prefix = state.layout.exec_prefix(broker.id) if state.layout is not None else []
            popen = subprocess.Popen(
                [*prefix, *state.broker_command, "--config", broker.config],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=out_path.parent,
                env=env,
                start_new_session=True,
            )
        broker.pid = self._procs.track(popen)
        broker.started_at = time.time()

    def _wait_registered(self, broker_ids: list[int], timeout: float, need_controller: bool) -> None:
        state = self._require_state()
        deadline = time.monotonic() + timeout
        from kazoo.exceptions import KazooException

        with _zk_session(state.zookeeper.port) as client:
            while True:
                for broker_id in broker_ids:
                    self._check_not_dead(state.brokers[broker_id])
                try:
                    registered = _registered_ids(client)
                    controller_id, _ = _controller(client) if need_controller else (0, None)
                except KazooException:
                    registered, controller_id = set(), None
                missing = [i for i in broker_ids if i not in registered]
                if not missing and controller_id is not None:
                    for broker_id in broker_ids:
                        self._progress(f"broker {broker_id} registered (pid {state.brokers[broker_id].pid})")
                    return
                if time.monotonic() >= deadline:
                    if missing:
                        broker = state.brokers[missing[0]]
                        raise ClusterError(
                            f"broker {broker.id} did not register in ZooKeeper within {timeout:g}s "
                            f"(process {broker.pid} still running); last lines of {broker.out}:\n{_tail(Path(broker.out))}"
                        )
                    raise ClusterError(
                        f"no controller was elected within {timeout:g}s (/controller is missing)"
                    )
                time.sleep(POLL_S)

    def _check_not_dead(self, broker: BrokerState) -> None:
        if self._broker_alive(broker):
            return
        code = self._procs.exit_code(broker.pid) if broker.pid else None
        how = f"exited with code {code}" if code is not None else "is not running"
        raise ClusterError(
            f"broker {broker.id} {how} before registering in ZooKeeper; last lines of {broker.out}:\n{_tail(Path(broker.out))}"
        )
