"""The controller election after a lost reply (issue 18's test gap; Kafka's
KafkaZkClient.registerControllerAndIncrementControllerEpoch and checkControllerAndEpoch;
docs/guarantees.md "The controller under ZooKeeper blips"). Each mechanism is pinned alone:

* ``_elect`` resolves an election multi whose answer the bridge gave up on by reading
  (``check_controller_and_epoch``), in the same Startup;
* ``try_to_become_controller`` recognises its own /controller when the bridge's resend of a
  landed election answers NODEEXISTS;
* ``check_controller_and_epoch`` accepts /controller only when this session owns it (owner) and
  /controller_epoch was written by the transaction that created it (epoch).

(``_elect``'s take-over of our own /controller found while inactive is pinned by
tests/integration/test_zk_session_faults.py::test_own_controller_znode_found_while_inactive_is_taken_over.)
ZooKeeper is real; answers are lost above the bridge (:class:`FailingZk`, the bridge gave up) or
beneath it (:class:`LostMultiAnswers`, the bridge resends).
"""

from __future__ import annotations

import random
from typing import Any

from controller.controller import ControllerConfig, KafkaController
from controller.controller_election import read_controller_epoch
from tests.bridge_faults import FailingZk
from tests.unit.test_controller_unknown_outcomes import LostMultiAnswers
from tests.unit.test_controller_zk_faults import eventually
from zk.bridge import CreateOp, SetDataOp, ZkBridge
from zk.data import decode_controller, decode_controller_epoch, encode_controller, encode_controller_epoch
from zk.paths import CONTROLLER_EPOCH_PATH, CONTROLLER_PATH

BROKER = 1


def _controller(zk: Any) -> KafkaController:
    return KafkaController(
        BROKER,
        zk,
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 1_000,
        random.Random(7),
        lambda _record: None,
    )


def _is_election(ops: Any) -> bool:
    return any(isinstance(op, CreateOp) and op.path == CONTROLLER_PATH for op in ops)


async def _held(zk: ZkBridge) -> tuple[int, int, int, int]:
    """(owner id, its session, epoch, epoch zkVersion) as ZooKeeper holds them."""
    (data, stat), (epoch, epoch_stat) = await zk.get(CONTROLLER_PATH), await zk.get(CONTROLLER_EPOCH_PATH)
    return decode_controller(data), stat.ephemeralOwner, decode_controller_epoch(epoch), epoch_stat.version


async def _elected_by(zk: ZkBridge, broker_id: int) -> None:
    """An election multi of ``broker_id`` in ``zk``'s session, as ``try_to_become_controller`` writes it."""
    epoch, version = await read_controller_epoch(zk)
    await zk.multi(
        [
            CreateOp(CONTROLLER_PATH, encode_controller(broker_id, 1), ephemeral=True),
            SetDataOp(CONTROLLER_EPOCH_PATH, encode_controller_epoch(epoch + 1), version),
        ]
    )


async def test_election_answer_the_bridge_gave_up_on_is_resolved_in_the_same_startup(zk: ZkBridge) -> None:
    """The election multi commits and ConnectionLoss reaches ``_elect``. Without the read after
    it (checkControllerAndEpoch) the election counts as lost to broker 1 itself:
    ``controller.is_active`` is False after Startup and stays so until some Reelect."""
    failing = FailingZk(zk)
    failing.fail("multi", match=_is_election, after_commit=True)
    controller = _controller(failing)
    try:
        await controller.startup()
        assert failing.injected == ["multi after commit"]
        assert controller.is_active, "Startup did not resolve its own election"
        assert (BROKER, zk.session_id, 1, 1) == await _held(zk)
        assert (controller.epoch, controller.epoch_zk_version) == (1, 1)
    finally:
        await controller.shutdown()


async def test_election_resent_by_the_bridge_recognises_its_own_controller_znode(zk: ZkBridge) -> None:
    """The election multi commits, its answer is lost beneath the bridge and the bridge's resend
    answers NODEEXISTS. Without ``try_to_become_controller`` checking whose /controller that is,
    broker 1 loses the election to itself: ``controller.is_active`` is False after Startup."""
    lost = LostMultiAnswers(zk.client, CONTROLLER_PATH)
    controller = _controller(zk)
    try:
        await controller.startup()
        assert lost.injected == 1 and zk.resent_requests == 1
        assert controller.is_active, "the resent election was not recognised as ours"
        assert (controller.epoch, controller.epoch_zk_version) == (1, 1)
    finally:
        await controller.shutdown()


async def test_own_id_in_a_previous_sessions_controller_znode_is_not_taken_over(zk: ZkBridge) -> None:
    """Broker 1 restarted quickly: /controller still names it, owned by its previous session.
    That is not this session's election (the owner check): the controller waits for the old
    session's expiry and then wins a fresh epoch. Without the owner check it took over at once
    with the old session's epoch 1 while that session's /controller was still there."""
    previous = ZkBridge(zk.connect, session_timeout_ms=6000)
    await previous.start()
    await _elected_by(previous, BROKER)
    controller = _controller(zk)
    try:
        await controller.startup()
        assert not controller.is_active, "took over the previous session's /controller"
        assert controller.active_controller_id == BROKER

        await previous.close()  # the old session ends: /controller goes and its watch fires

        assert await eventually(lambda: controller.is_active)
        assert (BROKER, zk.session_id, 2, 2) == await _held(zk)
        assert (controller.epoch, controller.epoch_zk_version) == (2, 2)
    finally:
        await controller.shutdown()
        await previous.close()


async def test_own_controller_znode_without_its_epoch_is_deleted_and_the_election_rerun(zk: ZkBridge) -> None:
    """/controller names broker 1 in this session but /controller_epoch was not written by the
    transaction that created it (mzxid != czxid): the epoch is not this election's, so the znode
    is deleted and the election runs again (the epoch check). Without the check the controller
    took over with epoch 4, an epoch another controller held, instead of winning epoch 5."""
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(4))
    await zk.create(CONTROLLER_PATH, encode_controller(BROKER, 1), ephemeral=True)
    controller = _controller(zk)
    try:
        await controller.startup()
        assert await eventually(lambda: controller.is_active)
        assert (BROKER, zk.session_id, 5, 1) == await _held(zk)
        assert (controller.epoch, controller.epoch_zk_version) == (5, 1)
    finally:
        await controller.shutdown()
