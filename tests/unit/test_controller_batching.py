"""The controller at scale (issue 25; docs/design.md "The controller at scale (issue 25)"): its
ZooKeeper writes of many partitions go in few fenced multis, its reads of many state znodes in
multiRead requests, a failover's first writes start from the states it has just read, its
requests to a broker are split at ``controller.request.max.partitions``, and big batches are sent
a request at a time.

The ZooKeeper is real (the ``zk`` fixture); :class:`Counting` wraps the bridge and counts each
kind of call, so a test can say "one multi per 500 ops" instead of timing anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest
from kazoo.exceptions import BadVersionError, RolledBackError

from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller.channel import ControllerBrokerRequestBatch, log_response_errors
from controller.context import ControllerContext
from controller.partition_state_machine import PartitionState, PartitionStateMachine
from controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from tests.unit.controller_harness import start
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.batch import MULTI_READ_MIN, fenced_multi_batched, get_partition_states, group_of_op, pack_groups
from zk.bridge import SetDataOp, ZkBridge
from zk.client import ControllerMovedError, get_partition_state
from zk.data import (
    BrokerInfo,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    encode_controller_epoch,
    encode_partition_state,
    encode_topic_assignment,
)
from zk.paths import (
    CONTROLLER_EPOCH_PATH,
    delete_topic_path,
    partition_path,
    partition_state_path,
    topic_path,
)

EPOCH = 1
TOPIC = "big"


class Counting:
    """The bridge, with every coroutine call counted by name (``multi`` once per multi)."""

    def __init__(self, zk: ZkBridge) -> None:
        self._zk = zk
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._zk, name)
        if not asyncio.iscoroutinefunction(real):
            return real

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await real(*args, **kwargs)

        return call


class Records:
    def __init__(self) -> None:
        self.entries: list[tuple[str, dict]] = []

    def __call__(self, decision: str, **fields: object) -> None:
        self.entries.append((decision, fields))


def tps(n: int) -> list[TopicPartition]:
    return [TopicPartition(TOPIC, p) for p in range(n)]


def state(
    leader: int, isr: tuple[int, ...], epoch: int = 0, zk_version: int = 0
) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, epoch, isr, zk_version), EPOCH)


def set_op(p: int, written: LeaderIsrAndControllerEpoch, version: int = 0) -> SetDataOp:
    return SetDataOp(partition_state_path(TOPIC, p), encode_partition_state(written), version)


async def cluster(zk: ZkBridge, n: int, live: list[int], with_states: bool) -> ControllerContext:
    """Topic ``big`` of ``n`` partitions on [1, 2, 3] (leader 1, full ISR when ``with_states``)."""
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(EPOCH))
    await zk.create(topic_path(TOPIC), encode_topic_assignment({p: [1, 2, 3] for p in range(n)}))
    context = ControllerContext(epoch=EPOCH, epoch_zk_version=0)
    context.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in live}
    for tp in tps(n):
        context.set_replicas(tp, [1, 2, 3])
    if with_states:
        await zk.ensure_path(f"/brokers/topics/{TOPIC}/partitions")
        data = encode_partition_state(state(1, (1, 2, 3)))
        for start in range(0, n, 200):
            await asyncio.gather(
                *(
                    zk.create(partition_state_path(TOPIC, p), data, makepath=True)
                    for p in range(start, min(n, start + 200))
                )
            )
        for tp in tps(n):
            context.partition_leadership[tp] = state(1, (1, 2, 3))
    return context


def machines(zk: Any, context: ControllerContext) -> tuple[PartitionStateMachine, ReplicaStateMachine]:
    batch = ControllerBrokerRequestBatch(1, context, lambda *a: None)
    partitions = PartitionStateMachine(context, zk, batch, Records(), False)
    return partitions, ReplicaStateMachine(context, batch, partitions, Records())


# -- packing ----------------------------------------------------------------------------------------


def test_groups_are_packed_in_order_and_never_split() -> None:
    assert pack_groups([2, 2, 2, 2, 2], max_ops=4) == [[0, 1], [2, 3], [4]]
    assert pack_groups([1] * 5, max_ops=500) == [[0, 1, 2, 3, 4]]
    assert pack_groups([3, 6, 1], max_ops=4) == [[0], [1], [2]]  # a group past the bound goes alone
    assert pack_groups([], max_ops=4) == []


def test_an_op_index_names_its_group() -> None:
    sizes = [2, 1, 3]
    assert [group_of_op(sizes, i) for i in range(6)] == [0, 0, 1, 2, 2, 2]
    assert group_of_op(sizes, 6) is None


# -- fenced_multi_batched ----------------------------------------------------------------------------


async def test_a_thousand_writes_take_three_multis(zk: ZkBridge) -> None:
    await cluster(zk, 1200, live=[1, 2, 3], with_states=True)
    counting = Counting(zk)
    groups = [[set_op(p, state(2, (2, 3), 1))] for p in range(1200)]

    results = await fenced_multi_batched(counting, 0, groups)  # type: ignore[arg-type]

    assert counting.calls == {"multi": 3}
    assert all(isinstance(r, list) and r[0].version == 1 for r in results)
    written = await get_partition_state(zk, TopicPartition(TOPIC, 1199))
    assert written is not None and written.leader_and_isr.leader == 2


async def test_a_refused_op_fails_its_group_alone_and_the_rest_is_written(zk: ZkBridge) -> None:
    await cluster(zk, 10, live=[1, 2, 3], with_states=True)
    await zk.set(partition_state_path(TOPIC, 4), encode_partition_state(state(1, (1, 2))), 0)  # now version 1
    groups = [[set_op(p, state(2, (2, 3), 1))] for p in range(10)]

    results = await fenced_multi_batched(zk, 0, groups)

    assert isinstance(results[4], BadVersionError)
    assert all(isinstance(r, list) for i, r in enumerate(results) if i != 4)


async def test_too_many_refusals_leave_the_rest_to_the_caller(zk: ZkBridge) -> None:
    await cluster(zk, 10, live=[1, 2, 3], with_states=True)
    for p in (1, 2, 3):
        await zk.set(partition_state_path(TOPIC, p), encode_partition_state(state(1, (1, 2))), 0)
    groups = [[set_op(p, state(2, (2, 3), 1))] for p in range(10)]

    results = await fenced_multi_batched(zk, 0, groups, resubmissions=2)

    # three commits, each refused by the next stale version; then the rest is left
    assert [type(r).__name__ for r in results[:4]] == [
        "RolledBackError",
        "BadVersionError",
        "BadVersionError",
        "BadVersionError",
    ]
    assert all(isinstance(r, RolledBackError) for r in results[4:])  # not written: the caller's turn
    untouched = await get_partition_state(zk, TopicPartition(TOPIC, 9))
    assert untouched is not None and untouched.leader_and_isr.zk_version == 0


async def test_a_deposed_controller_writes_nothing(zk: ZkBridge) -> None:
    await cluster(zk, 600, live=[1, 2, 3], with_states=True)
    groups = [[SetDataOp(partition_state_path(TOPIC, p), b"x", 0)] for p in range(600)]
    with pytest.raises(ControllerMovedError):
        await fenced_multi_batched(zk, 7, groups)
    unchanged = await get_partition_state(zk, TopicPartition(TOPIC, 0))
    assert unchanged is not None and unchanged.leader_and_isr.zk_version == 0


# -- the partition state machine -----------------------------------------------------------------------


async def test_creating_a_thousand_partitions_is_a_few_multis_and_no_existence_checks(zk: ZkBridge) -> None:
    context = await cluster(zk, 1000, live=[1, 2, 3], with_states=False)
    counting = Counting(zk)
    partitions, _ = machines(counting, context)
    partitions.initialize()

    failed = await partitions.handle_state_changes(tps(1000), PartitionState.ONLINE)

    assert failed == {}
    # .../partitions once (looked for, then created), then 2000 creates in multis of 500 ops
    assert counting.calls == {"exists": 1, "multi": 1 + 4}
    assert all(partitions.state(tp) is PartitionState.ONLINE for tp in tps(1000))
    last = await get_partition_state(zk, TopicPartition(TOPIC, 999))
    assert last is not None and (last.leader_and_isr.leader, last.leader_and_isr.isr) == (1, (1, 2, 3))
    assert set(partitions.batch.leader_and_isr) == {1, 2, 3}
    assert len(partitions.batch.leader_and_isr[2]) == 1000


async def test_a_partition_whose_dir_exists_is_created_alone(zk: ZkBridge) -> None:
    """A leftover ``.../partitions/3`` (another writer's) refuses its group: partition 3 takes
    the one-partition path, which looks at the parents; everyone else is in the multis."""
    context = await cluster(zk, 20, live=[1, 2, 3], with_states=False)
    await zk.create(partition_path(TOPIC, 3), makepath=True)
    partitions, _ = machines(zk, context)
    partitions.initialize()

    failed = await partitions.handle_state_changes(tps(20), PartitionState.ONLINE)

    assert failed == {}
    for tp in tps(20):
        created = await get_partition_state(zk, tp)
        assert created is not None and created.leader_and_isr.leader == 1, tp


async def test_a_failover_writes_from_the_states_it_read_and_reads_what_moved(zk: ZkBridge) -> None:
    """Broker 1 (leader of everything) is dead. Trusting the context, the elections write without
    reading first; partition 7's leader shrank its ISR since the context was read, so its write
    meets BADVERSION, and only it is read and decided again."""
    context = await cluster(zk, 600, live=[2, 3], with_states=True)
    await zk.set(partition_state_path(TOPIC, 7), encode_partition_state(state(1, (1, 3))), 0)
    counting = Counting(zk)
    partitions, _ = machines(counting, context)
    partitions.initialize()
    assert partitions.state(TopicPartition(TOPIC, 0)) is PartitionState.OFFLINE

    with partitions.trusting_context():
        failed = await partitions.handle_state_changes(tps(600), PartitionState.ONLINE)

    assert failed == {}
    # the topic's config (unclean.leader.election.enable), then partition 7 alone: the
    # BADVERSION's resolution and the re-read
    assert counting.calls["get"] == 1 + 2
    # 600 writes in multis of 500 and 100, the first committed again without partition 7, whose
    # own write follows its re-read
    assert counting.calls["multi"] == 2 + 1 + 1
    moved = await get_partition_state(zk, TopicPartition(TOPIC, 7))
    assert moved is not None and (moved.leader_and_isr.leader, moved.leader_and_isr.isr) == (3, (3,))
    other = await get_partition_state(zk, TopicPartition(TOPIC, 8))
    assert other is not None and (other.leader_and_isr.leader, other.leader_and_isr.isr) == (2, (2, 3))


async def test_without_trust_every_state_is_read_before_it_is_written(zk: ZkBridge) -> None:
    context = await cluster(zk, 600, live=[2, 3], with_states=True)
    counting = Counting(zk)
    partitions, replicas = machines(counting, context)
    partitions.initialize()
    replicas.initialize()

    await replicas.handle_state_changes([PartitionReplica(tp, 3) for tp in tps(600)], ReplicaState.OFFLINE)

    # 600 reads in one multiRead, 600 writes in multis of 500 and 100
    assert counting.calls == {"get_many": 1, "multi": 2}
    shrunk = await get_partition_state(zk, TopicPartition(TOPIC, 0))
    assert shrunk is not None and shrunk.leader_and_isr.isr == (1, 2)


# -- multiRead -------------------------------------------------------------------------------------------


async def test_multi_read_answers_every_znode_in_order_with_none_for_the_missing(zk: ZkBridge) -> None:
    """2,500 state znodes (and two that do not exist) in three multiRead requests of ZooKeeper
    3.6+, through the test's chroot, instead of 2,502 getData."""
    await cluster(zk, 2500, live=[1, 2, 3], with_states=True)
    await zk.set(partition_state_path(TOPIC, 1234), encode_partition_state(state(2, (2, 3), 1)), 0)
    counting = Counting(zk)
    assert counting.supports_multi_read
    wanted = [*tps(2500), TopicPartition(TOPIC, 9999), TopicPartition("nope", 0)]

    states = await get_partition_states(counting, wanted)  # type: ignore[arg-type]

    assert counting.calls == {"get_many": 1}
    assert states[-2:] == [None, None]
    assert all(
        s is not None and s.leader_and_isr.leader == 1 for i, s in enumerate(states[:2500]) if i != 1234
    )
    moved = states[1234]
    assert moved is not None and (moved.leader_and_isr.leader, moved.leader_and_isr.zk_version) == (2, 1)
    assert states[0] == await get_partition_state(zk, TopicPartition(TOPIC, 0))


async def test_few_states_are_read_one_get_each(zk: ZkBridge) -> None:
    """Below MULTI_READ_MIN each read is its own call, as every fault-injection test expects."""
    await cluster(zk, MULTI_READ_MIN - 1, live=[1, 2, 3], with_states=True)
    counting = Counting(zk)
    states = await get_partition_states(counting, tps(MULTI_READ_MIN - 1))  # type: ignore[arg-type]
    assert counting.calls == {"get": MULTI_READ_MIN - 1}
    assert all(s is not None for s in states)


# -- the request batch --------------------------------------------------------------------------------


def filled_batch(n: int, max_partitions: int, sent: list) -> ControllerBrokerRequestBatch:
    context = ControllerContext(epoch=EPOCH, epoch_zk_version=0)
    context.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2)}
    batch = ControllerBrokerRequestBatch(
        1, context, lambda *request: sent.append(request), max_partitions=max_partitions
    )
    for tp in tps(n):
        context.set_replicas(tp, [1, 2])
        context.partition_leadership[tp] = state(1, (1, 2))
        batch.add_leader_and_isr([1, 2], tp, context.partition_leadership[tp], [1, 2])
    return batch


def test_requests_are_split_at_max_partitions_in_partition_order() -> None:
    sent: list = []
    filled_batch(7, max_partitions=3, sent=sent).send(EPOCH)

    shapes = [(to, key, [p["partition"] for p in body["partition_states"]]) for to, key, body, _ in sent]
    assert shapes == [
        (1, ApiKey.LEADER_AND_ISR, [0, 1, 2]),
        (1, ApiKey.LEADER_AND_ISR, [3, 4, 5]),
        (1, ApiKey.LEADER_AND_ISR, [6]),
        (2, ApiKey.LEADER_AND_ISR, [0, 1, 2]),
        (2, ApiKey.LEADER_AND_ISR, [3, 4, 5]),
        (2, ApiKey.LEADER_AND_ISR, [6]),
        (1, ApiKey.UPDATE_METADATA, [0, 1, 2]),
        (1, ApiKey.UPDATE_METADATA, [3, 4, 5]),
        (1, ApiKey.UPDATE_METADATA, [6]),
        (2, ApiKey.UPDATE_METADATA, [0, 1, 2]),
        (2, ApiKey.UPDATE_METADATA, [3, 4, 5]),
        (2, ApiKey.UPDATE_METADATA, [6]),
    ]
    assert all(body["live_brokers"] for _, key, body, _ in sent if key is ApiKey.UPDATE_METADATA)


def test_a_brokers_elected_partitions_go_first_in_its_requests() -> None:
    """After a failover a broker's states take many requests, applied one after another: the
    partitions an election gave a leader come first, so they do not wait behind ISR updates."""
    sent: list = []
    batch = filled_batch(7, max_partitions=3, sent=sent)
    for p in (5, 2, 6):
        batch.add_leader_and_isr([1, 2], TopicPartition(TOPIC, p), state(2, (2,)), [1, 2], elected=True)
    batch.send(EPOCH)
    shapes = [(to, [p["partition"] for p in body["partition_states"]]) for to, key, body, _ in sent]
    assert shapes[:6] == [(1, [2, 5, 6]), (1, [0, 1, 3]), (1, [4]), (2, [2, 5, 6]), (2, [0, 1, 3]), (2, [4])]
    assert not batch.elected, "a sent batch forgets its elections"


def test_each_leader_and_isr_answer_is_read_against_its_own_request() -> None:
    sent: list = []
    seen: list[tuple[int, list[int]]] = []
    batch = filled_batch(5, max_partitions=2, sent=sent)
    batch._leader_and_isr_callback = lambda b, _r, body: seen.append(
        (b, [p["partition"] for p in body["partition_states"]])
    )
    batch.send(EPOCH)
    for to, key, _, callback in sent:
        if key is ApiKey.LEADER_AND_ISR:
            callback(to, {"error_code": 0, "partitions": []})
    assert seen == [(1, [0, 1]), (1, [2, 3]), (1, [4]), (2, [0, 1]), (2, [2, 3]), (2, [4])]


def test_live_brokers_alone_is_one_update_metadata() -> None:
    sent: list = []
    batch = filled_batch(0, max_partitions=3, sent=sent)
    batch.add_update_metadata([1, 2], [])
    batch.send(EPOCH)
    assert [(to, key, body["partition_states"]) for to, key, body, _ in sent] == [
        (1, ApiKey.UPDATE_METADATA, []),
        (2, ApiKey.UPDATE_METADATA, []),
    ]


async def test_a_large_batch_is_sent_a_request_at_a_time_and_a_small_one_at_once() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    task = asyncio.get_running_loop().create_task(ticker())
    await asyncio.sleep(0)
    try:
        sync_sent: list = []
        filled_batch(7, max_partitions=3, sent=sync_sent).send(EPOCH)
        async_sent: list = []
        before = ticks
        await filled_batch(7, max_partitions=3, sent=async_sent).send_async(EPOCH)
        assert [r[:3] for r in async_sent] == [r[:3] for r in sync_sent]
        assert ticks - before >= len(async_sent) - 1  # the loop ran between the requests
        before = ticks
        small: list = []
        await filled_batch(2, max_partitions=3, sent=small).send_async(EPOCH)
        assert len(small) == 4 and ticks == before
    finally:
        task.cancel()


def test_partition_errors_are_logged_one_line_per_error_code(caplog: pytest.LogCaptureFixture) -> None:
    fenced = [{"topic": "t", "partition": p, "error_code": ErrorCode.FENCED_LEADER_EPOCH} for p in range(300)]
    other = [{"topic": "t", "partition": 300, "error_code": ErrorCode.KAFKA_STORAGE_ERROR}]
    with caplog.at_level(logging.INFO, logger="controller.channel"):
        log_response_errors(2, {"error_code": 0, "partitions": [*fenced, *other]})
    lines = sorted(r.getMessage() for r in caplog.records)
    assert len(lines) == 2
    assert "FENCED_LEADER_EPOCH for t-0, t-1" in lines[0] and lines[0].endswith("and 290 more")
    assert lines[1] == "broker 2: KAFKA_STORAGE_ERROR for t-300"


# -- deleting a big topic --------------------------------------------------------------------------------


async def test_a_topic_of_more_znodes_than_one_multi_carries_is_deleted_partitions_first(
    zk: ZkBridge,
) -> None:
    """300 partitions: 600 znodes under the topic, past one multi's 500 ops (10,000 partitions'
    would pass ZooKeeper's 1 MiB request limit, and the single multi of before was refused every
    time). The partitions go in two batched multis, then the topic's own znodes in one."""
    counting = Counting(zk)
    controller, calls = await start(zk, counting, [1], {"big": {p: [1] for p in range(300)}})
    try:
        await zk.create(delete_topic_path("big"))
        assert await eventually(lambda: bool(calls.stop_replica_deletes(1, TopicPartition("big", 0))))
        await idle(controller)
        [request] = calls.stop_replica_deletes(1, TopicPartition("big", 0))
        before = counting.calls["multi"]
        every = [{"topic": "big", "partition": p, "error_code": ErrorCode.NONE} for p in range(300)]
        request.callback(1, {"error_code": 0, "partitions": every})
        assert await eventually(lambda: _gone(zk, topic_path("big"))), "the deletion of big hangs"
        await idle(controller)
        assert counting.calls["multi"] - before == 2 + 1
        assert await zk.exists(delete_topic_path("big")) is None
        assert await zk.exists(partition_path("big", 299)) is None
        assert "big" not in controller.context.assignments
    finally:
        await controller.shutdown()


async def _gone(zk: ZkBridge, path: str) -> bool:
    return await zk.exists(path) is None
