"""Preferred replica leader election and the auto-rebalance check (Kafka's
onPreferredReplicaElection and checkAndTriggerAutoLeaderRebalance; the request comes from
kafka-preferred-replica-election.sh): a request in /admin/preferred_replica_election, or a broker
whose share of partitions led by others passes leader.imbalance.per.broker.percentage, moves
leadership back to the first replica when it is in the ISR.
"""

from __future__ import annotations

import asyncio
import logging

from client.types import TopicPartition
from controller.event_manager import (
    AutoPreferredReplicaLeaderElection,
    PreferredReplicaElection,
)
from controller.partition_state_machine import ElectionStrategy, PartitionState
from controller.parts import ControllerParts
from zk.data import decode_partition_list
from zk.paths import PREFERRED_REPLICA_ELECTION_PATH

log = logging.getLogger(__name__)


async def handle_preferred_replica_election(ctl: ControllerParts, event: PreferredReplicaElection) -> None:
    if not ctl.is_active:
        return
    if await ctl.zk.exists(PREFERRED_REPLICA_ELECTION_PATH, watch=ctl.on_preferred_watch) is None:
        return
    got = await ctl.zk.get(PREFERRED_REPLICA_ELECTION_PATH)
    partitions: list[TopicPartition] = []
    if got is not None:
        try:
            partitions = decode_partition_list(got[0])
        except (ValueError, KeyError, TypeError):
            log.error("unreadable %s: %r", PREFERRED_REPLICA_ELECTION_PATH, got[0])
    try:
        await on_preferred_replica_election(ctl, partitions, "admin")
    finally:
        await ctl.delete_quietly([PREFERRED_REPLICA_ELECTION_PATH])


async def on_preferred_replica_election(
    ctl: ControllerParts, partitions: list[TopicPartition], trigger: str
) -> None:
    ctx = ctl.context
    eligible = sorted(
        tp
        for tp in set(partitions)
        if tp in ctx.partition_leadership
        and not ctx.is_topic_queued_for_deletion(tp.topic)
        and ctx.replicas(tp)
        and ctx.partition_leadership[tp].leader_and_isr.leader != ctx.replicas(tp)[0]
    )
    if eligible:
        ctl.record("preferred_replica_election", trigger=trigger, partitions=[str(tp) for tp in eligible])
        await ctl.partition_state_machine.handle_state_changes(
            eligible, PartitionState.ONLINE, ElectionStrategy.PREFERRED
        )


async def rebalance_timer(ctl: ControllerParts) -> None:
    while True:
        await asyncio.sleep(ctl.config.leader_imbalance_check_interval_seconds)
        ctl.events.put(AutoPreferredReplicaLeaderElection())


async def handle_auto_rebalance(ctl: ControllerParts, event: AutoPreferredReplicaLeaderElection) -> None:
    """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, if more than
    leader.imbalance.per.broker.percentage of its partitions are led by others, elect it back."""
    if not ctl.is_active:
        return
    ctx = ctl.context
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp in ctx.all_partitions():
        if not ctx.is_topic_queued_for_deletion(tp.topic) and ctx.replicas(tp):
            by_preferred.setdefault(ctx.replicas(tp)[0], []).append(tp)
    for broker_id, tps in sorted(by_preferred.items()):
        not_led = [
            tp
            for tp in tps
            if tp in ctx.partition_leadership
            and ctx.partition_leadership[tp].leader_and_isr.leader != broker_id
        ]
        ratio = len(not_led) / len(tps)
        if ratio > ctl.config.leader_imbalance_per_broker_percentage / 100 and ctx.is_replica_online(
            broker_id
        ):
            await on_preferred_replica_election(
                ctl, not_led, f"auto: imbalance {ratio:.0%} on broker {broker_id}"
            )
