"""The controller's failed events, retried (docs/design.md "The controller under ZooKeeper
blips", "The retry order"): a retried event runs before anything queued after it, so no later
event sees the half-done state of a failed one; the controller-election events still get
through; KIP-112's controller paths redo their work until it lands; and the LeaderAndIsr resend
is wired to the controller's events. A real KafkaController against a real ZooKeeper
(tests/unit/controller_harness.py), faults at exact calls (tests/bridge_faults.py).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller import leader_and_isr_retry
from controller.event_manager import ControllerChange, ControllerEventManager, Reelect, TopicChange
from tests.bridge_faults import FailingZk
from tests.unit.controller_harness import failing_hook, start
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import ZkBridge
from zk.client import get_partition_state, propagate_log_dir_event
from zk.data import encode_topic_assignment
from zk.paths import (
    BROKER_TOPICS_PATH,
    CONTROLLER_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    broker_id_path,
    delete_topic_path,
    partition_state_path,
    topic_path,
)

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
X0 = TopicPartition("x", 0)


# -- window 8: a retried event runs before the events queued after it ---------------------------------


async def test_a_failed_topic_change_is_retried_before_the_deletion_queued_after_it(zk: ZkBridge) -> None:
    failing = FailingZk(zk)
    controller, _ = await start(zk, failing, [1, 2], {"t": {0: [1, 2]}})
    try:

        async def admin_deletes_x() -> None:  # while the TopicChange that found x is being handled
            await zk.create(delete_topic_path("x"))
            controller.on_delete_topics_watch(None)  # type: ignore[arg-type]

        failing.before("get", failing_hook(admin_deletes_x), path=topic_path("x"))
        await zk.create(topic_path("x"), encode_topic_assignment({0: [1, 2]}))  # the admin was told: created

        assert await eventually(lambda: "x" in controller.context.assignments)
        await idle(controller)
        assert "x" in controller.context.topics_to_be_deleted, "the deletion of x was dropped as unknown"
        assert await zk.exists(delete_topic_path("x")) is not None
    finally:
        await controller.shutdown()


async def test_a_half_failed_broker_change_is_retried_before_a_topic_change_can_pick_the_dead_broker(
    zk: ZkBridge,
) -> None:
    failing = FailingZk(zk)
    controller, calls = await start(zk, failing, [1, 2, 3], {"t": {0: [2, 3], 1: [3, 2]}})
    try:

        async def admin_creates_x() -> None:  # while broker 2's failure is being handled
            await zk.create(topic_path("x"), encode_topic_assignment({0: [2, 3]}))
            controller.on_topics_watch(None)  # type: ignore[arg-type]

        # t-0 gets its new leader (3); then taking 2 out of t-1's ISR fails on its read.
        failing.before("get", failing_hook(admin_creates_x), path=partition_state_path("t", 1))
        await zk.delete(broker_id_path(2))

        assert await eventually(lambda: X0 in controller.context.partition_leadership)
        assert await eventually(lambda: 2 not in controller.context.live_brokers)
        await idle(controller)
        led_by_2 = [
            (s.to, s.api_key.name)
            for s in calls.sent
            if s.api_key in (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA)
            for p in s.body["partition_states"]
            if (p["topic"], p["partition"], p["leader"]) == ("x", 0, 2)
        ]
        assert not led_by_2, f"x-0 was given the dead broker 2 as leader: {led_by_2}"
        state = await get_partition_state(zk, X0)
        assert state is not None
        assert (state.leader_and_isr.leader, state.leader_and_isr.leader_epoch) == (3, 0), (
            "x-0 had a leader before"
        )
        state = await get_partition_state(zk, T1)
        assert state is not None and state.leader_and_isr.isr == (3,)
    finally:
        await controller.shutdown()


async def test_the_election_events_get_through_while_an_event_keeps_failing(
    zk: ZkBridge, caplog: pytest.LogCaptureFixture
) -> None:
    failing = FailingZk(zk)
    controller, _ = await start(zk, failing, [1, 2], {"t": {0: [1, 2]}})
    try:
        epoch = controller.epoch
        for _ in range(50):  # every TopicChange from now on fails (the failover's reads do not)
            failing.fail(
                "get_children",
                path=BROKER_TOPICS_PATH,
                match=lambda _path: isinstance(controller.events.current, TopicChange),
            )
        with caplog.at_level(logging.INFO, logger="controller.event_manager"):
            controller.events.put(TopicChange())
            assert await eventually(lambda: len(failing.failed) >= 2)
            # the controller moves (to this broker again, with a new epoch): the election runs
            # although the TopicChange waits at the head of the queue for its next attempt
            await zk.delete(CONTROLLER_PATH)
            assert await eventually(lambda: controller.is_active and controller.epoch == epoch + 1)
            failures = len(failing.failed)
            assert await eventually(lambda: len(failing.failed) > failures), (
                "the TopicChange is retried still"
            )
        assert any("in a row" in r.getMessage() for r in caplog.records)
    finally:
        await controller.shutdown()


async def test_the_event_manager_keeps_a_retry_at_the_head_and_lets_election_events_pass() -> None:
    ran: list[str] = []
    gate = asyncio.Event()
    manager: ControllerEventManager

    async def process(event: object) -> None:
        name = getattr(event, "label", type(event).__name__)
        ran.append(name)
        if name == "first":
            manager.retry_first(Labelled(label="first-retry"), failures=1)
            raise RuntimeError("failed half way")
        if name == "first-retry":
            await gate.wait()

    manager = ControllerEventManager(process)
    manager.put(Labelled(label="first"))
    manager.put(Labelled(label="second"))
    manager.put(ControllerChange())
    manager.start()
    try:
        assert await eventually(lambda: "first-retry" in ran)
        manager.put(Reelect())
        gate.set()
        assert await eventually(lambda: manager.queue_size == 0 and manager.current is None)
        assert ran == ["first", "ControllerChange", "first-retry", "second", "Reelect"]
    finally:
        await manager.close()


class Labelled(TopicChange):
    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label


# -- window 6: KIP-112's controller paths retry until their work lands -----------------------------------


async def test_a_log_dir_event_whose_read_failed_still_gets_the_broker_its_leader_and_isr(
    zk: ZkBridge,
) -> None:
    failing = FailingZk(zk)
    controller, calls = await start(zk, failing, [1, 2], {"t": {0: [1, 2], 1: [2, 1]}})
    try:
        before = len(calls.of(2, ApiKey.LEADER_AND_ISR))
        failing.fail("get", match=lambda p: str(p).startswith(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/"))
        await propagate_log_dir_event(zk, 2)

        def told_broker_2() -> bool:
            return any({T0, T1} <= s.partitions() for s in calls.of(2, ApiKey.LEADER_AND_ISR)[before:])

        assert await eventually(lambda: bool(failing.failed))
        assert await eventually(told_broker_2), (
            "broker 2 never got the LeaderAndIsr that finds its offline dir"
        )
        await idle(controller)
        assert not (await zk.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH) or [])
    finally:
        await controller.shutdown()


async def test_a_half_failed_leader_and_isr_answer_is_retried_until_the_replicas_are_offline(
    zk: ZkBridge,
) -> None:
    failing = FailingZk(zk)
    controller, calls = await start(zk, failing, [1, 2, 3], {"t": {0: [2, 3], 1: [3, 2]}})
    try:
        request = calls.of(2, ApiKey.LEADER_AND_ISR)[-1]
        # t-0 gets a new leader; then taking 2 out of t-1's ISR fails on its read.
        failing.fail("get", path=partition_state_path("t", 1))
        request.callback(
            2,
            {
                "error_code": 0,
                "partitions": [
                    {"topic": "t", "partition": p, "error_code": ErrorCode.KAFKA_STORAGE_ERROR}
                    for p in (0, 1)
                ],
            },
        )
        assert await eventually(lambda: bool(failing.failed))

        async def settled() -> bool:
            states = [await get_partition_state(zk, tp) for tp in (T0, T1)]
            return all(s is not None and s.leader_and_isr.isr == (3,) for s in states)

        assert await eventually(settled), "t-1 kept the replica on the offline dir in its ISR"
        assert controller.context.replicas_on_offline_dirs == {2: {T0, T1}}
    finally:
        await controller.shutdown()


# -- the LeaderAndIsr resend's wiring (controller/leader_and_isr_retry.py in controller.py) ----------------


async def test_a_partition_the_broker_could_not_apply_is_resent_with_its_current_leadership(
    zk: ZkBridge,
) -> None:
    controller, calls = await start(zk, zk, [1, 2], {"t": {0: [1, 2], 1: [1, 2]}})
    try:
        request = calls.of(2, ApiKey.LEADER_AND_ISR)[-1]
        before = len(calls.of(2, ApiKey.LEADER_AND_ISR))
        loop = asyncio.get_running_loop()
        answered_at = loop.time()
        request.callback(
            2,
            {
                "error_code": 0,
                "partitions": [
                    {"topic": "t", "partition": 0, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR},
                    {"topic": "t", "partition": 1, "error_code": ErrorCode.NONE},
                ],
            },
        )
        assert await eventually(lambda: len(calls.of(2, ApiKey.LEADER_AND_ISR)) > before)
        assert loop.time() - answered_at >= leader_and_isr_retry.INITIAL_BACKOFF_S * 0.9
        resent = calls.of(2, ApiKey.LEADER_AND_ISR)[before:]
        assert [s.partitions() for s in resent] == [{T0}], "only the partition that failed is resent"
        entry = resent[0].body["partition_states"][0]
        current = controller.context.partition_leadership[T0].leader_and_isr
        assert (entry["leader"], entry["leader_epoch"]) == (current.leader, current.leader_epoch)
        assert controller.leader_and_isr_retries._attempts == {(2, T0): 1}
        await idle(controller)
    finally:
        await controller.shutdown()
