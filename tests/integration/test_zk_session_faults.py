"""ZooKeeper session faults at exact points (review findings 4, 6 and 8; docs/guarantees.md
"Fencing"): Kafka 2.4's KafkaZkClient.checkControllerAndEpoch (an election write whose reply was
lost), KafkaServer's re-registration after session expiry (checkedEphemeralCreate) and
ControllerEventManager.clearAndPut(Expire).

ZooKeeper is real (the session-scoped ``zookeeper`` fixture). Failures are injected by
:class:`~tests.bridge_faults.FailingZk`, a thin wrapper around the real :class:`~zk.bridge.ZkBridge` that fails
chosen calls with kazoo's ConnectionLoss, before or after the real call, or by driving the
state-listener callbacks directly; never by timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.server import BrokerServer
from controller.controller import ControllerConfig, KafkaController
from controller.controller_election import read_controller_epoch
from controller.event_manager import (
    BrokerChange,
    Expire,
    IsrChangeNotification,
    Reelect,
    TopicChange,
    TopicDeletion,
)
from tests.bridge_faults import FailingZk
from zk.bridge import CreateOp, SetDataOp, ZkBridge
from zk.data import (
    EndPoint,
    decode_controller,
    decode_controller_epoch,
    encode_controller,
    encode_controller_epoch,
)
from zk.paths import CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, broker_id_path

BROKER = 1


def _is_election(ops: Any) -> bool:
    return any(isinstance(op, CreateOp) and op.path == CONTROLLER_PATH for op in ops)


async def _bridge(zk_connect: str) -> ZkBridge:
    bridge = ZkBridge(zk_connect, session_timeout_ms=6000)
    await bridge.start()
    return bridge


def _controller(zk: Any) -> KafkaController:
    return KafkaController(
        BROKER,
        zk,
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 1_000,
        random.Random(7),
        lambda _record: None,
    )


async def _controller_znodes(bridge: ZkBridge) -> tuple[int, int, int]:
    data, stat = await bridge.get(CONTROLLER_PATH)
    epoch, epoch_stat = await bridge.get(CONTROLLER_EPOCH_PATH)
    assert stat.ephemeralOwner == bridge.session_id
    return decode_controller(data), decode_controller_epoch(epoch), epoch_stat.version


# -- finding 4 --------------------------------------------------------------------------------------
async def test_election_write_committed_but_reply_lost_still_makes_the_controller(zk_connect: str) -> None:
    """Old code: Startup failed with ConnectionLoss and the Reelect after it found broker 1 in
    /controller and returned: ``assert controller.is_active`` failed (no controller at all)."""
    bridge = await _bridge(zk_connect)
    zk = FailingZk(bridge)
    zk.fail("multi", match=_is_election, after_commit=True)
    controller = _controller(zk)
    try:
        await controller.startup()
        controller.events.put(reelect := _reelect(controller))
        await reelect.done  # what the /controller watch's reset would queue next
        assert zk.injected == ["multi after commit"]
        owner, epoch, version = await _controller_znodes(bridge)
        assert owner == BROKER
        assert controller.is_active
        assert (controller.epoch, controller.epoch_zk_version) == (epoch, version) == (1, 1)
    finally:
        await controller.shutdown()
        await bridge.close()


async def test_own_controller_znode_found_while_inactive_is_taken_over(zk_connect: str) -> None:
    """A resignation whose delete of /controller failed silently leaves our znode behind, with
    the epoch our election wrote. Old code: ``_elect`` saw its own id and returned:
    ``assert controller.is_active`` failed."""
    bridge = await _bridge(zk_connect)
    controller = _controller(bridge)
    try:
        await bridge.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(4))
        epoch, version = await read_controller_epoch(bridge)
        await bridge.multi(
            [
                CreateOp(CONTROLLER_PATH, encode_controller(BROKER, 1), ephemeral=True),
                SetDataOp(CONTROLLER_EPOCH_PATH, encode_controller_epoch(epoch + 1), version),
            ]
        )
        await controller.startup()
        assert controller.is_active
        assert (controller.epoch, controller.epoch_zk_version) == (5, version + 1)
    finally:
        await controller.shutdown()
        await bridge.close()


def _reelect(controller: KafkaController):
    from controller.event_manager import Reelect

    return Reelect(done=asyncio.get_running_loop().create_future())


# -- finding 8 --------------------------------------------------------------------------------------
async def test_session_expiry_drops_the_backlog_and_runs_expire_first(zk_connect: str) -> None:
    """Old code: the events queued behind the held one ran before Expire, with the controller
    still active: the processed list began [('BrokerChange', True), ...]."""
    bridge = await _bridge(zk_connect)
    controller = _controller(bridge)
    processed: list[tuple[str, bool]] = []
    gate = asyncio.Event()
    entered = asyncio.Event()
    try:
        await controller.startup()
        assert controller.is_active

        async def held(event: Any) -> None:
            entered.set()
            await gate.wait()

        handlers = controller._handlers()

        def recording(kind: type) -> Callable:
            original = handlers[kind]

            async def handler(event: Any) -> Any:
                processed.append((event.name, controller.is_active))
                return await original(event)

            return handler

        for kind in (BrokerChange, IsrChangeNotification, TopicDeletion, Expire, Reelect):
            handlers[kind] = recording(kind)
        handlers[TopicChange] = held
        controller._handlers = lambda: handlers
        controller.events.put(TopicChange())
        await entered.wait()
        backlog = [BrokerChange(), IsrChangeNotification(), TopicDeletion()]
        for event in backlog:
            controller.events.put(event)
        controller._on_zk_state("LOST")  # as the bridge delivers it, on the loop
        gate.set()
        while not processed or controller.events.queue_size or controller.events.current is not None:
            await asyncio.sleep(0.01)
        assert processed[0] == ("Expire", True)
        assert [p for p in processed if p[1]] == [("Expire", True)], processed
        assert not controller.is_active
    finally:
        await controller.shutdown()
        await bridge.close()


# -- finding 6 --------------------------------------------------------------------------------------
def _server(zk: Any, zk_connect: str) -> BrokerServer:
    server = BrokerServer(
        BrokerConfig({"broker.id": str(BROKER), "zookeeper.connect": zk_connect}),
        rng=random.Random(3),
    )
    server.zk = zk
    server.port = 19092
    server.replica_manager = SimpleNamespace(broker_epoch=-1)  # what registration sets (KIP-380)
    return server


async def _registered(bridge: ZkBridge, timeout_s: float = 10.0) -> int | None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        stat = await bridge.exists(broker_id_path(BROKER))
        if stat is not None:
            return stat.ephemeralOwner
        await asyncio.sleep(0.05)
    return None


@pytest.mark.parametrize("after_commit", [False, True], ids=["lost-request", "lost-reply"])
async def test_reregistration_after_session_loss_retries_until_registered(
    zk_connect: str, after_commit: bool
) -> None:
    """Old code, lost-request: the one re-registration attempt died with ConnectionLoss and nothing
    retried: ``assert await _registered(bridge) == bridge.session_id`` failed (None == <session>).
    Lost-reply: the znode landed but the task died with ConnectionLoss:
    ``assert all(t.exception() is None ...)`` failed."""
    bridge = await _bridge(zk_connect)
    zk = FailingZk(bridge)
    server = _server(zk, zk_connect)
    try:
        await server._register()
        await bridge.delete(broker_id_path(BROKER))  # what the session's expiry does to it
        zk.fail("create", match=lambda path: path == broker_id_path(BROKER), after_commit=after_commit)
        server._on_zk_state("LOST")
        server._on_zk_state("CONNECTED")
        assert await _registered(bridge) == bridge.session_id
        # The re-registration must end once registered: wait for exactly that (a retry still
        # going would keep it running past the bound, or end it with an exception below).
        await asyncio.wait_for(asyncio.wait(server._tasks), 10)
        assert zk.injected == ["create after commit" if after_commit else "create before"]
        assert all(t.done() for t in server._tasks)
        assert all(t.exception() is None for t in server._tasks)
        registration = await bridge.exists(broker_id_path(BROKER))
        assert server.replica_manager.broker_epoch == registration.czxid  # KIP-380
    finally:
        for task in server._tasks:
            task.cancel()
        await asyncio.gather(*server._tasks, return_exceptions=True)
        await bridge.close()


async def test_reregistration_waits_for_the_previous_sessions_znode(zk_connect: str) -> None:
    """The previous session's /brokers/ids/1 outlives register_broker's wait (1.5 x the session
    timeout); the broker must keep trying and register once that session ends. Old code: the one
    attempt raised NodeExistsError and nothing retried: ``_registered`` returned None."""
    bridge = await _bridge(zk_connect)
    old = ZkBridge(zk_connect, session_timeout_ms=6000)
    await old.start()
    server = _server(bridge, zk_connect)
    server._registered.set()  # it registered once (the znode ``old`` holds stands for that)
    bridge.session_timeout_ms = 200  # register_broker gives up on the old session after 0.3 s
    try:
        await zk_register_as(old)
        with _first_log(server_log, "re-registration in ZooKeeper failed") as gave_up:
            server._on_zk_state("LOST")
            server._on_zk_state("CONNECTED")
            # register_broker's own wait ended (NodeExistsError): only a retry can register now.
            await asyncio.wait_for(gave_up.wait(), 10)
        await old.close()  # the previous session ends: its ephemeral goes
        assert await _registered(bridge) == bridge.session_id
    finally:
        for task in server._tasks:
            task.cancel()
        await asyncio.gather(*server._tasks, return_exceptions=True)
        await old.close()
        await bridge.close()


async def test_a_broker_still_starting_is_not_registered_by_a_session_event(zk_connect: str) -> None:
    """A session lost and regained before start-up reached its registration step registers
    nothing: the start-up's own step does that once its socket server listens (before, the
    session handler registered a broker with no listener: seed 219 of the simulator with
    consumers, a "ghost" the controller sent LeaderAndIsr to and got connection refused)."""
    bridge = await _bridge(zk_connect)
    server = _server(bridge, zk_connect)
    try:
        server._on_zk_state("LOST")
        server._on_zk_state("CONNECTED")
        assert not server._tasks
        await asyncio.sleep(0.3)
        assert await bridge.exists(broker_id_path(BROKER)) is None
    finally:
        await bridge.close()


server_log = logging.getLogger("broker.server")


@contextlib.contextmanager
def _first_log(logger: logging.Logger, text: str) -> Iterator[asyncio.Event]:
    """An event set (on the loop's thread, where the broker logs) by the first record with ``text``."""
    seen = asyncio.Event()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if text in record.getMessage():
                seen.set()

    handler = Handler(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


async def zk_register_as(bridge: ZkBridge) -> None:
    from zk.client import register_broker

    await register_broker(bridge, BROKER, [EndPoint("PLAINTEXT", "127.0.0.1", 19092)], 1_000)
