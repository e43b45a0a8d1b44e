"""Controller state writes whose outcome is unknown (issue 18, window 5; docs/guarantees.md "The
controller under ZooKeeper blips"): the write lands, its answer is lost, the bridge sends it
again and the resend answers BADVERSION (a conditional set) or NODEEXISTS (a create). The
controller reads what ZooKeeper holds and, when it is its own write (same leader, leader epoch,
ISR and controller epoch), carries on as if the answer had arrived: LeaderAndIsr and
UpdateMetadata go out (Kafka's ReplicaStateMachine.doRemoveReplicasFromIsr and
PartitionStateMachine.initializeLeaderAndIsrForPartitions/electLeaderForPartitions).

ZooKeeper is real, and so is the bridge's resend: the answer is lost beneath the bridge, at the
exact multi-op that writes the state znode (:class:`LostMultiAnswers`), as kazoo reports a
connection drop to a request in flight.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from client.protocol.api import ApiKey
from client.types import TopicPartition
from controller.channel import ControllerBrokerRequestBatch
from controller.context import ControllerContext
from controller.partition_state_machine import ElectionStrategy, PartitionState, PartitionStateMachine
from controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from tests.unit.test_controller_zk_faults import eventually, start_controller_with
from zk.bridge import ZkBridge
from zk.client import get_partition_state
from zk.data import (
    BrokerInfo,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    encode_controller_epoch,
    encode_partition_state,
    encode_topic_assignment,
)
from zk.paths import CONTROLLER_EPOCH_PATH, broker_id_path, partition_state_path, topic_path

TP = TopicPartition("t", 0)
STATE_PATH = partition_state_path("t", 0)
CONTROLLER_EPOCH = 1


class LostMultiAnswers:
    """Beneath the bridge: the next multi-op that touches ``path`` is committed by ZooKeeper and
    its answer replaced by ConnectionLoss (what kazoo hands every request in flight when its
    connection drops). ``injected`` counts the answers lost."""

    def __init__(self, client: KazooClient, path: str) -> None:
        self.path = path
        self.injected = 0
        real_transaction = client.transaction

        def transaction() -> Any:
            request = real_transaction()
            real_commit = request.commit_async

            def commit_async() -> Any:
                full_path = (client.chroot or "") + self.path  # kazoo's ops hold chrooted paths
                touches = any(getattr(op, "path", None) == full_path for op in request.operations)
                if not touches or self.injected:
                    return real_commit()
                self.injected += 1
                lost = client.handler.async_result()
                real_commit().rawlink(lambda _answer: lost.set_exception(ConnectionLoss()))
                return lost

            request.commit_async = commit_async
            return request

        client.transaction = transaction


async def _cluster(zk: ZkBridge, assignment: list[int], live: list[int]) -> ControllerContext:
    await zk.create(CONTROLLER_EPOCH_PATH, encode_controller_epoch(CONTROLLER_EPOCH))
    await zk.create(topic_path("t"), encode_topic_assignment({0: assignment}))
    context = ControllerContext(epoch=CONTROLLER_EPOCH, epoch_zk_version=0)
    context.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in live}
    context.set_replicas(TP, assignment)
    return context


async def _state(zk: ZkBridge, leader: int, isr: tuple[int, ...]) -> LeaderIsrAndControllerEpoch:
    state = LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, 0, isr), CONTROLLER_EPOCH)
    await zk.create(STATE_PATH, encode_partition_state(state), makepath=True)
    return state


def _machines(zk: ZkBridge, context: ControllerContext) -> tuple[PartitionStateMachine, ReplicaStateMachine]:
    batch = ControllerBrokerRequestBatch(1, context, lambda *a: None)
    record = lambda *a, **k: None  # noqa: E731 - the recorder is not what these tests check
    partitions = PartitionStateMachine(context, zk, batch, record, False)
    return partitions, ReplicaStateMachine(context, batch, partitions, record)


def _told(batch: ControllerBrokerRequestBatch) -> dict[int, tuple[int, int, list[int]]]:
    """Who gets a LeaderAndIsr for TP, with (leader, leader epoch, ISR)."""
    told = {}
    for broker_id, entries in batch.leader_and_isr.items():
        if TP in entries:
            lai = entries[TP].state.leader_and_isr
            told[broker_id] = (lai.leader, lai.leader_epoch, list(lai.isr))
    return told


async def _znode(zk: ZkBridge) -> tuple[int, int, list[int], int, int]:
    state = await get_partition_state(zk, TP)
    assert state is not None
    lai = state.leader_and_isr
    return lai.leader, lai.leader_epoch, list(lai.isr), state.controller_epoch, lai.zk_version


async def test_isr_removal_whose_answer_was_lost_still_tells_the_leader(zk: ZkBridge) -> None:
    """Broker 2 dies; ISR [1, 3] at leader epoch 1 lands, its answer is lost, the resend gets
    BADVERSION. Old code: the re-read found 2 already out, "unchanged", and only UpdateMetadata
    went out: nobody was told leader epoch 1 (``_told`` was {})."""
    context = await _cluster(zk, [1, 2, 3], live=[1, 3])
    context.partition_leadership[TP] = await _state(zk, 1, (1, 2, 3))
    partitions, replicas = _machines(zk, context)
    replicas.states[PartitionReplica(TP, 2)] = ReplicaState.ONLINE
    lost = LostMultiAnswers(zk.client, STATE_PATH)

    await replicas.handle_state_changes([PartitionReplica(TP, 2)], ReplicaState.OFFLINE)

    assert lost.injected == 1 and zk.resent_requests == 1
    assert await _znode(zk) == (1, 1, [1, 3], CONTROLLER_EPOCH, 1)
    assert _told(partitions.batch) == {1: (1, 1, [1, 3]), 3: (1, 1, [1, 3])}
    assert context.partition_leadership[TP].leader_and_isr.zk_version == 1
    assert replicas.state(PartitionReplica(TP, 2)) is ReplicaState.OFFLINE


async def test_preferred_election_whose_answer_was_lost_still_moves_the_leadership(zk: ZkBridge) -> None:
    """Broker 2, the preferred replica, is elected; the write lands, its answer is lost, the
    resend gets BADVERSION. Old code: the re-read found 2 already leading ("already the leader")
    and nothing was sent: ZooKeeper said 2 leads, the brokers still acted on 1 (``failed`` held
    the partition and ``_told`` was {})."""
    context = await _cluster(zk, [2, 1], live=[1, 2])
    context.partition_leadership[TP] = await _state(zk, 1, (1, 2))
    partitions, _ = _machines(zk, context)
    partitions.states[TP] = PartitionState.ONLINE
    lost = LostMultiAnswers(zk.client, STATE_PATH)

    failed = await partitions.handle_state_changes([TP], PartitionState.ONLINE, ElectionStrategy.PREFERRED)

    assert lost.injected == 1 and zk.resent_requests == 1
    assert failed == {}
    assert await _znode(zk) == (2, 1, [1, 2], CONTROLLER_EPOCH, 1)
    assert _told(partitions.batch) == {1: (2, 1, [1, 2]), 2: (2, 1, [1, 2])}
    assert context.partition_leadership[TP].leader_and_isr.zk_version == 1


async def test_new_partition_whose_create_answer_was_lost_goes_online(zk: ZkBridge) -> None:
    """The state znode's create (with its parents) lands, its answer is lost, the resend gets
    NODEEXISTS. Old code: "state znode already exists", the partition stayed NewPartition with no
    leader told, and every later trigger failed the same way."""
    context = await _cluster(zk, [1, 2], live=[1, 2])
    partitions, _ = _machines(zk, context)
    partitions.initialize()
    assert partitions.state(TP) is PartitionState.NEW
    lost = LostMultiAnswers(zk.client, STATE_PATH)

    failed = await partitions.handle_state_changes([TP], PartitionState.ONLINE)

    assert lost.injected == 1 and zk.resent_requests == 1
    assert failed == {}
    assert partitions.state(TP) is PartitionState.ONLINE
    assert await _znode(zk) == (1, 0, [1, 2], CONTROLLER_EPOCH, 0)
    assert _told(partitions.batch) == {1: (1, 0, [1, 2]), 2: (1, 0, [1, 2])}
    assert partitions.batch.leader_and_isr[1][TP].is_new


async def test_a_state_write_that_lost_the_race_is_not_adopted(zk: ZkBridge) -> None:
    """The resolution adopts only this controller's own write: a BADVERSION because the leader
    changed the ISR meanwhile (same leader epoch, another ISR) is read again and decided again,
    as before."""
    context = await _cluster(zk, [1, 2, 3], live=[1, 3])
    context.partition_leadership[TP] = await _state(zk, 1, (1, 2, 3))
    partitions, replicas = _machines(zk, context)
    replicas.states[PartitionReplica(TP, 2)] = ReplicaState.ONLINE
    stale = context.partition_leadership[TP].leader_and_isr

    async def leader_shrinks_isr_first(tp: TopicPartition, lai: LeaderAndIsr) -> Any:
        shrunk = LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 0, (1, 3)), CONTROLLER_EPOCH)
        await zk.set(STATE_PATH, encode_partition_state(shrunk), stale.zk_version)
        partitions._write_state = real_write  # type: ignore[method-assign]
        return await real_write(tp, lai)

    real_write = partitions._write_state
    partitions._write_state = leader_shrinks_isr_first  # type: ignore[method-assign]

    await replicas.handle_state_changes([PartitionReplica(TP, 2)], ReplicaState.OFFLINE)

    # the leader's own shrink stands (2 already out: nothing to write), no LeaderAndIsr claims epoch 1
    assert await _znode(zk) == (1, 0, [1, 3], CONTROLLER_EPOCH, 1)
    assert _told(partitions.batch) == {}


async def test_broker_failure_whose_isr_write_answer_was_lost_tells_the_leader(zk: ZkBridge) -> None:
    """The whole controller: broker 2's registration goes, the controller's ISR write [1, 3] at
    leader epoch 1 lands and its answer is lost. Old code: only UpdateMetadata (advertising epoch
    1) went out; leader 1 was never sent a LeaderAndIsr at epoch 1, so it kept 2 in its ISR and
    its own ISR writes failed on BADVERSION (the wait below timed out)."""
    controller, recorded = await start_controller_with(zk, zk, [1, 2, 3], {TP: [1, 2, 3]})
    try:
        recorded.sent.clear()
        lost = LostMultiAnswers(zk.client, STATE_PATH)

        await zk.delete(broker_id_path(2))

        def leader_told() -> bool:
            return any(
                (broker, key, p["leader"], p["leader_epoch"], p["isr"])
                == (1, ApiKey.LEADER_AND_ISR, 1, 1, [1, 3])
                for broker, key, body in recorded.sent
                for p in body.get("partition_states", [])
            )

        assert await eventually(leader_told), recorded.sent
        assert lost.injected == 1
        assert await _znode(zk) == (1, 1, [1, 3], controller.epoch, 1)
    finally:
        await controller.shutdown()
