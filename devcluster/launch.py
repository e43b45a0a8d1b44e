"""Starting the local cluster's processes and waiting for them (docs/operations.md "Local cluster
layout"): the ports a start needs are free, ZooKeeper answers ``ruok``, each broker is spawned
(``python -m broker --config server.properties``, in its network namespace and on its faultable
disk when the cluster has them), and the start is over when ZooKeeper shows every broker
registered (``/brokers/ids/<id>``) and, for a whole cluster, a controller (``/controller``), as a
Kafka operator would check. ``LocalCluster`` (devcluster/cluster.py) drives a ``Launcher``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
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
    registered_ids,
    ruok,
    zk_session,
)

POLL_S = 0.2


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

    def wait_registered(
        self, state: ClusterState, broker_ids: list[int], timeout: float, need_controller: bool
    ) -> None:
        """Until every broker in ``broker_ids`` is registered (and, with ``need_controller``, one is
        the controller); ClusterError, with the broker's last lines, when one dies or time is up."""
        from kazoo.exceptions import KazooException

        deadline = time.monotonic() + timeout
        with zk_session(state.zookeeper.port) as client:
            while True:
                for broker_id in broker_ids:
                    self._check_not_dead(state.brokers[broker_id])
                try:
                    registered = registered_ids(client)
                    controller_id, _ = controller_of(client) if need_controller else (0, None)
                except KazooException:
                    registered, controller_id = set(), None
                missing = [i for i in broker_ids if i not in registered]
                if not missing and controller_id is not None:
                    for broker_id in broker_ids:
                        self._progress(f"broker {broker_id} registered (pid {state.brokers[broker_id].pid})")
                    return
                if time.monotonic() >= deadline:
                    raise _not_started(state, missing, timeout)
                time.sleep(POLL_S)

    def _check_not_dead(self, broker: BrokerState) -> None:
        if self.broker_alive(broker):
            return
        code = self.procs.exit_code(broker.pid, wait_s=2.0) if broker.pid else None
        how = f"exited with code {code}" if code is not None else "is not running"
        raise ClusterError(
            f"broker {broker.id} {how} before registering in ZooKeeper; last lines of {broker.out}:\n{tail(Path(broker.out))}"
        )


def _not_started(state: ClusterState, missing: list[int], timeout: float) -> ClusterError:
    if not missing:
        return ClusterError(f"no controller was elected within {timeout:g}s (/controller is missing)")
    broker = state.brokers[missing[0]]
    return ClusterError(
        f"broker {broker.id} did not register in ZooKeeper within {timeout:g}s "
        f"(process {broker.pid} still running); last lines of {broker.out}:\n{tail(Path(broker.out))}"
    )
