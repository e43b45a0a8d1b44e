"""The controller (Kafka's KafkaController; SPEC 4; seed 000 "Broker Failover", "创建/删除Topic",
"Broker启动过程", "Controller Failover"; seed 003 sections 6-8; seed 004).

It runs in every broker and acts only in the elected one. Everything it does is the handling of
one event from its queue (:mod:`controller.events`): watches on ZooKeeper, the session's state,
timers and broker requests all become events, processed one at a time. A handler reads
ZooKeeper, moves partitions and replicas through their state machines (which write fenced,
conditional znodes and fill the request batch) and the batch goes out at the event's end, or
after each step where the order matters (a broker change sends the failure's requests before
the start-up's are built), and also when the event fails half way, since its znode writes were
made: one LeaderAndIsr, UpdateMetadata and StopReplica per broker per send.

The handlers follow the seeds' explanations:

* :meth:`_on_controller_failover`: the 12 steps of seed 000 "Controller Failover";
* :meth:`_on_broker_startup`: seed 000 "Broker启动过程" steps 1-3;
* :meth:`_on_broker_failure`: seed 000 "Broker Failover" steps 1-4;
* :meth:`_on_new_partition_creation`: seed 000 "创建/删除Topic" step 3-4;
* topic deletion: seed 000 "创建/删除Topic" step 2 (StopReplica with delete, then the znodes go);
* controlled shutdown: SPEC 4's last table row, Kafka's doControlledShutdown;
* preferred replica election and the auto-rebalance check: seed 000 "Preferred Replica Leader Election Tool".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
)
from kazoo.protocol.states import EventType, WatchedEvent

from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller import election
from controller.channel import (
    ControllerBrokerRequestBatch,
    ControllerChannelManager,
    ResponseCallback,
    log_response_errors,
)
from controller.context import ControllerContext, StateChangeRecorder
from controller.events import (
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
    PreferredReplicaElection,
    Reelect,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponse,
    retry_of,
)
from controller.leader_and_isr_retry import LeaderAndIsrRetries
from controller.log_dir_failure import LogDirFailureHandler
from controller.partition_state import ElectionStrategy, PartitionState, PartitionStateMachine
from controller.replica_state import ReplicaState, ReplicaStateMachine
from zk.bridge import DeleteOp, ZkBridge, is_reset_event
from zk.client import (
    ControllerMovedError,
    create_persistent_paths,
    fenced_multi,
    get_broker,
    get_controller_id,
    get_partition_state,
)
from zk.data import (
    BrokerInfo,
    PartitionReplica,
    decode_controller,
    decode_controller_epoch,
    decode_isr_change_notification,
    decode_partition_list,
    decode_topic_assignment,
)
from zk.paths import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    ISR_CHANGE_PREFIX,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    PREFERRED_REPLICA_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    config_topic_path,
    delete_topic_path,
    partition_path,
    topic_partitions_path,
    topic_path,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerConfig:
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    delete_topic_enable: bool = True
    controller_socket_timeout_ms: int = 30000


class KafkaController:
    def __init__(
        self,
        broker_id: int,
        zk: ZkBridge,
        config: ControllerConfig,
        time_ms: Callable[[], int],
        rng: random.Random,
        state_change_log: Callable[[dict], None],
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self.time_ms = time_ms
        self.rng = rng
        self.context = ControllerContext()
        self.record = StateChangeRecorder(broker_id, self.context, time_ms, state_change_log)
        self.channel: ControllerChannelManager | None = None
        self.batch = ControllerBrokerRequestBatch(
            broker_id, self.context, self._send, leader_and_isr_callback=self._on_leader_and_isr_response
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
            self._on_replicas_become_offline,
            self._delete_quietly,
            self.record,
        )
        self.leader_and_isr_retries = LeaderAndIsrRetries()
        self._event_failures: dict[type, int] = {}  # consecutive failures by event type (retry backoff)
        self.events = ControllerEventManager(self._process, name=f"controller-{broker_id}-events")
        #: The broker id in /controller as last read (-1: none); on non-controllers too.
        self.active_controller_id = -1
        self._active = False
        self._session_lost = False
        self._started = False
        self._rebalance_task: asyncio.Task | None = None
        self._topic_watchers: dict[str, Callable[[WatchedEvent], None]] = {}

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
        """OfflinePartitionsCount (SPEC 9); 0 on a broker that is not the controller."""
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
        """Move ``broker_id``'s leaderships away (SPEC 4). Returns the partitions it still leads
        (empty: it may exit). Raises KafkaError NOT_CONTROLLER or BROKER_NOT_AVAILABLE."""
        if not self._active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not the controller")
        event = self.events.put(
            ControlledShutdown(
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                done=asyncio.get_running_loop().create_future(),
            )
        )
        return await event.done

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
                self.batch.send(self.context.epoch)
            return result
        except ControllerMovedError as exc:
            log.warning("controller %s: %s; resigning", self.broker_id, exc)
            if isinstance(event, ControlledShutdown):
                await self._maybe_resign()
                raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from None
            await self._maybe_resign()
            return None
        except Exception:
            if self._active:
                # The znode writes behind what the batch holds were made: the brokers must hear of
                # them (Kafka's state machines send each step's batch as soon as the step is done).
                self.batch.send(self.context.epoch)
            self._retry_later(event)
            raise
        finally:
            self.batch.clear()

    def _retry_later(self, event: ControllerEvent) -> None:
        """Queue the failed event's retry (0.1 s doubling to 5 s while it keeps failing): the
        election events always, the others while this broker is the controller. A BrokerChange
        compares /brokers/ids with the live brokers, which it changed only for the brokers whose
        handling completed, so its retry handles the rest; any retried event re-registers the
        watch its failed read may have lost."""
        retry = retry_of(event)
        if retry is None or not (self._active or isinstance(retry, Reelect)):
            return
        failures = self._event_failures.get(type(event), 0)
        self._event_failures[type(event)] = failures + 1
        backoff_s = min(5.0, 0.1 * 2**failures)
        log.info("controller event %s failed; %s again in %.1f s", event.name, retry.name, backoff_s)
        asyncio.get_running_loop().call_later(backoff_s, self.events.put, retry)

    def _handlers(self) -> dict[type, Callable]:
        return {
            Startup: self._handle_startup,
            Reelect: self._handle_reelect,
            ControllerChange: self._handle_controller_change,
            Expire: self._handle_expire,
            BrokerChange: self._handle_broker_change,
            TopicChange: self._handle_topic_change,
            PartitionModifications: self._handle_partition_modifications,
            TopicDeletion: self._handle_topic_deletion,
            TopicDeletionStopReplicaResponse: self._handle_stop_replica_deletion_response,
            IsrChangeNotification: self._handle_isr_change_notification,
            LogDirEventNotification: self._handle_log_dir_event_notification,
            LeaderAndIsrResponseReceived: self._handle_leader_and_isr_response,
            LeaderAndIsrResend: self._handle_leader_and_isr_resend,
            PartitionReassignment: self._handle_partition_reassignment,
            PreferredReplicaElection: self._handle_preferred_replica_election,
            ControlledShutdown: self._handle_controlled_shutdown,
            AutoPreferredReplicaLeaderElection: self._handle_auto_rebalance,
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

    def _on_controller_watch(self, event: WatchedEvent) -> None:
        if is_reset_event(event) or event.type == EventType.DELETED:
            self.events.put(Reelect())
        else:
            self.events.put(ControllerChange())

    def _on_broker_ids_watch(self, event: WatchedEvent) -> None:
        self.events.put(BrokerChange())

    def _on_topics_watch(self, event: WatchedEvent) -> None:
        self.events.put(TopicChange())

    def _on_delete_topics_watch(self, event: WatchedEvent) -> None:
        self.events.put(TopicDeletion())

    def _on_isr_change_watch(self, event: WatchedEvent) -> None:
        self.events.put(IsrChangeNotification())

    def _on_log_dir_event_watch(self, event: WatchedEvent) -> None:
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

    def _on_reassign_watch(self, event: WatchedEvent) -> None:
        self.events.put(PartitionReassignment())

    def _on_preferred_watch(self, event: WatchedEvent) -> None:
        self.events.put(PreferredReplicaElection())

    def _topic_watcher(self, topic: str) -> Callable[[WatchedEvent], None]:
        watcher = self._topic_watchers.get(topic)
        if watcher is None:

            def watcher(event: WatchedEvent, _topic: str = topic) -> None:
                self.events.put(PartitionModifications(topic=_topic))

            self._topic_watchers[topic] = watcher
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
        await self.zk.exists(CONTROLLER_PATH, watch=self._on_controller_watch)
        self.active_controller_id = await get_controller_id(self.zk)

        async def our_election() -> election.ElectionWin | None:
            """Kafka's checkControllerAndEpoch: /controller is this broker's, in this session, and
            /controller_epoch was written by the multi that created it (same zxid): that epoch is ours.
            Our /controller with another epoch is deleted (its watch re-runs the election)."""
            controller, epoch = await asyncio.gather(
                self.zk.get(CONTROLLER_PATH), self.zk.get(CONTROLLER_EPOCH_PATH)
            )
            if controller is None or epoch is None:
                return None
            (data, stat), (epoch_data, epoch_stat) = controller, epoch
            if decode_controller(data) != self.broker_id or stat.ephemeralOwner != self.zk.session_id:
                return None  # another broker, or our previous session's znode: its expiry fires the watch
            if epoch_stat.mzxid != stat.czxid:
                with contextlib.suppress(NoNodeError, BadVersionError):
                    await self.zk.delete(CONTROLLER_PATH, version=stat.version)
                return None
            return election.ElectionWin(decode_controller_epoch(epoch_data), epoch_stat.version)

        if self.active_controller_id == self.broker_id and not self._active:
            # our election's reply was lost, or our resignation's delete failed: take over
            win = await our_election()
            if win is None:
                return
        elif self.active_controller_id != -1:
            log.debug("broker %s: broker %s is the controller", self.broker_id, self.active_controller_id)
            return
        else:
            for _ in range(3):
                try:
                    win = await election.try_to_become_controller(self.zk, self.broker_id, self.time_ms())
                    break
                except (ConnectionLoss, OperationTimeoutError):
                    # the multi may have committed with its reply lost: read what ZooKeeper holds
                    log.warning("broker %s: controller election write unanswered; checking", self.broker_id)
                    win = await our_election()
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
            await self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception(
                "controller failover of broker %s failed; giving up the controllership", self.broker_id
            )
            await self._trigger_controller_move()

    async def _maybe_resign(self) -> None:
        was_active = self._active
        await self.zk.exists(CONTROLLER_PATH, watch=self._on_controller_watch)
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
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        self.replica_state_machine.shutdown()
        self.partition_state_machine.shutdown()
        self.batch.clear()
        if self.channel is not None:
            await self.channel.shutdown()
            self.channel = None
        self.context.reset()
        self.leader_and_isr_retries.reset()
        self._topic_watchers.clear()
        log.info("broker %s resigned as controller (epoch %s)", self.broker_id, self.context.epoch)
        self.record("controller_resigned")

    # -- seed 000 "Controller Failover" ------------------------------------------------------------
    async def _on_controller_failover(self) -> None:
        # 1. the epoch was read and incremented by the election.
        await create_persistent_paths(self.zk)
        # 2-3. reassignment and preferred replica election requests
        await self.zk.exists(REASSIGN_PARTITIONS_PATH, watch=self._on_reassign_watch)
        await self.zk.exists(PREFERRED_REPLICA_ELECTION_PATH, watch=self._on_preferred_watch)
        # Pending ISR change notifications go *before* the context is read (Kafka's order): the
        # context reads every state znode after them, and one written later stays for its event.
        pending_isr_notifications = await self.zk.get_children(
            ISR_CHANGE_NOTIFICATION_PATH, watch=self._on_isr_change_watch
        )
        await self._delete_isr_change_notifications(pending_isr_notifications or [])
        # KIP-112, also before the context: step 8 sends every live broker LeaderAndIsr, and its
        # answers name the offline dirs; a notification written after this stays for its event.
        pending_log_dir_events = await self.log_dir_failure.pending(watch=self._on_log_dir_event_watch)
        await self._delete_quietly([f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{n}" for n in pending_log_dir_events])
        # 4-7. /brokers/topics, /admin/delete_topics, /brokers/ids watches, while reading the context
        await self._initialize_context()
        self.channel = ControllerChannelManager(
            self.broker_id, self.config.controller_socket_timeout_ms / 1000.0, self.rng
        )
        for broker in self.context.live_brokers.values():
            self.channel.add_broker(broker)
        # 8. the state machines: every live replica learns its leadership; New and Offline partitions get leaders
        await self.replica_state_machine.startup()
        await self.partition_state_machine.startup()
        # 9-10. running as controller: every live broker gets the whole metadata
        self.batch.add_update_metadata(
            self.context.live_or_shutting_down_broker_ids, self.context.all_partitions()
        )
        self.record(
            "controller_failover",
            live_brokers=sorted(self.context.live_brokers),
            topics=sorted(self.context.all_topics),
            offline_partitions=[str(tp) for tp in self.partition_state_machine.offline_partitions()],
        )
        # 11. the auto-rebalance timer
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_timer())
        # 12. pending deletions, then pending admin requests
        await self._resume_deletions()
        if await self.zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is not None:
            await self._handle_preferred_replica_election(PreferredReplicaElection())
        if await self.zk.exists(REASSIGN_PARTITIONS_PATH) is not None:
            await self._handle_partition_reassignment(PartitionReassignment())

    async def _initialize_context(self) -> None:
        ctx = self.context
        ctx.reset()
        ctx.live_brokers.update(await self._read_live_brokers())
        topics = await self.zk.get_children(BROKER_TOPICS_PATH, watch=self._on_topics_watch) or []
        assignments = await asyncio.gather(*(self._read_assignment(t) for t in topics))
        for topic, assignment in zip(topics, assignments, strict=True):
            if assignment is not None:
                ctx.assignments[topic] = assignment
        partitions = ctx.all_partitions()
        states = await asyncio.gather(*(get_partition_state(self.zk, tp) for tp in partitions))
        for tp, state in zip(partitions, states, strict=True):
            if state is not None:
                ctx.partition_leadership[tp] = state
        if self.config.delete_topic_enable:
            marked = await self.zk.get_children(DELETE_TOPICS_PATH, watch=self._on_delete_topics_watch) or []
            ctx.topics_to_be_deleted.update(t for t in marked if t in ctx.assignments)

    async def _read_live_brokers(self) -> dict[int, BrokerInfo]:
        children = await self.zk.get_children(BROKER_IDS_PATH, watch=self._on_broker_ids_watch) or []
        ids = sorted(int(c) for c in children if c.lstrip("-").isdigit())
        infos = await asyncio.gather(*(get_broker(self.zk, i) for i in ids))
        return {info.id: info for info in infos if info is not None}

    async def _read_assignment(self, topic: str) -> dict[int, list[int]] | None:
        got = await self.zk.get(topic_path(topic), watch=self._topic_watcher(topic))
        return None if got is None else decode_topic_assignment(got[0])

    # -- seed 000 "Broker启动过程" and "Broker Failover" ----------------------------------------------
    async def _handle_broker_change(self, event: BrokerChange) -> None:
        """Kafka's processBrokerChange. Each step's requests are sent before the next step is
        made, so a bounced broker gets the failure's StopReplica before the start-up's
        LeaderAndIsr. If a step fails, the brokers it was handling are put back as they were in
        the context, so the retry (see :meth:`_process`) sees them again in /brokers/ids."""
        if not self._active:
            return
        current = await self._read_live_brokers()
        known = self.context.live_brokers
        new_ids = sorted(set(current) - set(known))
        dead_ids = sorted(set(known) - set(current))
        bounced_ids = sorted(i for i in set(current) & set(known) if current[i].epoch != known[i].epoch)
        for i in sorted(self.channel.broker_ids - set(current)):
            self.channel.remove_broker(i)  # gone, also if its start-up failed (no longer in the context)
        if not (new_ids or dead_ids or bounced_ids):
            return
        log.info("broker change: new %s, dead %s, bounced %s", new_ids, dead_ids, bounced_ids)
        self.record("broker_change", new=new_ids, dead=dead_ids, bounced=bounced_ids)
        for failed_ids in (bounced_ids, dead_ids):
            if not failed_ids:
                continue
            previous = {i: known.pop(i) for i in failed_ids}
            for i in failed_ids:
                self.channel.remove_broker(i)
            try:
                await self._on_broker_failure(failed_ids)
            except ControllerMovedError:
                raise
            except Exception:
                # the writes made go out with the context they were made in; then these brokers
                # are put back, so that the retry sees them fail again
                self.batch.send(self.context.epoch)
                known.update(previous)
                raise
            self.batch.send(self.context.epoch)
        started_ids = sorted(new_ids + bounced_ids)
        for i in started_ids:
            known[i] = current[i]
            self.channel.add_broker(current[i])
        if started_ids:
            try:
                await self._on_broker_startup(started_ids)
            except ControllerMovedError:
                raise
            except Exception:
                self.batch.send(self.context.epoch)
                for i in started_ids:  # not started: the retry sees them as new brokers
                    known.pop(i, None)
                raise

    async def _on_broker_startup(self, new_ids: list[int]) -> None:
        ctx = self.context
        self.log_dir_failure.on_broker_startup(new_ids)  # restarted: its dirs were recovered
        # 1. everyone learns the new live-broker list; the new brokers get the whole metadata
        self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids - set(new_ids), [])
        self.batch.add_update_metadata(new_ids, ctx.all_partitions())
        # 2. their replicas are online: each gets its partition's leadership
        replicas = [
            r for r in ctx.replicas_on_brokers(new_ids) if not ctx.is_topic_queued_for_deletion(r.tp.topic)
        ]
        await self.replica_state_machine.handle_state_changes(replicas, ReplicaState.ONLINE)
        # 3. offline and new partitions may have a leader now
        await self.partition_state_machine.trigger_online_partition_state_change()
        # topic deletions waiting for these brokers may go on
        for topic in list(ctx.topics_ineligible_for_deletion):
            if any(
                r.replica in new_ids for r in ctx.replicas_for_partitions(ctx.partitions_for_topic(topic))
            ):
                ctx.topics_ineligible_for_deletion.discard(topic)
                deleting = self.replica_state_machine.replicas_in_state(
                    topic, ReplicaState.DELETION_INELIGIBLE
                )
                await self.replica_state_machine.handle_state_changes(deleting, ReplicaState.OFFLINE)
        await self._resume_deletions()

    async def _on_broker_failure(self, dead_ids: list[int]) -> None:
        for i in dead_ids:
            self.context.shutting_down_broker_ids.discard(i)
        await self._on_replicas_become_offline(self.context.replicas_on_brokers(dead_ids))

    async def _on_replicas_become_offline(self, replicas: list[PartitionReplica]) -> None:
        ctx = self.context
        for_deletion = [r for r in replicas if ctx.is_topic_queued_for_deletion(r.tp.topic)]
        not_for_deletion = [r for r in replicas if not ctx.is_topic_queued_for_deletion(r.tp.topic)]
        without_leader = sorted(
            tp
            for tp, state in ctx.partition_leadership.items()
            if not ctx.is_replica_online(state.leader_and_isr.leader, include_shutting_down=True, tp=tp)
            and not ctx.is_topic_queued_for_deletion(tp.topic)
            and self.partition_state_machine.state(tp) in (PartitionState.ONLINE, PartitionState.OFFLINE)
        )
        # 2-3. partitions led by dead brokers go offline, then get a leader by the rules of SPEC 4
        await self.partition_state_machine.handle_state_changes(without_leader, PartitionState.OFFLINE)
        await self.partition_state_machine.trigger_online_partition_state_change()
        # the dead replicas leave the ISRs they were in
        await self.replica_state_machine.handle_state_changes(not_for_deletion, ReplicaState.OFFLINE)
        if for_deletion:
            ctx.topics_ineligible_for_deletion.update(r.tp.topic for r in for_deletion)
            await self.replica_state_machine.handle_state_changes(for_deletion, ReplicaState.OFFLINE)
            await self.replica_state_machine.handle_state_changes(
                for_deletion, ReplicaState.DELETION_INELIGIBLE
            )
        if not without_leader:
            self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [])

    # -- seed 000 "创建/删除Topic" -------------------------------------------------------------------
    async def _handle_topic_change(self, event: TopicChange) -> None:
        if not self._active:
            return
        topics = set(await self.zk.get_children(BROKER_TOPICS_PATH, watch=self._on_topics_watch) or [])
        new_topics = sorted(topics - self.context.all_topics)
        gone = sorted(self.context.all_topics - topics)
        for topic in gone:  # deleted behind our back (or by us): forget them
            self._forget_topic(topic)
        if not new_topics:
            return
        assignments = await asyncio.gather(*(self._read_assignment(t) for t in new_topics))
        new_partitions = []
        for topic, assignment in zip(new_topics, assignments, strict=True):
            if assignment is None:
                continue
            self.context.assignments[topic] = assignment
            new_partitions += self.context.partitions_for_topic(topic)
            self.record("topic_created", topic=topic, assignment={str(p): r for p, r in assignment.items()})
        if new_partitions:
            await self._on_new_partition_creation(new_partitions)

    async def _handle_partition_modifications(self, event: PartitionModifications) -> None:
        if not self._active or event.topic not in self.context.assignments:
            return
        assignment = await self._read_assignment(event.topic)
        if assignment is None or self.context.is_topic_queued_for_deletion(event.topic):
            return
        existing = self.context.assignments[event.topic]
        added = sorted(set(assignment) - set(existing))
        for p in sorted(set(existing) & set(assignment)):
            if assignment[p] != existing[p]:
                log.warning(
                    "replicas of %s-%s changed in ZooKeeper outside a reassignment; ignored", event.topic, p
                )
        if not added:
            return
        for p in added:
            existing[p] = assignment[p]
        self.record("partitions_added", topic=event.topic, partitions={str(p): assignment[p] for p in added})
        await self._on_new_partition_creation([TopicPartition(event.topic, p) for p in added])

    async def _on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        ctx = self.context
        psm, rsm = self.partition_state_machine, self.replica_state_machine
        replicas = ctx.replicas_for_partitions(partitions)
        await psm.handle_state_changes(partitions, PartitionState.NEW)
        await rsm.handle_state_changes(replicas, ReplicaState.NEW)
        await psm.handle_state_changes(partitions, PartitionState.ONLINE, ElectionStrategy.OFFLINE)
        live = [r for r in replicas if ctx.is_replica_online(r.replica, include_shutting_down=True, tp=r.tp)]
        dead = [
            r for r in replicas if not ctx.is_replica_online(r.replica, include_shutting_down=True, tp=r.tp)
        ]
        await rsm.handle_state_changes(live, ReplicaState.ONLINE)
        await rsm.handle_state_changes(dead, ReplicaState.OFFLINE)

    def _forget_topic(self, topic: str) -> None:
        for tp in self.context.partitions_for_topic(topic):
            self.partition_state_machine.states.pop(tp, None)
            for replica in self.context.replicas(tp):
                self.replica_state_machine.states.pop(PartitionReplica(tp, replica), None)
        self.context.remove_topic(topic)
        self._topic_watchers.pop(topic, None)

    async def _handle_topic_deletion(self, event: TopicDeletion) -> None:
        if not self._active:
            return
        marked = await self.zk.get_children(DELETE_TOPICS_PATH, watch=self._on_delete_topics_watch) or []
        if not marked:
            return
        if not self.config.delete_topic_enable:
            log.info("delete.topic.enable is false: dropping deletion requests for %s", marked)
            await self._delete_quietly([delete_topic_path(t) for t in marked])
            return
        unknown = [t for t in marked if t not in self.context.assignments]
        if unknown:
            await self._delete_quietly([delete_topic_path(t) for t in unknown])
        new = sorted(set(marked) - set(unknown) - self.context.topics_to_be_deleted)
        if new:
            self.context.topics_to_be_deleted.update(new)
            self.record("topic_deletion_queued", topics=new)
            await self._resume_deletions()

    async def _resume_deletions(self) -> None:
        ctx, rsm = self.context, self.replica_state_machine
        if not self.config.delete_topic_enable:
            return
        for topic in sorted(ctx.topics_to_be_deleted):
            replicas = ctx.replicas_for_partitions(ctx.partitions_for_topic(topic))
            states = [rsm.state(r) for r in replicas]
            if all(s is ReplicaState.DELETION_SUCCESSFUL for s in states):
                await self._complete_topic_deletion(topic)
            elif any(s is ReplicaState.DELETION_STARTED for s in states):
                continue  # waiting for StopReplica answers
            elif topic in ctx.topics_ineligible_for_deletion:
                continue  # waiting for a dead replica's broker
            else:
                await self._on_topic_deletion(topic)

    async def _on_topic_deletion(self, topic: str) -> None:
        ctx, psm, rsm = self.context, self.partition_state_machine, self.replica_state_machine
        partitions = ctx.partitions_for_topic(topic)
        # everyone stops serving it: UpdateMetadata announces leader -2 for its partitions
        self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, partitions)
        await psm.handle_state_changes(
            [tp for tp in partitions if psm.state(tp) in (PartitionState.NEW, PartitionState.ONLINE)],
            PartitionState.OFFLINE,
        )
        await psm.handle_state_changes(
            [tp for tp in partitions if psm.state(tp) is PartitionState.OFFLINE], PartitionState.NON_EXISTENT
        )
        replicas = ctx.replicas_for_partitions(partitions)
        live = [
            r
            for r in replicas
            if ctx.is_replica_online(r.replica, True)
            and rsm.state(r) in (ReplicaState.ONLINE, ReplicaState.OFFLINE, ReplicaState.DELETION_INELIGIBLE)
        ]
        dead = [
            r
            for r in replicas
            if not ctx.is_replica_online(r.replica, True) and rsm.state(r) is ReplicaState.OFFLINE
        ]
        await rsm.handle_state_changes(
            [r for r in live if rsm.state(r) is not ReplicaState.OFFLINE], ReplicaState.OFFLINE
        )
        await rsm.handle_state_changes(
            live, ReplicaState.DELETION_STARTED, callback=self._on_stop_replica_deleted
        )
        if dead:
            ctx.topics_ineligible_for_deletion.add(topic)
            await rsm.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        self.record("topic_deletion_started", topic=topic, waiting_for=sorted({r.replica for r in dead}))
        if all(rsm.state(r) is ReplicaState.DELETION_SUCCESSFUL for r in replicas):
            await self._complete_topic_deletion(topic)

    def _on_stop_replica_deleted(self, broker_id: int, response: dict) -> None:
        """A StopReplica(delete=true) answer, in the channel's sender task: make it an event."""
        errors = {
            TopicPartition(p["topic"], p["partition"]): p["error_code"]
            for p in response.get("partitions", [])
        }
        if response.get("error_code"):
            errors[None] = response["error_code"]
        self.events.put(TopicDeletionStopReplicaResponse(broker_id=broker_id, partition_errors=errors))

    async def _handle_stop_replica_deletion_response(self, event: TopicDeletionStopReplicaResponse) -> None:
        if not self._active:
            return
        rsm = self.replica_state_machine
        started = [
            r
            for r, s in rsm.states.items()
            if r.replica == event.broker_id and s is ReplicaState.DELETION_STARTED
        ]
        failed_all = event.partition_errors.get(None, 0) != 0
        ok = [r for r in started if not failed_all and not event.partition_errors.get(r.tp, 0)]
        failed = [r for r in started if r not in ok]
        await rsm.handle_state_changes(ok, ReplicaState.DELETION_SUCCESSFUL)
        if failed:
            self.context.topics_ineligible_for_deletion.update(r.tp.topic for r in failed)
            await rsm.handle_state_changes(failed, ReplicaState.DELETION_INELIGIBLE)
        await self._resume_deletions()

    async def _complete_topic_deletion(self, topic: str) -> None:
        ctx, rsm = self.context, self.replica_state_machine
        replicas = ctx.replicas_for_partitions(ctx.partitions_for_topic(topic))
        await rsm.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)
        paths = []
        for p in await self.zk.get_children(topic_partitions_path(topic)) or []:
            for child in await self.zk.get_children(partition_path(topic, int(p))) or []:
                paths.append(f"{partition_path(topic, int(p))}/{child}")
            paths.append(partition_path(topic, int(p)))
        if await self.zk.exists(topic_partitions_path(topic)) is not None:
            paths.append(topic_partitions_path(topic))
        paths.append(topic_path(topic))
        if await self.zk.exists(config_topic_path(topic)) is not None:
            paths.append(config_topic_path(topic))
        paths.append(delete_topic_path(topic))
        try:
            await fenced_multi(self.zk, ctx.epoch_zk_version, [DeleteOp(p) for p in paths])
        except (NoNodeError, NotEmptyError) as exc:
            log.warning(
                "deleting the znodes of topic %s raced (%s); deleting one by one", topic, type(exc).__name__
            )
            await self._delete_quietly(paths)
        self._forget_topic(topic)
        log.info("topic %s deleted", topic)
        self.record("topic_deleted", topic=topic)

    # -- ISR change notifications (SPEC 3, 5.4) ------------------------------------------------------
    async def _handle_isr_change_notification(self, event: IsrChangeNotification) -> None:
        """Refresh the named partitions' states and send them in UpdateMetadata. A notification is
        deleted only once it was read and every partition it names was re-read and propagated;
        after a failed read the rest stay, and the event comes again after a short backoff (Kafka
        retries its ZooKeeper reads until connected instead)."""
        if not self._active:
            return
        retry = asyncio.get_running_loop().call_later
        try:
            children = await self.zk.get_children(
                ISR_CHANGE_NOTIFICATION_PATH, watch=self._on_isr_change_watch
            )
        except Exception:
            retry(0.1, self.events.put, IsrChangeNotification())  # the watch may not be set either
            raise
        notifications = sorted(c for c in children or [] if c.startswith(ISR_CHANGE_PREFIX))
        if not notifications:
            return
        data = await asyncio.gather(
            *(self.zk.get(f"{ISR_CHANGE_NOTIFICATION_PATH}/{n}") for n in notifications),
            return_exceptions=True,
        )
        named: dict[str, set[TopicPartition]] = {}  # read (or unreadable, or gone): may be deleted
        for notification, got in zip(notifications, data, strict=True):
            if isinstance(got, Exception):
                log.warning("cannot read ISR change notification %s: %s; retrying", notification, got)
                continue
            named[notification] = set()
            if got is None:
                continue
            try:
                named[notification].update(decode_isr_change_notification(got[0]))
            except (ValueError, KeyError, TypeError):
                log.error("unreadable ISR change notification %s: %r", notification, got[0])
        partitions = sorted(
            {tp for tps in named.values() for tp in tps if tp in self.context.partition_leadership}
        )
        states = await asyncio.gather(
            *(get_partition_state(self.zk, tp) for tp in partitions), return_exceptions=True
        )
        refreshed: set[TopicPartition] = set()
        for tp, state in zip(partitions, states, strict=True):
            if isinstance(state, Exception):
                log.warning("cannot read the state of %s after an ISR change: %s; retrying", tp, state)
                continue
            refreshed.add(tp)
            if state is not None:
                self.context.partition_leadership[tp] = state
        if refreshed:
            self.batch.add_update_metadata(self.context.live_or_shutting_down_broker_ids, refreshed)
            self.record("isr_change_propagated", partitions=[str(tp) for tp in sorted(refreshed)])
        done = [
            n
            for n, tps in named.items()
            if all(tp in refreshed or tp not in self.context.partition_leadership for tp in tps)
        ]
        await self._delete_isr_change_notifications(done)
        if len(done) < len(notifications):
            retry(0.1, self.events.put, IsrChangeNotification())

    # -- KIP-112 log dir failure (controller/log_dir_failure.py) -------------------------------------
    async def _handle_log_dir_event_notification(self, event: LogDirEventNotification) -> None:
        if self._active:
            notifications = await self.log_dir_failure.pending(watch=self._on_log_dir_event_watch)
            await self.log_dir_failure.process_notifications(notifications)

    async def _handle_leader_and_isr_response(self, event: LeaderAndIsrResponseReceived) -> None:
        if self._active:
            await self.log_dir_failure.on_leader_and_isr_response(event.broker_id, event.response)

    async def _delete_isr_change_notifications(self, notifications: list[str]) -> None:
        await self._delete_quietly([f"{ISR_CHANGE_NOTIFICATION_PATH}/{n}" for n in notifications])

    async def _delete_quietly(self, paths: list[str]) -> None:
        """Fenced deletes that may find the znode gone already."""
        results = await asyncio.gather(
            *(fenced_multi(self.zk, self.context.epoch_zk_version, [DeleteOp(p)]) for p in paths),
            return_exceptions=True,
        )
        for path, result in zip(paths, results, strict=True):
            if isinstance(result, ControllerMovedError):
                raise result
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                log.warning("cannot delete %s: %s", path, result)

    # -- admin requests ------------------------------------------------------------------------------
    async def _handle_partition_reassignment(self, event: PartitionReassignment) -> None:
        if not self._active:
            return
        if await self.zk.exists(REASSIGN_PARTITIONS_PATH, watch=self._on_reassign_watch) is not None:
            log.warning(
                "%s: partition reassignment is not yet supported; request left in place",
                REASSIGN_PARTITIONS_PATH,
            )

    async def _handle_preferred_replica_election(self, event: PreferredReplicaElection) -> None:
        if not self._active:
            return
        if await self.zk.exists(PREFERRED_REPLICA_ELECTION_PATH, watch=self._on_preferred_watch) is None:
            return
        got = await self.zk.get(PREFERRED_REPLICA_ELECTION_PATH)
        partitions: list[TopicPartition] = []
        if got is not None:
            try:
                partitions = decode_partition_list(got[0])
            except (ValueError, KeyError, TypeError):
                log.error("unreadable %s: %r", PREFERRED_REPLICA_ELECTION_PATH, got[0])
        try:
            await self._on_preferred_replica_election(partitions, "admin")
        finally:
            await self._delete_quietly([PREFERRED_REPLICA_ELECTION_PATH])

    async def _on_preferred_replica_election(self, partitions: list[TopicPartition], trigger: str) -> None:
        ctx = self.context
        eligible = sorted(
            tp
            for tp in set(partitions)
            if tp in ctx.partition_leadership
            and not ctx.is_topic_queued_for_deletion(tp.topic)
            and ctx.replicas(tp)
            and ctx.partition_leadership[tp].leader_and_isr.leader != ctx.replicas(tp)[0]
        )
        if eligible:
            self.record(
                "preferred_replica_election", trigger=trigger, partitions=[str(tp) for tp in eligible]
            )
            await self.partition_state_machine.handle_state_changes(
                eligible, PartitionState.ONLINE, ElectionStrategy.PREFERRED
            )

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_seconds)
            self.events.put(AutoPreferredReplicaLeaderElection())

    async def _handle_auto_rebalance(self, event: AutoPreferredReplicaLeaderElection) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, if more than
        leader.imbalance.per.broker.percentage of its partitions are led by others, elect it back."""
        if not self._active:
            return
        ctx = self.context
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
            if ratio > self.config.leader_imbalance_per_broker_percentage / 100 and ctx.is_replica_online(
                broker_id
            ):
                await self._on_preferred_replica_election(
                    not_led, f"auto: imbalance {ratio:.0%} on broker {broker_id}"
                )

    # -- controlled shutdown (SPEC 4) ------------------------------------------------------------------
    async def _handle_controlled_shutdown(self, event: ControlledShutdown) -> list[tuple[str, int]]:
        if not self._active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not the controller")
        ctx = self.context
        broker_id = event.broker_id
        if broker_id not in ctx.live_brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
        live_epoch = ctx.live_brokers[broker_id].epoch
        if event.broker_epoch != -1 and event.broker_epoch < live_epoch:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"controlled shutdown of broker {broker_id} with broker epoch {event.broker_epoch}, "
                f"older than its registration's {live_epoch}",
            )
        ctx.shutting_down_broker_ids.add(broker_id)
        self.record("controlled_shutdown", broker=broker_id)
        acting = [
            tp
            for tp in ctx.partitions_on_broker(broker_id)
            if len(ctx.replicas(tp)) > 1
            and tp in ctx.partition_leadership
            and not ctx.is_topic_queued_for_deletion(tp.topic)
        ]
        led = [tp for tp in acting if ctx.partition_leadership[tp].leader_and_isr.leader == broker_id]
        followed = [tp for tp in acting if tp not in led]
        await self.partition_state_machine.handle_state_changes(
            led, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN
        )
        await self.replica_state_machine.handle_state_changes(
            [PartitionReplica(tp, broker_id) for tp in followed], ReplicaState.OFFLINE
        )
        remaining = [
            tp
            for tp in ctx.partitions_led_by(broker_id)
            if len(ctx.replicas(tp)) > 1 and not ctx.is_topic_queued_for_deletion(tp.topic)
        ]
        return [(tp.topic, tp.partition) for tp in remaining]
