"""Adversarial review of topic ids (KIP-516) and the FULL LeaderAndIsr's stray-replica deletion:
each test forces one interleaving against the real controller (a real ZooKeeper, requests
recorded by tests/unit/controller_harness.py) and a real broker (ReplicaManager + LogManager on
a temporary dir, tests/unit/test_leader_and_isr_topic_ids.py's Broker), and fails today.
"""

from __future__ import annotations

import random
from pathlib import Path

from client.protocol.api import ApiKey, validate_request
from client.protocol.records import build_batch
from controller.controller import ControllerConfig, KafkaController
from tests.unit.controller_harness import Calls, start
from tests.unit.test_controller_zk_faults import idle
from tests.unit.test_leader_and_isr_topic_ids import Broker, codes, recorded_id
from zk.bridge import ZkBridge
from zk.data import encode_topic_assignment
from zk.paths import CONTROLLER_PATH, topic_path

FULL = 2


async def start_successor(zk: ZkBridge, controller_id: int) -> tuple[KafkaController, Calls]:
    """A second controller (the previous one resigned), its requests recorded."""
    calls = Calls()
    controller = KafkaController(
        controller_id,
        zk,
        ControllerConfig(auto_leader_rebalance_enable=False),
        lambda: 0,
        random.Random(1),
        lambda r: None,
    )
    controller.batch._send = calls
    await controller.startup()
    assert controller.is_active
    await idle(controller)
    return controller, calls


async def apply(broker: Broker, body: dict) -> dict:
    return await broker.rm.become_leader_or_follower(validate_request(ApiKey.LEADER_AND_ISR, 0, dict(body)))


async def test_failover_after_an_id_less_rewrite_deletes_every_replica_of_the_topic(
    zk: ZkBridge, tmp_path: Path
) -> None:
    """The interleaving: topic t has id X (given by controller 1) and broker 1 leads t-0 with a
    record, its partition.metadata saying X. An older tool (a pre-2.8 kafka-reassign-partitions /
    kafka-topics --zookeeper, or a pre-topic-id floodmark) rewrites /brokers/topics/t as version 1
    without the id while controller 1 is going away (it never reads the rewrite; the restore of
    controller/topic_ids.py:read_topic needs the id in *its* context). Controller 2's failover
    (controller/failover.py:initialize_context -> topic_ids.read_topic) knows no id, draws a NEW
    one Y, and sends broker 1 a FULL LeaderAndIsr whose hosted_topics say t is Y: the broker
    (broker/replica/topic_ids.py:find_stray_replicas, rule 2) deletes t-0 as "a deleted topic"
    -- on every replica at once, so the topic's data is gone cluster-wide.

    Kafka 3.7 assigns the new id too (KafkaController.processTopicIds ->
    KafkaZkClient.setTopicIds), but in ZooKeeper mode the broker only answers
    INCONSISTENT_TOPIC_ID (ReplicaManager.becomeLeaderOrFollower: hasConsistentTopicId) and
    keeps the log; updateStrayLogs runs only for a KRaft controller's FULL request."""
    controller, calls = await start(zk, zk, [1, 2], {"t": {0: [1, 2]}})
    broker = Broker(tmp_path)
    try:
        old_id = controller.context.topic_ids["t"]
        (first,) = calls.of(1, ApiKey.LEADER_AND_ISR)
        assert codes(await apply(broker, first.body)) == {("t", 0): 0}
        lg = broker.lm.get_log("t", 0)
        lg.append_as_leader(build_batch([(None, b"acknowledged", 0, [])]), 0)
        assert recorded_id(lg.dir) == old_id
    finally:
        await controller.shutdown()
    await zk.delete(CONTROLLER_PATH)  # controller 1's session is gone
    # the older tool's rewrite: same assignment, version 1, no topic_id
    got = await zk.get(topic_path("t"))
    assert got is not None
    await zk.set(topic_path("t"), encode_topic_assignment({0: [1, 2]}), got[1].version)

    successor, calls2 = await start_successor(zk, 2)
    try:
        full = calls2.of(1, ApiKey.LEADER_AND_ISR)[0].body
        assert full.get("type") == FULL
        new_id = successor.context.topic_ids["t"]
        await apply(broker, full)
        kept = broker.lm.get_log("t", 0)
        assert kept is not None and kept.log_end_offset == 1, (
            f"t-0's acknowledged record was deleted as a stray: the successor gave t a new id "
            f"{new_id} (was {old_id}) and its FULL LeaderAndIsr took the live log for a deleted "
            f"incarnation; state changes: "
            f"{[s for s in broker.state_changes if s.get('event') == 'StrayReplicaDeleted']}"
        )
    finally:
        await successor.shutdown()
        broker.lm.shutdown()


async def test_a_full_request_applied_after_a_newer_request_of_the_same_epoch_deletes_a_live_log(
    tmp_path: Path,
) -> None:
    """(Reachability-dependent; reported as a note.) The interleaving: controller epoch 2 sends
    broker 1 its FULL LeaderAndIsr F (hosting t-0) on connection A; the broker stalls past
    controller.socket.timeout.ms; the controller's sender (controller/channel.py:
    _BrokerSender._send_until_answered) drops A and resends F on connection B, which is answered;
    the next request R (same epoch 2) creates n-0 here and it takes writes; then F, read late from
    A, is applied. broker/replica/leader_and_isr.py:_become_leader_or_follower only fences F by
    controller epoch (2 == 2 passes) and topic_ids.delete_stray_replicas deletes n-0, which F's
    hosted_topics do not name. Kafka 3.7's ZooKeeper-mode broker never deletes on a LeaderAndIsr
    (ReplicaManager.becomeLeaderOrFollower: updateStrayLogs only for a KRaft controller's FULL),
    and an incremental request carrying an old leader epoch is refused per partition."""
    from tests.unit.test_leader_and_isr_topic_ids import hosted, state

    broker = Broker(tmp_path)
    t_id, n_id = "b1Sle8nHTmWcGCu-bBzMJw", "Vf3q5yUFQ4i0gn0Pfq4MKA"
    full_f = {"states": [state("t", t_id, is_new=True)], "full": [hosted("t", t_id, 0)]}
    await broker.leader_and_isr(full_f["states"], full=full_f["full"], epoch=2)  # F' on B
    await broker.leader_and_isr([state("n", n_id, is_new=True)], epoch=2)  # R: n-0 created
    broker.lm.get_log("n", 0).append_as_leader(build_batch([(None, b"acknowledged", 0, [])]), 0)
    await broker.leader_and_isr(full_f["states"], full=full_f["full"], epoch=2)  # F, late, from A
    lg = broker.lm.get_log("n", 0)
    try:
        assert lg is not None and lg.log_end_offset == 1, (
            "n-0 (created by a request newer than the late FULL, same controller epoch) was "
            f"deleted as a stray: {[s for s in broker.state_changes if s.get('event') == 'StrayReplicaDeleted']}"
        )
    finally:
        broker.lm.shutdown()
