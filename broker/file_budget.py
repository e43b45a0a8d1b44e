"""The broker's file budget (docs/design.md "Open files at scale (issue 25)", after issue 19's
"The file budget and resource exhaustion").

Kafka leaves the open-file limit to the operator (its docs ask for 100,000 or more: it holds a
descriptor per segment) and meets EMFILE as an IOException that takes the log dir offline. Here
the descriptors the logs hold are bounded by a setting, not by the partition count: every
segment's ``.log`` is opened on demand through the log manager's LRU
(:class:`broker.log.file_cache.SegmentFileCache`) and the index files hold none. At start:

1. ``floodmark-broker`` (broker/__main__.py) raises the soft RLIMIT_NOFILE to the hard limit
   (what a process may do unprivileged; an infinite hard limit is capped at Linux's default
   ``fs.nr_open``, 1,048,576);
2. the broker (broker/server.py) derives its :class:`zk.data.FileBudget`: a reserve for what must
   never fail and is not a log's (the ZooKeeper session, the controller channel, client and
   inter-broker sockets, checkpoint, snapshot and directory fsyncs, the cleaner's readers, the
   metrics server): :func:`default_reserve`, a quarter of the limit and at least 64 descriptors;
   the segment file cache's bound, ``log.segment.open.files.max`` (-1: everything the reserve
   leaves; an explicit value is capped there); :data:`FILES_PER_REPLICA` per replica, 0; and
   ``max.broker.partitions``, the explicit capacity;
3. logs it and publishes it in /brokers/ids/<id>, where CreateTopics, CreatePartitions and
   reassignments (controller/topic_admin.py) check new replicas against every broker's budget.

The resource module is injected, so the rules are tested without touching the process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

from zk.data import MAX_BROKER_PARTITIONS_DEFAULT, FileBudget

log = logging.getLogger(__name__)

#: A replica's descriptors at rest: none. Its segments' ``.log`` files, the active one included,
#: are opened on demand through the segment file cache (whose bound is the fixed cost) and its
#: index, checkpoint, epoch and snapshot files are opened only while read or written.
FILES_PER_REPLICA = 0
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
    """Descriptors kept out of the logs' budget: a quarter of the limit, at least 64."""
    return min(open_files_limit, max(MIN_RESERVE, open_files_limit // 4))


def segment_files_max(open_files_limit: int, configured: int = -1) -> int:
    """The segment file cache's bound: ``configured`` (``log.segment.open.files.max``), or with
    -1 everything the reserve leaves; never more than that, and at least one."""
    room = max(1, open_files_limit - default_reserve(open_files_limit))
    if configured < 0:
        return room
    if configured > room:
        log.warning(
            "log.segment.open.files.max=%d leaves no reserve under the open-file limit %d: using %d",
            configured,
            open_files_limit,
            room,
        )
        return room
    return max(1, configured)


def file_budget(
    open_files_limit: int,
    configured_segment_files: int = -1,
    max_partitions: int = MAX_BROKER_PARTITIONS_DEFAULT,
) -> FileBudget:
    return FileBudget(
        open_files_limit,
        default_reserve(open_files_limit),
        FILES_PER_REPLICA,
        segment_files_max(open_files_limit, configured_segment_files),
        max_partitions,
    )


def open_files() -> int | None:
    """Descriptors this process holds now (None where /proc is missing)."""
    try:
        return len(os.listdir(Path("/proc/self/fd"))) - 1  # less the one listdir itself opened
    except OSError:
        return None


def current_budget(
    resource: ResourceModule,
    configured_segment_files: int = -1,
    max_partitions: int = MAX_BROKER_PARTITIONS_DEFAULT,
) -> FileBudget:
    """The budget under the soft limit in force now (``floodmark-broker`` raised it at start)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = DEFAULT_NR_OPEN if soft == resource.RLIM_INFINITY else soft
    return file_budget(limit, configured_segment_files, max_partitions)


def log_budget(budget: FileBudget, broker_id: int, hosted_replicas: int, open_segment_files: int) -> None:
    """Log the budget at start-up, with what the loaded logs already hold."""
    by_files = budget.max_replicas_by_files
    log.info(
        "[KafkaServer id=%d] file budget: open-file limit %d = reserve %d (ZooKeeper, controller "
        "channel, connections, checkpoints) + segment file cache %d (log.segment.open.files.max; "
        "%d open) + %d files per replica at rest: room for %s replicas (max.broker.partitions %d; "
        "%d hosted, %s files open)",
        broker_id,
        budget.open_files_limit,
        budget.reserve,
        budget.segment_files,
        open_segment_files,
        budget.files_per_replica,
        "any number of" if by_files is None else by_files,
        budget.max_partitions,
        hosted_replicas,
        open_files(),
    )
    if hosted_replicas > budget.max_replicas:
        log.warning(
            "[KafkaServer id=%d] %d hosted replicas are past the budget of %d replicas",
            broker_id,
            hosted_replicas,
            budget.max_replicas,
        )
