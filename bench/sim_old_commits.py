"""Run today's simulator (sim/, docs/design.md "Simulation") against an older commit, where the
review findings still stand (issue 21 item 5: "proof that it finds what matters").

It makes a git worktree of the old commit (``/tmp/wt-old-<commit>``), copies today's ``sim/``
package into it, re-runs itself with ``PYTHONPATH`` set to that worktree and, before importing
``sim``, installs an adapter for the interfaces the old code lacks. The adapter lives here, out
of the product; it only wraps and monkeypatches the old classes at run time:

``ServerRuntime`` / ``ClientRuntime`` stand-ins and ``BrokerServer`` / ``Producer`` /
``AdminClient`` subclasses taking ``runtime=``; ``KazooClient``, ``BrokerConnection.open``, the
``Acceptor`` and the clocks routed through the running broker's runtime (a context variable);
for c0c9003 also a ``zk`` shim package (today's paths and codecs), Kafka's maximal ISR emulated
from the write in flight, and the replica manager's request hook the invariants watch.

Usage: ``.venv/bin/python bench/sim_old_commits.py --commit 94ad6ee --seeds 0..199 --jobs 2``.
Failed schedules (seed, invariant, message, history) also go to ``--out`` as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dataclasses
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: the runtime of the broker whose code is running (set in its start-up and shutdown tasks)
RUNTIME: contextvars.ContextVar[Any] = contextvars.ContextVar("old_commit_runtime", default=None)
#: the connection factory of the client whose Cluster is connecting (then RUNTIME's)
CLIENT_CONNECT: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "old_commit_client_connect", default=None
)
#: broker id -> the runtime of its latest incarnation (for callbacks born outside its tasks)
_RUNTIMES: dict[int, Any] = {}
ZK_SHIM_MARK = "SIM_OLD_COMMITS_SHIM"


# -- the worktree ----------------------------------------------------------------------------------
def prepare(commit: str, worktree: Path) -> None:
    """The worktree of ``commit`` with today's sim/ copied in (made once, refreshed each run)."""
    if not (worktree / ".git").exists():
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), commit], check=True
        )
    head = subprocess.run(
        ["git", "-C", str(worktree), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not head.startswith(commit):
        raise SystemExit(f"{worktree} is at {head}, not {commit}")
    shutil.rmtree(worktree / "sim", ignore_errors=True)
    shutil.copytree(REPO / "sim", worktree / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    shim = worktree / "zk"
    if not shim.exists() or (shim / ZK_SHIM_MARK).exists():
        # before zk/ (c0c9003: controller/zk.py): sim/ reads znodes through today's paths and
        # codecs (the znode layout is Kafka's, unchanged); zk.bridge re-exports the old ops
        shim.mkdir(exist_ok=True)
        (shim / ZK_SHIM_MARK).write_text("made by bench/sim_old_commits.py\n")
        (shim / "__init__.py").write_text('"""Shim for the simulator (bench/sim_old_commits.py)."""\n')
        for name in ("paths.py", "data.py"):
            shutil.copy(REPO / "zk" / name, shim / name)
        (shim / "bridge.py").write_text(
            "from controller.zk import CheckOp, CreateOp, DeleteOp, SetDataOp, ZkBridge, ZkOp  # noqa: F401\n"
        )


# -- the adapter -----------------------------------------------------------------------------------
def _sim(name: str) -> Any:
    """A module of the simulator copied into the old worktree, imported at run time (this script
    never imports this repository's own sim/, which import-linter keeps out of bench/)."""
    return importlib.import_module(f"sim.{name}")


def _current_runtime() -> Any:
    runtime = RUNTIME.get()
    if runtime is not None:
        return runtime
    owner = _sim("broker_process").OWNER.get()
    return _RUNTIMES.get(owner.broker_id) if owner is not None else None


def _sim_loop() -> Any:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop if hasattr(loop, "elapsed_ns") else None


def _monotonic() -> float:
    loop = _sim_loop()
    return loop.time() if loop is not None else time.monotonic()


def _wall_time() -> float:
    loop = _sim_loop()
    return _sim("clock").DEFAULT_EPOCH_MS / 1000 + loop.elapsed_ns / 1e9 if loop is not None else time.time()


class _TimeShim:
    """The ``time`` module as the old modules that read it see it: virtual under simulation."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    monotonic = staticmethod(_monotonic)
    time = staticmethod(_wall_time)


class _OldQuotas:
    """Today's ConnectionQuotas interface over the old one (per-IP limits came with issue 19)."""

    def __init__(self, quotas: Any) -> None:
        self._quotas = quotas

    def __getattr__(self, name: str) -> Any:
        return getattr(self._quotas, name)

    def try_acquire(self, ip: str, _listener: str) -> str | None:
        if _OldProcessor.ARITY < 3:  # before 94ad6ee's listeners: the connection acquires itself
            return None
        return None if self._quotas.try_acquire(ip) else "max.connections"


class _OldProcessor:
    #: how many arguments the old Processor.new_connection takes (2 before listeners, then 3)
    ARITY = 3

    def __init__(self, processor: Any) -> None:
        self._processor = processor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._processor, name)

    def new_connection(self, quotas: Any, index: int, listener_name: str, _ip: str = "") -> Any:
        args = (quotas._quotas, index, listener_name)[: self.ARITY]
        return self._processor.new_connection(*args)


def install_server_adapter() -> None:
    import broker.network.processor as processor_mod
    import broker.network.socket_server as socket_server_mod
    import broker.server as server_mod

    if hasattr(server_mod, "ServerRuntime"):
        return  # the commit has the injection points already

    @dataclasses.dataclass(frozen=True)
    class ServerRuntime:
        zk_client_factory: Any = None
        connect: Any = None
        acceptor_factory: Any = None
        monotonic: Any = time.monotonic
        schedule_once: Any = None

    original = server_mod.BrokerServer

    takes_halt = "halt" in inspect.signature(original.__init__).parameters
    _OldProcessor.ARITY = len(inspect.signature(processor_mod.Processor.new_connection).parameters) - 1

    class BrokerServer(original):  # type: ignore[misc, valid-type]
        def __init__(
            self, config: Any, time_ms: Any = None, rng: Any = None, halt: Any = os._exit, runtime: Any = None
        ) -> None:
            kwargs = {"time_ms": time_ms} if time_ms is not None else {}
            if takes_halt:  # KIP-112's halt came after c0c9003
                kwargs["halt"] = halt
            super().__init__(config, rng=rng, **kwargs)
            self.runtime = runtime

        async def startup(self) -> None:
            RUNTIME.set(self.runtime)
            _RUNTIMES[self.broker_id] = self.runtime
            await super().startup()

        async def shutdown(self, controlled: bool = True) -> None:
            RUNTIME.set(self.runtime)
            await super().shutdown(controlled=controlled)

    server_mod.ServerRuntime = ServerRuntime
    server_mod.BrokerServer = BrokerServer

    real_acceptor = socket_server_mod.Acceptor

    def acceptor(host: str, port: int, processors: Any, quotas: Any, *args: Any, **kwargs: Any) -> Any:
        runtime = _current_runtime()
        if runtime is None or runtime.acceptor_factory is None:
            return real_acceptor(host, port, processors, quotas, *args, **kwargs)
        # before issue 19: try_acquire(ip) -> bool, new_connection(quotas, index, listener)
        processors = [_OldProcessor(p) for p in processors]
        return runtime.acceptor_factory(host, port, processors, _OldQuotas(quotas), *args, **kwargs)

    socket_server_mod.Acceptor = acceptor
    processor_mod.time = _TimeShim()


def install_zk_adapter() -> None:
    import zk.bridge

    bridge_mod = sys.modules[zk.bridge.ZkBridge.__module__]  # controller.zk before zk/ existed
    if "client_factory" in bridge_mod.ZkBridge.__init__.__code__.co_varnames:
        return
    real_kazoo = bridge_mod.KazooClient

    def kazoo_client(*args: Any, **kwargs: Any) -> Any:
        runtime = _current_runtime()
        if runtime is not None and runtime.zk_client_factory is not None:
            return runtime.zk_client_factory(*args, **kwargs)
        return real_kazoo(*args, **kwargs)

    bridge_mod.KazooClient = kazoo_client
    bridge = bridge_mod.ZkBridge
    real_start, real_close = bridge.start, bridge.close

    async def start(self: Any, timeout: float = 15.0) -> None:
        if not asyncio.iscoroutinefunction(getattr(self.client, "start", None)):
            return await real_start(self, timeout)
        _ = self.loop
        await self.client.start(timeout)

    async def close(self: Any) -> None:
        if not asyncio.iscoroutinefunction(getattr(self.client, "start", None)):
            return await real_close(self)
        if self._closed:
            return
        self._closed = True
        try:
            await self.client.stop()
        finally:
            await self.client.close()

    bridge.start, bridge.close = start, close


def install_client_adapter() -> None:
    import client.admin as admin_mod
    import client.connection as connection_mod
    import client.metadata as metadata_mod
    import client.producer

    if not hasattr(client.producer, "__path__"):  # one module before the producer/ split
        sys.modules["client.producer.producer"] = client.producer
    producer_mod = sys.modules.get("client.producer.producer")
    if producer_mod is None:
        import client.producer.producer as producer_mod

    if hasattr(metadata_mod, "ClientRuntime"):
        return

    @dataclasses.dataclass(frozen=True)
    class ClientRuntime:
        connect: Any = None
        monotonic_ms: Any = metadata_mod.monotonic_ms
        wall_clock_ms: Any = None
        rng: Any = None

    metadata_mod.ClientRuntime = ClientRuntime
    connection = connection_mod.BrokerConnection
    real_open = connection.open

    async def open_connection(host: str, port: int, client_id: str = "floodmark", **kwargs: Any) -> Any:
        connect = CLIENT_CONNECT.get()
        if connect is None:
            runtime = _current_runtime()
            connect = runtime.connect if runtime is not None else None
        if connect is None:
            return await real_open(host, port, client_id, **kwargs)
        return await connect(host, port, client_id=client_id, **kwargs)

    connection.open = staticmethod(open_connection)
    cluster = metadata_mod.Cluster
    real_connect = cluster._connect

    async def connect(self: Any, address: Any) -> Any:
        token = CLIENT_CONNECT.set(getattr(self, "_sim_connect", None))
        try:
            return await real_connect(self, address)
        finally:
            CLIENT_CONNECT.reset(token)

    cluster._connect = connect

    def adopt(client: Any, runtime: Any) -> None:
        if runtime is None:
            return
        target = client._cluster
        target._sim_connect = runtime.connect
        target._clock = runtime.monotonic_ms
        if runtime.rng is not None:
            target._rng = runtime.rng

    class Producer(producer_mod.Producer):  # type: ignore[misc, valid-type]
        def __init__(
            self, bootstrap_servers: Any, config: Any = None, *, runtime: Any = None, **overrides: Any
        ) -> None:
            super().__init__(bootstrap_servers, config, **overrides)
            adopt(self, runtime)
            if runtime is not None and runtime.rng is not None:
                self._partitioner = producer_mod.make_partitioner(self.config.partitioner, runtime.rng)

    class AdminClient(admin_mod.AdminClient):  # type: ignore[misc, valid-type]
        def __init__(
            self,
            bootstrap_servers: Any,
            client_id: str = "floodmark-admin",
            *args: Any,
            runtime: Any = None,
            **kwargs: Any,
        ) -> None:
            super().__init__(bootstrap_servers, client_id, *args, **kwargs)
            adopt(self, runtime)

    producer_mod.Producer = Producer
    admin_mod.AdminClient = AdminClient
    producer_mod.time = _TimeShim()


class _StaleEpochView:
    """``ReplicaManager.state_changes._stale_epoch`` (the hook of sim/invariants.py's request
    checks) over a replica manager older than LeaderAndIsrHandler: the old refusal rule, a
    controller epoch below the newest one applied."""

    def __init__(self, rm: Any) -> None:
        self._rm = rm

    def _stale_epoch(self, request: str, body: dict) -> str | None:
        if body["controller_epoch"] < self._rm.controller_epoch:
            return "stale controller epoch"
        return None


def install_replica_manager_adapter() -> None:
    import broker.replica.replica_manager as rm_mod

    manager = rm_mod.ReplicaManager
    if "state_changes" in inspect.getsource(manager.__init__):
        return
    real_init = manager.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self.state_changes = _StaleEpochView(self)
        if not hasattr(self, "broker_epoch"):  # no KIP-380 broker epochs yet
            self.broker_epoch = -1
        if not hasattr(self, "offline_partitions"):  # no KIP-112 yet
            self.offline_partitions = set()

    manager.__init__ = init
    for name, request in (("become_leader_or_follower", "LeaderAndIsr"), ("stop_replicas", "StopReplica")):
        real = getattr(manager, name)

        if asyncio.iscoroutinefunction(real):

            async def wrapped(self: Any, body: dict, _real: Any = real, _request: str = request) -> Any:
                self.state_changes._stale_epoch(_request, body)
                return await _real(self, body)

        else:

            def wrapped(self: Any, body: dict, _real: Any = real, _request: str = request) -> Any:  # type: ignore[misc]
                self.state_changes._stale_epoch(_request, body)
                return _real(self, body)

        setattr(manager, name, wrapped)


def install_partition_adapter() -> None:
    """Before KIP-497's maximal ISR (c0c9003: one bool, ``isr_update_in_flight``): the change a
    write in flight carries is kept beside it, so the ``hw-within-isr`` invariant counts the
    replicas of an ISR write whose outcome is unknown, as it does on today's code."""
    import broker.replica.partition as partition_mod

    partition = partition_mod.Partition
    if hasattr(partition, "maximal_isr"):
        return
    real_begin, real_complete = partition.begin_isr_update, partition.complete_isr_update

    def begin(self: Any, change: Any) -> None:
        real_begin(self, change)
        self.sim_pending_change = change

    def complete(self: Any, change: Any, written_zk_version: int | None) -> bool:
        self.sim_pending_change = None
        return real_complete(self, change, written_zk_version)

    def maximal_isr(self: Any) -> frozenset[int]:
        pending = getattr(self, "sim_pending_change", None)
        return frozenset(self.isr) | (frozenset(pending.new_isr) if pending is not None else frozenset())

    partition.begin_isr_update, partition.complete_isr_update = begin, complete
    partition.maximal_isr = property(maximal_isr)
    partition.pending_isr_change = property(lambda self: getattr(self, "sim_pending_change", None))


def install() -> None:
    install_server_adapter()
    install_replica_manager_adapter()
    install_partition_adapter()
    install_zk_adapter()
    install_client_adapter()


# -- the sweep (inside the worktree) ---------------------------------------------------------------
def run_inside(args: argparse.Namespace) -> int:
    import logging

    import broker.server

    if not broker.server.__file__.startswith(str(args.worktree)):
        raise SystemExit(f"broker.server comes from {broker.server.__file__}, not {args.worktree}")
    install()
    parse_kinds = _sim("faults").parse_kinds
    sim_sweep = _sim("sweep")
    ScheduleConfig, SweepReport, sweep = sim_sweep.ScheduleConfig, sim_sweep.SweepReport, sim_sweep.sweep  # noqa: N806

    seeds = _seeds(args.seeds)
    config = ScheduleConfig(steps=args.steps, brokers=args.brokers, faults=parse_kinds(args.faults))
    if args.fault_rate is not None:
        config = dataclasses.replace(config, fault_rate=args.fault_rate)
    if args.invariants:
        config = dataclasses.replace(config, invariants=frozenset(args.invariants.split(",")))
    if args.log_level:
        logging.basicConfig(level=args.log_level, format="%(name)s %(levelname)s %(message)s")
    elif not args.verbose:
        logging.disable(logging.CRITICAL)
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 - closed below

    def show(result: Any) -> None:
        if not result.ok:
            print(
                f"seed {result.seed}: {result.invariant}: {result.message.splitlines()[0][:300]}", flush=True
            )
            if out is not None:
                row = dataclasses.asdict(result) | {"commit": args.commit}
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()
        elif args.verbose:
            print(result.report(), flush=True)

    # A fresh pool of worker processes every --batch seeds: the old code leaks file descriptors
    # from one schedule to the next (20,000 were gone after about 700 schedules per process).
    reports = []
    try:
        for start in range(0, len(seeds), args.batch):
            # always through a pool (sweep runs one job in this process, where the leak would pile up)
            batch = seeds[start : start + args.batch]
            reports.append(sweep(batch, config, jobs=max(2, args.jobs), on_result=show))
    finally:
        if out is not None:
            out.close()
    report = SweepReport(
        [r for rep in reports for r in rep.results], sum(rep.wall_seconds for rep in reports)
    )
    print(report.summary())
    return 1 if report.failed else 0


def _seeds(text: str) -> list[int]:
    low, _, high = text.partition("..")
    return list(range(int(low), int(high or low) + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default="94ad6ee")
    parser.add_argument("--worktree", type=Path, default=None, help="default: /tmp/wt-old-<commit>")
    parser.add_argument("--seeds", default="0..99", help="A..B inclusive, or one seed")
    parser.add_argument("--seed", dest="seeds", help="one seed (same as --seeds N)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--faults", default="all")
    parser.add_argument("--fault-rate", type=float, default=None, help="chance of a fault per step [0.08]")
    parser.add_argument("--invariants", default=None, help="comma-separated; default: every one")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=200, help="seeds per pool of worker processes")
    parser.add_argument("--out", default=None, help="JSON lines of the failed schedules")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--log-level", default=None, help="the brokers' logs at this level (DEBUG, INFO)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.worktree = (args.worktree or Path(f"/tmp/wt-old-{args.commit}")).resolve()
    if args.inside:
        return run_inside(args)
    prepare(args.commit, args.worktree)
    env = dict(os.environ, PYTHONPATH=str(args.worktree))
    return subprocess.call([sys.executable, __file__, "--inside", *sys.argv[1:]], env=env)


if __name__ == "__main__":
    sys.exit(main())
