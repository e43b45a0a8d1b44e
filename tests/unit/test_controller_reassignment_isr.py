"""The controller's partition reassignment decides from ZooKeeper's ISR, and keeps an
interrupted move (controller/reassignment.py; Kafka's isReassignmentComplete, which reads the
state znode each time, and ReplicaAssignment.isBeingReassigned). A real KafkaController against a
real ZooKeeper whose broker requests are recorded (tests/unit/controller_harness.py); the
leader's ISR changes are written to the state znode by the test, as a leader writes them, with
no /isr_change_notification (which a leader writes 5 s to 60 s later), so the controller's
cached ISR is stale exactly as in a cluster; the windows are forced with
:meth:`tests.bridge_faults.FailingZk.before` hooks.

* Item 7: a move [1,2,3] -> [2,3] asked for right after the leader took 3 out of the ISR waits
  until both targets are in the ZooKeeper ISR, on the request's path, on a new controller's
  (failover step 12), and when the leader shrinks the ISR between the completion's decision
  and step 8's write; it ends with two in-sync copies, not one.
* Item 8: a replication-factor increase [1,2] -> [1,2,3] interrupted after step 1 (AR already
  equals the target) is not dropped as "already assigned": a new controller, or the event's
  retry after step 2 failed, keeps it in /admin/reassign_partitions (ListPartitionReassignments
  lists it, adding [3]) and completes it only when 3 joins the ZooKeeper ISR.
"""

from __future__ import annotations

import json
import random

from broker.reassignment_admin import list_partition_reassignments
from client.protocol.api import ApiKey
from controller.controller import ControllerConfig, KafkaController
from tests.bridge_faults import FailingZk
from tests.unit.controller_harness import start
from tests.unit.test_controller_reassignment import TP, leader_expands_isr, moved, request
from tests.unit.test_controller_zk_faults import eventually, idle
from zk.bridge import SetDataOp, ZkBridge
from zk.client import get_full_topic_assignment, get_partition_state, get_topic_assignment
from zk.paths import REASSIGN_PARTITIONS_PATH, partition_state_path


class Shrink:
    """A :meth:`FailingZk.before` hook: the leader takes 3 out of the ISR (its znode write only)."""

    def __init__(self, zk: ZkBridge) -> None:
        self.zk = zk
        self.ran = False

    async def __call__(self) -> None:
        self.ran = True
        got = await get_partition_state(self.zk, TP)
        await leader_expands_isr(self.zk, [r for r in got.leader_and_isr.isr if r != 3])


async def listed(zk: ZkBridge) -> list[dict]:
    """ListPartitionReassignments, all partitions: the entries of topic t."""
    answer = await list_partition_reassignments(zk, {"topics": None})
    return [p for t in answer["topics"] if t["name"] == "t" for p in t["partitions"]]


async def still_moving(
    zk: ZkBridge, controller: KafkaController, wide: list[int], target: list[int], origin: list[int]
) -> None:
    """The move is in progress: listed with Kafka's fields (adding RAR - OAR, removing OAR - RAR,
    as the topic znode holds them: KIP-455), AR = OAR + RAR in ZooKeeper, no replica deleted."""
    await idle(controller)
    assert TP in controller.context.partitions_being_reassigned, (
        "the move was completed (or dropped) while a target replica is outside the ZooKeeper ISR: "
        f"AR {(await get_topic_assignment(zk, 't'))[0]}, state {await get_partition_state(zk, TP)}"
    )
    assert controller.context.partitions_being_reassigned[TP] == target
    assert (await get_topic_assignment(zk, "t"))[0] == wide
    (entry,) = await listed(zk)
    assert (entry["replicas"], entry["adding_replicas"], entry["removing_replicas"]) == (
        wide,
        [r for r in target if r not in origin],
        [r for r in origin if r not in target],
    )
    full = (await get_full_topic_assignment(zk, "t"))[0]
    assert (list(full.adding_replicas), list(full.removing_replicas)) == (
        entry["adding_replicas"],
        entry["removing_replicas"],
    )


# -- item 7: the ISR the completion decides from ---------------------------------------------------


async def test_a_move_asked_right_after_the_leader_shrank_the_isr_waits_for_it(zk: ZkBridge) -> None:
    """Interleaving: the leader takes 3 out of the ISR in ZooKeeper (no notification yet, so the
    controller's cached ISR is still [1,2,3]); then the move [1,2,3] -> [2,3] is asked for."""
    controller, calls = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2, 3]}})
    try:
        await leader_expands_isr(zk, [1, 2])  # the leader's shrink: 3 fell behind
        await idle(controller)
        assert controller.context.partition_leadership[TP].leader_and_isr.isr == (1, 2, 3)  # stale
        await request(zk, [2, 3])
        assert await eventually(lambda: TP in controller.context.partitions_being_reassigned)
        await still_moving(zk, controller, [1, 2, 3], [2, 3], origin=[1, 2, 3])
        assert not calls.stop_replica_deletes(1, TP)
        state = (await get_partition_state(zk, TP)).leader_and_isr
        assert state.isr == (1, 2)  # nothing taken out

        await leader_expands_isr(zk, [1, 2, 3])  # 3 caught up
        await moved(zk, controller, [2, 3])
        final = (await get_partition_state(zk, TP)).leader_and_isr
        assert (final.leader, final.isr) == (2, (2, 3))  # two in-sync copies
        assert calls.stop_replica_deletes(1, TP)
    finally:
        await controller.shutdown()


async def test_a_new_controller_decides_the_move_from_the_isr_in_zookeeper(zk: ZkBridge) -> None:
    """Interleaving: the move [1,2,3] -> [2,3] waits in /admin/reassign_partitions for a
    controller; the new controller reads the state znodes (initialize_context), then the leader
    takes 3 out of the ISR (just before the controller reads the request), then failover step 12
    resumes the move."""
    await request(zk, [2, 3])
    failing, shrink = FailingZk(zk), Shrink(zk)
    failing.before("get", shrink, path=REASSIGN_PARTITIONS_PATH)
    controller, calls = await start(zk, failing, [1, 2, 3], {"t": {0: [1, 2, 3]}})
    try:
        assert shrink.ran
        await still_moving(zk, controller, [1, 2, 3], [2, 3], origin=[1, 2, 3])
        assert not calls.stop_replica_deletes(1, TP)

        await leader_expands_isr(zk, [1, 2, 3])
        await moved(zk, controller, [2, 3])
        final = (await get_partition_state(zk, TP)).leader_and_isr
        assert (final.leader, final.isr) == (2, (2, 3))
    finally:
        await controller.shutdown()


def _electing(ops: object) -> bool:
    """Step 7's write: broker 2 (a target replica) made leader."""
    return any(
        isinstance(op, SetDataOp)
        and op.path == partition_state_path("t", 0)
        and json.loads(op.value)["leader"] == 2
        for op in ops  # type: ignore[attr-defined]
    )


async def test_a_shrink_between_the_decision_and_step_8_stops_the_completion(zk: ZkBridge) -> None:
    """Interleaving: every target is in the ISR when the move [1,2,3] -> [2,3] is decided
    complete; the leader takes 3 out of the ISR just before step 7's write (a new leader from
    the target); step 8 must not then take 1 out of an ISR that lacks 3."""
    failing, shrink = FailingZk(zk), Shrink(zk)
    controller, calls = await start(zk, failing, [1, 2, 3], {"t": {0: [1, 2, 3]}})
    try:
        failing.before("multi", shrink, match=_electing)
        await request(zk, [2, 3])
        assert await eventually(lambda: shrink.ran)
        await still_moving(zk, controller, [1, 2, 3], [2, 3], origin=[1, 2, 3])
        assert not calls.stop_replica_deletes(1, TP)
        state = (await get_partition_state(zk, TP)).leader_and_isr
        assert state.leader == 2 and set(state.isr) == {1, 2}
        # back in phase 1: every replica of OAR + RAR hears the wide AR again
        last = calls.of(1, ApiKey.LEADER_AND_ISR, TP)[-1]
        entry = next(p for p in last.body["partition_states"] if p["partition"] == 0)
        assert (entry["leader"], entry["replicas"]) == (2, [1, 2, 3])

        await leader_expands_isr(zk, [2, 1, 3])
        await moved(zk, controller, [2, 3])
        final = (await get_partition_state(zk, TP)).leader_and_isr
        assert (final.leader, set(final.isr)) == (2, {2, 3})
    finally:
        await controller.shutdown()


# -- item 8: an interrupted replication-factor increase -------------------------------------------


async def test_a_new_controller_keeps_an_interrupted_rf_increase(zk: ZkBridge) -> None:
    """Interleaving: the controller runs steps 1-3 of [1,2] -> [1,2,3] (AR [1,2,3] in ZooKeeper:
    the target itself) and dies; a new controller takes over before 3 joins the ISR."""
    first, _ = await start(zk, zk, [1, 2, 3], {"t": {0: [1, 2]}})
    await request(zk, [1, 2, 3])
    assert await eventually(lambda: TP in first.context.partitions_being_reassigned)
    await idle(first)
    assert (await get_topic_assignment(zk, "t"))[0] == [1, 2, 3]  # step 1
    await first.shutdown()
    await zk.delete("/controller")
    second = KafkaController(
        2,
        zk,
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 0,
        random.Random(1),
        lambda r: None,
    )
    second.batch._send = lambda *args: None
    try:
        await second.startup()
        assert second.is_active
        await still_moving(zk, second, [1, 2, 3], [1, 2, 3], origin=[1, 2])
        assert await zk.exists(REASSIGN_PARTITIONS_PATH) is not None
        (entry,) = await listed(zk)
        assert (entry["replicas"], entry["adding_replicas"]) == ([1, 2, 3], [3])

        await leader_expands_isr(zk, [1, 2, 3])
        await moved(zk, second, [1, 2, 3])
        assert await listed(zk) == []
        assert (await get_partition_state(zk, TP)).leader_and_isr.isr == (1, 2, 3)
    finally:
        await second.shutdown()


def _bumping(ops: object) -> bool:
    """Step 2's write: the same leader and ISR under a new leader epoch."""
    return any(
        isinstance(op, SetDataOp)
        and op.path == partition_state_path("t", 0)
        and json.loads(op.value)["leader_epoch"] == 1
        for op in ops  # type: ignore[attr-defined]
    )


async def test_an_rf_increase_whose_step_2_failed_is_retried_not_dropped(zk: ZkBridge) -> None:
    """Interleaving: step 1 of [1,2] -> [1,2,3] lands (AR [1,2,3]), step 2's write fails; the
    event's retry finds AR equal to the target."""
    failing = FailingZk(zk)
    controller, calls = await start(zk, failing, [1, 2, 3], {"t": {0: [1, 2]}})
    try:
        failing.fail("multi", match=_bumping)
        await request(zk, [1, 2, 3])
        assert await eventually(lambda: bool(failing.injected))

        async def retried() -> bool:  # the retry resumed the move, or dropped the request
            return (
                TP in controller.context.partitions_being_reassigned
                or await zk.exists(REASSIGN_PARTITIONS_PATH) is None
            )

        assert await eventually(retried)
        await still_moving(zk, controller, [1, 2, 3], [1, 2, 3], origin=[1, 2])
        assert calls.of(3, ApiKey.LEADER_AND_ISR, TP), "the new replica was never started"

        await leader_expands_isr(zk, [1, 2, 3])
        await moved(zk, controller, [1, 2, 3])
    finally:
        await controller.shutdown()
