"""Controller failover: what a newly elected controller does before it acts (Kafka's
KafkaController.onControllerFailover, its 12 steps numbered in the code), and the context reads
it shares with broker and topic changes. docs/architecture.md "Where each mechanism lives" maps
it.
"""

from __future__ import annotations

import asyncio
import logging

from client.types import TopicPartition
from controller import isr_change_notifications, preferred_election, reassignment, topic_deletion, topic_ids
from controller.channel import ControllerChannelManager
from controller.event_manager import PreferredReplicaElection
from controller.parts import ControllerParts
from zk.batch import get_partition_states, windowed
from zk.client import create_persistent_paths, get_broker
from zk.data import BrokerInfo
from zk.paths import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    PREFERRED_REPLICA_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
)

log = logging.getLogger(__name__)


async def on_controller_failover(ctl: ControllerParts) -> None:
    # 1. the epoch was read and incremented by the election.
    await create_persistent_paths(ctl.zk)
    # 2-3. reassignment and preferred replica election requests
    await ctl.zk.exists(REASSIGN_PARTITIONS_PATH, watch=ctl.on_reassign_watch)
    await ctl.zk.exists(PREFERRED_REPLICA_ELECTION_PATH, watch=ctl.on_preferred_watch)
    # Pending ISR change notifications go *before* the context is read (Kafka's order): the
    # context reads every state znode after them, and one written later stays for its event.
    pending_isr_notifications = await ctl.zk.get_children(
        ISR_CHANGE_NOTIFICATION_PATH, watch=ctl.on_isr_change_watch
    )
    await isr_change_notifications.delete_isr_change_notifications(ctl, pending_isr_notifications or [])
    # KIP-112, also before the context: step 8 sends every live broker LeaderAndIsr, and its
    # answers name the offline dirs; a notification written after this stays for its event.
    pending_log_dir_events = await ctl.log_dir_failure.pending(watch=ctl.on_log_dir_event_watch)
    await ctl.delete_quietly([f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{n}" for n in pending_log_dir_events])
    # 4-7. /brokers/topics, /admin/delete_topics, /brokers/ids watches, while reading the context
    await initialize_context(ctl)
    ctl.channel = ControllerChannelManager(
        ctl.broker_id,
        ctl.config.controller_socket_timeout_ms / 1000.0,
        ctl.rng,
        listener_name=ctl.config.inter_broker_listener_name,
        connect=ctl.connect,
    )
    for broker in ctl.context.live_brokers.values():
        ctl.channel.add_broker(broker)
    # 8. the state machines: every live replica learns its leadership; New and Offline partitions get leaders
    # (their first writes start from the states just read: docs/design.md "The controller at scale")
    with ctl.partition_state_machine.trusting_context():
        # KIP-516: each live broker's first LeaderAndIsr names all it hosts; it drops its strays
        ctl.batch.add_full_leader_and_isr(ctl.context.live_brokers)
        await ctl.replica_state_machine.startup()
        await ctl.partition_state_machine.startup()
        # what the elections decided goes out now (each broker's elected partitions first), as
        # Kafka's state machines send each step's batch; the dead brokers' replicas leave the ISRs
        # of the partitions that kept their leader only after, so the ISR writes of thousands of
        # those do not hold back the partitions without a leader
        await ctl.batch.send_async(ctl.context.epoch)
        await ctl.replica_state_machine.take_dead_replicas_offline()
    # 9-10. running as controller: every live broker gets the whole metadata
    ctl.batch.add_update_metadata(ctl.context.live_or_shutting_down_broker_ids, ctl.context.all_partitions())
    ctl.record(
        "controller_failover",
        live_brokers=sorted(ctl.context.live_brokers),
        topics=sorted(ctl.context.all_topics),
        offline_partitions=[str(tp) for tp in ctl.partition_state_machine.offline_partitions()],
    )
    # 11. the auto-rebalance timer
    if ctl.config.auto_leader_rebalance_enable:
        ctl.rebalance_task = asyncio.get_running_loop().create_task(preferred_election.rebalance_timer(ctl))
    # 12. the reassignments read with the context resume (their steps run again; one of a topic
    # queued for deletion is dropped, as Kafka's maybeTriggerPartitionReassignment does), then
    # pending deletions and preferred elections
    await reassignment.maybe_trigger_partition_reassignment(
        ctl, dict(ctl.context.partitions_being_reassigned)
    )
    await topic_deletion.resume_deletions(ctl)
    if await ctl.zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is not None:
        await preferred_election.handle_preferred_replica_election(ctl, PreferredReplicaElection())


async def initialize_context(ctl: ControllerParts) -> None:
    ctx = ctl.context
    ctx.reset()
    ctx.live_brokers.update(await read_live_brokers(ctl))
    topics = await ctl.zk.get_children(BROKER_TOPICS_PATH, watch=ctl.on_topics_watch) or []
    assignments = await windowed(topics, lambda t: topic_ids.read_full_topic(ctl, t))
    for topic, assignment in zip(topics, assignments, strict=True):
        if assignment is not None:
            ctx.assignments[topic] = {}
            for p, replica_assignment in assignment.items():
                ctx.set_full_replica_assignment(TopicPartition(topic, p), replica_assignment)
    partitions = ctx.all_partitions()
    states = await get_partition_states(ctl.zk, partitions)
    for tp, state in zip(partitions, states, strict=True):
        if state is not None:
            ctx.partition_leadership[tp] = state
    # Kafka's initializePartitionReassignment: the moves in progress, before deletions resume
    ctx.partitions_being_reassigned.update(
        reassignment.moves_in_progress(ctx, await reassignment.read_reassignment_request(ctl))
    )
    if ctl.config.delete_topic_enable:
        marked = await ctl.zk.get_children(DELETE_TOPICS_PATH, watch=ctl.on_delete_topics_watch) or []
        ctx.topics_to_be_deleted.update(t for t in marked if t in ctx.assignments)


async def read_live_brokers(ctl: ControllerParts) -> dict[int, BrokerInfo]:
    children = await ctl.zk.get_children(BROKER_IDS_PATH, watch=ctl.on_broker_ids_watch) or []
    ids = sorted(int(c) for c in children if c.lstrip("-").isdigit())
    infos = await asyncio.gather(*(get_broker(ctl.zk, i) for i in ids))
    return {info.id: info for info in infos if info is not None}


async def read_assignment(ctl: ControllerParts, topic: str) -> dict[int, list[int]] | None:
    """The topic's assignment, watched; its id (KIP-516) goes in the context, assigned first if
    the znode has none (:func:`controller.topic_ids.read_topic`)."""
    return await topic_ids.read_topic(ctl, topic)
