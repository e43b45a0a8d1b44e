"""Broker start-up and failure as the controller handles them (Kafka's processBrokerChange,
onBrokerStartup, onBrokerFailure, onReplicasBecomeOffline; docs/architecture.md "The control path,
file by file" walks a broker failure through them). A broker that re-registered before the
controller read /brokers/ids (a bounce) is failed and started in one event, each step's requests
sent before the next is built (docs/guarantees.md "The controller under ZooKeeper blips").
"""

from __future__ import annotations

import logging

from controller import failover, reassignment, topic_deletion
from controller.event_manager import BrokerChange
from controller.partition_state_machine import PartitionState
from controller.parts import ControllerParts
from controller.replica_state_machine import ReplicaState
from zk.client import ControllerMovedError
from zk.data import PartitionReplica

log = logging.getLogger(__name__)


async def handle_broker_change(ctl: ControllerParts, event: BrokerChange) -> None:
    """Kafka's processBrokerChange. Each step's requests are sent before the next step is
    made, so a bounced broker gets the failure's StopReplica before the start-up's
    LeaderAndIsr. If a step fails, the brokers it was handling are put back as they were in
    the context, so the retry (see :meth:`_process`) sees them again in /brokers/ids."""
    if not ctl.is_active:
        return
    current = await failover.read_live_brokers(ctl)
    known = ctl.context.live_brokers
    new_ids = sorted(set(current) - set(known))
    dead_ids = sorted(set(known) - set(current))
    bounced_ids = sorted(i for i in set(current) & set(known) if current[i].epoch != known[i].epoch)
    for i in sorted(ctl.channel.broker_ids - set(current)):
        ctl.channel.remove_broker(i)  # gone, also if its start-up failed (no longer in the context)
    if not (new_ids or dead_ids or bounced_ids):
        return
    log.info("broker change: new %s, dead %s, bounced %s", new_ids, dead_ids, bounced_ids)
    ctl.record("broker_change", new=new_ids, dead=dead_ids, bounced=bounced_ids)
    for failed_ids in (bounced_ids, dead_ids):
        if not failed_ids:
            continue
        previous = {i: known.pop(i) for i in failed_ids}
        for i in failed_ids:
            ctl.channel.remove_broker(i)
        try:
            await on_broker_failure(ctl, failed_ids)
        except ControllerMovedError:
            raise
        except Exception:
            # the writes made go out with the context they were made in; then these brokers
            # are put back, so that the retry sees them fail again
            await ctl.batch.send_async(ctl.context.epoch)
            known.update(previous)
            raise
        await ctl.batch.send_async(ctl.context.epoch)
    started_ids = sorted(new_ids + bounced_ids)
    for i in started_ids:
        known[i] = current[i]
        ctl.channel.add_broker(current[i])
    if started_ids:
        try:
            await on_broker_startup(ctl, started_ids)
        except ControllerMovedError:
            raise
        except Exception:
            await ctl.batch.send_async(ctl.context.epoch)
            for i in started_ids:  # not started: the retry sees them as new brokers
                known.pop(i, None)
            raise


async def on_broker_startup(ctl: ControllerParts, new_ids: list[int]) -> None:
    ctx = ctl.context
    ctl.log_dir_failure.on_broker_startup(new_ids)  # restarted: its dirs were recovered
    # 1. everyone learns the new live-broker list; the new brokers get the whole metadata
    ctl.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids - set(new_ids), [])
    ctl.batch.add_update_metadata(new_ids, ctx.all_partitions())
    # 2. their replicas are online: each gets its partition's leadership, in a first LeaderAndIsr
    # that names all they host (KIP-516: a log of anything else is a stray, deleted)
    ctl.batch.add_full_leader_and_isr(new_ids)
    replicas = [
        r for r in ctx.replicas_on_brokers(new_ids) if not ctx.is_topic_queued_for_deletion(r.tp.topic)
    ]
    await ctl.replica_state_machine.handle_state_changes(replicas, ReplicaState.ONLINE)
    # 3. offline and new partitions may have a leader now
    await ctl.partition_state_machine.trigger_online_partition_state_change()
    # 4. reassignments moving onto these brokers go on
    await reassignment.resume_reassignments_for_brokers(ctl, new_ids)
    # topic deletions waiting for these brokers may go on
    for topic in sorted(ctx.topics_ineligible_for_deletion):  # name order, never str-hash order
        if any(r.replica in new_ids for r in ctx.replicas_for_partitions(ctx.partitions_for_topic(topic))):
            ctx.topics_ineligible_for_deletion.discard(topic)
            deleting = ctl.replica_state_machine.replicas_in_state(topic, ReplicaState.DELETION_INELIGIBLE)
            await ctl.replica_state_machine.handle_state_changes(deleting, ReplicaState.OFFLINE)
    await topic_deletion.resume_deletions(ctl)


async def on_broker_failure(ctl: ControllerParts, dead_ids: list[int]) -> None:
    for i in dead_ids:
        ctl.context.shutting_down_broker_ids.discard(i)
    await on_replicas_become_offline(ctl, ctl.context.replicas_on_brokers(dead_ids))


async def on_replicas_become_offline(ctl: ControllerParts, replicas: list[PartitionReplica]) -> None:
    ctx = ctl.context
    for_deletion = [r for r in replicas if ctx.is_topic_queued_for_deletion(r.tp.topic)]
    not_for_deletion = [r for r in replicas if not ctx.is_topic_queued_for_deletion(r.tp.topic)]
    without_leader = sorted(
        tp
        for tp, state in ctx.partition_leadership.items()
        if not ctx.is_replica_online(state.leader_and_isr.leader, include_shutting_down=True, tp=tp)
        and not ctx.is_topic_queued_for_deletion(tp.topic)
        and ctl.partition_state_machine.state(tp) in (PartitionState.ONLINE, PartitionState.OFFLINE)
    )
    # 2-3. partitions led by dead brokers go offline, then get a leader (PartitionLeaderElectionAlgorithms)
    await ctl.partition_state_machine.handle_state_changes(without_leader, PartitionState.OFFLINE)
    await ctl.partition_state_machine.trigger_online_partition_state_change()
    # the dead replicas leave the ISRs they were in
    await ctl.replica_state_machine.handle_state_changes(not_for_deletion, ReplicaState.OFFLINE)
    if for_deletion:
        ctx.topics_ineligible_for_deletion.update(r.tp.topic for r in for_deletion)
        await ctl.replica_state_machine.handle_state_changes(for_deletion, ReplicaState.OFFLINE)
        await ctl.replica_state_machine.handle_state_changes(for_deletion, ReplicaState.DELETION_INELIGIBLE)
    if not without_leader:
        ctl.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [])
