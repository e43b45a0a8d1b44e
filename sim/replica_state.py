"""The cheap checks of the replicas' state (``leader-epochs`` in each replica, ``hw-within-isr``;
sim/invariants.py has their statements), run every few loop callbacks: one pass over each live
broker's partitions, reading only fields (no log I/O).

Both return the first problem in the order the checks always used (brokers by id, each broker's
partitions in its own order; for a partition, the lowest replica id), or None. Finding none is
the common case, so the replicas of a partition are not sorted unless one is found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from client.types import TopicPartition

if TYPE_CHECKING:
    from broker.log import Log
    from broker.replica.replica_manager import ReplicaManager


def replica_epoch_problem(
    live: Mapping[int, ReplicaManager],
    incarnation: Callable[[int], int],
    seen: dict[tuple[int, int, Any], int],
    deleting: Callable[[str], bool],
) -> str | None:
    """A replica whose leader epoch went back in this incarnation; ``seen`` keeps the epochs."""
    for broker_id, rm in live.items():
        number = incarnation(broker_id)
        for key_tp, partition in rm.partitions.items():
            epoch = partition.leader_epoch
            key = (broker_id, number, key_tp)
            previous = seen.get(key, -1)
            if epoch == previous:
                continue  # nothing to judge, nothing to note
            if epoch < 0 or deleting(key_tp[0]):
                continue  # registered by a LeaderAndIsr still creating the log: nothing applied yet
            if epoch < previous:
                return (
                    f"broker {broker_id}'s replica of {key_tp[0]}-{key_tp[1]} went back from "
                    f"leader epoch {previous} to {epoch}"
                )
            seen[key] = epoch
    return None


def high_watermark_problem(
    live: Mapping[int, ReplicaManager],
    isr_in_zk: Mapping[Any, Any],
    deleting: Callable[[str], bool],
    exempt: Callable[[int, Any, Log, int], bool] | None = None,
) -> str | None:
    """A leader whose HW passed the log end offset of a replica in its maximal ISR or in the
    state znode's ISR (``isr_in_zk``: (topic, partition) -> the znode's entry, with ``isr``),
    but a replica ``exempt`` excuses (asked, with the partition as a TopicPartition, of every listed
    replica with a log, so what it notes does not depend on their order)."""
    for broker_id, rm in live.items():
        for key_tp, partition in rm.partitions.items():
            if not partition.is_leader or deleting(key_tp[0]):
                continue
            log_ = rm.get_log(key_tp)
            if log_ is None:
                continue
            hw = log_.high_watermark
            zk = isr_in_zk.get((key_tp[0], key_tp[1]))
            listed = partition.maximal_isr if zk is None else zk.isr.union(partition.maximal_isr)
            tp = TopicPartition(*key_tp) if exempt is not None else key_tp
            behind = None
            for replica in listed:
                if replica == broker_id:
                    continue
                other = live.get(replica)
                if other is None or key_tp in other.offline_partitions:
                    continue
                replica_log = other.get_log(key_tp)
                if replica_log is None or (exempt is not None and exempt(replica, tp, replica_log, hw)):
                    continue
                if replica_log.log_end_offset < hw and (behind is None or replica < behind):
                    behind = replica
            if behind is not None:
                replica_log = live[behind].get_log(key_tp)
                return (
                    f"leader {broker_id} of {key_tp[0]}-{key_tp[1]} (epoch {partition.leader_epoch}) "
                    f"has HW {hw} past replica {behind}'s log end offset "
                    f"{replica_log.log_end_offset}; ISR in ZooKeeper "
                    f"{sorted(zk.isr) if zk else None}, leader's ISR {sorted(partition.isr)}, "
                    f"pending change {partition.pending_isr_change}"
                )
    return None
