"""The local cluster's state file, ``DIR/cluster.json``, and the configs derived from it.

It records what the runner started (ports, pids, configs, the bootstrap string, the network
namespace index and the faultable disks) so that every later ``floodmark cluster`` command, in
another process, acts on the same processes. It is written atomically (a temp file, then
``os.replace``). Each broker's ``server.properties`` uses Kafka's property names
(docs/operations.md); the keys that differ per broker (``RUNNER_KEYS``) are the runner's. Each
broker serves Prometheus ``/metrics`` on its ``metrics.port``, by default a port of a second
block the runner picks, unless the user's ``--config metrics.port`` says otherwise. Each broker
also has a second named listener (KIP-103), ``KAFKA``, for Kafka's own clients (kcat,
confluent-kafka): ``listeners=PLAINTEXT://host:port,KAFKA://host:kafka_port``, its port from a
third block. A state file written before the runner added it has no ``kafka_port`` and its
brokers keep their single listener.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devcluster.disk import DiskState
from devcluster.errors import ClusterError
from devcluster.netns import NetnsLayout, layout_for
from devcluster.ports import HOST, bindable, choose_block

STATE_FILE = "cluster.json"
DEFAULT_SESSION_TIMEOUT_MS = "6000"  # ZooKeeper's tick is 1 s here (devcluster/zookeeper.py)
#: Keys the runner owns: they differ per broker and are derived from the layout above.
RUNNER_KEYS = ("broker.id", "listeners", "log.dirs", "zookeeper.connect")
#: The broker's /metrics port: the runner sets one per broker unless the user's --config sets it.
METRICS_KEY = "metrics.port"
#: The listener Kafka's clients use: its name makes the broker speak Kafka's binary protocol on it
#: (the broker's default ``listener.wire.protocol.map`` is ``KAFKA:KAFKA``).
KAFKA_LISTENER = "KAFKA"


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
    #: Its ``metrics.port``: the runner's, or the user's ``--config metrics.port``; 0 when the broker
    #: picks one (it logs the address in ``out``); None when it serves no /metrics (-1, or a state
    #: file written before the runner turned metrics on).
    metrics_port: int | None = None
    #: Its ``KAFKA`` listener's port; None in a state file written before the runner gave brokers one.
    kafka_port: int | None = None

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
    #: Set when every broker runs in its own network namespace (devcluster/netns.py), so network
    #: partitions can be injected; None for the plain loopback layout.
    netns_index: int | None = None
    #: Set when every broker's log dir sits on a faultable disk (devcluster/disk.py); None otherwise.
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

    def metrics_address(self, broker_id: int) -> str | None:
        """``http://host:port/metrics`` of a broker's endpoint (it binds its listener's host); None
        when it serves none or picks its own port."""
        port = self.brokers[broker_id].metrics_port
        return f"http://{self.broker_host(broker_id)}:{port}/metrics" if port else None

    @property
    def bootstrap(self) -> str:
        return ",".join(
            f"{self.broker_host(b.id)}:{b.port}" for b in sorted(self.brokers.values(), key=lambda b: b.id)
        )

    @property
    def kafka_bootstrap(self) -> str | None:
        """The brokers' ``KAFKA`` listeners as ``bootstrap.servers`` for Kafka's clients; None for a
        cluster set up before the runner gave brokers one."""
        brokers = sorted(self.brokers.values(), key=lambda b: b.id)
        addresses = [f"{self.broker_host(b.id)}:{b.kafka_port}" for b in brokers if b.kafka_port]
        return ",".join(addresses) or None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "status": self.status,
            "data_dir": self.data_dir,
            "bootstrap": self.bootstrap,
            "kafka_bootstrap": self.kafka_bootstrap,
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
    metrics_port: int | None = None,
    kafka_port: int | None = None,
) -> str:
    """A broker's server.properties: the runner's keys (``listeners`` with the ``KAFKA`` listener
    when there is a ``kafka_port``), a short session timeout, the runner's ``metrics.port`` (when
    it chose one), then the user's."""
    clash = sorted(set(overrides) & set(RUNNER_KEYS))
    if clash:
        raise ClusterError(
            f"--config {clash[0]} is set by the cluster runner per broker and cannot be overridden"
        )
    listeners = [f"PLAINTEXT://{host}:{port}"]
    if kafka_port is not None:
        listeners.append(f"{KAFKA_LISTENER}://{host}:{kafka_port}")
    props = {
        "broker.id": str(broker_id),
        "listeners": ",".join(listeners),
        "log.dirs": ",".join(str(d) for d in (log_dir if isinstance(log_dir, list) else [log_dir])),
        "zookeeper.connect": f"{zookeeper_host}:{zookeeper_port}",
        "zookeeper.session.timeout.ms": DEFAULT_SESSION_TIMEOUT_MS,
        **({METRICS_KEY: str(metrics_port)} if metrics_port is not None else {}),
        **overrides,
    }
    lines = ["# written by floodmark's local cluster runner (devcluster/)"]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def metrics_ports(
    ports: list[int],
    zookeeper_port: int,
    overrides: Mapping[str, str],
    metrics_base_port: int | None = None,
    netns: bool = False,
    avoid: Collection[int] = (),
) -> list[int | None]:
    """Each broker's ``metrics.port``, in broker order. The user's ``--config metrics.port`` is kept
    as it is (-1: none, 0: the broker picks); otherwise broker i gets ``metrics_base_port + i - 1``,
    by default from a free block beside the cluster's other ports (and ``avoid``: the ``KAFKA``
    listeners' ports when the user chose them)."""
    if METRICS_KEY in overrides:
        if metrics_base_port is not None:
            raise ClusterError(f"--config {METRICS_KEY} and --metrics-base-port are both set: keep one")
        try:
            port = int(overrides[METRICS_KEY])
        except ValueError:
            raise ClusterError(f"--config {METRICS_KEY} must be a port, -1 or 0") from None
        if port > 0 and len(ports) > 1 and not netns:
            raise ClusterError(
                f"--config {METRICS_KEY}={port} gives all {len(ports)} brokers the same loopback port: "
                f"leave it out (each broker gets its own) or set it to -1 (off) or 0 (the broker picks)"
            )
        return [port if port >= 0 else None] * len(ports)
    others = "ZooKeeper, broker or KAFKA listener ports" if avoid else "ZooKeeper or broker ports"
    return list(
        choose_block(len(ports), "metrics", [zookeeper_port, *ports, *avoid], others, metrics_base_port)
    )


#: The KAFKA listeners' default block sits this far above the brokers' own ports: 9192.. beside
#: 9092.., as in the compose cluster's layout and the docs (docs/operations.md "Local cluster layout").
KAFKA_PORT_OFFSET = 100


def default_kafka_base_port(ports: list[int], zookeeper_port: int) -> int | None:
    """``ports[0] + KAFKA_PORT_OFFSET`` (9192 for brokers on 9092) when that block is free on
    loopback and clear of the cluster's other ports; None (a free block elsewhere) when not, so
    a busy port never stops a start."""
    base = ports[0] + KAFKA_PORT_OFFSET
    block = range(base, base + len(ports))
    if block[-1] > 65535 or set(block) & {zookeeper_port, *ports}:
        return None
    return base if all(map(bindable, block)) else None


def kafka_ports(
    ports: list[int],
    zookeeper_port: int,
    metrics: list[int | None],
    kafka_base_port: int | None = None,
) -> list[int]:
    """Each broker's ``KAFKA`` listener port, in broker order: broker i gets ``kafka_base_port + i - 1``,
    by default from a free block clear of ZooKeeper's, the brokers' and their /metrics ports."""
    taken = [zookeeper_port, *ports, *(p for p in metrics if p)]
    return choose_block(
        len(ports), "KAFKA listener", taken, "ZooKeeper, broker or /metrics ports", kafka_base_port
    )


def new_state(
    data_dir: Path,
    brokers: int,
    zookeeper_port: int,
    base_port: int,
    overrides: dict[str, str],
    broker_command: list[str],
    netns: bool = False,
    log_dirs_per_broker: int = 1,
    metrics_base_port: int | None = None,
    kafka_base_port: int | None = None,
) -> ClusterState:
    """A fresh "stopped" state for brokers 1..N on consecutive ports (and /metrics ports:
    ``metrics_ports``; ``KAFKA`` listener ports: ``kafka_ports``); every broker's config is
    validated, then written, and its log dirs made, before anything starts."""
    if log_dirs_per_broker < 1:
        raise ClusterError("a broker needs at least one log dir")
    ports = [base_port + i for i in range(brokers)]
    if zookeeper_port in ports:
        raise ClusterError(
            f"ZooKeeper port {zookeeper_port} collides with the broker ports {ports[0]}-{ports[-1]}"
        )
    if ports[-1] > 65535:
        raise ClusterError(f"broker ports {ports[0]}-{ports[-1]} run past 65535")
    if kafka_base_port is None:
        kafka_base_port = default_kafka_base_port(ports, zookeeper_port)
    users_kafka = range(kafka_base_port, kafka_base_port + brokers) if kafka_base_port is not None else ()
    metrics = metrics_ports(ports, zookeeper_port, overrides, metrics_base_port, netns, avoid=users_kafka)
    kafka = kafka_ports(ports, zookeeper_port, metrics, kafka_base_port)
    zk = ZooKeeperState(port=zookeeper_port, data_dir=str(data_dir / "zookeeper"))
    state = ClusterState(
        data_dir=str(data_dir),
        zookeeper=zk,
        brokers={},
        broker_command=broker_command,
        overrides=overrides,
        status="stopped",
        netns_index=layout_for(zookeeper_port).index if netns else None,
    )
    for broker_id, (port, metrics_port, kafka_port) in enumerate(zip(ports, metrics, kafka, strict=True), 1):
        home = data_dir / f"broker-{broker_id}"
        state.brokers[broker_id] = BrokerState(
            id=broker_id,
            port=port,
            config=str(home / "server.properties"),
            log_dir=str(home / "data"),
            out=str(home / "broker.out"),
            extra_log_dirs=[str(home / f"data-{k}") for k in range(2, log_dirs_per_broker + 1)],
            metrics_port=metrics_port,
            kafka_port=kafka_port,
        )
    _write_configs(state, overrides)
    return state


def _write_configs(state: ClusterState, overrides: Mapping[str, str]) -> None:
    """Validate every broker's config before anything starts, then write them and make the log dirs."""
    texts = {
        b.id: render_properties(
            b.id,
            b.port,
            [Path(d) for d in b.log_dirs],
            state.zookeeper.port,
            overrides,
            state.broker_host(b.id),
            state.zookeeper_host,
            metrics_port=None if METRICS_KEY in overrides else b.metrics_port,
            kafka_port=b.kafka_port,
        )
        for b in state.brokers.values()
    }
    for broker in state.brokers.values():
        for d in broker.log_dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
        Path(broker.config).write_text(texts[broker.id])


def read_state(state_file: Path) -> ClusterState | None:
    """The state in ``state_file``; None when there is none."""
    try:
        doc = json.loads(state_file.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {state_file}: {exc}") from None
    try:
        return ClusterState.from_json(doc)
    except (KeyError, TypeError) as exc:
        raise ClusterError(f"{state_file} is not a floodmark cluster state file ({exc})") from None


def write_state(state_file: Path, state: ClusterState) -> None:
    """Write ``state`` atomically: a temp file beside it, then ``os.replace``."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    os.replace(tmp, state_file)
