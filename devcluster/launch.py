"""Starting the local cluster's processes and waiting for them (docs/operations.md "Local cluster
layout"): the ports a start needs are free, ZooKeeper answers ``ruok``, each broker is spawned
(``python -m broker --config server.properties``, in its network namespace and on its faultable
disk when the cluster has them), and the start is over when ZooKeeper shows every broker
registered (``/brokers/ids/<id>``) and, for a whole cluster, a controller (``/controller``), as a
Kafka operator would check. ``LocalCluster`` (devcluster/cluster.py) drives a ``Launcher``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from pathlib import Path

from devcluster.disk import BrokerDisk
from devcluster.errors import ClusterError
from devcluster.ports import HOST, check_port_free
from devcluster.processes import Processes, broker_marker, launch_broker, tail, zookeeper_marker
from devcluster.state import BrokerState, ClusterState
from devcluster.zookeeper import (
    ZooKeeperProcess,
    ZooKeeperUnavailable,
    controller_of,
    registration_owners,
    ruok,
    zk_session,
)

POLL_S = 0.2
#: How often a broker still starting is reported while the runner waits for it.
STILL_STARTING_EVERY_S = 10.0
#: The start-up bound's allowance for loading logs: per partition directory and per MiB on disk
#: (recovery reads an unflushed tail at disk speed, index rebuilds included: generous on purpose).
LOAD_S_PER_PARTITION = 0.02
LOAD_S_PER_MIB = 0.01


def broker_disk(broker: BrokerState) -> BrokerDisk:
    """The faultable disk under a broker's first log dir (devcluster/disk.py)."""
    return BrokerDisk(Path(broker.out).parent, Path(broker.log_dir))


class Launcher:
    """Liveness of the recorded processes, and starting them: ZooKeeper, then brokers."""

    def __init__(self, procs: Processes, progress: Callable[[str], None]) -> None:
        self.procs = procs
        self._progress = progress

    def broker_alive(self, broker: BrokerState) -> bool:
        return self.procs.alive(broker.pid, broker_marker(broker))

    def zookeeper_alive(self, state: ClusterState, check_ruok: bool = True) -> bool:
        alive = self.procs.alive(state.zookeeper.pid, zookeeper_marker(state.zookeeper))
        return alive and (not check_ruok or ruok(HOST, state.zookeeper.port))

    def check_ports(
        self, state: ClusterState, brokers: Iterable[BrokerState], zookeeper: bool, wait_s: float = 0.0
    ) -> None:
        """PortInUse unless ZooKeeper's port (``zookeeper``) and each broker's listeners' (PLAINTEXT
        and KAFKA) and /metrics ports are free on loopback; brokers in network namespaces have ports
        of their own. Each may take ``wait_s`` to come free (a restart: its old process just died)."""
        if zookeeper:
            check_port_free(state.zookeeper.port, "ZooKeeper", wait_s)
        if state.layout is not None:
            return
        for broker in brokers:
            check_port_free(broker.port, f"broker {broker.id}", wait_s)
            if broker.kafka_port:
                check_port_free(broker.kafka_port, f"broker {broker.id}'s KAFKA listener", wait_s)
            if broker.metrics_port:
                check_port_free(broker.metrics_port, f"broker {broker.id}'s /metrics", wait_s)

    def start_zookeeper(self, state: ClusterState) -> None:
        zk = state.zookeeper
        self._progress(f"starting ZooKeeper on {HOST}:{zk.port} (data in {zk.data_dir})")
        server = ZooKeeperProcess(zk.port, Path(zk.data_dir))
        try:
            server.start()
        except ZooKeeperUnavailable as exc:
            raise ClusterError(
                f"{exc}; last lines of {zk.data_dir}/zookeeper.out:\n{tail(Path(zk.data_dir) / 'zookeeper.out')}"
            ) from None
        zk.pid = self.procs.track(server.process)

    def spawn_broker(self, broker: BrokerState, state: ClusterState) -> None:
        if state.disks is not None:  # mounted before the broker starts, so its namespace sees them
            state.disks.set_up(broker.id, broker_disk(broker))
            self._progress(
                f"broker {broker.id}'s log dir is a FUSE filesystem over a {state.disks.size} tmpfs"
            )
        host = state.broker_host(broker.id)
        metrics = state.metrics_address(broker.id)
        kafka = f"KAFKA listener on {host}:{broker.kafka_port}, " if broker.kafka_port else ""
        self._progress(
            f"starting broker {broker.id} on {host}:{broker.port} "
            f"({kafka}{f'metrics on {metrics}, ' if metrics else ''}log in {broker.out})"
        )
        prefix = state.layout.exec_prefix(broker.id) if state.layout is not None else []
        popen = launch_broker(
            [*prefix, *state.broker_command, "--config", broker.config],
            Path(broker.out),
            f"floodmark cluster: starting broker {broker.id}",
        )
        broker.pid = self.procs.track(popen)
        broker.started_at = time.time()

    def registrations(self, state: ClusterState) -> dict[int, int]:
        """The sessions owning the brokers' registrations now (taken before a start, so a stale
        registration of a killed process is not mistaken for the new one's)."""
        from kazoo.exceptions import KazooException

        try:
            with zk_session(state.zookeeper.port, timeout=5.0) as client:
                return registration_owners(client)
        except (ClusterError, KazooException):
            return {}

    def wait_registered(
        self,
        state: ClusterState,
        broker_ids: list[int],
        timeout: float,
        need_controller: bool,
        stale: Mapping[int, int] | None = None,
    ) -> None:
        """Until every broker in ``broker_ids`` is registered (and, with ``need_controller``, one is
        the controller); ClusterError, with the broker's last lines, when one exits or time is up.
        A registration still owned by the session in ``stale`` (the one before this start: a
        SIGKILLed broker's lingers until its session expires) does not count.
        The bound is ``timeout`` plus what the brokers' logs take to load (:func:`log_load_allowance`),
        and every ``STILL_STARTING_EVERY_S`` a broker still starting is reported with its last line."""
        from kazoo.exceptions import KazooException

        timeout += max((log_load_allowance(state.brokers[i]) for i in broker_ids), default=0.0)
        started = time.monotonic()
        deadline, next_report = started + timeout, started + STILL_STARTING_EVERY_S
        with zk_session(state.zookeeper.port) as client:
            while True:
                for broker_id in broker_ids:
                    self._check_not_exited(state.brokers[broker_id])
                try:
                    owners = registration_owners(client)
                    registered = {i for i, owner in owners.items() if owner != (stale or {}).get(i)}
                    controller_id, _ = controller_of(client) if need_controller else (0, None)
                except KazooException:
                    registered, controller_id = set(), None
                missing = [i for i in broker_ids if i not in registered]
                if not missing and controller_id is not None:
                    for broker_id in broker_ids:
                        self._progress(f"broker {broker_id} registered (pid {state.brokers[broker_id].pid})")
                    return
                now = time.monotonic()
                if now >= deadline:
                    raise _not_started(state, missing, timeout)
                if now >= next_report and missing:
                    broker = state.brokers[missing[0]]
                    last = tail(Path(broker.out), 1)
                    self._progress(
                        f"broker {broker.id} still starting after {now - started:.0f}s "
                        f"(pid {broker.pid}, waiting up to {timeout:.0f}s): {last}"
                    )
                    next_report = now + STILL_STARTING_EVERY_S
                time.sleep(POLL_S)

    def _check_not_exited(self, broker: BrokerState) -> None:
        """ClusterError when the broker's process has exited. A child of this runner is judged by
        its exit status alone: its command line can read empty for a moment while it execs (``ip
        netns exec`` becoming python), which once made a starting broker "not running" two seconds
        before it registered. A broker started by another runner process is judged by its pid and
        marker, looked at twice."""
        running = self.procs.running_child(broker.pid) if broker.pid else False
        if running is None:  # not our child: /proc is all there is, so look twice
            running = self.broker_alive(broker)
            if not running:
                time.sleep(POLL_S)
                running = self.broker_alive(broker)
        if running:
            return
        code = self.procs.exit_code(broker.pid, wait_s=2.0) if broker.pid else None
        how = f"exited with code {code}" if code is not None else "is not running"
        raise ClusterError(
            f"broker {broker.id} {how} before registering in ZooKeeper; last lines of {broker.out}:\n{tail(Path(broker.out))}"
        )


def log_load_allowance(broker: BrokerState) -> float:
    """Seconds a broker's start may take beyond the base bound to load its logs: a start after a
    crash recovers every partition's unflushed tail, so the bound grows with the partitions
    (LOAD_S_PER_PARTITION each) and the bytes on disk (LOAD_S_PER_MIB)."""
    partitions, size = 0, 0
    for log_dir in broker.log_dirs:
        try:
            entries = list(os.scandir(log_dir))
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            partitions += 1
            with suppress(OSError):
                size += sum(f.stat().st_size for f in os.scandir(entry.path) if f.is_file())
    return partitions * LOAD_S_PER_PARTITION + size / (1 << 20) * LOAD_S_PER_MIB


def _not_started(state: ClusterState, missing: list[int], timeout: float) -> ClusterError:
    if not missing:
        return ClusterError(f"no controller was elected within {timeout:g}s (/controller is missing)")
    broker = state.brokers[missing[0]]
    return ClusterError(
        f"broker {broker.id} did not register in ZooKeeper within {timeout:g}s "
        f"(process {broker.pid} still running); last lines of {broker.out}:\n{tail(Path(broker.out))}"
    )
