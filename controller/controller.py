"""The controller (Kafka's KafkaController): it runs in every broker and acts only in the
elected one. This module is its lifecycle and its dispatch: everything the controller does is
the handling of one event from its queue (:mod:`controller.event_manager`), one at a time;
watches, the ZooKeeper session's state, timers and broker requests all become events. A handler
reads ZooKeeper, moves partitions and replicas through their state machines (which write fenced,
conditional znodes and fill the request batch), and the batch goes out at the event's end, or
after each step where the order matters, and also when the event fails half way, since its
znode writes were made. A failed event is retried before the events queued after it
(docs/design.md "The controller under ZooKeeper blips", "The retry order").

The mechanisms live in their own modules, named as Kafka names them: controller election
(:mod:`controller.controller_election`), controller failover's 12 steps (:mod:`controller.failover`),
broker start-up and failure (:mod:`controller.broker_changes`), topic creation
(:mod:`controller.topic_creation`), topic deletion (:mod:`controller.topic_deletion`), ISR change
notifications (:mod:`controller.isr_change_notifications`), preferred election and auto-rebalance
(:mod:`controller.preferred_election`), controlled shutdown (:mod:`controller.controlled_shutdown`)
and reassignment (:mod:`controller.reassignment`). docs/architecture.md "Where each mechanism
lives" maps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent

from client.connection import ConnectionFactory
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller import (
    broker_changes,
    controlled_shutdown,
    failover,
    isr_change_notifications,
    preferred_election,
    reassignment,
    topic_creation,
    topic_deletion,
)
from controller.channel import (
    ControllerBrokerRequestBatch,
    ControllerChannelManager,
    ResponseCallback,
    log_response_errors,
)
from controller.context import ControllerContext, StateChangeRecorder
from controller.controller_election import check_controller_and_epoch, try_to_become_controller
from controller.event_manager import (
    ASKED,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdown,
    ControllerChange,
    ControllerEvent,
    ControllerEventManager,
    Expire,
    IsrChangeNotification,
    LeaderAndIsrResend,
    LeaderAndIsrResponseReceived,
    LogDirEventNotification,
    PartitionModifications,
    PartitionReassignment,
    PartitionReassignmentIsrChange,
    PreferredReplicaElection,
    Reelect,
    ReplicaLeaderElection,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponse,
    retry_of,
)
from controller.leader_and_isr_retry import LeaderAndIsrRetries
from controller.log_dir_failure import LogDirFailureHandler
from controller.partition_state_machine import PartitionStateMachine
from controller.parts import ControllerConfig
from controller.replica_state_machine import ReplicaStateMachine
from zk.batch import delete_fenced
from zk.bridge import DeleteOp, ZkBridge, is_reset_event
from zk.client import (
    ControllerMovedError,
    create_persistent_paths,
    fenced_multi,
    get_controller_id,
)
from zk.paths import CONTROLLER_PATH

log = logging.getLogger(__name__)


class KafkaController:
    def __init__(
        self,
        broker_id: int,
        zk: ZkBridge,
        config: ControllerConfig,
        time_ms: Callable[[], int],
        rng: random.Random,
        state_change_log: Callable[[dict], None],
        connect: ConnectionFactory | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self.time_ms = time_ms
        self.rng = rng
        #: How the channel opens its connections to brokers (None: BrokerConnection.open; the
        #: simulator passes its network's).
        self.connect = connect
        self.context = ControllerContext()
        self.record = StateChangeRecorder(broker_id, self.context, time_ms, state_change_log)
        self.channel: ControllerChannelManager | None = None
        self.batch = ControllerBrokerRequestBatch(
            broker_id,
            self.context,
            self._send,
            leader_and_isr_callback=self._on_leader_and_isr_response,
            listener_name=config.inter_broker_listener_name,
            max_partitions=config.request_max_partitions,
        )
        self.partition_state_machine = PartitionStateMachine(
            self.context, zk, self.batch, self.record, config.unclean_leader_election_enable
        )
        self.replica_state_machine = ReplicaStateMachine(
            self.context, self.batch, self.partition_state_machine, self.record
        )
        self.log_dir_failure = LogDirFailureHandler(
            zk,
            self.context,
            self.replica_state_machine,
            functools.partial(broker_changes.on_replicas_become_offline, self),
            self.delete_quietly,
            self.record,
        )
        self.leader_and_isr_retries = LeaderAndIsrRetries()
        self._event_failures: dict[type, int] = {}  # consecutive failures by retry type (retry backoff)
        self.events = ControllerEventManager(self._process, name=f"controller-{broker_id}-events")
        #: The broker id in /controller as last read (-1: none); on non-controllers too.
        self.active_controller_id = -1
        self._active = False
        self._session_lost = False
        self._started = False
        self.rebalance_task: asyncio.Task | None = None
        self.topic_watchers: dict[str, Callable[[WatchedEvent], None]] = {}
        self.reassignment_watchers: dict[TopicPartition, Callable[[WatchedEvent], None]] = {}

    # -- public API ------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def epoch(self) -> int:
        return self.context.epoch

    @property
    def epoch_zk_version(self) -> int:
        return self.context.epoch_zk_version

    @property
    def offline_partitions_count(self) -> int:
        """OfflinePartitionsCount, 0 off the controller (docs/operations.md "Metrics (`/metrics`)")."""
        return self.context.offline_partition_count() if self._active else 0

    async def startup(self) -> None:
        """Start the event task, register the /controller watch and try to be elected. Returns
        once that first attempt is over (won or lost)."""
        if self._started:
            return
        self._started = True
        self.zk.add_state_listener(self._on_zk_state)
        self.events.start()
        event = self.events.put(Startup(done=asyncio.get_running_loop().create_future()))
        try:
            await event.done
        except Exception as exc:  # logged by the event manager; a Reelect retries it
            log.warning("broker %s: controller start-up failed (%s); retrying", self.broker_id, exc)

    async def shutdown(self) -> None:
        """Stop processing events and resign; /controller goes when the broker closes its ZooKeeper session."""
        await self.events.close()
        if self._active:
            await self._on_controller_resignation()
        elif self.channel is not None:
            await self.channel.shutdown()
            self.channel = None

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> list[tuple[str, int]]:
        """Move ``broker_id``'s leaderships away (KafkaController.doControlledShutdown). Returns the
        partitions it still leads (empty: it may exit). Raises NOT_CONTROLLER or BROKER_NOT_AVAILABLE."""
        if not self._active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not the controller")
        return await self.events.ask(ControlledShutdown(broker_id=broker_id, broker_epoch=broker_epoch))

    # -- the event loop's one entry point ---------------------------------------------------------
    async def _process(self, event: ControllerEvent) -> object:
        handler = self._handlers().get(type(event))
        if handler is None:
            log.error("no handler for controller event %s", event.name)
            return None
        self.batch.new_batch()
        try:
            result = await handler(event)
            self._event_failures.pop(type(event), None)
            if self._active:
                await self.batch.send_async(self.context.epoch)
            return result
        except ControllerMovedError as exc:
            log.warning("controller %s: %s; resigning", self.broker_id, exc)
            await self._maybe_resign()
            if isinstance(event, ASKED):
                raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from None
            return None
        except Exception:
            if self._active:
                # The znode writes behind what the batch holds were made: the brokers must hear of
                # them (Kafka's state machines send each step's batch as soon as the step is done).
                await self.batch.send_async(self.context.epoch)
            self._retry_later(event)
            raise
        finally:
            self.batch.clear()

    def _retry_later(self, event: ControllerEvent) -> None:
        """Retry the failed event (0.1 s doubling to 5 s while it keeps failing), before any event
        queued after it (:meth:`ControllerEventManager.retry_first`; docs/design.md "The retry
        order"): the election events always, the others while this broker is the controller. A
        BrokerChange compares /brokers/ids with the live brokers, which it changed only for the
        brokers whose handling completed, so its retry handles the rest; any retried event
        re-registers the watch its failed read may have lost. An event that never stops failing
        holds the queue, so each failure says so, as an error from the fifth on."""
        retry = retry_of(event)
        if retry is None or not (self._active or isinstance(retry, Reelect)):
            return
        failures = self._event_failures.get(type(retry), 0) + 1
        self._event_failures[type(retry)] = failures
        self.events.retry_first(retry, failures, failed=event.name)

    def _handlers(self) -> dict[type, Callable]:
        """Each event's handler: the lifecycle ones here, the mechanisms in their modules
        (docs/architecture.md "Where each mechanism lives"), each given this controller."""
        mechanisms: dict[type, Callable] = {
            BrokerChange: broker_changes.handle_broker_change,
            TopicChange: topic_creation.handle_topic_change,
            PartitionModifications: topic_creation.handle_partition_modifications,
            TopicDeletion: topic_deletion.handle_topic_deletion,
            TopicDeletionStopReplicaResponse: topic_deletion.handle_stop_replica_deletion_response,
            IsrChangeNotification: isr_change_notifications.handle_isr_change_notification,
            PartitionReassignment: reassignment.handle_partition_reassignment,
            PartitionReassignmentIsrChange: reassignment.handle_isr_change,
            PreferredReplicaElection: preferred_election.handle_preferred_replica_election,
            ReplicaLeaderElection: preferred_election.handle_replica_leader_election,
            AutoPreferredReplicaLeaderElection: preferred_election.handle_auto_rebalance,
            ControlledShutdown: controlled_shutdown.handle_controlled_shutdown,
        }
        return {
            Startup: self._handle_startup,
            Reelect: self._handle_reelect,
            ControllerChange: self._handle_controller_change,
            Expire: self._handle_expire,
            LogDirEventNotification: self._handle_log_dir_event_notification,
            LeaderAndIsrResponseReceived: self._handle_leader_and_isr_response,
            LeaderAndIsrResend: self._handle_leader_and_isr_resend,
            **{kind: functools.partial(handler, self) for kind, handler in mechanisms.items()},
        }

    def _send(self, broker_id: int, api_key: ApiKey, body: dict, callback: ResponseCallback | None) -> None:
        if self.channel is not None:
            self.channel.send(broker_id, api_key, body, callback)

    # -- ZooKeeper session and watches (called on the loop by ZkBridge) ---------------------------------
    def _on_zk_state(self, state: str) -> None:
        if state == "LOST":
            # Kafka's clearAndPut(Expire): the old session's backlog must not run as an active controller.
            self._session_lost = True
            self.events.clear_and_put(Expire())
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            self.events.put(Reelect())

    def on_controller_watch(self, event: WatchedEvent) -> None:
        if is_reset_event(event) or event.type == EventType.DELETED:
            self.events.put(Reelect())
        else:
            self.events.put(ControllerChange())

    def on_broker_ids_watch(self, event: WatchedEvent) -> None:
        self.events.put(BrokerChange())

    def on_topics_watch(self, event: WatchedEvent) -> None:
        self.events.put(TopicChange())

    def on_delete_topics_watch(self, event: WatchedEvent) -> None:
        self.events.put(TopicDeletion())

    def on_isr_change_watch(self, event: WatchedEvent) -> None:
        self.events.put(IsrChangeNotification())

    def on_log_dir_event_watch(self, event: WatchedEvent) -> None:
        self.events.put(LogDirEventNotification())

    def _on_leader_and_isr_response(self, broker_id: int, response: dict, request: dict) -> None:
        """On the loop, from the channel's sender: KIP-112 answers become an event, and
        partitions the broker could not apply are sent again after a backoff."""
        log_response_errors(broker_id, response)
        if not self._active:
            return
        if self.log_dir_failure.should_process(broker_id, response):
            self.events.put(LeaderAndIsrResponseReceived(broker_id=broker_id, response=response))
        resend = self.leader_and_isr_retries.on_response(broker_id, response, request)
        if resend is not None:
            asyncio.get_running_loop().call_later(
                resend.delay_s,
                self.events.put,
                LeaderAndIsrResend(broker_id=resend.broker_id, partitions=resend.partitions),
            )

    async def _handle_leader_and_isr_resend(self, event: LeaderAndIsrResend) -> None:
        ctx = self.context
        if not self._active or event.broker_id not in ctx.live_brokers:
            return
        for tp in event.partitions:
            leadership = ctx.partition_leadership.get(tp)
            replicas = ctx.replicas(tp)
            if (
                leadership is None
                or event.broker_id not in replicas
                or ctx.is_topic_queued_for_deletion(tp.topic)
            ):
                continue
            self.batch.add_leader_and_isr([event.broker_id], tp, leadership, replicas)

    def on_reassign_watch(self, event: WatchedEvent) -> None:
        self.events.put(PartitionReassignment())

    def on_preferred_watch(self, event: WatchedEvent) -> None:
        self.events.put(PreferredReplicaElection())

    def reassignment_isr_watcher(self, tp: TopicPartition) -> Callable[[WatchedEvent], None]:
        """The watch on a moving partition's state znode (one function per partition: kazoo
        keeps watchers in a set, so registering it again after each event adds nothing)."""
        watcher = self.reassignment_watchers.get(tp)
        if watcher is None:

            def watcher(event: WatchedEvent, _tp: TopicPartition = tp) -> None:
                self.events.put(PartitionReassignmentIsrChange(partition=_tp))

            self.reassignment_watchers[tp] = watcher
        return watcher

    def topic_watcher(self, topic: str) -> Callable[[WatchedEvent], None]:
        watcher = self.topic_watchers.get(topic)
        if watcher is None:

            def watcher(event: WatchedEvent, _topic: str = topic) -> None:
                self.events.put(PartitionModifications(topic=_topic))

            self.topic_watchers[topic] = watcher
        return watcher

    # -- election and resignation -----------------------------------------------------------------
    async def _handle_startup(self, event: Startup) -> None:
        await create_persistent_paths(self.zk)
        await self._elect()

    async def _handle_reelect(self, event: Reelect) -> None:
        await self._maybe_resign()
        await self._elect()

    async def _handle_controller_change(self, event: ControllerChange) -> None:
        await self._maybe_resign()

    async def _handle_expire(self, event: Expire) -> None:
        self.active_controller_id = -1
        if self._active:
            await self._on_controller_resignation()

    async def _elect(self) -> None:
        await self.zk.exists(CONTROLLER_PATH, watch=self.on_controller_watch)
        self.active_controller_id = await get_controller_id(self.zk)

        if self.active_controller_id == self.broker_id and not self._active:
            # our election's reply was lost, or our resignation's delete failed: take over
            win = await check_controller_and_epoch(self.zk, self.broker_id)
            if win is None:
                return
        elif self.active_controller_id != -1:
            log.debug("broker %s: broker %s is the controller", self.broker_id, self.active_controller_id)
            return
        else:
            for _ in range(3):
                try:
                    win = await try_to_become_controller(self.zk, self.broker_id, self.time_ms())
                    break
                except (ConnectionLoss, OperationTimeoutError):
                    # the multi may have committed with its reply lost: read what ZooKeeper holds
                    log.warning("broker %s: controller election write unanswered; checking", self.broker_id)
                    win = await check_controller_and_epoch(self.zk, self.broker_id)
                    if win is not None or await self.zk.exists(CONTROLLER_PATH) is not None:
                        break
            else:
                raise ConnectionLoss("controller election: no answer in 3 attempts")
        if win is None:
            self.active_controller_id = await get_controller_id(self.zk)
            log.info(
                "broker %s lost the controller election to %s", self.broker_id, self.active_controller_id
            )
            return
        self.active_controller_id = self.broker_id
        self.context.epoch, self.context.epoch_zk_version = win.epoch, win.epoch_zk_version
        self._active = True
        log.info("broker %s is the controller, epoch %s", self.broker_id, win.epoch)
        self.record("controller_elected", epoch_zk_version=win.epoch_zk_version)
        try:
            await failover.on_controller_failover(self)
        except ControllerMovedError:
            raise
        except Exception:
            log.exception(
                "controller failover of broker %s failed; giving up the controllership", self.broker_id
            )
            await self._trigger_controller_move()

    async def _maybe_resign(self) -> None:
        was_active = self._active
        await self.zk.exists(CONTROLLER_PATH, watch=self.on_controller_watch)
        self.active_controller_id = await get_controller_id(self.zk)
        if was_active and self.active_controller_id != self.broker_id:
            await self._on_controller_resignation()

    async def _trigger_controller_move(self) -> None:
        epoch_zk_version = self.context.epoch_zk_version
        await self._on_controller_resignation()
        self.active_controller_id = -1
        with contextlib.suppress(Exception):
            await fenced_multi(self.zk, epoch_zk_version, [DeleteOp(CONTROLLER_PATH)])

    async def _on_controller_resignation(self) -> None:
        self._active = False
        if self.rebalance_task is not None:
            self.rebalance_task.cancel()
            self.rebalance_task = None
        self.replica_state_machine.shutdown()
        self.partition_state_machine.shutdown()
        self.batch.clear()
        if self.channel is not None:
            await self.channel.shutdown()
            self.channel = None
        self.context.reset()
        self.leader_and_isr_retries.reset()
        self.topic_watchers.clear()
        self.reassignment_watchers.clear()
        log.info("broker %s resigned as controller (epoch %s)", self.broker_id, self.context.epoch)
        self.record("controller_resigned")

    # -- KIP-112 log dir failure (controller/log_dir_failure.py) -------------------------------------
    async def _handle_log_dir_event_notification(self, event: LogDirEventNotification) -> None:
        if self._active:
            notifications = await self.log_dir_failure.pending(watch=self.on_log_dir_event_watch)
            await self.log_dir_failure.process_notifications(notifications)

    async def _handle_leader_and_isr_response(self, event: LeaderAndIsrResponseReceived) -> None:
        if self._active:
            await self.log_dir_failure.on_leader_and_isr_response(event.broker_id, event.response)

    async def delete_quietly(self, paths: list[str]) -> None:
        """Fenced deletes that may find the znode gone already."""
        await delete_fenced(self.zk, self.context.epoch_zk_version, paths)
