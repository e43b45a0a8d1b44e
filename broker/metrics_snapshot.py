"""The broker's gauges at scrape time (docs/operations.md "Metrics"): one :class:`BrokerState`
read from the subsystems that own the state.

It runs on the metrics server's thread and only reads plain attributes: a scrape racing a change
may see either side of it, as a JMX read would.
"""

from __future__ import annotations

from broker.file_budget import open_files
from broker.log import LogManager
from broker.log.log_dir_failure import LogDirFailureChannel
from broker.metrics import BrokerState, PartitionView
from broker.replica.replica_manager import ReplicaManager
from controller import preferred_election
from controller.controller import KafkaController
from zk.data import FileBudget


def broker_state(
    rm: ReplicaManager,
    controller: KafkaController,
    failures: LogDirFailureChannel,
    log_manager: LogManager,
    file_budget: FileBudget | None,
    now_ms: int,
) -> BrokerState:
    """What ``/metrics`` shows of this broker now."""
    partitions = [
        PartitionView(
            p.is_leader,
            len(p.assigned_replicas),
            len(p.isr),
            rm.min_insync_replicas(p.topic),
            p.reassigning,
        )
        for p in list(rm.partitions.values())
    ]
    isr = rm.isr_manager
    return BrokerState(
        active_controller=controller.is_active,
        offline_partitions=controller.offline_partitions_count,
        partitions=partitions,
        isr_shrinks=isr.isr_shrinks if isr else 0,
        isr_expands=isr.isr_expands if isr else 0,
        offline_replicas=len(rm.offline_partitions),
        offline_log_dirs=len(failures.offline_dirs),
        resource_errors=failures.resource_errors,
        file_budget=file_budget,
        open_files=open_files(),
        segment_files=log_manager.segment_file_stats,
        preferred_replica_imbalance=preferred_election.preferred_replica_imbalance_count(controller),
        leader_replication_byte_rate=rm.quotas.leader.rate(now_ms),
        follower_replication_byte_rate=rm.quotas.follower.rate(now_ms),
        log_dir_space=rm.disk_space.snapshot(),
    )
