"""What ``floodmark cluster status`` reports (docs/operations.md "Local cluster layout"): the state
file's view (ports, the ``KAFKA`` listeners' bootstrap string, pids, configs, each broker's
Prometheus ``/metrics`` address) checked against
the processes and against ZooKeeper, where health lives as in ZooKeeper-era Kafka: a broker is
registered when ``/brokers/ids/<id>`` exists, the controller is whoever ``/controller`` names.
"""

from __future__ import annotations

from typing import Any

from devcluster.launch import Launcher, broker_disk
from devcluster.ports import HOST
from devcluster.state import BrokerState, ClusterState
from devcluster.zookeeper import controller_of, registered_ids, ruok, zk_session


def controller(state: ClusterState) -> tuple[int | None, int | None]:
    """(controller id, controller epoch) from ZooKeeper; (None, None) when ZooKeeper is down."""
    if not ruok(HOST, state.zookeeper.port):
        return None, None
    with zk_session(state.zookeeper.port) as client:
        return controller_of(client)


def cluster_status(state: ClusterState, launcher: Launcher) -> dict[str, Any]:
    """Per broker: its ports, process alive / paused, registered in ZooKeeper, controller, /metrics
    address; ZooKeeper health; the controller id and epoch; the bootstrap strings (``kafka_bootstrap``:
    the KAFKA listeners, None for an older cluster without them). A plain dict, ready for ``json.dumps``."""
    zk = state.zookeeper
    zk_ok = ruok(HOST, zk.port)
    registered: set[int] = set()
    controller_id = epoch = None
    if zk_ok:
        with zk_session(zk.port) as client:
            registered = registered_ids(client)
            controller_id, epoch = controller_of(client)
    brokers = [
        _broker_status(state, broker, launcher, broker.id in registered, broker.id == controller_id)
        for broker in sorted(state.brokers.values(), key=lambda b: b.id)
    ]
    return {
        "data_dir": state.data_dir,
        "status": state.status,
        "bootstrap": state.bootstrap,
        "kafka_bootstrap": state.kafka_bootstrap,
        "zookeeper": {
            "port": zk.port,
            "pid": zk.pid,
            "alive": launcher.zookeeper_alive(state, check_ruok=False),
            "ok": zk_ok,
            "data_dir": zk.data_dir,
        },
        "controller": {"id": controller_id, "epoch": epoch},
        "brokers": brokers,
    }


def _broker_status(
    state: ClusterState, broker: BrokerState, launcher: Launcher, registered: bool, is_controller: bool
) -> dict[str, Any]:
    alive = launcher.broker_alive(broker)
    return {
        "id": broker.id,
        "port": broker.port,
        "kafka_port": broker.kafka_port,
        "pid": broker.pid,
        "alive": alive,
        "paused": alive and launcher.procs.paused(broker.pid),
        "registered": registered,
        "controller": is_controller,
        "config": broker.config,
        "log_dir": broker.log_dir,
        "out": broker.out,
        "metrics_port": broker.metrics_port,
        "metrics": state.metrics_address(broker.id),
        "disk": broker_disk(broker).describe() if state.disks else None,
    }
