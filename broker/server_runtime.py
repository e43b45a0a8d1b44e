"""What a broker process takes from outside (docs/design.md "Simulation"): :class:`ServerRuntime`
holds the real ZooKeeper clients, connections, acceptors and clocks by default, and the
simulator's in-memory ones when it runs the broker. :mod:`broker.server` re-exports both names."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.file_budget import ResourceModule
from broker.log.disk_space import Statvfs
from broker.log.executor import ExecutorFactory, thread_pool
from broker.log.log import ScheduleOnce
from broker.network.acceptor import Acceptor
from broker.network.socket_server import AcceptorFactory
from client.connection import ConnectionFactory


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ServerRuntime:
    """What the broker takes from outside the process beyond its clock and randomness: ZooKeeper
    clients, outgoing connections, listening sockets, the monotonic clock of request timing. The
    defaults are the real ones; the simulator (docs/design.md "Simulation") passes its in-memory
    ZooKeeper's clients, its network's connections and acceptors, and its virtual clock."""

    #: ZkBridge's ``client_factory`` (None: kazoo's KazooClient)
    zk_client_factory: Callable[..., Any] | None = None
    #: opens the controller channel's, the replica fetchers' and controlled shutdown's connections
    #: (None: BrokerConnection.open, real TCP)
    connect: ConnectionFactory | None = None
    #: makes each listener's acceptor (default: a listening socket)
    acceptor_factory: AcceptorFactory = Acceptor
    monotonic: Callable[[], float] = time.monotonic
    #: runs each roll's "flush-log" job (None: the log manager's own flusher thread; the
    #: simulator runs it as a callback on its loop, since a real thread would race it)
    schedule_once: ScheduleOnce | None = None
    #: the log layer's thread pools (recovery, log creation, leader-epoch writers:
    #: broker/log/executor.py); the simulator's runs every job inline, in submission order
    executor_factory: ExecutorFactory = thread_pool
    #: measures the log dirs' free space (``log.dir.min.free.bytes``, DescribeLogDirs); the
    #: simulator's answers from its disk model, never the host's
    statvfs: Statvfs = os.statvfs
    #: the open-file limit the file budget is computed from (broker/file_budget.py); the
    #: simulator's is fixed, not the host's ``ulimit -n``
    resource: ResourceModule = resource  # type: ignore[assignment]
