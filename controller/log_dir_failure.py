"""The controller's side of KIP-112 log dir failure (docs/design.md "Log dir failure").

Kafka 2.x's KafkaController.processLogDirEventNotification, onBrokerLogDirFailure and
LeaderAndIsrResponseReceived:

1. A broker whose log dir failed writes ``/log_dir_event_notification/log_dir_event_<seq>``
   (``{"version":1,"broker":B,"event":1}``). The controller reads the notifications,
   moves every replica of each named live broker to OnlineReplica, which
   sends that broker LeaderAndIsr for all of them, then deletes them.
2. The broker answers KAFKA_STORAGE_ERROR for each partition whose log is on an offline dir.
   Every LeaderAndIsr response goes through :meth:`LogDirFailureHandler.on_leader_and_isr_response`
   (so a broker that starts with a dir already offline is caught too): the partitions answered
   with KAFKA_STORAGE_ERROR join ``context.replicas_on_offline_dirs[B]``, those answered NONE
   leave it, and the newly offline replicas go through the same path as the replicas of a dead
   broker: partitions they led get a new leader at once, and they leave every ISR, instead of
   lingering until ``replica.lag.time.max.ms`` passes. If that fails half way the set is put
   back and the answer's event is retried, so the retry finds the same replicas newly offline.
3. ``context.is_replica_online(B, ..., tp)`` is False for them from then on, so no election
   picks them; when B registers again (restarted after its disk was fixed) the set is forgotten.

Steps 1 and 2 are retried until they land: a notification is deleted only once its broker's
LeaderAndIsr is in the batch, and a failed read leaves it for the event's retry (docs/design.md
"Log dir failure").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from client.protocol.errors import ErrorCode, error_name
from client.types import TopicPartition
from controller.context import ControllerContext, StateChangeRecorder
from controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from zk.bridge import ZkBridge
from zk.data import PartitionReplica, decode_log_dir_event
from zk.paths import LOG_DIR_EVENT_NOTIFICATION_PATH, LOG_DIR_EVENT_PREFIX

log = logging.getLogger(__name__)


class LogDirFailureHandler:
    def __init__(
        self,
        zk: ZkBridge,
        context: ControllerContext,
        replica_state_machine: ReplicaStateMachine,
        on_replicas_become_offline: Callable[[list[PartitionReplica]], Awaitable[None]],
        delete_quietly: Callable[[list[str]], Awaitable[None]],
        record: StateChangeRecorder,
    ) -> None:
        self.zk = zk
        self.context = context
        self.replica_state_machine = replica_state_machine
        self.on_replicas_become_offline = on_replicas_become_offline
        self.delete_quietly = delete_quietly
        self.record = record

    # -- 1. the notifications -------------------------------------------------------------------
    async def pending(self, watch: Callable | None = None) -> list[str]:
        """The notification znodes waiting under /log_dir_event_notification (sets ``watch``)."""
        children = await self.zk.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH, watch=watch) or []
        return sorted(c for c in children if c.startswith(LOG_DIR_EVENT_PREFIX))

    async def process_notifications(self, notifications: list[str]) -> None:
        """Read ``notifications``, send LeaderAndIsr to the brokers they name, then delete them.
        Nothing is deleted unless all of it was done: a failure leaves them for the event's retry
        (Kafka deletes them in a ``finally``, but its ZooKeeper client never gives up on a read)."""
        if not notifications:
            return
        paths = [f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{n}" for n in notifications]
        data = await asyncio.gather(*(self.zk.get(p) for p in paths))
        broker_ids: set[int] = set()
        for path, got in zip(paths, data, strict=True):
            if got is None:
                continue
            try:
                broker_ids.add(decode_log_dir_event(got[0]))
            except ValueError as exc:
                log.error("unreadable log dir event notification %s: %s", path, exc)
        await self.on_broker_log_dir_failure(sorted(broker_ids))
        await self.delete_quietly(paths)

    async def on_broker_log_dir_failure(self, broker_ids: list[int]) -> None:
        live = [b for b in broker_ids if b in self.context.live_brokers]
        if not live:
            return
        log.info(
            "brokers %s reported a failed log dir; sending them LeaderAndIsr for all their replicas", live
        )
        self.record("log_dir_failure", brokers=live)
        replicas = [
            r
            for r in self.context.replicas_on_brokers(live)
            if not self.context.is_topic_queued_for_deletion(r.tp.topic)
        ]
        await self.replica_state_machine.handle_state_changes(replicas, ReplicaState.ONLINE)

    # -- 2. the answers -----------------------------------------------------------------------------
    def should_process(self, broker_id: int, response: dict) -> bool:
        """Whether a LeaderAndIsr response changes what we know of the broker's offline dirs."""
        if response.get("error_code"):
            return False
        if broker_id in self.context.replicas_on_offline_dirs:
            return True
        return any(
            p.get("error_code") == ErrorCode.KAFKA_STORAGE_ERROR for p in response.get("partitions", [])
        )

    async def on_leader_and_isr_response(self, broker_id: int, response: dict) -> None:
        if broker_id not in self.context.live_brokers or response.get("error_code"):
            return
        offline: set[TopicPartition] = set()
        online: set[TopicPartition] = set()
        for p in response.get("partitions", []):
            tp = TopicPartition(p["topic"], p["partition"])
            if p.get("error_code") == ErrorCode.KAFKA_STORAGE_ERROR:
                offline.add(tp)
            elif p.get("error_code") == ErrorCode.NONE:
                online.add(tp)
        previous = self.context.replicas_on_offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        self._set_offline(broker_id, current)
        newly_offline = sorted(current - previous)
        if not newly_offline:
            return
        log.warning(
            "broker %s: %d replica(s) on an offline log dir (%s): taking them offline",
            broker_id,
            len(newly_offline),
            error_name(ErrorCode.KAFKA_STORAGE_ERROR),
        )
        self.record("replicas_on_offline_dir", broker=broker_id, partitions=[str(tp) for tp in newly_offline])
        try:
            await self.on_replicas_become_offline(
                [
                    PartitionReplica(tp, broker_id)
                    for tp in newly_offline
                    if tp in self.context.partition_leadership
                ]
            )
        except BaseException:
            # not done: the event's retry must find them newly offline again (the elections and
            # ISR writes already made are read back from ZooKeeper then)
            self._set_offline(broker_id, previous)
            raise

    def _set_offline(self, broker_id: int, replicas: set[TopicPartition]) -> None:
        if replicas:
            self.context.replicas_on_offline_dirs[broker_id] = set(replicas)
        else:
            self.context.replicas_on_offline_dirs.pop(broker_id, None)

    # -- 3. the broker is back ------------------------------------------------------------------------
    def on_broker_startup(self, broker_ids: list[int]) -> None:
        for broker_id in broker_ids:
            self.context.replicas_on_offline_dirs.pop(broker_id, None)
