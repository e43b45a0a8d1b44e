"""A simulated cluster (docs/design.md "Simulation"): the in-memory ZooKeeper, N real brokers
(sim/broker_process.py) and the simulated network (sim/network.py), built from the run's seed
inside :func:`sim.runner.run_simulation`, with clients (the real Producer and AdminClient) on the
same network, and the faults by broker id: crash, restart, pause, resume, partition, heal.

Everything random is drawn from the loop's seeded streams (``loop.seeds.stream(name)``): the
scheduler's, ``"network"``, ``"zookeeper"``, one per broker incarnation and one per client; the
brokers' wall clock is :class:`sim.clock.SimClock`. Log dirs live under one temp dir per world,
on /dev/shm when there is one (the files are real files), each broker's on a modelled disk
(sim/storage.py, installed for the world's life): a power loss keeps only what was fsynced, and
disk-full / disk-error faults fail its writes (:data:`STORAGE_FAULTS`, :meth:`World.storage_fault`).

Usage (inside ``run_simulation``)::

    async with World(WorldConfig(brokers=3)) as world:
        await world.start()
        admin = await world.admin()
        ...
        world.crash(2); await world.restart(2)
        world.power_loss(3); await world.restart(3)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from client.admin import AdminClient
from client.metadata import ClientRuntime
from client.producer.producer import Producer
from client.protocol.records import Record
from client.types import TopicPartition
from sim.broker_process import BrokerProcess, ProcessState, ProcessTable, host_name, node_name
from sim.clock import SimClock
from sim.log_reading import records_below
from sim.loop import SimEventLoop
from sim.network import NetworkConfig, SimNetwork
from sim.storage import SimStorage
from sim.storage_model import Disk, Op, PowerLoss
from sim.zookeeper import ZkFaultRates, ZooKeeperServer
from zk.paths import BROKER_IDS_PATH, CONTROLLER_PATH, partition_state_path

if TYPE_CHECKING:
    from broker.log import Log

PORT = 9092
#: Broker properties of every simulated broker (each can be overridden in WorldConfig).
DEFAULT_PROPS = {
    "zookeeper.connect": "sim",
    "zookeeper.session.timeout.ms": "6000",
    "num.network.threads": "1",
    "num.io.threads": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "controlled.shutdown.enable": "false",
    # virtual time never runs late (broker/loop_stall.py): the monitor would only add its timers
    # to the seeded schedule, and every seed's schedule with them
    "event.loop.stall.monitor.interval.ms": "0",
}
#: The storage faults :meth:`World.storage_fault` injects (the sweep draws among them).
STORAGE_FAULTS = ("power-loss", "disk-full", "disk-error")


@dataclass
class WorldConfig:
    brokers: int = 3
    #: broker properties on top of DEFAULT_PROPS (``broker.id``, ``log.dirs`` and ``listeners`` are set)
    props: dict[str, str] = field(default_factory=dict)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    zk_latency_s: tuple[float, float] = (0.0002, 0.001)
    zk_faults: ZkFaultRates | None = None
    #: where the per-run temp dir goes (None: /dev/shm if present, else the system's temp dir)
    root: Path | None = None
    #: probability that each call on a broker's log dirs fails with EIO (sim/storage_model.py)
    storage_error_rate: float = 0.0


class World:
    """ZooKeeper + N brokers + network on the running simulation loop."""

    def __init__(self, config: WorldConfig | None = None) -> None:
        self.config = config or WorldConfig()
        loop = asyncio.get_running_loop()
        if not isinstance(loop, SimEventLoop):
            raise RuntimeError("a World runs under the simulation loop (sim.runner.run_simulation)")
        self.loop = loop
        self.clock = SimClock(loop)
        self.table = ProcessTable(loop)
        self.network = SimNetwork(loop.seeds.stream("network"), self.config.network, loop)
        self.zookeeper = ZooKeeperServer(
            loop.seeds.stream("zookeeper"),
            loop,
            latency=self.config.zk_latency_s,
            faults=self.config.zk_faults,
        )
        parent = self.config.root or _default_root()
        self.root = Path(tempfile.mkdtemp(prefix=f"sim-{loop.seed}-", dir=parent))
        self.brokers: dict[int, BrokerProcess] = {
            broker_id: BrokerProcess(
                broker_id, self._props(broker_id), loop, self.table, self.network, self.zookeeper
            )
            for broker_id in range(1, self.config.brokers + 1)
        }
        self._clients = 0
        self._closeables: list[Any] = []
        #: the network nodes of the producers (the ``stall`` fault aims at their connections)
        self.producer_nodes: list[str] = []
        # Each broker's log dirs on a modelled disk (sim/storage.py); installed last, undone by close().
        self.storage = SimStorage()
        for broker in self.brokers.values():
            disk = self.storage.add_disk(
                broker.node, broker.log_dirs, loop.seeds.stream(f"storage/{broker.node}")
            )
            disk.error_rate = self.config.storage_error_rate
            broker.disk = disk
        self._storage_rng = loop.seeds.stream("storage")
        self.storage.install()

    def _props(self, broker_id: int) -> dict[str, str]:
        base = self.root / node_name(broker_id)
        props = {**DEFAULT_PROPS, **self.config.props}
        props.update(
            {
                "broker.id": str(broker_id),
                "log.dirs": str(base / "logs"),
                "listeners": f"PLAINTEXT://{host_name(broker_id)}:{PORT}",
                "state.change.log.file": str(base / "state-change.log"),
            }
        )
        return props

    async def __aenter__(self) -> World:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, *, ready_within_s: float = 60.0) -> None:
        """Start every broker (concurrently) and wait until all are registered under a controller."""
        await asyncio.gather(*(b.start() for b in self.brokers.values()))
        await self.wait_until_ready(within_s=ready_within_s)

    async def close(self) -> None:
        """Close the clients, crash whatever still runs, put the real os functions back, remove
        the temp dir."""
        try:
            for client in reversed(self._closeables):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 5.0)
            for broker in self.brokers.values():
                broker.crash()
            await asyncio.sleep(0)
            self.table.uninstall()
        finally:
            self.storage.uninstall()
            shutil.rmtree(self.root, ignore_errors=True)

    # -- the state, read straight from ZooKeeper's tree (no session, no network) ----------------
    def znode(self, path: str) -> bytes | None:
        try:
            return self.zookeeper.tree.get(path, None)[0]
        except Exception:  # noqa: BLE001 - absent (kazoo's NoNodeError)
            return None

    def controller_id(self) -> int | None:
        data = self.znode(CONTROLLER_PATH)
        return None if data is None else int(json.loads(data)["brokerid"])

    def registered_brokers(self) -> set[int]:
        try:
            return {int(c) for c in self.zookeeper.tree.get_children(BROKER_IDS_PATH, None)}
        except Exception:  # noqa: BLE001 - /brokers/ids not created yet
            return set()

    async def wait_for(self, condition: Callable[[], bool], what: str, within_s: float = 60.0) -> None:
        """Wait (virtual time, polling every 10 ms) until ``condition()``; fail after ``within_s``."""
        deadline = self.loop.time() + within_s
        while not condition():
            if self.loop.time() > deadline:
                raise AssertionError(f"not within {within_s} virtual s: {what}")
            await asyncio.sleep(0.01)

    async def wait_until_ready(self, brokers: Iterable[int] | None = None, within_s: float = 60.0) -> None:
        """Until a live broker is controller and every broker in ``brokers`` (default: those
        running) is registered."""
        expected = set(brokers) if brokers is not None else {i for i, b in self.brokers.items() if b.running}

        def ready() -> bool:
            controller = self.controller_id()
            return (
                controller is not None
                and controller in self.brokers
                and self.brokers[controller].running
                and expected <= self.registered_brokers()
            )

        await self.wait_for(ready, f"controller and registrations of {sorted(expected)}", within_s)

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The leader ZooKeeper names for the partition (its state znode), or None."""
        data = self.znode(partition_state_path(topic, partition))
        if data is None:
            return None
        leader = int(json.loads(data)["leader"])
        return leader if leader >= 0 else None

    def replica_log(self, broker_id: int, topic: str, partition: int) -> Log | None:
        """The broker's log of the partition, if it runs and hosts one."""
        broker = self.brokers[broker_id]
        manager = getattr(broker.server, "replica_manager", None)
        return manager.get_log(TopicPartition(topic, partition)) if broker.running and manager else None

    def records(self, broker_id: int, topic: str, partition: int, below_hw: bool = True) -> list[Record]:
        """The records of the broker's replica, below its high watermark (or up to its LEO)."""
        log = self.replica_log(broker_id, topic, partition)
        if log is None:
            return []
        return list(records_below(log, log.high_watermark if below_hw else log.log_end_offset))

    # -- faults by broker id ---------------------------------------------------------------------
    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def crash(self, broker_id: int) -> None:
        self.brokers[broker_id].crash()

    async def restart(self, broker_id: int) -> None:
        await self.brokers[broker_id].restart()

    def pause(self, broker_id: int) -> None:
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    async def stop(self, broker_id: int, controlled: bool = False) -> None:
        await self.brokers[broker_id].stop(controlled)

    def partition(self, side_a: Iterable[int | str], side_b: Iterable[int | str] | None = None) -> None:
        """Cut the links between the two sides (broker ids or node names; ``side_b`` default:
        every other broker). Clients are nodes too (``client-<n>``)."""
        a = [_node(n) for n in side_a]
        b = (
            [_node(n) for n in side_b]
            if side_b is not None
            else [node_name(i) for i in self.brokers if node_name(i) not in a]
        )
        self.network.cut(a, b)

    def heal(self) -> None:
        self.network.heal()

    # -- storage faults by broker id (sim/storage.py) ---------------------------------------------
    def power_loss(self, broker_id: int) -> PowerLoss | None:
        """The broker's machine loses power: it crashes and its disk keeps only what was fsynced."""
        return self.brokers[broker_id].power_loss()

    def disk_full(self, broker_id: int, room_bytes: int = 0) -> None:
        """The broker's disk fills up after ``room_bytes`` more bytes (ENOSPC) until healed."""
        self._disk(broker_id).fill(room_bytes)

    def disk_error(
        self, broker_id: int, op: Op | None = None, count: int | None = 1, path_contains: str | None = None
    ) -> None:
        """The next ``count`` calls of kind ``op`` on the broker's disk fail with EIO (None: for ever)."""
        self._disk(broker_id).fail(op, count=count, path_contains=path_contains)

    def heal_disks(self) -> None:
        """Free every full disk and drop every placed disk error (an offline log dir stays offline
        until its broker restarts, as KIP-112 has it)."""
        for broker in self.brokers.values():
            self._disk(broker.broker_id).heal()

    def storage_fault(self, kind: str, broker_id: int) -> str:
        """Inject one of :data:`STORAGE_FAULTS` on the broker, its parameters drawn from the
        world's "storage" stream; returns what was done (for the run's history)."""
        rng = self._storage_rng
        if kind == "power-loss":
            report = self.power_loss(broker_id)
            return f"power-loss broker {broker_id}: {report.bytes_lost if report else 0} unsynced bytes lost"
        if kind == "disk-full":
            room = rng.choice((0, rng.randrange(1, 1 << 12)))  # full now, or a few batches later
            self.disk_full(broker_id, room)
            return f"disk-full broker {broker_id} after {room} bytes"
        if kind == "disk-error":
            op = rng.choice(("write", "fsync", "open", "metadata"))
            self.disk_error(broker_id, op)
            return f"disk-error broker {broker_id} on the next {op}"
        raise ValueError(f"unknown storage fault {kind!r}, expected one of {STORAGE_FAULTS}")

    def _disk(self, broker_id: int) -> Disk:
        disk = self.brokers[broker_id].disk
        assert disk is not None
        return disk

    @contextlib.contextmanager
    def observing(self) -> Iterator[None]:
        """While the simulator's checks read the brokers' logs: their disk calls meet no placed
        fault and use none up (a check must observe the run, never steer it)."""
        disks = [b.disk for b in self.brokers.values() if b.disk is not None]
        for disk in disks:
            disk.observers += 1
        try:
            yield
        finally:
            for disk in disks:
                disk.observers -= 1

    def states(self) -> dict[int, ProcessState]:
        return {i: b.state for i, b in self.brokers.items()}

    # -- clients ---------------------------------------------------------------------------------
    def bootstrap(self) -> str:
        return ",".join(f"{host_name(i)}:{PORT}" for i in self.brokers)

    def client_runtime(self) -> tuple[str, ClientRuntime]:
        """A new client node and its runtime: the network's connections, virtual clocks, a seeded stream."""
        self._clients += 1
        node = f"client-{self._clients}"
        runtime = ClientRuntime(
            connect=self.network.connector(node),
            monotonic_ms=lambda: self.loop.time() * 1000.0,
            wall_clock_ms=self.clock.time_ms,
            rng=self.loop.seeds.stream(node),
        )
        return node, runtime

    async def producer(self, **overrides: Any) -> Producer:
        """A started :class:`client.producer.producer.Producer` on the simulated network."""
        node, runtime = self.client_runtime()
        self.producer_nodes.append(node)
        producer = Producer(self.bootstrap(), runtime=runtime, client_id=node, **overrides)
        await producer.start()
        self._closeables.append(producer)
        return producer

    async def admin(self, **kwargs: Any) -> AdminClient:
        """A started :class:`client.admin.AdminClient` on the simulated network."""
        node, runtime = self.client_runtime()
        admin = AdminClient(self.bootstrap(), node, runtime=runtime, **kwargs)
        await admin.start()
        self._closeables.append(admin)
        return admin


def _node(name: int | str) -> str:
    return node_name(name) if isinstance(name, int) else cast(str, name)


def _default_root() -> Path | None:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None
