"""The thread pools of the log layer, injected (docs/design.md "Simulation"): log recovery at
start-up (``num.recovery.threads.per.data.dir``, Kafka's LogManager recovery threads), the
creation of many new logs at once, the leader-epoch checkpoint writers and the flusher each get
their pool from an :data:`ExecutorFactory` (``max_workers``, ``thread_name_prefix``). The
broker's default is :func:`thread_pool`, a ``concurrent.futures.ThreadPoolExecutor``; the
simulator passes one that runs every job on the spot, in submission order, so the work the
threads would share is a deterministic sequence of its schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

#: ``(max_workers, thread_name_prefix) -> Executor``
ExecutorFactory = Callable[[int, str], Executor]


def thread_pool(max_workers: int, thread_name_prefix: str) -> Executor:
    """The broker's pools: real threads."""
    return ThreadPoolExecutor(max_workers, thread_name_prefix=thread_name_prefix)
