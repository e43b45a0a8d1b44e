"""The broker's file budget (docs/design.md "The file budget"; issue 19 item 6).

Kafka leaves the open-file limit to the operator (its docs ask for 100,000 or more) and meets
EMFILE as an IOException that takes the log dir offline. Here, at start:

1. ``floodmark-broker`` (broker/__main__.py) raises the soft RLIMIT_NOFILE to the hard limit
   (what a process may do unprivileged; an infinite hard limit is capped at Linux's default
   ``fs.nr_open``, 1,048,576);
2. the broker (broker/server.py) derives its :class:`zk.data.FileBudget`: the limit, less a
   reserve for everything that is not a replica's files (the ZooKeeper session, client and
   inter-broker sockets, checkpoint and snapshot writes, the metrics server):
   :func:`default_reserve`, a quarter of the limit and at least 64 descriptors; at
   :data:`FILES_PER_REPLICA` files per replica;
3. logs it and publishes it in /brokers/ids/<id>, where CreateTopics and CreatePartitions
   (controller/topic_admin.py) check new replicas against every broker's budget.

The resource module is injected, so the rules are tested without touching the process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

from zk.data import FileBudget

log = logging.getLogger(__name__)

#: A replica's open files: its active segment's ``.log``, ``.index`` and ``.timeindex``
#: (broker/log/segment.py keeps all three of every segment open; a new replica has one segment).
FILES_PER_REPLICA = 3
#: Linux's default ``fs.nr_open``: the most a soft limit can be raised to when the hard one is infinite.
DEFAULT_NR_OPEN = 1_048_576
MIN_RESERVE = 64


class ResourceModule(Protocol):
    RLIMIT_NOFILE: int
    RLIM_INFINITY: int

    def getrlimit(self, resource: int, /) -> tuple[int, int]: ...

    def setrlimit(self, resource: int, limits: tuple[int, int], /) -> None: ...


def raise_open_files_limit(resource: ResourceModule) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = DEFAULT_NR_OPEN if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
    return DEFAULT_NR_OPEN if soft == resource.RLIM_INFINITY else soft


def default_reserve(open_files_limit: int) -> int:
    """Descriptors kept out of the replicas' budget: a quarter of the limit, at least 64."""
    return min(open_files_limit, max(MIN_RESERVE, open_files_limit // 4))


def file_budget(open_files_limit: int) -> FileBudget:
    return FileBudget(open_files_limit, default_reserve(open_files_limit), FILES_PER_REPLICA)


def open_files() -> int | None:
    """Descriptors this process holds now (None where /proc is missing)."""
    try:
        return len(os.listdir(Path("/proc/self/fd"))) - 1  # less the one listdir itself opened
    except OSError:
        return None


def current_budget(resource: ResourceModule) -> FileBudget:
    """The budget under the soft limit in force now (``floodmark-broker`` raised it at start)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return file_budget(DEFAULT_NR_OPEN if soft == resource.RLIM_INFINITY else soft)


def log_budget(budget: FileBudget, broker_id: int, hosted_replicas: int) -> None:
    """Log the budget at start-up, with what the loaded logs already hold."""
    log.info(
        "[KafkaServer id=%d] file budget: open-file limit %d, reserve %d, %d files per replica: "
        "room for %d replicas (%d hosted, %s files open)",
        broker_id,
        budget.open_files_limit,
        budget.reserve,
        budget.files_per_replica,
        budget.max_replicas,
        hosted_replicas,
        open_files(),
    )
    if hosted_replicas > budget.max_replicas:
        log.warning(
            "[KafkaServer id=%d] %d hosted replicas are past the file budget of %d replicas",
            broker_id,
            hosted_replicas,
            budget.max_replicas,
        )
