"""The local cluster runner (docs/operations.md "Local cluster layout"): one ZooKeeper and N broker
processes on loopback, each broker serving Prometheus ``/metrics`` and, beside its PLAINTEXT
listener (floodmark's msgpack protocol), a ``KAFKA`` listener (KIP-103) that speaks Kafka's binary
protocol for Kafka's own clients (``kafka_bootstrap_servers``). ``LocalCluster`` composes the
parts of ``devcluster``: the state file (``state``), starting processes and waiting for them
(``launch``), the status report (``report``), the broker processes (``processes``), the ZooKeeper
process (``zookeeper``), the network namespaces (``netns``) and the ports (``ports``).
``LocalCluster(DIR)`` owns a data directory laid out as::

    DIR/cluster.json                  the state file (ports, /metrics and KAFKA ports, pids, configs,
                                      the bootstrap strings)
    DIR/zookeeper/                    ZooKeeper's data and zookeeper.out
    DIR/broker-<i>/server.properties  Kafka property names (docs/operations.md)
    DIR/broker-<i>/data/              the broker's log.dirs (with ``up(disk_size=...)``, a FUSE
                                      filesystem over a tmpfs that can fill or fail: devcluster/disk.py)
    DIR/broker-<i>/broker.out         the broker's stdout and stderr

Faults are ``os.kill`` on a recorded pid. Health comes from ZooKeeper itself (docs/operations.md "ZooKeeper
paths"): a broker is registered when ``/brokers/ids/<id>`` exists, the controller is whoever ``/controller``
names. Users: the ``floodmark cluster`` commands (cli/), the chaos runner, tests, benchmarks.
"""

from __future__ import annotations

import logging
import os
import signal as signals
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devcluster import report
from devcluster.disk import BrokerDisk, DiskError, DiskState, check_available, check_size
from devcluster.errors import ClusterError
from devcluster.launch import POLL_S, Launcher, broker_disk
from devcluster.netns import netns_available
from devcluster.ports import HOST
from devcluster.processes import SIGNALS, Processes, broker_marker, default_broker_command, zookeeper_marker
from devcluster.state import STATE_FILE, BrokerState, ClusterState, new_state, read_state, write_state
from devcluster.zookeeper import out_of_sync, registered_ids, ruok, zk_session

log = logging.getLogger(__name__)


#: How long a restarted broker's ports may take to come free (devcluster/ports.py check_port_free).
PORT_RELEASE_WAIT_S = 5.0
#: How long `cluster kill N --signal TERM` waits for the controlled shutdown and the exit.
TERM_WAIT_S = 120.0


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
        self._procs = Processes()
        self._launcher = Launcher(self._procs, self._progress)
        self.state: ClusterState | None = read_state(self.state_file)

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
    def kafka_bootstrap_servers(self) -> str:
        """``bootstrap.servers`` for Kafka's clients (kcat, confluent-kafka): every broker's KAFKA
        listener. ClusterError for a cluster set up before the runner gave brokers one."""
        kafka = self._require_state().kafka_bootstrap
        if kafka is None:
            raise ClusterError(
                f"the cluster in {self.data_dir} was set up without KAFKA listeners: "
                "set up a new one (another --data-dir, or `cluster down` and remove this one)"
            )
        return kafka

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
        metrics_base_port: int | None = None,
        kafka_base_port: int | None = None,
    ) -> ClusterState:
        """Start ZooKeeper and brokers 1..N, wait until all are registered and a controller is elected.
        Broker i serves /metrics on ``metrics_base_port + i - 1``, by default a free block of loopback
        ports; a ``metrics.port`` in ``overrides`` is the user's and is kept (-1 turns /metrics off).
        Its KAFKA listener is on ``kafka_base_port + i - 1``, by default ``base_port + 100 + i - 1``
        (a free block when those are busy).
        With ``netns`` (root only) every broker runs in its own network namespace on a bridge, so
        ``isolate`` can cut it off the network (devcluster/netns.py). With ``disk_size`` (root only) every
        broker's log dir is a FUSE filesystem over a tmpfs of that size, so ``disk`` can fill it or make it
        fail (devcluster/disk.py); a stopped cluster can be given disks, or a new size, this way too.

        On a directory whose cluster already exists, the recorded ports and configs are reused and
        only what is not running is started; a fully running cluster is just reported.
        """
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        if disk_size is not None:
            check_available()
            disk_size = check_size(disk_size)
        state = self._reuse_or_create(
            brokers,
            zookeeper_port,
            base_port,
            dict(overrides or {}),
            metrics_base_port,
            kafka_base_port,
            netns,
            log_dirs_per_broker,
        )
        self._set_disk_size(state, disk_size)
        zk_up = self._zookeeper_alive(state)
        to_start = [b for b in state.brokers.values() if not self._broker_alive(b)]
        if zk_up and not to_start:
            self._progress(f"cluster in {self.data_dir} is already running")
            state.status = "running"
            self._save()
            return state
        self._launcher.check_ports(state, to_start, zookeeper=not zk_up)
        if state.layout is not None:
            state.layout.create(sorted(state.brokers))
        self._start_missing(state, zk_up, to_start, timeout)
        controller_id, epoch = self.controller()
        self._progress(f"controller: broker {controller_id} (epoch {epoch})")
        return state

    def _reuse_or_create(
        self,
        brokers: int,
        zookeeper_port: int,
        base_port: int,
        overrides: dict[str, str],
        metrics_base_port: int | None,
        kafka_base_port: int | None,
        netns: bool,
        log_dirs_per_broker: int,
    ) -> ClusterState:
        """The recorded state (with a note when other overrides or a metrics or KAFKA base port are
        asked for), or a new one from the arguments."""
        state = self.state
        if state is None:
            if netns and not netns_available():
                raise ClusterError("network namespaces need root and iproute2 (`ip`)")
            state = self._new_state(
                brokers,
                zookeeper_port,
                base_port,
                overrides,
                netns,
                log_dirs_per_broker,
                metrics_base_port,
                kafka_base_port,
            )
        elif len(state.brokers) != brokers:
            raise ClusterError(
                f"{self.data_dir} already holds a {len(state.brokers)}-broker cluster; "
                f"use another --data-dir for a {brokers}-broker one"
            )
        elif (overrides and overrides != state.overrides) or {metrics_base_port, kafka_base_port} != {None}:
            self._progress(
                f"note: {self.data_dir} keeps its recorded ports and configs; --config, "
                "--metrics-base-port and --kafka-base-port are ignored for an existing cluster"
            )
        self.state = state
        return state

    def _set_disk_size(self, state: ClusterState, disk_size: str | None) -> None:
        if disk_size is not None and state.disks is None:
            if any(self._broker_alive(b) for b in state.brokers.values()):
                raise ClusterError(f"the cluster in {self.data_dir} runs without disk faults: stop it first")
            state.disks = DiskState(disk_size)
        elif disk_size is not None and not any(map(self._broker_alive, state.brokers.values())):
            state.disks.size = disk_size  # unmounted while stopped: the next set-up mounts this size

    def _start_missing(
        self, state: ClusterState, zk_up: bool, to_start: list[BrokerState], timeout: float
    ) -> None:
        """Start ZooKeeper (unless ``zk_up``) and ``to_start``, then wait for every broker and a
        controller; on any failure, stop what this call started and re-raise."""
        started: list[int] = []
        zk_started = False
        try:
            if not zk_up:
                self._launcher.start_zookeeper(state)
                zk_started = True
            stale = self._launcher.registrations(state) if zk_up else {}
            for broker in to_start:
                self._launcher.spawn_broker(broker, state)
                started.append(broker.id)
            state.status = "running"
            self._save()
            self._progress(
                f"waiting for {len(state.brokers)} brokers to register and a controller to be elected"
            )
            stale = {i: owner for i, owner in stale.items() if i in {b.id for b in to_start}}
            self._launcher.wait_registered(
                state, sorted(state.brokers), timeout, need_controller=True, stale=stale
            )
        except BaseException:
            self._roll_back(state, started, zk_started)
            raise

    def _roll_back(self, state: ClusterState, started: list[int], zk_started: bool) -> None:
        self._progress("start-up failed: stopping what this run started")
        self._procs.terminate({state.brokers[i].pid: broker_marker(state.brokers[i]) for i in started}, 10)
        for i in started:
            state.brokers[i].pid = None
        self._tear_down_disks(state, [b.id for b in state.brokers.values() if not self._broker_alive(b)])
        if zk_started:
            self._procs.terminate({state.zookeeper.pid: zookeeper_marker(state.zookeeper)}, 10)
            state.zookeeper.pid = None
        if zk_started or not any(self._broker_alive(b) for b in state.brokers.values()):
            state.status = "stopped"
        self._save()

    def _new_state(
        self,
        brokers: int,
        zookeeper_port: int,
        base_port: int,
        overrides: dict[str, str],
        netns: bool = False,
        log_dirs_per_broker: int = 1,
        metrics_base_port: int | None = None,
        kafka_base_port: int | None = None,
    ) -> ClusterState:
        command = self._broker_command or default_broker_command()
        return new_state(
            self.data_dir,
            brokers,
            zookeeper_port,
            base_port,
            overrides,
            command,
            netns,
            log_dirs_per_broker,
            metrics_base_port,
            kafka_base_port,
        )

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
        """Per broker: process alive / paused, registered in ZooKeeper, controller, /metrics address;
        ZooKeeper health; the controller id and epoch. A plain dict, ready for ``json.dumps``."""
        return report.cluster_status(self._require_state(), self._launcher)

    def metrics_addresses(self) -> dict[int, str | None]:
        """Each broker's ``http://host:port/metrics``; None for a broker that serves none, or picks
        its own port (``--config metrics.port=0``: the broker logs it in its broker.out)."""
        state = self._require_state()
        return {i: state.metrics_address(i) for i in sorted(state.brokers)}

    def controller(self) -> tuple[int | None, int | None]:
        """(controller id, controller epoch) from ZooKeeper; (None, None) when ZooKeeper is down."""
        return report.controller(self._require_state())

    # -- down ----------------------------------------------------------------------------------
    def down(self, timeout: float = 30.0) -> None:
        """SIGINT every broker (a clean shutdown without the controlled-shutdown hand-over: with every
        broker stopping there is nowhere to move leadership, so asking would only wait out its
        retries), SIGKILL those still there after ``timeout``, then stop ZooKeeper. Data stays;
        the state file says "stopped". SIGTERM (``kill ID --signal TERM``) is the controlled one."""
        state = self._require_state()
        live = {b.pid: broker_marker(b) for b in state.brokers.values() if self._broker_alive(b)}
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
            self._procs.terminate({state.zookeeper.pid: zookeeper_marker(state.zookeeper)}, 10)
        state.zookeeper.pid = None
        if state.layout is not None:
            self._progress(f"removing the network namespaces of bridge {state.layout.bridge}")
            state.layout.destroy(sorted(state.brokers))
        state.status = "stopped"
        self._save()
        self._progress(f"cluster stopped; data kept in {self.data_dir}")

    # -- faults and restarts -------------------------------------------------------------------
    def kill(self, broker_id: int, signal: str = "KILL", term_wait_s: float = TERM_WAIT_S) -> int:
        """Send SIGKILL, SIGTERM, SIGSTOP or SIGCONT to a broker's recorded pid; returns that pid.
        After SIGKILL, waits (bounded) until the process is gone, so a status right after is true.
        After SIGTERM, waits (up to ``term_wait_s``) for its controlled shutdown to end and the
        process to exit, so a ``start`` right after starts it again instead of finding it still
        running (the README's tour met that: "already running", and the broker then exited)."""
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
        if name == "TERM" and term_wait_s > 0:
            started = time.monotonic()
            if not self._procs.wait_gone(broker.pid, term_wait_s):
                raise ClusterError(
                    f"broker {broker_id} (pid {broker.pid}) is still running {term_wait_s:g}s after SIGTERM; "
                    f"`floodmark cluster kill {broker_id}` (SIGKILL) stops it at once"
                )
            self._progress(
                f"broker {broker_id} exited after {time.monotonic() - started:.1f}s (controlled shutdown)"
            )
        return broker.pid

    def pause_zookeeper(self) -> int:
        """SIGSTOP the ZooKeeper server (the chaos fault ``zk-pause``); returns its pid."""
        return self._signal_zookeeper("STOP")

    def resume_zookeeper(self) -> int:
        """SIGCONT the ZooKeeper server (a no-op when it is not paused); returns its pid."""
        return self._signal_zookeeper("CONT")

    def _signal_zookeeper(self, name: str) -> int:
        zk = self._require_state().zookeeper
        if zk.pid is None or not self._procs.alive(zk.pid, zookeeper_marker(zk)):
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
        killed = self._procs.terminate({broker.pid: broker_marker(broker)}, timeout)
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
        """Fill, unfill, break, fix or heal a broker's disk (devcluster/disk.py ACTIONS); returns the line
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
        # a restart: the listeners of the broker's previous process may outlive it for a moment
        self._launcher.check_ports(state, [broker], zookeeper=False, wait_s=PORT_RELEASE_WAIT_S)
        stale = self._launcher.registrations(state)  # a SIGKILLed broker's lingers for a session
        self._launcher.spawn_broker(broker, state)
        self._save()
        self._launcher.wait_registered(state, [broker_id], timeout, need_controller=False, stale=stale)
        return broker.pid

    def wait_in_sync(self, broker_id: int, timeout: float = 120.0) -> None:
        """Wait (bounded) until the broker is in the ISR of every partition it is a replica of, as
        an operator waits for no under-replicated partitions before a preferred election (which
        refuses a preferred replica outside the ISR: PREFERRED_LEADER_NOT_AVAILABLE). Progress
        every 10 s; ClusterError naming what is still out of sync when time is up."""
        state = self._require_state()
        started = time.monotonic()
        report_at = started + 10.0
        with zk_session(state.zookeeper.port) as client:
            while missing := out_of_sync(client, broker_id):
                now = time.monotonic()
                if now - started >= timeout:
                    shown = ", ".join(missing[:5]) + (
                        f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                    )
                    raise ClusterError(
                        f"broker {broker_id} is still out of the ISR of {len(missing)} partition(s) "
                        f"after {timeout:g}s: {shown}"
                    )
                if now >= report_at:
                    self._progress(f"broker {broker_id}: {len(missing)} partition(s) still catching up")
                    report_at = now + 10.0
                time.sleep(POLL_S)
        self._progress(f"broker {broker_id} is in the ISR of all its partitions")

    def wait_registered(self, broker_id: int, registered: bool = True, timeout: float = 30.0) -> None:
        """Wait (bounded) until ``/brokers/ids/<id>`` exists (or, with registered=False, is gone,
        which after a crash takes the ZooKeeper session timeout)."""
        state = self._require_state()
        deadline = time.monotonic() + timeout
        with zk_session(state.zookeeper.port) as client:
            while (broker_id in registered_ids(client)) != registered:
                if time.monotonic() >= deadline:
                    verb = "register" if registered else "unregister"
                    raise ClusterError(f"broker {broker_id} did not {verb} in ZooKeeper within {timeout:g}s")
                time.sleep(POLL_S)

    # -- internals -----------------------------------------------------------------------------
    def _progress(self, message: str) -> None:
        log.info("%s", message)
        if self._progress_sink is not None:
            self._progress_sink(message)

    def _save(self) -> None:
        write_state(self.state_file, self._require_state())

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
        return self._launcher.broker_alive(broker)

    def _zookeeper_alive(self, state: ClusterState, check_ruok: bool = True) -> bool:
        return self._launcher.zookeeper_alive(state, check_ruok)

    def _disk(self, broker: BrokerState) -> BrokerDisk:
        return broker_disk(broker)

    def _tear_down_disks(self, state: ClusterState, broker_ids: list[int]) -> None:
        for broker_id in broker_ids if state.disks is not None else []:
            try:
                state.disks.tear_down(broker_id, self._disk(state.brokers[broker_id]))
            except (DiskError, OSError) as exc:  # the next broker's disk and ZooKeeper still stop
                self._progress(f"broker {broker_id}'s disk: {exc}")
