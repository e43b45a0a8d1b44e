"""Replica placement for new topics and added partitions (Kafka's AdminUtils.assignReplicasToBrokers).

Kafka's ``AdminUtils.assignReplicasToBrokersRackUnaware``, exactly:

* the brokers are sorted; the first replica of partition 0 goes to a random broker
  (``start_index``) and the first replica of each next partition to the next broker, so
  preferred replicas, and hence leaders, spread evenly;
* the other replicas follow the first at a distance of ``1 + (shift + j) % (n - 1)``, where
  ``shift`` (``nextReplicaShift``) is random too and grows by one each time the partition id
  wraps around the broker list, so followers spread as well.

With 5 brokers, 10 partitions, replication factor 3 and start index and shift both 0 this gives
Kafka's documented example::

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4       (1st replica)
    p5        p6        p7        p8        p9       (1st replica)
    p4        p0        p1        p2        p3       (2nd replica)
    p8        p9        p5        p6        p7       (2nd replica)
    p3        p4        p0        p1        p2       (3nd replica)
    p7        p8        p9        p5        p6       (3nd replica)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from client.protocol.errors import ErrorCode, KafkaError


def assign_replicas(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """Partition id -> replica list (the first is the preferred replica).

    ``fixed_start_index`` >= 0 fixes both the start index and the initial shift (Kafka's
    convention, used for tests and for adding partitions); ``start_partition_id`` is the first
    partition id to assign (the existing partition count when adding partitions).
    """
    if num_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    brokers = sorted(broker_ids)
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {n}.",
        )
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    current_partition_id = max(0, start_partition_id)
    assignment: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if current_partition_id > 0 and current_partition_id % n == 0:
            next_replica_shift += 1
        first = (current_partition_id + start_index) % n
        replicas = [brokers[first]]
        replicas += [
            brokers[_replica_index(first, next_replica_shift, j, n)] for j in range(replication_factor - 1)
        ]
        assignment[current_partition_id] = replicas
        current_partition_id += 1
    return assignment


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, n: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n - 1)
    return (first_replica_index + shift) % n


def start_index_for_new_partitions(
    broker_ids: Sequence[int], existing_partition0_replicas: Sequence[int]
) -> int:
    """When partitions are added (a topic's partition count only grows), Kafka keeps
    the existing layout going: the start index is the position of partition 0's first replica in
    the sorted broker list (or random, -1, when that broker is gone)."""
    brokers = sorted(broker_ids)
    if existing_partition0_replicas and existing_partition0_replicas[0] in brokers:
        return brokers.index(existing_partition0_replicas[0])
    return -1
