"""Applying the controller's LeaderAndIsr and StopReplica requests (Kafka's
ReplicaManager.becomeLeaderOrFollower, makeLeaders, makeFollowers, stopReplicas and
handleLogDirFailure; docs/design.md "Broker").

* Requests are applied one at a time (Kafka's ``replicaStateChangeLock``): epochs are checked
  before the awaits of log creation and applied after them, so two requests must not
  interleave (issue 9 finding 6).
* Each partition succeeds or fails on its own, with its error code in the response; the steps
  that can fail run before the partition's state changes, so the controller's resend of a
  failed partition is accepted (finding 2, :mod:`controller.leader_and_isr_retry`).
* StopReplica without delete keeps the Partition and its leader epoch, so an older
  LeaderAndIsr is still refused; with delete the partition goes with its log.
* One controller epoch (``ReplicaManager.controller_epoch``, Kafka's
  ``ReplicaManager.controllerEpoch``) fences LeaderAndIsr, StopReplica and UpdateMetadata alike:
  each refuses an older epoch with STALE_CONTROLLER_EPOCH and raises it, so a deposed
  controller's request of any kind is refused once its successor's request of any kind has
  arrived (issue 10 finding 10). UpdateMetadata is applied here, under the same lock, as
  Kafka's ``maybeUpdateMetadataCache`` is.
* KIP-112: partitions on an offline log dir answer KAFKA_STORAGE_ERROR to everything
  (``ReplicaManager.offline_partitions``) until the broker restarts.
* KIP-516 (:mod:`broker.replica.topic_ids`): a log records its partition state's topic id; one
  of another id answers INCONSISTENT_TOPIC_ID; a FULL request first deletes the strays it shows.
* A request of thousands of partitions gives the event loop back every 50 ms of work
  (:class:`broker.loop_stall.CooperativeYield`; docs/design.md "The controller at scale (issue
  25)"), as an await of a ZooKeeper read already may: ZooKeeper watches, requests and fetches
  are served meanwhile, and the lock keeps other controller requests out.

The state itself (partitions, logs, purgatories, fetchers) belongs to the
:class:`~broker.replica.replica_manager.ReplicaManager`, which delegates here.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from pathlib import Path

from broker.config import validate_topic_configs
from broker.log import Log, LogConfig
from broker.log.log_dir_failure import KafkaStorageError
from broker.loop_stall import CooperativeYield
from broker.replica.leader_endpoint import inter_broker_endpoint
from broker.replica.partition import Partition, PartitionState
from broker.replica.replica_state import ReplicaState
from broker.replica.topic_ids import check_topic_id, delete_stray_replicas
from client.protocol.api import NO_LEADER, ControlRequestType
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.topic_id import is_set
from client.types import TopicPartition

log = logging.getLogger(__name__)


#: A LeaderAndIsr making more partitions leaders than this makes them all leaders first, then
#: writes each new leader epoch's checkpoint on :data:`EPOCH_WRITE_THREADS` threads; one naming
#: more partitions without a log creates those logs together (docs/design.md "The controller at
#: scale (issue 25)", "Leader epochs in parallel", "Thousands of new logs").
EPOCH_WRITE_WINDOW = 64
EPOCH_WRITE_THREADS = 16


class LeaderAndIsrHandler:
    def __init__(self, replica_manager: ReplicaState) -> None:
        self.rm = replica_manager
        self._state_change_lock = asyncio.Lock()  # Kafka's replicaStateChangeLock
        self._epoch_writers: Executor | None = None  # started by the first large batch
        #: KIP-516: topic -> id of the request being applied (Kafka's ``topicIdFromRequest``)
        self._request_topic_ids: dict[str, str] = {}
        #: controller epochs of which this incarnation applied a LeaderAndIsr: only the first may
        #: delete stray replicas (a resent FULL read late must not judge by an older list)
        self._applied_epochs: set[int] = set()

    async def become_leader_or_follower(self, body: dict) -> dict:
        """Apply a LeaderAndIsr request. Requests are applied one at a time (Kafka's
        replicaStateChangeLock): epochs are checked before the awaits of log creation and applied
        after them, so two requests must not interleave. Each partition succeeds or fails on its
        own, with its error code in the response (the controller resends what failed)."""
        async with self._state_change_lock:
            return await self._become_leader_or_follower(body)

    def _stale_epoch(self, request: str, body: dict) -> ErrorCode | None:
        """The checks every controller request passes first: the broker epoch (KIP-380, Kafka's
        ``KafkaApis.isBrokerEpochStale``: a request addressed to an older incarnation of this
        broker, queued before it restarted or re-registered, is STALE_BROKER_EPOCH; -1 is
        "unknown" and passes; a newer one passes, the controller may learn of the registration
        first) and the controller epoch (Kafka's ``ReplicaManager.controllerEpoch``: a request
        from a controller older than the newest one heard from is STALE_CONTROLLER_EPOCH;
        otherwise the epoch is raised to the request's). Refusals are logged."""
        broker_epoch = body.get("broker_epoch", -1)
        if broker_epoch != -1 and broker_epoch < self.rm.broker_epoch:
            self.rm.state_change_log(
                {
                    "event": f"{request}Rejected",
                    "reason": "stale broker epoch",
                    "broker_epoch": broker_epoch,
                    "current_broker_epoch": self.rm.broker_epoch,
                }
            )
            return ErrorCode.STALE_BROKER_EPOCH
        return ErrorCode.STALE_CONTROLLER_EPOCH if self._stale_controller_epoch(request, body) else None

    def _stale_controller_epoch(self, request: str, body: dict) -> bool:
        epoch = body["controller_epoch"]
        if epoch < self.rm.controller_epoch:
            self.rm.state_change_log(
                {
                    "event": f"{request}Rejected",
                    "reason": "stale controller epoch",
                    "controller_epoch": epoch,
                    "current_controller_epoch": self.rm.controller_epoch,
                }
            )
            return True
        self.rm.controller_epoch = epoch
        return False

    async def update_metadata(self, body: dict) -> list[tuple[str, int]] | ErrorCode:
        """Apply UpdateMetadata to the metadata cache (Kafka's
        ``ReplicaManager.maybeUpdateMetadataCache``), fenced by the same epochs as LeaderAndIsr
        and StopReplica and serialised with them. Returns the partitions whose state changed, or
        the error code of a stale request (nothing applied)."""
        async with self._state_change_lock:
            stale = self._stale_epoch("UpdateMetadata", body)
            if stale is not None:
                return stale
            return self.rm.metadata_cache.update(body)

    async def _become_leader_or_follower(self, body: dict) -> dict:
        stale = self._stale_epoch("LeaderAndIsr", body)
        if stale is not None:
            return {
                "error_code": stale,
                "partitions": [
                    {"topic": s["topic"], "partition": s["partition"], "error_code": stale}
                    for s in body["partition_states"]
                ],
            }
        epoch = body["controller_epoch"]
        if body.get("type") == ControlRequestType.FULL:  # first: a re-created topic meets no stray
            if epoch in self._applied_epochs:  # a late copy of a resent FULL: its list may be old
                log.warning(
                    "a FULL LeaderAndIsr of controller epoch %d after another of it: no stray deleted", epoch
                )
            else:
                self._forget_deleted_topics({s.tp[0] for s in await delete_stray_replicas(self.rm, body)})
        self._applied_epochs.add(epoch)
        self._request_topic_ids = {
            e["topic"]: e["topic_id"] for e in body["partition_states"] if is_set(e.get("topic_id"))
        }
        listener = self.rm.config.inter_broker_listener_name
        leaders = {b["id"]: inter_broker_endpoint(b, listener) for b in body["live_leaders"]}
        results = []
        to_lead: list[tuple[Partition, PartitionState]] = []
        to_follow: list[tuple[Partition, PartitionState]] = []
        new_replicas = {(e["topic"], e["partition"]) for e in body["partition_states"] if e.get("is_new")}
        pause = CooperativeYield(self.rm.time_ms)  # thousands of partitions: never one long step
        for entry in body["partition_states"]:
            await pause()
            tp = (entry["topic"], entry["partition"])
            state = PartitionState.from_request(entry)
            partition = self.rm.partitions.get(tp) or Partition(tp[0], tp[1], self.rm.broker_id)
            error = ErrorCode.NONE
            if tp in self.rm.offline_partitions:
                error = ErrorCode.KAFKA_STORAGE_ERROR  # KIP-112: the controller takes this replica offline
            elif (error := self._check_topic_id(partition, entry)) != ErrorCode.NONE:
                pass  # KIP-516: another incarnation's log (or its dir failed reading it)
            elif not partition.is_newer(state):
                error = ErrorCode.FENCED_LEADER_EPOCH  # not newer: Kafka refuses a stale leader epoch
            elif self.rm.broker_id not in state.replicas:
                log.warning(
                    "LeaderAndIsr for %s-%s does not list broker %s as a replica", *tp, self.rm.broker_id
                )
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                self.rm.partitions[tp] = partition
                (to_lead if state.leader == self.rm.broker_id else to_follow).append((partition, state))
            self.rm.state_change_log(
                {
                    "event": "LeaderAndIsrReceived",
                    "topic": tp[0],
                    "partition": tp[1],
                    "controller_id": body["controller_id"],
                    "controller_epoch": body["controller_epoch"],
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "isr": list(state.isr),
                    "replicas": list(state.replicas),
                    "error": ErrorCode(error).name,
                }
            )
            results.append({"topic": tp[0], "partition": tp[1], "error_code": error})
        codes = {(r["topic"], r["partition"]): r for r in results}
        await self._create_logs(to_lead + to_follow, new_replicas)
        await self._make_leaders(to_lead, new_replicas, codes, pause)
        for partition, state in to_follow:
            await pause()
            try:
                await self._make_follower(
                    partition, state, leaders.get(state.leader), partition.key in new_replicas
                )
            except Exception as exc:  # noqa: BLE001
                codes[partition.key]["error_code"] = self._role_change_failed(partition, state, exc)
        return {"error_code": ErrorCode.NONE, "partitions": results}

    async def _make_leaders(
        self,
        to_lead: list[tuple[Partition, PartitionState]],
        new_replicas: set[TopicPartition],
        codes: dict[TopicPartition, dict],
        pause: CooperativeYield,
    ) -> None:
        """Make each partition of ``to_lead`` a leader, its failure reported in ``codes``. A new
        leader's first step writes its epoch checkpoint, two fsyncs (LeaderEpochFileCache.assign,
        as Kafka's). A few leaders (an election, the simulator's batches) go one after another on
        the loop. More than EPOCH_WRITE_WINDOW (a failover, a topic created) first all become
        leaders, then their checkpoints are written on threads, where concurrent fsyncs share the
        file system's journal commits, all before the answer (docs/design.md "Leader epochs in
        parallel")."""
        if len(to_lead) <= EPOCH_WRITE_WINDOW:
            for partition, state in to_lead:
                await pause()
                try:
                    await self._make_leader(partition, state, partition.key in new_replicas)
                except Exception as exc:  # noqa: BLE001 - reported per partition, never half a request
                    codes[partition.key]["error_code"] = self._role_change_failed(partition, state, exc)
            return
        if self._epoch_writers is None:
            self._epoch_writers = self.rm.log_manager.executor_factory(EPOCH_WRITE_THREADS, "leader-epoch")
        became: list[tuple[Partition, PartitionState, Log, int]] = []
        for partition, state in to_lead:
            await pause()
            try:
                log_ = await self._log_for(
                    partition.topic, partition.partition, partition.key in new_replicas
                )
                self.rm.fetchers.remove_partition(partition.key)
                partition.make_leader(state, log_.log_end_offset, self.rm.time_ms())
            except Exception as exc:  # noqa: BLE001
                codes[partition.key]["error_code"] = self._role_change_failed(partition, state, exc)
                continue
            # leading from now: an append meanwhile records this epoch from its batch, at this same
            # start offset (the LEO now), and the write below then adds nothing
            became.append((partition, state, log_, log_.log_end_offset))
            self.rm.maybe_increment_high_watermark(partition, log_)
            self.rm.wake(partition.key)
        loop = asyncio.get_running_loop()
        written = await asyncio.gather(
            *(
                loop.run_in_executor(self._epoch_writers, log_.assign_leader_epoch, state.leader_epoch, start)
                for _, state, log_, start in became
            ),
            return_exceptions=True,
        )
        for (partition, state, log_, _), outcome in zip(became, written, strict=True):
            if isinstance(outcome, Exception):
                codes[partition.key]["error_code"] = self._role_change_failed(partition, state, outcome)
            else:
                self._became_leader(partition, state, log_)

    def _check_topic_id(self, partition: Partition, entry: dict) -> int:
        """KIP-516: INCONSISTENT_TOPIC_ID for another incarnation's log (:mod:`broker.replica.topic_ids`)."""
        try:
            return check_topic_id(self.rm, partition, entry.get("topic_id"))
        except KafkaStorageError as exc:
            return self._went_offline(partition, exc)

    def _role_change_failed(self, partition: Partition, state: PartitionState, exc: Exception) -> int:
        """One partition of a LeaderAndIsr could not be applied: its error code for the response.
        The role change steps that can fail (a ZooKeeper read of the topic's config, its
        validation, creating the log) run before the partition's state changes, so the partition
        keeps its previous epoch and the controller's resend is accepted."""
        if isinstance(exc, KafkaStorageError):
            return self._went_offline(partition, exc)
        code = exc.code if isinstance(exc, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
        if isinstance(exc, KafkaError):
            log.error("cannot apply LeaderAndIsr to %s-%s: %s", partition.topic, partition.partition, exc)
        else:
            log.exception("cannot apply LeaderAndIsr to %s-%s", partition.topic, partition.partition)
        self.rm.state_change_log(
            {
                "event": "LeaderAndIsrFailed",
                "topic": partition.topic,
                "partition": partition.partition,
                "leader_epoch": state.leader_epoch,
                "error": ErrorCode(code).name,
                "reason": str(exc),
            }
        )
        return code

    def _went_offline(self, partition: Partition, exc: KafkaStorageError) -> int:
        """A log dir failed while applying LeaderAndIsr to ``partition``: it is offline now."""
        log.error("cannot apply LeaderAndIsr to %s-%s: %s", partition.topic, partition.partition, exc)
        self.handle_log_dir_failure([partition.key])
        return ErrorCode.KAFKA_STORAGE_ERROR

    # -- KIP-112 (Kafka's ReplicaManager.handleLogDirFailure) -------------------------------------

    async def fail_log_dir(self, log_dir: Path) -> list[TopicPartition]:
        """A log dir went offline: take its logs and partitions offline, serialised with
        LeaderAndIsr and StopReplica (Kafka holds replicaStateChangeLock here too). A LeaderAndIsr
        suspended in a ZooKeeper read finishes first, against the logs as they are (an offline
        log fails its role change with KAFKA_STORAGE_ERROR); it can never resume afterwards and
        act on a partition that left, or create its log afresh in another dir. Returns the
        partitions taken offline."""
        async with self._state_change_lock:
            partitions = self.rm.log_manager.handle_log_dir_failure(log_dir)
            self.handle_log_dir_failure(partitions)
            return partitions

    def handle_log_dir_failure(self, partitions: list[TopicPartition]) -> None:
        """Stop serving ``partitions`` (their log dir is offline): no fetcher, no leadership,
        KAFKA_STORAGE_ERROR to every request; parked produce and fetch requests complete now."""
        for tp in partitions:
            self.rm.fetchers.remove_partition(tp)
            self.rm.partitions.pop(tp, None)
            self.rm.offline_partitions.add(tp)
            self.rm.state_change_log(
                {"event": "ReplicaOffline", "topic": tp[0], "partition": tp[1], "reason": "log dir offline"}
            )
        for tp in partitions:
            self.rm.wake(tp)

    async def _log_config(self, topic: str) -> LogConfig:
        """The topic's log config: the broker's defaults under its ZooKeeper overrides, read
        from /config/topics at its first LeaderAndIsr here."""
        if topic not in self.rm.topic_overrides:
            overrides = await self.rm.topic_config_source(topic)
            # a config change applied meanwhile (broker/dynamic_config.py) read a newer state: keep it
            if topic not in self.rm.topic_overrides:
                self.rm.topic_configs[topic] = validate_topic_configs(overrides)
                self.rm.topic_overrides[topic] = overrides
                self.rm.quotas.apply_topic_config(topic, overrides, self.rm.broker_id)
        return self.rm.config.log_config(self.rm.topic_overrides[topic])

    async def _create_logs(
        self, changing: list[tuple[Partition, PartitionState]], new_replicas: set[TopicPartition]
    ) -> None:
        """More than EPOCH_WRITE_WINDOW partitions of one request without a log (a topic created,
        a broker's first replicas): create them together, off the loop, with one directory fsync
        for them all (LogManager.create_logs; docs/design.md "Thousands of new logs"). Each
        topic's config is read once. What is not created here (a config that cannot be read, a
        log that cannot be opened) is left to the partition's own step, which reports it."""
        lm = self.rm.log_manager
        missing = [p.key for p, _ in changing if lm.get_log(*p.key) is None]
        if len(missing) <= EPOCH_WRITE_WINDOW:
            return
        configs: dict[str, LogConfig] = {}
        for topic in sorted({topic for topic, _ in missing}):
            try:
                configs[topic] = await self._log_config(topic)
            except Exception:  # noqa: BLE001 - the partitions' own steps read it again and report
                log.debug("reading the config of %s failed; its logs are created one by one", topic)
        wanted = [(tp, configs[tp[0]], tp in new_replicas) for tp in missing if tp[0] in configs]
        created = await asyncio.get_running_loop().run_in_executor(None, lm.create_logs, wanted)
        log.info("created %d of %d new logs together", created, len(missing))

    async def _log_for(self, topic: str, partition: int, is_new: bool = True) -> Log:
        config = await self._log_config(topic)
        log_ = self.rm.log_manager.get_or_create_log(topic, partition, config, is_new=is_new)
        if log_.config != config:  # loaded from disk with the broker's defaults
            log_.update_config(config)
        topic_id = self._request_topic_ids.get(topic)
        if topic_id is not None:  # KIP-516: Partition.checkOrSetTopicId (INCONSISTENT_TOPIC_ID if another)
            self.rm.log_manager.topic_ids.assign(topic, partition, topic_id)
        return log_

    async def _make_leader(self, partition: Partition, state: PartitionState, is_new: bool) -> None:
        log_ = await self._log_for(partition.topic, partition.partition, is_new)
        self.rm.fetchers.remove_partition(partition.key)
        partition.make_leader(state, log_.log_end_offset, self.rm.time_ms())
        # A new leader records (new epoch, LEO): every batch it appends from now on carries this epoch.
        log_.assign_leader_epoch(state.leader_epoch, log_.log_end_offset)
        self._became_leader(partition, state, log_)
        self.rm.maybe_increment_high_watermark(partition, log_)
        self.rm.wake(partition.key)

    def _became_leader(self, partition: Partition, state: PartitionState, log_: Log) -> None:
        self.rm.state_change_log(
            {
                "event": "BecameLeader",
                "topic": partition.topic,
                "partition": partition.partition,
                "leader_epoch": state.leader_epoch,
                "log_end_offset": log_.log_end_offset,
                "high_watermark": log_.high_watermark,
            }
        )

    async def _make_follower(
        self, partition: Partition, state: PartitionState, leader: dict | None, is_new: bool
    ) -> None:
        log_ = await self._log_for(partition.topic, partition.partition, is_new)
        partition.make_follower(state)
        self.rm.state_change_log(
            {
                "event": "BecameFollower",
                "topic": partition.topic,
                "partition": partition.partition,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "log_end_offset": log_.log_end_offset,
                "high_watermark": log_.high_watermark,
            }
        )
        self.rm.wake(partition.key)  # parked produce requests learn they are no longer on the leader
        self.rm.fetchers.remove_partition(partition.key)
        if leader is not None and state.leader >= 0:
            self.rm.fetchers.add_partition(partition.key, leader, state.leader_epoch)

    async def stop_replicas(self, body: dict) -> dict:
        """StopReplica, serialised with LeaderAndIsr. Without delete the Partition is kept, with
        its leader epoch, so a LeaderAndIsr older than the one it knows is still refused; it only
        stops fetching (and, if it led, stops acting as leader). With delete it goes with its log."""
        async with self._state_change_lock:
            return await self._stop_replicas(body)

    async def _stop_replicas(self, body: dict) -> dict:
        stale = self._stale_epoch("StopReplica", body)
        if stale is not None:
            return {
                "error_code": stale,
                "partitions": [dict(p, error_code=stale) for p in body["partitions"]],
            }
        results = []
        pause = CooperativeYield(self.rm.time_ms)
        deleted_in: set[Path] = set()  # the log dirs whose checkpoints name deleted partitions
        try:
            for entry in body["partitions"]:
                await pause()
                tp = (entry["topic"], entry["partition"])
                results.append(
                    {
                        "topic": tp[0],
                        "partition": tp[1],
                        "error_code": self._stop_replica(tp, body, deleted_in),
                    }
                )
        finally:
            # once per dir and request, before the answer (LogManager.delete_log, ``checkpoint``)
            self.rm.log_manager.checkpoint_log_dirs(deleted_in)
            if body["delete_partitions"]:
                self._forget_deleted_topics({e["topic"] for e in body["partitions"]})
        return {"error_code": ErrorCode.NONE, "partitions": results}

    def _stop_replica(self, tp: TopicPartition, body: dict, deleted_in: set[Path]) -> int:
        """One partition of a StopReplica; its error code."""
        if tp in self.rm.offline_partitions:
            # Its files are on an offline dir: nothing to stop, and nothing can be deleted
            # until the broker restarts (then the controller resends StopReplica).
            return ErrorCode.KAFKA_STORAGE_ERROR if body["delete_partitions"] else ErrorCode.NONE
        self.rm.fetchers.remove_partition(tp)
        if body["delete_partitions"]:
            partition = self.rm.partitions.pop(tp, None)
            try:
                log_dir = self.rm.log_manager.delete_log(*tp, checkpoint=False)
            except KafkaStorageError as exc:
                log.error("cannot delete %s-%s: %s", *tp, exc)
                self.rm.wake(tp)
                return exc.code
            if log_dir is not None:
                deleted_in.add(log_dir)
        else:
            partition = self.rm.partitions.get(tp)
            if partition is not None and partition.is_leader:
                partition.leader_id = NO_LEADER  # stopped: no longer serves as leader, keeps its epoch
        self.rm.wake(tp)
        self.rm.state_change_log(
            {
                "event": "StopReplica",
                "topic": tp[0],
                "partition": tp[1],
                "delete": body["delete_partitions"],
                "was_hosted": partition is not None,
            }
        )
        return ErrorCode.NONE

    def _forget_deleted_topics(self, topics: set[str]) -> None:
        """The topic-level state of each topic this broker no longer hosts a partition of: one
        pass over the partitions per request, not one per deleted partition."""
        hosted = {t for t, _ in self.rm.partitions}
        for topic in topics - hosted:
            self.rm.topic_configs.pop(topic, None)
            self.rm.topic_overrides.pop(topic, None)
            self.rm.quotas.leader.remove_throttle(topic)
            self.rm.quotas.follower.remove_throttle(topic)
