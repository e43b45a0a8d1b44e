"""The partition state machine's ZooKeeper writes for many partitions at once, batched into few
fenced multi-ops (docs/design.md "The controller at scale (issue 25)").

Kafka's ZooKeeper-era controller pipelines one request per partition (KafkaZkClient's
createTopicPartitionStatesRaw and updateLeaderAndIsr send them all, then wait). Here the writes of
many partitions go into multis of at most :data:`zk.batch.MULTI_MAX_OPS` ops, each fenced once by
the /controller_epoch check (:func:`zk.batch.fenced_multi_batched`): creating 10,000 partitions
is about 40 round trips instead of 10,000 (and 20,000 existence checks of parents).

A multi is atomic, so what one partition's op refuses is handed back to that partition alone,
and what a refusal took down with it is written again. Every outcome a partition can meet is then
settled as the one-partition path settles it (:meth:`PartitionStateMachine._create_state` and
``_write_state``, passed in as ``create_one`` and ``write_one``): a NODEEXISTS or BADVERSION may
be this controller's own write that landed with its answer lost (the bridge resent the multi), and
is read back (:func:`zk.client.resolve_leader_and_isr_write`). One partition alone takes the
one-partition path directly: batching has nothing to save there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from kazoo.exceptions import BadVersionError, RolledBackError

from client.types import TopicPartition
from zk.batch import fenced_multi_batched
from zk.bridge import CreateOp, SetDataOp, ZkBridge
from zk.client import ControllerMovedError, fenced_multi, resolve_leader_and_isr_write
from zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch, encode_partition_state
from zk.paths import partition_path, partition_state_path, topic_partitions_path

CreateOne = Callable[[TopicPartition, LeaderIsrAndControllerEpoch], Awaitable[LeaderIsrAndControllerEpoch]]
WriteOne = Callable[[TopicPartition, LeaderAndIsr], Awaitable[LeaderAndIsr]]

#: Encoded partition states between two yields to the event loop (about 25 ms of JSON).
YIELD_EVERY = 500


async def _pause(done: int) -> None:
    """Let the loop serve others every YIELD_EVERY items of a long synchronous build (counted,
    not timed, so the simulator's schedule stays a function of its seed)."""
    if done % YIELD_EVERY == 0:
        await asyncio.sleep(0)


async def _each(
    items: Mapping[TopicPartition, object], one: Callable[[TopicPartition, object], Awaitable[object]]
) -> dict[TopicPartition, object]:
    """``one`` for every item, in parallel; each partition's result or exception."""
    results = await asyncio.gather(*(one(tp, value) for tp, value in items.items()), return_exceptions=True)
    return dict(zip(items, results, strict=True))


def _raise_moved(results: Mapping[TopicPartition, object]) -> None:
    for result in results.values():
        if isinstance(result, ControllerMovedError):
            raise result


async def create_states(
    zk: ZkBridge,
    epoch_zk_version: int,
    states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
    create_one: CreateOne,
) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | BaseException]:
    """Create the state znodes of new partitions (Kafka's createTopicPartitionStatesRaw): first
    each topic's ``.../partitions`` once, then per partition ``.../partitions/<p>`` and its
    ``state`` in batched fenced multis. A partition whose multi refused it (a parent already
    there, a create whose answer was lost, the topic gone) is created alone by ``create_one``,
    which looks at its parents first. Returns each partition's state or exception; raises
    ControllerMovedError."""
    if len(states) <= 1:
        results = await _each(states, create_one)
        _raise_moved(results)
        return results
    await _create_partitions_dirs(zk, epoch_zk_version, sorted({tp.topic for tp in states}))
    groups = []
    for tp, state in states.items():
        groups.append(
            [
                CreateOp(partition_path(tp.topic, tp.partition)),
                CreateOp(partition_state_path(tp.topic, tp.partition), encode_partition_state(state)),
            ]
        )
        await _pause(len(groups))
    batched = await fenced_multi_batched(zk, epoch_zk_version, groups)
    results: dict[TopicPartition, LeaderIsrAndControllerEpoch | BaseException] = {}
    alone: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
    for (tp, state), result in zip(states.items(), batched, strict=True):
        if isinstance(result, list):
            results[tp] = state
        else:
            alone[tp] = state
    again = await _each(alone, create_one)
    _raise_moved(again)
    results.update(again)
    return {tp: results[tp] for tp in states}


async def _create_partitions_dirs(zk: ZkBridge, epoch_zk_version: int, topics: list[str]) -> None:
    """``/brokers/topics/<t>/partitions`` of each topic that lacks it, each in its own fenced
    multi; one that appeared meanwhile, or whose topic is gone, is left to the partitions'
    creates (they fail, and ``create_one`` tells why)."""
    paths = [topic_partitions_path(t) for t in topics]
    present = await asyncio.gather(*(zk.exists(p) for p in paths))
    missing = [p for p, stat in zip(paths, present, strict=True) if stat is None]
    results = await asyncio.gather(
        *(fenced_multi(zk, epoch_zk_version, [CreateOp(p)]) for p in missing), return_exceptions=True
    )
    for result in results:
        if isinstance(result, ControllerMovedError):
            raise result


async def write_states(
    zk: ZkBridge,
    epoch_zk_version: int,
    controller_epoch: int,
    writes: Mapping[TopicPartition, LeaderAndIsr],
    write_one: WriteOne,
) -> dict[TopicPartition, LeaderAndIsr | BaseException]:
    """Write each partition's new leader and ISR conditionally on its zkVersion (Kafka's
    updateLeaderAndIsr), in batched fenced multis. Returns each partition's written state (with
    its new zkVersion) or exception: BadVersionError when the znode moved on (the caller reads it
    again and decides again), NoNodeError when it is gone. A BADVERSION that holds this very
    write (sent again after a lost answer) counts as written; a partition taken down by others'
    refusals too often is written alone by ``write_one``. Raises ControllerMovedError."""
    if len(writes) <= 1:
        results = await _each(writes, write_one)
        _raise_moved(results)
        return results
    groups = []
    for tp, lai in writes.items():
        data = encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch))
        groups.append([SetDataOp(partition_state_path(tp.topic, tp.partition), data, lai.zk_version)])
        await _pause(len(groups))
    batched = await fenced_multi_batched(zk, epoch_zk_version, groups)
    results: dict[TopicPartition, LeaderAndIsr | BaseException] = {}
    bad_version: list[TopicPartition] = []
    alone: dict[TopicPartition, LeaderAndIsr] = {}
    for (tp, lai), result in zip(writes.items(), batched, strict=True):
        if isinstance(result, list):
            results[tp] = lai.with_zk_version(result[0].version)
        elif isinstance(result, BadVersionError):
            bad_version.append(tp)
        elif isinstance(result, RolledBackError):
            alone[tp] = lai
        else:
            results[tp] = result
    landed = await asyncio.gather(
        *(resolve_leader_and_isr_write(zk, tp, writes[tp], controller_epoch) for tp in bad_version),
        return_exceptions=True,
    )
    for tp, outcome in zip(bad_version, landed, strict=True):
        results[tp] = BadVersionError() if outcome is None else outcome
    again = await _each(alone, write_one)
    _raise_moved(again)
    results.update(again)
    return {tp: results[tp] for tp in writes}
