"""The replication throttle of ``floodmark reassign`` (Kafka 3.7's ReassignPartitionsCommand:
calculateCurrentMoveMap, calculateProposedMoveMap, calculateLeaderThrottles,
calculateFollowerThrottles, calculateReassigningBrokers, modifyReassignmentThrottle,
modifyInterBrokerThrottle and clearAllThrottles, over KIP-73's replication quotas;
docs/operations.md "Throttling a reassignment").

A throttle is two topic configs and two broker configs, written with IncrementalAlterConfigs'
SET and removed with its DELETE (KIP-339, as Kafka 3.7 writes them: a config the tool does not
name keeps its override, and the broker applies each change conditionally on the overrides it
read, so a concurrent change of the same entity is not lost).

They are computed from the *move map*, every move the cluster will run: the reassignments
already running (ListPartitionReassignments: a running move's sources are its replicas but the
ones being added, its destinations the ones being added) overlaid with the plan's (a planned
partition's sources are the running move's when it moves already, else its replicas now; its
destinations are the target's other brokers). Both configs of a topic name every move of that
topic, so a second plan for the same topic (``--additional``) keeps the running moves throttled:

* per topic, ``leader.replication.throttled.replicas``: ``partition:broker`` for every source of
  every move, and ``follower.replication.throttled.replicas``: ``partition:broker`` for every
  destination (Kafka's TreeSet order: the strings sorted);
* per broker of any move (a source or a destination), ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate``: the throttle, in bytes per second.

When no move of the map copies anything (every target is within its sources: a shrink, a
reorder), nothing is written and the tool says so (:data:`NOTHING_THROTTLED`) where Kafka 3.7
prints its warning and the limit line for a throttle that holds nothing back.

``clear_all_throttles`` removes the four from every live broker (Kafka no longer knows which
brokers took part in earlier reassignments) and the two topic configs from each topic of the
plan. A broker that is not live is skipped both ways: a broker's IncrementalAlterConfigs, which
only that broker answers, has nowhere to go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cli.common import CliError
from cli.configs import resource

Partition = tuple[str, int]
Assignment = Mapping[Partition, Sequence[int]]

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
REPLICAS_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
#: ``--throttle``'s default: no throttle (Kafka's -1).
NO_THROTTLE = -1
#: Kafka's Long.MaxValue: the brokers' default rate, unthrottled.
MAX_RATE = 2**63 - 1

#: Kafka 3.7's YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE.
WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed."
)
#: Where Kafka's tool prints the warning and the limit line anyway: no move copies any data.
NOTHING_THROTTLED = (
    "No partition of the plan gains a replica, so nothing was throttled "
    "(the limit applies only to data copied to new replicas)."
)


@dataclass(frozen=True)
class PartitionMove:
    """Kafka's PartitionMove: the brokers a partition's data comes from and goes to."""

    sources: frozenset[int]
    destinations: frozenset[int]


#: topic -> partition -> its move (Kafka's Map<String, Map<Integer, PartitionMove>>).
MoveMap = dict[str, dict[int, PartitionMove]]


def limit_line(rate: int) -> str:
    return f"The inter-broker throttle limit was set to {rate} B/s"


def current_move_map(reassignments: Mapping[Partition, Any]) -> MoveMap:
    """The running moves (calculateCurrentMoveMap): sources are the replicas but the ones being
    added, destinations the ones being added."""
    moves: MoveMap = {}
    for (topic, partition), running in reassignments.items():
        adding = frozenset(running.adding_replicas)
        sources = frozenset(running.replicas) - adding
        moves.setdefault(topic, {})[partition] = PartitionMove(sources, adding)
    return moves


def proposed_move_map(
    reassignments: Mapping[Partition, Any], proposed: Assignment, current: Assignment
) -> MoveMap:
    """The running moves overlaid with the plan's (calculateProposedMoveMap)."""
    moves = current_move_map(reassignments)
    for (topic, partition), target in proposed.items():
        partition_moves = moves.setdefault(topic, {})
        if partition in partition_moves:
            sources = partition_moves[partition].sources
        elif (topic, partition) in current:
            sources = frozenset(current[topic, partition])
        else:
            raise CliError(f"Trying to reassign a topic partition {topic}-{partition} with 0 replicas")
        partition_moves[partition] = PartitionMove(sources, frozenset(target) - sources)
    return moves


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    """Each topic -> every source of its moves (calculateLeaderThrottles)."""
    return {
        topic: ",".join(sorted(f"{p}:{b}" for p, move in parts.items() for b in move.sources))
        for topic, parts in moves.items()
    }


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    """Each topic -> every destination of its moves (calculateFollowerThrottles)."""
    return {
        topic: ",".join(
            sorted(f"{p}:{b}" for p, move in parts.items() for b in move.destinations - move.sources)
        )
        for topic, parts in moves.items()
    }


def reassigning_brokers(moves: MoveMap) -> set[int]:
    """Every source and destination of every move (calculateReassigningBrokers)."""
    return {
        b for parts in moves.values() for move in parts.values() for b in move.sources | move.destinations
    }


def copies(moves: MoveMap) -> bool:
    """Whether any move of the map gains a replica (else a throttle holds nothing back)."""
    return any(move.destinations - move.sources for parts in moves.values() for move in parts.values())


async def _live(admin: Any) -> set[int]:
    return {b.node_id for b in (await admin.describe_cluster()).brokers}


async def modify_reassignment_throttle(admin: Any, moves: MoveMap, rate: int) -> list[int]:
    """The two topic configs of every topic of ``moves``, then the two rates on each live
    reassigning broker (modifyReassignmentThrottle). The brokers whose rate was set."""
    from client.cluster_admin import AlterConfigOp

    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    topics = {
        resource("topics", topic): [
            AlterConfigOp(LEADER_REPLICAS, leaders[topic]),
            AlterConfigOp(FOLLOWER_REPLICAS, followers[topic]),
        ]
        for topic in sorted(moves)
    }
    if topics:
        await admin.incremental_alter_configs(topics)
    return await modify_inter_broker_throttle(admin, reassigning_brokers(moves), rate)


async def modify_inter_broker_throttle(admin: Any, brokers: Iterable[int], rate: int) -> list[int]:
    """Both rates SET to ``rate`` on each live one of ``brokers`` (modifyInterBrokerThrottle)."""
    from client.cluster_admin import AlterConfigOp

    live = sorted(set(brokers) & await _live(admin))
    if live:
        await admin.incremental_alter_configs(
            {resource("brokers", str(b)): [AlterConfigOp(k, str(rate)) for k in RATE_KEYS] for b in live}
        )
    return live


async def set_throttle(
    admin: Any,
    current: Assignment,
    targets: Assignment,
    rate: int,
    reassignments: Mapping[Partition, Any] | None = None,
) -> list[int]:
    """The throttle of ``targets`` beside ``reassignments`` (the running ones), as ``--execute
    --throttle`` writes it; the brokers whose rate was set (none when nothing copies)."""
    moves = proposed_move_map(reassignments or {}, targets, current)
    if not copies(moves):
        return []
    return await modify_reassignment_throttle(admin, moves, rate)


async def clear_all_throttles(admin: Any, topics: Iterable[str]) -> tuple[list[int], list[str]]:
    """clearAllThrottles: both rates DELETEd on every live broker, both throttled-replicas configs
    on each of ``topics`` (that exist: the caller's to say). The brokers and topics cleared."""
    from client.cluster_admin import AlterConfigOp, AlterConfigOpType

    def deleted(keys: Sequence[str]) -> list[Any]:
        return [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in keys]

    brokers = sorted(await _live(admin))
    if brokers:
        await admin.incremental_alter_configs(
            {resource("brokers", str(b)): deleted(RATE_KEYS) for b in brokers}
        )
    names = sorted(set(topics))
    if names:
        await admin.incremental_alter_configs({resource("topics", t): deleted(REPLICAS_KEYS) for t in names})
    return brokers, names


async def remove_throttle(admin: Any, topics: Iterable[str]) -> None:
    """What ``--verify`` does once nothing moves (bench/reassign_time.py's name for it)."""
    await clear_all_throttles(admin, topics)


def clearing_lines(brokers: Sequence[int], topics: Sequence[str]) -> list[str]:
    """clearAllThrottles' two lines."""
    return [
        f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
        f"{','.join(map(str, brokers))}",
        f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}",
    ]
