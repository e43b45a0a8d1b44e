"""A deposed controller's election writes fail their epoch check (KIP-4's fence; Kafka's
``KafkaZkClient.updateLeaderAndIsr`` sends every state write in a multi guarded by
``/controller_epoch``'s version). A real KafkaController against a real ZooKeeper
(tests/unit/controller_harness.py): another controller wins behind its back (``/controller_epoch``
moves on while this one still believes it is active), then a broker fails and this controller
tries to take it out of the ISR. The write must not land.

Found as a coverage hole by the planted-bug harness (bench/sim_plants.py: no test failed with the
fence removed); the simulator's ``controller-epoch-fence`` invariant catches it in sweeps with the
``zombie-controller`` fault, this test catches it in one run.
"""

from __future__ import annotations

from client.types import TopicPartition
from tests.unit.controller_harness import start
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import ZkBridge
from zk.client import get_partition_state
from zk.data import decode_controller_epoch, encode_controller_epoch
from zk.paths import CONTROLLER_EPOCH_PATH, broker_id_path

TP = TopicPartition("t", 0)


async def test_a_deposed_controllers_isr_removal_does_not_land(zk: ZkBridge) -> None:
    controller, _calls = await start(zk, zk, [1, 2, 3], {"t": {0: [2, 1, 3]}})
    try:
        before = (await get_partition_state(zk, TP)).leader_and_isr
        assert (before.leader, before.isr) == (2, (2, 1, 3))
        got = await zk.get(CONTROLLER_EPOCH_PATH)
        assert got is not None
        epoch, stat = decode_controller_epoch(got[0]), got[1]
        await zk.set(CONTROLLER_EPOCH_PATH, encode_controller_epoch(epoch + 1), stat.version)
        await zk.delete(broker_id_path(2))  # the leader's broker dies: an election for t-0
        assert await eventually(lambda: 2 not in controller.context.live_broker_ids)
        await idle(controller)
        after = await get_partition_state(zk, TP)
        assert after.leader_and_isr == before, (
            f"a controller of epoch {epoch} wrote t-0's state {after} after /controller_epoch moved to {epoch + 1}"
        )
    finally:
        await controller.shutdown()
