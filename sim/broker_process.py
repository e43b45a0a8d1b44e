"""One simulated broker process (docs/design.md "Simulation"): a real :class:`broker.server.BrokerServer`
(Kafka's KafkaServer: logs, ReplicaManager, fetchers, ISR manager, controller candidate, request
pipeline) started with the simulator's clock, a seeded random stream, a ZooKeeper session on the
in-memory server (sim/zookeeper.py) and the simulated network (sim/network.py), and what an
operating system does to a process: start, crash (SIGKILL), restart, pause (SIGSTOP) and resume
(SIGCONT).

Which callbacks belong to which process: every task and callback created while a broker's code
runs inherits the ``contextvars`` context it was created in, and the broker is started in a
context whose :data:`OWNER` is its current :class:`Incarnation`. :class:`ProcessTable`, installed
on the simulation loop, records each task's owner (a task factory) and looks at each ready
callback's owner before it runs (``SimEventLoop.intercept``):

* **paused**: the callback is held, in order, and made ready again on resume, so no code of the
  process runs meanwhile (timers that fall due run late, as after SIGCONT). Its ZooKeeper client
  is cut off from the server, so its session expires after the session timeout, as a stopped
  process stops sending pings. Limit: the in-memory ZooKeeper client's own state callbacks
  (connection drop, expiry) are called from the server's context and so run while paused; the
  broker tasks they wake stay held.
* **dead** (crashed): every task of the incarnation was cancelled at the crash; what that
  cancellation chains (task steps, future callbacks: ``wait_for`` and ``gather`` need theirs to
  end) still runs, every timer of the incarnation that falls due afterwards (a sleep, a retry, a
  purgatory expiration, a network delivery to it) is dropped, and a task created by it is
  cancelled before it starts.

A crash cancels the tasks without running any shutdown, closes the file descriptors of the logs
without flushing (as the kernel does at exit: no clean-shutdown marker, no checkpoints), kills
the node in the network (peers see its FIN) and drops its ZooKeeper connection without a Close
request (the session expires at the server after its timeout, taking the broker's ephemeral
znodes). Files keep every byte written, fsynced or not: this is a *process* crash, which the page
cache survives. :meth:`BrokerProcess.power_loss` is the machine's: the crash, then its disk
(:class:`sim.storage_model.Disk`, set by the world) keeps only what was fsynced.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import logging
import weakref
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.config import BrokerConfig
from broker.server import BrokerServer, ServerRuntime
from sim.acceptor import SimAcceptor
from sim.clock import SimClock
from sim.isolation import InlineExecutor
from sim.network import SimNetwork
from sim.trace import task_of
from sim.zk_client import SimKazooClient, client_factory

if TYPE_CHECKING:
    from sim.loop import SimEventLoop
    from sim.storage_model import Disk, PowerLoss
    from sim.zookeeper import ZooKeeperServer

log = logging.getLogger(__name__)


class _OpenFileLimits:
    """The ``resource`` module as a simulated broker sees it: a fixed open-file limit, so its
    file budget (broker/file_budget.py) is the same on every host, whatever ``ulimit -n`` says."""

    RLIMIT_NOFILE = 7  # Linux's number; only passed back to getrlimit
    RLIM_INFINITY = -1

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def getrlimit(self, resource: int, /) -> tuple[int, int]:
        return self.limit, self.limit

    def setrlimit(self, resource: int, limits: tuple[int, int], /) -> None:
        raise ValueError("the simulated broker's open-file limit is fixed")


#: Every simulated broker's open-file limit.
SIM_OPEN_FILES = _OpenFileLimits(4096)


class ProcessCrashed(RuntimeError):
    """The process crashed while :meth:`BrokerProcess.start` waited for its start-up."""


class ProcessState(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    DEAD = "dead"


class Incarnation:
    """One life of a broker process, from its start to its crash or stop."""

    def __init__(self, broker_id: int, number: int) -> None:
        self.broker_id = broker_id
        self.number = number
        self.state = ProcessState.RUNNING
        self.tasks: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()
        self.held: list[asyncio.Handle] = []

    def __repr__(self) -> str:
        return f"Incarnation(broker {self.broker_id} #{self.number}, {self.state.value})"


#: The incarnation whose code is running (None: the world's own code, ZooKeeper, clients).
OWNER: contextvars.ContextVar[Incarnation | None] = contextvars.ContextVar("sim_owner", default=None)


class ProcessTable:
    """Installed on the loop: which incarnation owns each task and callback, and what runs."""

    def __init__(self, loop: SimEventLoop) -> None:
        if loop.intercept is not None or loop.get_task_factory() is not None:
            raise RuntimeError("the loop already has a process table")
        self.loop = loop
        loop.set_task_factory(self._create_task)
        loop.intercept = self._intercept

    def uninstall(self) -> None:
        self.loop.set_task_factory(None)
        self.loop.intercept = None

    def _create_task(self, loop: asyncio.AbstractEventLoop, coro: Coroutine, **kwargs: Any) -> asyncio.Task:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        owner = context.get(OWNER) if context is not None else OWNER.get()
        if owner is not None:
            owner.tasks.add(task)
            if owner.state is ProcessState.DEAD:
                task.cancel()
        return task

    def _intercept(self, handle: asyncio.Handle) -> bool:
        owner = handle._context.get(OWNER)  # type: ignore[attr-defined]
        if owner is None or owner.state is ProcessState.RUNNING:
            return False
        if owner.state is ProcessState.PAUSED:
            owner.held.append(handle)
            return True
        # Dead: its timers (its sleeps, retries, expirations, deliveries to it) are dropped; what
        # its running code chained (task steps, future callbacks) runs, so cancellations end.
        return isinstance(handle, asyncio.TimerHandle) and task_of(handle._callback) is None  # type: ignore[attr-defined]

    def tasks_of(self, incarnation: Incarnation) -> list[asyncio.Task]:
        """The incarnation's unfinished tasks, in creation order (deterministic)."""
        return sorted((t for t in incarnation.tasks if not t.done()), key=self.loop.task_number)


class BrokerProcess:
    """One broker id: its config and log dirs, and the incarnation running now (if any)."""

    def __init__(
        self,
        broker_id: int,
        props: dict[str, str],
        loop: SimEventLoop,
        table: ProcessTable,
        network: SimNetwork,
        zookeeper: ZooKeeperServer,
    ) -> None:
        self.broker_id = broker_id
        self.node = node_name(broker_id)
        self.props = props
        self.loop = loop
        self.table = table
        self.network = network
        self.zookeeper = zookeeper
        self.clock = SimClock(loop)
        self.server: BrokerServer | None = None
        self.incarnation: Incarnation | None = None
        self.incarnations = 0
        #: incarnations started after a power loss (their logs lost what was not fsynced), and
        #: the virtual time of the latest power loss
        self.after_power_loss: set[int] = set()
        self.power_lost_at: float | None = None
        self.zk_client: SimKazooClient | None = None
        self.halted: int | None = None  # the exit code the broker halted with (KIP-112)
        self.disk: Disk | None = None  # its log dirs' page-cache model and faults (sim/storage.py)

    @property
    def state(self) -> ProcessState:
        return self.incarnation.state if self.incarnation is not None else ProcessState.DEAD

    @property
    def running(self) -> bool:
        return self.state is ProcessState.RUNNING and self.server is not None

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self.props["log.dirs"].split(",")]

    # -- start -------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start a new incarnation (recovering the logs it finds) and wait for its start-up."""
        if self.incarnation is not None and self.incarnation.state is not ProcessState.DEAD:
            raise RuntimeError(f"broker {self.broker_id} is already running")
        self.incarnations += 1
        incarnation = Incarnation(self.broker_id, self.incarnations)
        self.incarnation = incarnation
        self.halted = None
        if self.disk is not None:
            self.disk.power_on()
        runtime = ServerRuntime(
            zk_client_factory=self._zk_client,
            connect=self.network.connector(self.node),
            acceptor_factory=lambda *args, **kwargs: SimAcceptor(self.network, self.node, *args, **kwargs),
            monotonic=self.loop.time,
            # a roll's flush job as a callback of this incarnation, not on a real flusher thread
            schedule_once=lambda _name, job: self.loop.call_soon(job),
            # recovery and log creation jobs one after another on the loop's thread, not on threads
            executor_factory=InlineExecutor,
            statvfs=self._statvfs,
            resource=SIM_OPEN_FILES,
        )
        server = BrokerServer(
            BrokerConfig(dict(self.props)),
            time_ms=self.clock,
            rng=self.loop.seeds.stream(f"{self.node}/{incarnation.number}"),
            halt=self._halt,
            runtime=runtime,
        )
        self.server = server
        context = contextvars.copy_context()
        context.run(OWNER.set, incarnation)
        startup = self.loop.create_task(
            server.startup(), name=f"{self.node}#{incarnation.number}-startup", context=context
        )
        try:
            await startup
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            raise ProcessCrashed(f"broker {self.broker_id} crashed while starting") from None
        except Exception as exc:
            # floodmark-broker exits when its start-up fails (broker/__main__.py lets the error
            # out, as Kafka's "Fatal error during KafkaServer startup"): the process is gone
            self.crash()
            raise ProcessCrashed(f"broker {self.broker_id} exited: its start-up failed: {exc!r}") from exc

    def _statvfs(self, path: str) -> Any:
        """The free space of the broker's log dirs, as its modelled disk reports it."""
        if self.disk is None:
            raise OSError(2, "no modelled disk", path)
        return self.disk.statvfs(path)

    def _zk_client(self, *args: Any, **kwargs: Any) -> SimKazooClient:
        self.zk_client = client_factory(self.zookeeper)(*args, **kwargs)
        return self.zk_client

    def _halt(self, code: int) -> None:
        """Kafka's Exit.halt (every log dir failed): the process dies on the spot."""
        self.halted = code
        self.loop.call_soon(self.crash, context=contextvars.Context())

    # -- faults ------------------------------------------------------------------------------------
    def crash(self) -> None:
        """SIGKILL: nothing of the process runs again (see the module doc)."""
        incarnation = self.incarnation
        if incarnation is None or incarnation.state is ProcessState.DEAD:
            return
        incarnation.state = ProcessState.DEAD
        # What a pause held goes back: the steps of its tasks run (their cancellation), the
        # interceptor drops the rest.
        held, incarnation.held = incarnation.held, []
        self.loop.requeue(held)
        self.network.kill_node(self.node)
        self._kill_zk_session()
        for task in self.table.tasks_of(incarnation):
            task.cancel()
        self._close_files()
        log.info("sim: broker %d crashed (incarnation %d)", self.broker_id, incarnation.number)

    def power_loss(self) -> PowerLoss | None:
        """The machine loses power: the process dies (:meth:`crash`), then its disk rolls back to
        what was fsynced and stays off until the next :meth:`start` (sim/storage_model.py)."""
        self.crash()
        self.after_power_loss.add(self.incarnations + 1)
        self.power_lost_at = self.loop.time()
        return self.disk.power_loss() if self.disk is not None else None

    def _kill_zk_session(self) -> None:
        """The TCP connection to ZooKeeper closes without a Close request: the server keeps the
        session until its timeout; the dead client never reconnects."""
        client = self.zk_client
        if client is None:
            return
        client._stopped = True
        if client._reconnect is not None:
            client._reconnect.cancel()
            client._reconnect = None
        connection, client.connection = client.connection, None
        if connection is not None:
            self.zookeeper.heal(client)
            contextvars.Context().run(self.zookeeper.drop, connection)
        self.zk_client = None

    def _close_files(self) -> None:
        """The kernel closes the dead process's descriptors: no flush, no checkpoint, no marker."""
        server = self.server
        log_manager = getattr(server, "log_manager", None)
        if log_manager is not None:
            for partition_log in log_manager.all_logs().values():
                with contextlib.suppress(OSError):  # (Exception here once hid a bug: no log was closed)
                    partition_log.close(write_indexes=False)  # the dead process writes nothing
        state_change_log = getattr(server, "state_change_log", None)
        if state_change_log is not None:
            with contextlib.suppress(Exception):
                state_change_log.close()

    async def restart(self) -> None:
        """Crash if still running, then start again on the same log dirs (recovery runs)."""
        self.crash()
        await self.start()

    def pause(self) -> None:
        """SIGSTOP: none of its callbacks runs until :meth:`resume`."""
        incarnation = self.incarnation
        if incarnation is None or incarnation.state is not ProcessState.RUNNING:
            return
        incarnation.state = ProcessState.PAUSED
        if self.zk_client is not None:  # no pings: the server expires the session in time
            contextvars.Context().run(self.zookeeper.isolate, self.zk_client)

    def resume(self) -> None:
        """SIGCONT: what was held runs, in the order it became ready."""
        incarnation = self.incarnation
        if incarnation is None or incarnation.state is not ProcessState.PAUSED:
            return
        incarnation.state = ProcessState.RUNNING
        held, incarnation.held = incarnation.held, []
        self.loop.requeue(held)
        if self.zk_client is not None:
            self.zookeeper.heal(self.zk_client)

    async def stop(self, controlled: bool = False) -> None:
        """A clean shutdown (SIGTERM): BrokerServer.shutdown, controlled or not."""
        incarnation, server = self.incarnation, self.server
        if incarnation is None or server is None or incarnation.state is ProcessState.DEAD:
            return
        self.resume()
        context = contextvars.copy_context()
        context.run(OWNER.set, incarnation)
        await self.loop.create_task(
            server.shutdown(controlled=controlled), name=f"{self.node}-shutdown", context=context
        )
        incarnation.state = ProcessState.DEAD
        for task in self.table.tasks_of(incarnation):
            task.cancel()
        self.zk_client = None


def node_name(broker_id: int) -> str:
    """The network node (and host name prefix) of a broker."""
    return f"broker-{broker_id}"


def host_name(broker_id: int) -> str:
    return f"{node_name(broker_id)}.sim"
