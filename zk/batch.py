"""The controller's ZooKeeper reads and writes of many partitions at once (docs/design.md "The
controller at scale (issue 25)"), beside :mod:`zk.client`'s one-znode calls: fenced multi-ops that
carry many partitions' writes (:func:`fenced_multi_batched`, :func:`delete_fenced`), and reads of
many state znodes in ZooKeeper multiRead requests or parallel windows
(:func:`get_partition_states`, :func:`windowed`). Kafka's ZooKeeper-era controller pipelines one
request per znode (KafkaZkClient's ``*Raw`` calls); with kazoo each request costs the caller about
0.1 ms of its own time, so at 10,000 partitions the number of requests is what counts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from kazoo.exceptions import NoNodeError, RolledBackError

from client.types import TopicPartition
from zk.bridge import DeleteOp, ZkBridge, ZkOp
from zk.client import ControllerMovedError, fenced_multi, get_partition_state
from zk.data import decode_partition_state
from zk.paths import partition_state_path

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

#: Ops per ZooKeeper multi in the controller's batched writes (:func:`fenced_multi_batched`):
#: a partition's state write is one or two ops of about 150 bytes (a 249-character topic name:
#: about 600), so a multi stays far below ZooKeeper's 1 MiB request limit (jute.maxbuffer),
#: which closes the connection when exceeded.
MULTI_MAX_OPS = 500
#: How often a batched multi is committed again without the group whose op failed it.
MULTI_RESUBMISSIONS = 3
#: Reads sent before the first of them is awaited (:func:`windowed`): sending one costs the
#: loop about 0.1 ms (kazoo's queue and wake-up socket), so a window is about 50 ms.
READ_WINDOW = 500
#: From this many state znodes on, :func:`get_partition_states` reads them with multiRead.
MULTI_READ_MIN = 100


def pack_groups(sizes: Sequence[int], max_ops: int) -> list[list[int]]:
    """Pack groups of ``sizes[i]`` ops, in order, into multis of at most ``max_ops`` ops (a group
    larger than that alone in its multi): the indices of the groups of each multi."""
    packed: list[list[int]] = []
    ops = 0
    for index, size in enumerate(sizes):
        if not packed or ops + size > max_ops:
            packed.append([])
            ops = 0
        packed[-1].append(index)
        ops += size
    return packed


def group_of_op(sizes: Sequence[int], op_index: int) -> int | None:
    """Which of the groups of ``sizes`` (packed in order into one multi) holds op ``op_index``."""
    end = 0
    for index, size in enumerate(sizes):
        end += size
        if op_index < end:
            return index
    return None


async def fenced_multi_batched(
    zk: ZkBridge,
    epoch_zk_version: int,
    groups: Sequence[Sequence[ZkOp]],
    max_ops: int = MULTI_MAX_OPS,
    resubmissions: int = MULTI_RESUBMISSIONS,
) -> list[list | BaseException]:
    """Commit many groups of ops (one partition's writes each) in few fenced multis of at most
    ``max_ops`` ops, committed in parallel, instead of one round trip per group. A multi is
    atomic: when one op fails, ZooKeeper names it (``op_index``); its group gets that error and
    the others of the multi are committed again without it, at most ``resubmissions`` times,
    after which they get RolledBackError, meaning "not written, try on your own"
    (:func:`zk.client.fenced_multi` per group is the caller's fallback).

    Returns, per group in order, the results of its ops or the error that refused it. An error
    that names no op (ConnectionLoss past the bridge's retries, SessionExpiredError) is every
    group's of that multi. ControllerMovedError is raised: this controller is deposed."""
    results: list[list | BaseException] = [RolledBackError() for _ in groups]

    async def commit(indices: list[int]) -> None:
        pending = list(indices)
        for _ in range(resubmissions + 1):
            if not pending:
                return
            sizes = [len(groups[i]) for i in pending]
            try:
                done = await fenced_multi(zk, epoch_zk_version, [op for i in pending for op in groups[i]])
            except ControllerMovedError:
                raise
            except Exception as exc:  # noqa: BLE001 - handed to the group it belongs to
                op_index = getattr(exc, "op_index", None)
                failed = None if op_index is None or op_index < 0 else group_of_op(sizes, op_index)
                if failed is None:
                    for i in pending:
                        results[i] = exc
                    return
                results[pending[failed]] = exc
                del pending[failed]
                continue
            for i in pending:
                results[i], done = done[: len(groups[i])], done[len(groups[i]) :]
            return

    packed = pack_groups([len(g) for g in groups], max_ops)
    outcomes = await asyncio.gather(*(commit(indices) for indices in packed), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return results


async def delete_fenced(zk: ZkBridge, epoch_zk_version: int, paths: Sequence[str]) -> None:
    """Delete ``paths`` in batched fenced multi-ops (:func:`fenced_multi_batched`); one already
    gone is no error, one that fails otherwise is logged. ControllerMovedError is raised: this
    controller is deposed."""
    results = await fenced_multi_batched(zk, epoch_zk_version, [[DeleteOp(p)] for p in paths])
    retry = [p for p, r in zip(paths, results, strict=True) if isinstance(r, RolledBackError)]
    if retry:  # taken down by another path's failure too often: one multi each
        again = await asyncio.gather(
            *(fenced_multi(zk, epoch_zk_version, [DeleteOp(p)]) for p in retry), return_exceptions=True
        )
        by_path = dict(zip(retry, again, strict=True))
        results = [by_path.get(p, r) for p, r in zip(paths, results, strict=True)]
    for path, result in zip(paths, results, strict=True):
        if isinstance(result, ControllerMovedError):
            raise result
        if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
            log.warning("cannot delete %s: %s", path, result)


async def get_partition_states(
    zk: ZkBridge, partitions: Sequence[TopicPartition], return_exceptions: bool = False
) -> list:
    """The state znodes of ``partitions``, in order. From MULTI_READ_MIN partitions on, in
    ZooKeeper multiRead requests of a thousand znodes (:meth:`zk.bridge.ZkBridge.get_many`);
    fewer, or without multiRead, one getData each, in parallel windows of READ_WINDOW
    (:func:`windowed`; Kafka's getTopicPartitionStatesRaw pipelines them the same way). Each is
    a LeaderIsrAndControllerEpoch or None (no znode), or, with ``return_exceptions``, the
    exception its read met (else the first one is raised)."""
    if len(partitions) < MULTI_READ_MIN or not getattr(zk, "supports_multi_read", False):
        return await windowed(partitions, lambda tp: get_partition_state(zk, tp), return_exceptions)
    try:
        got = await zk.get_many([partition_state_path(tp.topic, tp.partition) for tp in partitions])
    except Exception as exc:
        if not return_exceptions:
            raise
        return [exc] * len(partitions)
    states: list = []
    for answer in got:
        try:
            states.append(None if answer is None else decode_partition_state(answer[0], answer[1].version))
        except Exception as exc:
            if not return_exceptions:
                raise
            states.append(exc)
    return states


async def windowed(
    items: Sequence[T], read: Callable[[T], Awaitable[R]], return_exceptions: bool = False
) -> list:
    """``read`` of every item, in order, in parallel windows of READ_WINDOW: a window's requests
    are all sent before its first answer is awaited, and the window bounds how long the loop
    spends sending before it serves anything else."""
    results: list = []
    for start in range(0, len(items), READ_WINDOW):
        reads = (read(item) for item in items[start : start + READ_WINDOW])
        results += await asyncio.gather(*reads, return_exceptions=return_exceptions)
    return results
