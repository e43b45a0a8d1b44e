"""The replica state machine (Kafka's ReplicaStateMachine; docs/architecture.md "The control
path, file by file").

States: NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionStarted,
ReplicaDeletionSuccessful, ReplicaDeletionIneligible, NonExistentReplica.

* -> OnlineReplica: the replica's broker is told the partition's leadership (LeaderAndIsr).
* -> OfflineReplica: the broker is told to stop the replica (StopReplica, no delete) and the
  replica leaves the ISR of the partitions it follows, written like any other leadership change;
  the remaining replicas get LeaderAndIsr and every live broker UpdateMetadata.
* -> ReplicaDeletionStarted: StopReplica with delete, whose answer moves the replica on to
  ReplicaDeletionSuccessful or ReplicaDeletionIneligible (topic deletion).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from enum import Enum

from client.types import TopicPartition
from controller.channel import ControllerBrokerRequestBatch, ResponseCallback
from controller.context import ControllerContext, StateChangeRecorder
from controller.partition_leader_election import ElectionOutcome, remove_replica_from_isr
from controller.partition_state_machine import PartitionStateMachine
from zk.data import LeaderIsrAndControllerEpoch, PartitionReplica

log = logging.getLogger(__name__)


class ReplicaState(Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


_S = ReplicaState
VALID_PREVIOUS_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    _S.NEW: frozenset({_S.NON_EXISTENT}),
    _S.ONLINE: frozenset({_S.NEW, _S.ONLINE, _S.OFFLINE, _S.DELETION_INELIGIBLE}),
    _S.OFFLINE: frozenset({_S.NEW, _S.ONLINE, _S.OFFLINE, _S.DELETION_INELIGIBLE}),
    _S.DELETION_STARTED: frozenset({_S.OFFLINE}),
    _S.DELETION_SUCCESSFUL: frozenset({_S.DELETION_STARTED}),
    _S.DELETION_INELIGIBLE: frozenset({_S.OFFLINE, _S.DELETION_STARTED}),
    _S.NON_EXISTENT: frozenset({_S.DELETION_SUCCESSFUL}),
}


class ReplicaStateMachine:
    def __init__(
        self,
        context: ControllerContext,
        batch: ControllerBrokerRequestBatch,
        partitions: PartitionStateMachine,
        record: StateChangeRecorder,
    ) -> None:
        self.context = context
        self.batch = batch
        self.partitions = partitions
        self.record = record
        self.states: dict[PartitionReplica, ReplicaState] = {}

    def state(self, replica: PartitionReplica) -> ReplicaState:
        return self.states.get(replica, ReplicaState.NON_EXISTENT)

    # -- lifecycle -------------------------------------------------------------------------------
    def initialize(self) -> None:
        """Replicas on live brokers are Online, the others Offline."""
        self.states.clear()
        for tp in self.context.all_partitions():
            for replica in self.context.replicas(tp):
                online = self.context.is_replica_online(replica, include_shutting_down=True, tp=tp)
                self.states[PartitionReplica(tp, replica)] = (
                    ReplicaState.ONLINE if online else ReplicaState.OFFLINE
                )

    async def startup(self) -> None:
        """Initialise and tell every live replica its partition's leadership (Kafka 2.x's
        ReplicaStateMachine.startup). The controller then elects leaders for the offline
        partitions and only after that calls :meth:`take_dead_replicas_offline`."""
        self.initialize()
        online = [r for r, s in self.states.items() if s is ReplicaState.ONLINE]
        await self.handle_state_changes(online, ReplicaState.ONLINE)

    async def take_dead_replicas_offline(self) -> None:
        """Take the replicas on dead brokers offline: floodmark's step after the partition state
        machine's startup. It matters when brokers died while there was no controller (the old
        controller among them): nobody else removes them from the ISRs of partitions that kept
        their leader, and a leader keeps an idle follower in its ISR (its LEO is the leader's), so
        acks=all would wait on the dead. It runs after the elections of the offline partitions
        (whose new ISRs hold live replicas only, so it writes nothing for them): its ISR writes
        and LeaderAndIsr of every other partition, thousands after a failover at scale, must not
        hold back the partitions that have no leader (docs/design.md "The controller at scale")."""
        offline = [
            r
            for r, s in self.states.items()
            if s is ReplicaState.OFFLINE and not self.context.is_topic_queued_for_deletion(r.tp.topic)
        ]
        if offline:
            await self.handle_state_changes(offline, ReplicaState.OFFLINE)

    def shutdown(self) -> None:
        self.states.clear()

    def replicas_in_state(self, topic: str, state: ReplicaState) -> list[PartitionReplica]:
        return [r for r, s in self.states.items() if r.tp.topic == topic and s is state]

    # -- transitions -----------------------------------------------------------------------------
    async def handle_state_changes(
        self,
        replicas: Sequence[PartitionReplica],
        target: ReplicaState,
        callback: ResponseCallback | None = None,
    ) -> None:
        valid = []
        for replica in replicas:
            if self.state(replica) in VALID_PREVIOUS_STATES[target]:
                valid.append(replica)
            else:
                log.error(
                    "replica %s of %s: illegal transition %s -> %s",
                    replica.replica,
                    replica.tp,
                    self.state(replica).value,
                    target.value,
                )
        if not valid:
            return
        if target is ReplicaState.NEW:
            for r in valid:
                leadership = self.context.partition_leadership.get(r.tp)
                if leadership is not None:
                    if leadership.leader_and_isr.leader == r.replica:
                        log.error("replica %s of %s cannot be new: it leads the partition", r.replica, r.tp)
                        continue
                    self.batch.add_leader_and_isr(
                        [r.replica], r.tp, leadership, self.context.replicas(r.tp), is_new=True
                    )
                self._set_state(r, target)
        elif target is ReplicaState.ONLINE:
            for r in valid:
                if self.state(r) is ReplicaState.NEW:
                    replicas_now = self.context.replicas(r.tp)
                    if r.replica not in replicas_now:
                        self.context.set_replicas(r.tp, [*replicas_now, r.replica])
                else:
                    leadership = self.context.partition_leadership.get(r.tp)
                    if leadership is not None:
                        self.batch.add_leader_and_isr(
                            [r.replica], r.tp, leadership, self.context.replicas(r.tp)
                        )
                self._set_state(r, target)
        elif target is ReplicaState.OFFLINE:
            await self._go_offline(valid)
        elif target is ReplicaState.DELETION_STARTED:
            for r in valid:
                self.batch.add_stop_replica([r.replica], r.tp, delete_partition=True, callback=callback)
                self._set_state(r, target)
        elif target is ReplicaState.NON_EXISTENT:
            for r in valid:
                replicas_now = self.context.replicas(r.tp)
                if r.replica in replicas_now:
                    self.context.set_replicas(r.tp, [x for x in replicas_now if x != r.replica])
                self._set_state(r, target)
        else:
            for r in valid:
                self._set_state(r, target)

    async def _go_offline(self, replicas: Sequence[PartitionReplica]) -> None:
        by_broker: dict[int, list[TopicPartition]] = defaultdict(list)
        for r in replicas:
            self.batch.add_stop_replica([r.replica], r.tp, delete_partition=False)
            by_broker[r.replica].append(r.tp)
        for broker_id, tps in sorted(by_broker.items()):
            with_leadership = [
                tp
                for tp in tps
                if tp in self.context.partition_leadership
                and not self.context.is_topic_queued_for_deletion(tp.topic)
            ]
            written, _, _ = await self._remove_from_isr(broker_id, with_leadership)
            for tp in tps:
                if tp in written:
                    state = written[tp]
                    if not self.context.is_topic_queued_for_deletion(tp.topic):
                        recipients = [
                            r
                            for r in self.context.live_replicas(tp, include_shutting_down=True)
                            if r != broker_id
                        ]
                        self.batch.add_leader_and_isr(recipients, tp, state, self.context.replicas(tp))
                else:
                    self.batch.add_update_metadata(self.context.live_or_shutting_down_broker_ids, [tp])
                self._set_state(PartitionReplica(tp, broker_id), ReplicaState.OFFLINE)

    async def _remove_from_isr(
        self, broker_id: int, partitions: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, LeaderIsrAndControllerEpoch], dict, dict]:
        def compute(tp: TopicPartition, current: LeaderIsrAndControllerEpoch) -> ElectionOutcome:
            return ElectionOutcome(
                remove_replica_from_isr(current.leader_and_isr, broker_id),
                reason=f"replica {broker_id} went offline: removed from the ISR",
            )

        written, unchanged, failed = await self.partitions.update_leader_and_isr(sorted(partitions), compute)
        for tp, (state, outcome) in written.items():
            lai = state.leader_and_isr
            self.record(
                "isr_shrink",
                topic=tp.topic,
                partition=tp.partition,
                replica=broker_id,
                leader=lai.leader,
                leader_epoch=lai.leader_epoch,
                isr=list(lai.isr),
                zk_version=lai.zk_version,
                reason=outcome.reason,
            )
        return {tp: s for tp, (s, _) in written.items()}, unchanged, failed

    def _set_state(self, replica: PartitionReplica, target: ReplicaState) -> None:
        previous = self.state(replica)
        if target is ReplicaState.NON_EXISTENT:
            self.states.pop(replica, None)
        else:
            self.states[replica] = target
        if previous is not target:
            self.record(
                "replica_state_change",
                topic=replica.tp.topic,
                partition=replica.tp.partition,
                replica=replica.replica,
                **{"from": previous.value, "to": target.value},
            )
