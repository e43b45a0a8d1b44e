"""Preferred replica leader election and the auto-rebalance check (Kafka's
onPreferredReplicaElection and checkAndTriggerAutoLeaderRebalance; the request comes from
kafka-preferred-replica-election.sh): a request in /admin/preferred_replica_election, or a broker
whose share of partitions led by others passes leader.imbalance.per.broker.percentage, moves
leadership back to the first replica when it is in the ISR.

The ElectLeaders API (KIP-460; ``kafka-leader-election.sh``, ``floodmark elect-leaders``) asks the
controller directly (:func:`elect_leaders`): a preferred election of partitions not led by their
first replica, or an unclean one of partitions without a live leader (any live replica, in the
ISR or not: Kafka's OfflinePartitionLeaderElectionStrategy with unclean allowed). Each partition
answers NONE, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE
(nothing changed) or UNKNOWN_TOPIC_OR_PARTITION (docs/design.md "Leader elections on request").
"""

from __future__ import annotations

import asyncio
import logging

from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller.event_manager import (
    AutoPreferredReplicaLeaderElection,
    PreferredReplicaElection,
    ReplicaLeaderElection,
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


PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType
#: Kafka's strategy names, as its error messages print them.
STRATEGY_NAMES = {
    PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
    UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)",
}
Outcome = tuple[int, str | None]


async def elect_leaders(
    ctl: ControllerParts, partitions: list[TopicPartition] | None, election_type: int
) -> dict[TopicPartition, Outcome]:
    """ElectLeaders at the controller: each partition's (error code, message). Raises
    NOT_CONTROLLER on a broker that is not the active controller."""
    if not ctl.is_active:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
    return await ctl.events.ask(ReplicaLeaderElection(partitions=partitions, election_type=election_type))


async def handle_replica_leader_election(
    ctl: ControllerParts, event: ReplicaLeaderElection
) -> dict[TopicPartition, Outcome]:
    if not ctl.is_active:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is no longer the controller")
    ctx = ctl.context
    preferred = event.election_type == PREFERRED
    wanted = sorted(set(event.partitions)) if event.partitions is not None else sorted(ctx.all_partitions())
    results: dict[TopicPartition, Outcome] = {}
    to_elect = []
    for tp in wanted:
        held = ctx.partition_leadership.get(tp)
        if held is None or not ctx.replicas(tp):
            results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The partition {tp} does not exist.")
        elif ctx.is_topic_queued_for_deletion(tp.topic):
            results[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, f"The topic {tp.topic} is being deleted.")
        elif (preferred and held.leader_and_isr.leader == ctx.replicas(tp)[0]) or (
            not preferred and ctx.is_replica_online(held.leader_and_isr.leader, tp=tp)
        ):
            results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
        else:
            to_elect.append(tp)
    if to_elect:
        ctl.record(
            "replica_leader_election",
            trigger="ElectLeaders",
            election_type="preferred" if preferred else "unclean",
            partitions=[str(tp) for tp in to_elect],
        )
        strategy = ElectionStrategy.PREFERRED if preferred else ElectionStrategy.UNCLEAN
        await ctl.partition_state_machine.handle_state_changes(to_elect, PartitionState.ONLINE, strategy)
    for tp in to_elect:
        leader = ctx.partition_leadership[tp].leader_and_isr.leader
        if (preferred and leader == ctx.replicas(tp)[0]) or (
            not preferred and ctx.is_replica_online(leader, tp=tp)
        ):
            results[tp] = (ErrorCode.NONE, None)
        else:
            code = (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                if preferred
                else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            )
            results[tp] = (
                code,
                f"Failed to elect leader for partition {tp} under strategy {STRATEGY_NAMES[event.election_type]}",
            )
    return results


def preferred_replica_imbalance_count(ctl: ControllerParts) -> int:
    """Kafka's PreferredReplicaImbalanceCount: partitions not led by their first replica (topics
    being deleted aside); 0 off the active controller."""
    if not ctl.is_active:
        return 0
    ctx = ctl.context
    return sum(
        1
        for tp, held in ctx.partition_leadership.items()
        if ctx.replicas(tp)
        and not ctx.is_topic_queued_for_deletion(tp.topic)
        and held.leader_and_isr.leader != ctx.replicas(tp)[0]
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
