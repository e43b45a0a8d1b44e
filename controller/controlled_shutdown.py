"""Controlled shutdown (Kafka's KafkaController.doControlledShutdown): a broker about to exit
asks the controller to move its leaderships to other ISR members and take its follower replicas
Offline; the answer lists what it still leads. A request from an older incarnation of the broker
is STALE_BROKER_EPOCH (KIP-380).
"""

from __future__ import annotations

import logging

from client.protocol.errors import ErrorCode, KafkaError
from controller.event_manager import ControlledShutdown
from controller.partition_state_machine import ElectionStrategy, PartitionState
from controller.parts import ControllerParts
from controller.replica_state_machine import ReplicaState
from zk.data import PartitionReplica

log = logging.getLogger(__name__)


async def handle_controlled_shutdown(
    ctl: ControllerParts, event: ControlledShutdown
) -> list[tuple[str, int]]:
    if not ctl.is_active:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {ctl.broker_id} is not the controller")
    ctx = ctl.context
    broker_id = event.broker_id
    if broker_id not in ctx.live_brokers:
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
    live_epoch = ctx.live_brokers[broker_id].epoch
    if event.broker_epoch != -1 and event.broker_epoch < live_epoch:
        raise KafkaError(
            ErrorCode.STALE_BROKER_EPOCH,
            f"controlled shutdown of broker {broker_id} with broker epoch {event.broker_epoch}, "
            f"older than its registration's {live_epoch}",
        )
    ctx.shutting_down_broker_ids.add(broker_id)
    ctl.record("controlled_shutdown", broker=broker_id)
    acting = [
        tp
        for tp in ctx.partitions_on_broker(broker_id)
        if len(ctx.replicas(tp)) > 1
        and tp in ctx.partition_leadership
        and not ctx.is_topic_queued_for_deletion(tp.topic)
    ]
    led = [tp for tp in acting if ctx.partition_leadership[tp].leader_and_isr.leader == broker_id]
    followed = [tp for tp in acting if tp not in led]
    await ctl.partition_state_machine.handle_state_changes(
        led, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN
    )
    await ctl.replica_state_machine.handle_state_changes(
        [PartitionReplica(tp, broker_id) for tp in followed], ReplicaState.OFFLINE
    )
    remaining = [
        tp
        for tp in ctx.partitions_led_by(broker_id)
        if len(ctx.replicas(tp)) > 1 and not ctx.is_topic_queued_for_deletion(tp.topic)
    ]
    return [(tp.topic, tp.partition) for tp in remaining]
