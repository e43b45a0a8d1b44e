"""The replication throttle of ``floodmark reassign --throttle`` (Kafka 2.x's
ReassignPartitionsCommand: assignThrottledReplicas, maybeLimit and removeThrottle, over KIP-73's
replication quotas; docs/operations.md "Reassigning partitions").

A throttle is two topic configs and two broker configs, written with Kafka's non-incremental
AlterConfigs, so each entity's other overrides are read first and sent back with them
(:func:`cli.configs.merge_overrides`):

* per topic of the plan, ``leader.replication.throttled.replicas``: ``partition:broker`` for each
  replica a moving partition has now (the leaders the new replicas fetch from), and
  ``follower.replication.throttled.replicas``: ``partition:broker`` for each replica it gains. A
  partition moves when its target names a broker it does not have (a reordering does not move it).
* per broker of the moving partitions (now or in the target), ``leader.replication.throttled.rate``
  and ``follower.replication.throttled.rate``: the throttle, in bytes per second.

A rerun of ``--execute --throttle`` while every partition of the plan still moves only sets the
rates (``There is an existing assignment running.``: the broker would refuse the moves); a plan
the broker will refuse whole (a partition already moving or missing, a target broker that is not
live) writes no throttle, so the refusal leaves none behind.

``--verify`` removes all four once every partition of the plan completed: the two topic configs
from each topic of the plan, the two rates from every live broker (Kafka no longer knows which
brokers took part), and reports ``Throttle was removed.`` when there was one. A broker that is
not live is skipped both ways: its DescribeConfigs, which only that broker answers, has nowhere
to go (Kafka's removeThrottle likewise walks the registered brokers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cli.configs import entity_overrides, merge_overrides, resource

Partition = tuple[str, int]
Assignment = Mapping[Partition, Sequence[int]]

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
REPLICAS_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
#: ``--throttle``'s default: no throttle (Kafka's NoThrottle, -1).
NO_THROTTLE = -1
#: Kafka's Long.MaxValue: the brokers' default rate, unthrottled.
MAX_RATE = 2**63 - 1

WARNING = (
    "Warning: You must run Verify periodically, until the reassignment completes, to ensure the "
    "throttle is removed. You can also alter the throttle by rerunning the Execute command passing "
    "a new value."
)
EXISTING = "There is an existing assignment running."
REMOVED = "Throttle was removed."
#: Where Kafka's tool prints the limit line anyway: a plan that copies no data throttles nothing.
NOTHING_THROTTLED = (
    "No partition of the plan gains a replica, so nothing was throttled "
    "(the limit applies only to data copied to new replicas)."
)


def limit_line(rate: int) -> str:
    return f"The inter-broker throttle limit was set to {rate} B/s"


def moving(current: Assignment, targets: Assignment) -> list[Partition]:
    """The partitions of the plan that gain a replica (Kafka's preRebalanceReplicaForMovingPartitions
    test); a partition that does not exist is not moving (the broker refuses it)."""
    return sorted(tp for tp, target in targets.items() if tp in current and set(target) - set(current[tp]))


def throttled_replicas(current: Assignment, targets: Assignment) -> dict[str, dict[str, str]]:
    """Each existing topic of the plan -> its two throttled-replicas configs (assignThrottledReplicas:
    Kafka writes both for every topic of the plan, "" when none of its partitions moves)."""
    moves = moving(current, targets)
    out: dict[str, dict[str, str]] = {}
    for topic in sorted({t for t, _ in targets if any(tp[0] == t for tp in current)}):
        mine = [tp for tp in moves if tp[0] == topic]
        leader = [f"{p}:{b}" for t, p in mine for b in current[t, p]]
        follower = [f"{p}:{b}" for t, p in mine for b in targets[t, p] if b not in current[t, p]]
        out[topic] = {LEADER_REPLICAS: ",".join(leader), FOLLOWER_REPLICAS: ",".join(follower)}
    return out


def brokers_of(current: Assignment, targets: Assignment, partitions: Iterable[Partition]) -> list[int]:
    """Every broker that holds or will hold one of ``partitions``."""
    return sorted({b for tp in partitions for b in (*current.get(tp, ()), *targets[tp])})


async def set_throttle(admin: Any, current: Assignment, targets: Assignment, rate: int) -> list[int] | None:
    """Before the move starts (Kafka's maybeThrottle): the throttled replicas of each topic of the
    plan, then the rate on each live broker of the moving partitions. Nothing is written for a
    plan the broker will refuse whole (a partition that does not exist, a target broker that is
    not live): the refusal then leaves no throttle behind (None). Else the brokers whose rate was
    set: none when no partition gains a replica (a shrink or a reorder copies nothing)."""
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    if any(tp not in current or not set(target) <= live for tp, target in targets.items()):
        return None
    replicas = throttled_replicas(current, targets)
    overrides = await entity_overrides(admin, "topics", replicas)
    if replicas:
        await admin.alter_configs(
            {
                resource("topics", topic): merge_overrides(overrides.get(topic, {}), values, [])
                for topic, values in replicas.items()
            }
        )
    brokers = brokers_of(current, targets, moving(current, targets))
    await set_rate(admin, brokers, rate)
    return sorted(set(brokers) & live)


async def set_rate(admin: Any, brokers: Iterable[int], rate: int) -> None:
    """Both rates set to ``rate`` on each live one of ``brokers``, its other overrides kept
    (Kafka's maybeLimit, also what a rerun of ``--execute`` during the move does)."""
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    names = [str(b) for b in sorted(set(brokers) & live)]
    overrides = await entity_overrides(admin, "brokers", names)
    rates = {key: str(rate) for key in RATE_KEYS}
    if names:
        await admin.alter_configs(
            {resource("brokers", n): merge_overrides(overrides.get(n, {}), rates, []) for n in names}
        )


async def remove_throttle(admin: Any, topics: Iterable[str]) -> bool:
    """Kafka's removeThrottle: the rates off every live broker, the throttled replicas off each
    of ``topics``, each entity written only when it had one. Whether anything was removed."""
    brokers = [str(b.node_id) for b in (await admin.describe_cluster()).brokers]
    found = {
        resource("brokers", name): (overrides, RATE_KEYS)
        for name, overrides in (await entity_overrides(admin, "brokers", brokers)).items()
    }
    found.update(
        (resource("topics", name), (overrides, REPLICAS_KEYS))
        for name, overrides in (await entity_overrides(admin, "topics", topics)).items()
    )
    updates = {
        r: merge_overrides(overrides, {}, [k for k in keys if k in overrides])
        for r, (overrides, keys) in found.items()
        if any(k in overrides for k in keys)
    }
    if updates:
        await admin.alter_configs(updates)
    return bool(updates)
