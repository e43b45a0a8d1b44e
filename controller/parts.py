"""What the controller's mechanism modules use of the controller: its state, its collaborators
and its watch callbacks, as a Protocol (:class:`ControllerParts`). The mechanisms
(controller/failover.py, broker_changes.py, topic_creation.py, topic_deletion.py,
isr_change_notifications.py, preferred_election.py, controlled_shutdown.py, reassignment.py)
take one and never import controller/controller.py, so the package has no import circle, and
this list is the whole of what they may touch (docs/architecture.md "The control path, file by file").
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kazoo.protocol.states import WatchedEvent

from client.connection import ConnectionFactory
from client.types import TopicPartition
from controller.channel import ControllerBrokerRequestBatch, ControllerChannelManager
from controller.context import ControllerContext, StateChangeRecorder
from controller.event_manager import ControllerEventManager
from controller.log_dir_failure import LogDirFailureHandler
from controller.partition_state_machine import PartitionStateMachine
from controller.replica_state_machine import ReplicaStateMachine
from zk.bridge import ZkBridge


@dataclass(frozen=True)
class ControllerConfig:
    """The broker properties the controller reads (Kafka's names, with dots as underscores)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    delete_topic_enable: bool = True
    controller_socket_timeout_ms: int = 30000
    #: KIP-103: the listener of each broker the controller connects to, and announces in
    #: LeaderAndIsr / UpdateMetadata host and port (Kafka's interBrokerListenerName).
    inter_broker_listener_name: str = "PLAINTEXT"
    #: Partition states per LeaderAndIsr / UpdateMetadata request (controller.request.max.partitions;
    #: docs/design.md "The controller at scale (issue 25)").
    request_max_partitions: int = 1000


class ControllerParts(Protocol):
    broker_id: int
    zk: ZkBridge
    config: ControllerConfig
    rng: random.Random
    context: ControllerContext
    record: StateChangeRecorder
    batch: ControllerBrokerRequestBatch
    channel: ControllerChannelManager | None
    connect: ConnectionFactory | None
    partition_state_machine: PartitionStateMachine
    replica_state_machine: ReplicaStateMachine
    log_dir_failure: LogDirFailureHandler
    events: ControllerEventManager
    rebalance_task: asyncio.Task | None
    topic_watchers: dict[str, Callable[[WatchedEvent], None]]

    @property
    def is_active(self) -> bool: ...

    async def delete_quietly(self, paths: list[str]) -> None: ...

    def topic_watcher(self, topic: str) -> Callable[[WatchedEvent], None]: ...

    def on_topics_watch(self, event: WatchedEvent) -> None: ...

    def on_delete_topics_watch(self, event: WatchedEvent) -> None: ...

    def on_broker_ids_watch(self, event: WatchedEvent) -> None: ...

    def on_isr_change_watch(self, event: WatchedEvent) -> None: ...

    def on_log_dir_event_watch(self, event: WatchedEvent) -> None: ...

    def on_reassign_watch(self, event: WatchedEvent) -> None: ...

    def on_preferred_watch(self, event: WatchedEvent) -> None: ...

    def reassignment_isr_watcher(self, tp: TopicPartition) -> Callable[[WatchedEvent], None]: ...
