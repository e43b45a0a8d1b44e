"""Review finding 3 (docs/guarantees.md "The controller under ZooKeeper blips"): a watch is never
lost for good. When kazoo's connection drops it clears every watch and fires a NONE event; the
handler re-registers by reading again, and that read can meet a second drop. Errors in the
controller's start-up must not leave it without a /controller watch either.

ZooKeeper is real; connection drops are real (kazoo's own drop hook) or injected at exact
requests beneath the bridge (:class:`KazooFaults`) or above it (:class:`FailingZk`: the bridge
gave up, as after ``retry_timeout_s``).
"""

from __future__ import annotations

import random

from client.types import TopicPartition
from controller.controller import ControllerConfig, KafkaController
from controller.controller_election import try_to_become_controller
from tests.bridge_faults import FailingZk
from tests.unit.kazoo_faults import KazooFaults, drop_connection
from tests.unit.test_controller_zk_faults import eventually, idle, start_controller
from zk.bridge import ZkBridge
from zk.client import get_partition_state
from zk.data import encode_topic_assignment
from zk.paths import BROKER_TOPICS_PATH, CONTROLLER_PATH, topic_path


def _controller(zk: object, broker_id: int = 1) -> KafkaController:
    return KafkaController(
        broker_id,
        zk,  # type: ignore[arg-type]
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 0,
        random.Random(0),
        lambda r: None,
    )


async def test_controller_watch_reset_then_a_lost_re_registration_still_sees_the_controller_go(
    zk: ZkBridge, zk_connect: str
) -> None:
    """Broker 2 is the controller; broker 1's connection drops (its /controller watch fires NONE)
    and the read that re-registers the watch loses its answer too. Old code: Reelect failed with
    ConnectionLoss, no watch was left, and when broker 2 went broker 1 never stood for election:
    ``controller.is_active`` stayed False (no controller at all)."""
    other = ZkBridge(zk_connect, session_timeout_ms=6000)
    await other.start()
    assert await try_to_become_controller(other, 2, 0) is not None
    controller = _controller(zk)
    try:
        await controller.startup()
        assert controller.active_controller_id == 2 and not controller.is_active
        faults = KazooFaults(zk.client)
        faults.fail("exists_async", path=CONTROLLER_PATH)

        await drop_connection(zk.client)
        assert await eventually(lambda: faults.injected == [("exists_async", CONTROLLER_PATH)])
        await idle(controller)
        await other.close()  # broker 2's session ends: /controller goes

        assert await eventually(lambda: controller.is_active), "broker 1 never stood for election"
    finally:
        await controller.shutdown()
        await other.close()


async def test_start_up_that_meets_a_connection_drop_still_elects(zk: ZkBridge) -> None:
    """The start-up's first read of /controller loses its answer. Old code: the error was
    suppressed, nothing retried, and with /controller absent no watch ever fired:
    ``controller.is_active`` stayed False."""
    faults = KazooFaults(zk.client)
    faults.fail("exists_async", path=CONTROLLER_PATH, after_answer=True)
    controller = _controller(zk)
    try:
        await controller.startup()
        assert faults.injected == [("exists_async", CONTROLLER_PATH)]
        assert await eventually(lambda: controller.is_active)
    finally:
        await controller.shutdown()


async def test_start_up_error_above_the_bridge_is_retried(zk: ZkBridge) -> None:
    """The bridge gave up (no connection within its retry timeout) during start-up. Old code:
    the error was suppressed and nothing retried: no election, ever."""
    failing = FailingZk(zk)
    failing.fail("exists", path=CONTROLLER_PATH)
    controller = _controller(failing)
    try:
        await controller.startup()
        assert failing.failed == [("exists", CONTROLLER_PATH)]
        assert await eventually(lambda: controller.is_active)
    finally:
        await controller.shutdown()


async def test_topic_watch_lost_with_a_failed_read_is_set_again(zk: ZkBridge) -> None:
    """A TopicChange's read of /brokers/topics fails after the bridge gave up. Old code: the
    event failed, the watch it would have set was gone, and topics created from then on never
    got leaders (``get_partition_state`` stayed None)."""
    failing = FailingZk(zk)
    controller, _recorded = await start_controller(zk, failing, [1, 2])
    try:
        failing.fail("get_children", path=BROKER_TOPICS_PATH)
        await zk.create(topic_path("u"), encode_topic_assignment({0: [1, 2]}))
        assert await eventually(lambda: failing.failed == [("get_children", BROKER_TOPICS_PATH)])
        assert await eventually(lambda: _led(zk, TopicPartition("u", 0)))

        await zk.create(topic_path("v"), encode_topic_assignment({0: [2, 1]}))
        assert await eventually(lambda: _led(zk, TopicPartition("v", 0))), "no watch on /brokers/topics"
    finally:
        await controller.shutdown()


async def _led(zk: ZkBridge, tp: TopicPartition) -> bool:
    state = await get_partition_state(zk, tp)
    return state is not None and state.leader_and_isr.leader >= 0
