"""Controller election (Kafka's KafkaController.elect; the winner then runs onControllerFailover,
:mod:`controller.failover`).

Every broker is a candidate. The winner is whoever creates the ephemeral /controller; in the
same multi-op it raises /controller_epoch by one, conditional on the version it read, and
keeps the version it wrote: every later controller write first checks that version
(:func:`zk.fenced_multi`), so a deposed controller cannot write any more.
/controller_epoch is created as 0 the first time, so the first controller has epoch 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zk.bridge import CreateOp, SetDataOp, ZkBridge
from zk.data import (
    INITIAL_CONTROLLER_EPOCH,
    decode_controller,
    decode_controller_epoch,
    encode_controller,
    encode_controller_epoch,
)
from zk.paths import CONTROLLER_EPOCH_PATH, CONTROLLER_PATH

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionWin:
    epoch: int
    epoch_zk_version: int


async def read_controller_epoch(zk: ZkBridge) -> tuple[int, int]:
    """(epoch, zkVersion) of /controller_epoch, creating it as 0 when it does not exist yet."""
    while True:
        got = await zk.get(CONTROLLER_EPOCH_PATH)
        if got is not None:
            return decode_controller_epoch(got[0]), got[1].version
        with contextlib.suppress(NodeExistsError):  # another candidate may create it first
            await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(INITIAL_CONTROLLER_EPOCH))


async def try_to_become_controller(zk: ZkBridge, broker_id: int, timestamp_ms: int) -> ElectionWin | None:
    """Create /controller and increment /controller_epoch atomically. None if another broker won."""
    for _ in range(3):
        epoch, version = await read_controller_epoch(zk)
        try:
            results = await zk.multi(
                [
                    CreateOp(CONTROLLER_PATH, encode_controller(broker_id, timestamp_ms), ephemeral=True),
                    SetDataOp(CONTROLLER_EPOCH_PATH, encode_controller_epoch(epoch + 1), version),
                ]
            )
        except (NodeExistsError, BadVersionError) as exc:
            mine = await _our_controller_node(zk, broker_id)
            if mine:
                # An earlier attempt of ours went through (a retried request): it is our epoch.
                epoch, version = await read_controller_epoch(zk)
                return ElectionWin(epoch, version)
            if isinstance(exc, BadVersionError) and await zk.exists(CONTROLLER_PATH) is None:
                continue  # the epoch moved without a controller appearing: read it again
            return None
        return ElectionWin(epoch + 1, results[1].version)
    return None


async def _our_controller_node(zk: ZkBridge, broker_id: int) -> bool:
    got = await zk.get(CONTROLLER_PATH)
    if got is None:
        return False
    data, stat = got
    try:
        return decode_controller(data) == broker_id and stat.ephemeralOwner == zk.session_id
    except (ValueError, KeyError):
        return False


async def check_controller_and_epoch(zk: ZkBridge, broker_id: int) -> ElectionWin | None:
    """Kafka's checkControllerAndEpoch, after an election write whose answer was lost or a
    resignation whose delete failed: /controller is this broker's, in this session, and
    /controller_epoch was written by the multi that created it (same zxid), so that epoch is
    ours. Our /controller with another epoch is deleted (its watch runs the election again)."""
    controller, epoch = await asyncio.gather(zk.get(CONTROLLER_PATH), zk.get(CONTROLLER_EPOCH_PATH))
    if controller is None or epoch is None:
        return None
    (data, stat), (epoch_data, epoch_stat) = controller, epoch
    if decode_controller(data) != broker_id or stat.ephemeralOwner != zk.session_id:
        return None  # another broker, or our previous session's znode: its expiry fires the watch
    if epoch_stat.mzxid != stat.czxid:
        with contextlib.suppress(NoNodeError, BadVersionError):
            await zk.delete(CONTROLLER_PATH, version=stat.version)
        return None
    return ElectionWin(decode_controller_epoch(epoch_data), epoch_stat.version)
