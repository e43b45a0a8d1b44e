"""The replica manager: every partition this broker hosts, as leader or follower (Kafka's
ReplicaManager: becomeLeaderOrFollower, appendRecords, fetchMessages; docs/design.md "Broker").

It owns the :class:`Partition` rule objects, their logs (through the LogManager), the
produce and fetch purgatories and the replica fetchers. The rules themselves live in
``partition.py`` and ``truncation.py``; this module applies their decisions to the logs
and wakes the purgatories when the high watermark or leadership moves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.coordinator.group_metadata_manager import GROUP_METADATA_TOPIC
from broker.log import Log, LogManager
from broker.log.disk_space import DiskSpaceMonitor, Statvfs
from broker.log.log_dir_failure import KafkaStorageError
from broker.metadata_cache import MetadataCache
from broker.purgatory import Purgatory
from broker.replica.delayed import DelayedFetch, DelayedProduce, FetchPartitionStatus, ProducePartitionStatus
from broker.replica.fetch_session import (
    INVALID_SESSION_ID,
    FetchSessionCache,
    fetch_context,
    mark_clean,
    touch,
)
from broker.replica.isr_manager import IsrManager, IsrStore
from broker.replica.leader_and_isr import LeaderAndIsrHandler
from broker.replica.partition import Partition
from broker.replica.replica_state import NoReplicaFetchers, ReplicaFetchers
from broker.replica.replication_quota import ReplicationQuotas
from client.protocol.api import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition

log = logging.getLogger(__name__)

TopicConfigSource = Callable[[str], Awaitable[dict[str, str]]]


@dataclass(frozen=True)
class ReadResult:
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    log_end_offset: int = -1  # the leader's LEO when a follower's read was made (not sent)


#: answers a FETCH: the results to send, the fetch session's id (0: none) and the error code
FetchRespond = Callable[[dict[TopicPartition, ReadResult], int, int], None]


class ReplicaManager:
    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        metadata_cache: MetadataCache,
        time_ms: Callable[[], int],
        state_change_log: Callable[[dict], None],
        topic_config_source: TopicConfigSource,
        isr_store: IsrStore | None = None,
        fetcher_manager: Callable[[ReplicaManager], ReplicaFetchers] | None = None,
        statvfs: Statvfs = os.statvfs,
    ) -> None:
        """``fetcher_manager`` makes the replica fetchers for this replica manager (the server
        passes :class:`~broker.replica.fetcher_manager.ReplicaFetcherManager`); without it nothing is
        fetched (:class:`~broker.replica.leader_and_isr.NoReplicaFetchers`, for unit tests).
        ``statvfs`` measures the log dirs' free space (``log.dir.min.free.bytes``)."""
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.time_ms = time_ms
        self.state_change_log = state_change_log
        self.topic_config_source = topic_config_source
        self.partitions: dict[TopicPartition, Partition] = {}
        #: KIP-112: partitions whose log is on an offline log dir (Kafka's HostedPartition.Offline):
        #: they answer KAFKA_STORAGE_ERROR to everything until the broker restarts.
        self.offline_partitions: set[TopicPartition] = set()
        self.state_changes = LeaderAndIsrHandler(self)
        self.topic_overrides: dict[str, dict[str, str]] = {}  # as written in /config/topics/<t>
        self.topic_configs: dict[str, dict[str, Any]] = {}  # the same, parsed and typed
        #: KIP-73's replication throttles (broker/replica/replication_quota.py); the rates are
        #: dynamic broker configs, the throttled replicas topic configs
        self.quotas = ReplicationQuotas.create(
            config["replication.quota.window.num"],
            config["replication.quota.window.size.seconds"] * 1000,
            config["leader.replication.throttled.rate"],
            config["follower.replication.throttled.rate"],
        )
        self.controller_epoch = -1
        #: KIP-380: the czxid of this broker's /brokers/ids/<id>, set by the server each time it
        #: registers; controller requests addressed to an older one are refused.
        self.broker_epoch = -1
        #: issue 25: each log dir's free-space floor (broker/log/disk_space.py); the server's
        #: periodic job refreshes it, the append path and the fetchers ask it
        self.disk_space = DiskSpaceMonitor(
            log_manager.log_dirs, config["log.dir.min.free.bytes"], time_ms, statvfs
        )
        self.produce_purgatory = Purgatory("Produce")
        self.fetch_purgatory = Purgatory("Fetch")
        #: KIP-227: the followers' fetch sessions (broker/replica/fetch_session.py)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        # Leader-side ISR shrink/expand (docs/design.md "ISR management"); without a store (some
        # unit tests) the ISR only changes through LeaderAndIsr.
        self.isr_manager: IsrManager | None = None
        if isr_store is not None:
            lag_ms = config["replica.lag.time.max.ms"]
            self.isr_manager = IsrManager(
                isr_store, self.broker_id, lag_ms, time_ms, state_change_log, self._on_isr_changed
            )
        self.fetchers: ReplicaFetchers = (
            fetcher_manager(self) if fetcher_manager is not None else NoReplicaFetchers()
        )

    # -- lookups --------------------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self.log_manager.get_log(*tp)

    def leader_log(self, tp: TopicPartition, current_leader_epoch: int = -1) -> tuple[Partition, Log]:
        """The partition and log if this broker leads it, else KafkaError with Kafka's code."""
        return self.hosted_log(tp, current_leader_epoch, fetch_only_from_leader=True)

    def hosted_log(
        self, tp: TopicPartition, current_leader_epoch: int = -1, fetch_only_from_leader: bool = False
    ) -> tuple[Partition, Log]:
        """The partition and log if this broker hosts it, as leader or (unless
        ``fetch_only_from_leader``, Kafka's argument of the same name) as follower; else
        KafkaError with Kafka's code."""
        partition = self.partitions.get(tp)
        log_ = self.get_log(tp)
        if tp in self.offline_partitions:
            raise KafkaStorageError(f"{tp[0]}-{tp[1]} is on an offline log dir of broker {self.broker_id}")
        if partition is None or log_ is None:
            known = self.metadata_cache.partition(*tp) is not None
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{tp[0]}-{tp[1]} is not hosted on broker {self.broker_id}",
            )
        self._check_leader_epoch(partition, current_leader_epoch)
        if fetch_only_from_leader and not partition.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.broker_id} is not the leader of {tp[0]}-{tp[1]} (leader is {partition.leader_id})",
            )
        return partition, log_

    @staticmethod
    def _check_leader_epoch(partition: Partition, current_leader_epoch: int) -> None:
        """KIP-320: a request from an older epoch is fenced, one from a newer epoch is unknown to us."""
        if current_leader_epoch == -1:
            return
        if current_leader_epoch < partition.leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{partition.topic}-{partition.partition}: epoch {current_leader_epoch} < current {partition.leader_epoch}",
            )
        if current_leader_epoch > partition.leader_epoch:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"{partition.topic}-{partition.partition}: epoch {current_leader_epoch} > current {partition.leader_epoch}",
            )

    def min_insync_replicas(self, topic: str) -> int:
        return self.topic_configs.get(topic, {}).get(
            "min.insync.replicas", self.config["min.insync.replicas"]
        )

    # -- LeaderAndIsr, StopReplica, KIP-112 (broker/replica/leader_and_isr.py) ---------------------

    async def become_leader_or_follower(self, body: dict) -> dict:
        return await self.state_changes.become_leader_or_follower(body)

    async def stop_replicas(self, body: dict) -> dict:
        return await self.state_changes.stop_replicas(body)

    async def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """KIP-112: ``log_dir`` went offline; returns the partitions it took offline."""
        return await self.state_changes.fail_log_dir(log_dir)

    # -- high watermark (Kafka's Partition.maybeIncrementLeaderHW) ---------------------------------

    def maybe_increment_high_watermark(self, partition: Partition, log_: Log) -> bool:
        """Kafka 3.7's maybeIncrementLeaderHW: nothing while the ISR is under the effective
        min.insync.replicas (KAFKA-15583), else the candidate of :meth:`Partition.high_watermark_candidate`."""
        # A full ISR is never under min ISR: the topic's config is looked up only when one is short.
        if len(partition.isr) <= len(partition.remote_replicas) and partition.is_under_min_isr(
            self.min_insync_replicas(partition.topic)
        ):
            return False
        new_hw = partition.high_watermark_candidate(
            log_.log_end_offset, log_.high_watermark, self.time_ms(), self.config["replica.lag.time.max.ms"]
        )
        if new_hw > log_.high_watermark:
            log_.update_high_watermark(new_hw)
            self.wake(partition.key)
            return True
        return False

    # -- ISR shrink / expand / propagation (docs/design.md "ISR management"; ZooKeeper: isr_manager.py) --

    def maybe_shrink_isr(self) -> int:
        """isr-expiration: drop out-of-sync followers from the ISR of every partition led here."""
        if self.isr_manager is None:
            return 0
        leaders = []
        for tp, partition in self.partitions.items():
            log_ = self.get_log(tp) if partition.is_leader else None
            if log_ is not None:
                leaders.append((partition, log_))
        return self.isr_manager.maybe_shrink_isr(leaders)

    async def maybe_propagate_isr_changes(self) -> None:
        """isr-change-propagation: announce recent ISR changes to the controller."""
        if self.isr_manager is not None:
            await self.isr_manager.maybe_propagate_isr_changes()

    def _on_isr_changed(self, partition: Partition) -> None:
        """After the ISR or the maximal ISR changed (an expand settled either way): the HW may move
        (it is the minimum LEO over the leader and the ISR, so a shrink can raise it, unless it
        leaves the ISR under min.insync.replicas; an expand back to the minimum releases it), and
        parked acks=all requests may complete (Kafka 3.7: a shrink no longer fails them; they
        wait for the HW or their timeout)."""
        touch(self.fetch_sessions, partition.key)  # read at the sessions' next fetches
        log_ = self.get_log(partition.key)
        leads = log_ is not None and self.partitions.get(partition.key) is partition and partition.is_leader
        if leads and self.maybe_increment_high_watermark(partition, log_):
            return  # the HW moved: both purgatories were checked
        self.produce_purgatory.check_and_complete(partition.key)
        # A parked fetch waits on leadership, offsets, bytes and the HW, none of which an ISR change
        # moves; only KIP-73's throttle (a follower out of the ISR is held back) reads the ISR.
        # Checking it anyway scanned a follower's whole fetch for every partition whose ISR it
        # joined: 5,000 ISR expansions after a restart held the loop for seconds (issue 25).
        if self.quotas.leader.throttled:
            self.fetch_ready(partition.key)

    def wake(self, tp: TopicPartition) -> None:
        """Let parked produce and fetch requests on ``tp`` check whether they can complete."""
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_ready(tp)

    def fetch_ready(self, tp: TopicPartition) -> None:
        """Something a fetch of ``tp`` answers changed (an append, the HW, leadership): parked
        fetches on it check whether they can complete, and each fetch session holding it reads it
        again at its next fetch (KIP-227; broker/replica/fetch_session.py)."""
        self.fetch_purgatory.check_and_complete(tp)
        for key in touch(self.fetch_sessions, tp):
            self.fetch_purgatory.check_and_complete(key)

    # -- Produce ------------------------------------------------------------------------------------

    def append_records(
        self,
        acks: int,
        timeout_ms: int,
        entries: dict[TopicPartition, bytes],
        respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
    ) -> None:
        """Append to every leader log, then answer now (acks 0/1, or any error) or park an
        acks=all request in the produce purgatory until the HW passes each last offset."""
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, records in entries.items():
            statuses[tp] = self._append_to_leader(tp, records, acks)
        waiting = acks == -1 and any(s.error_code == ErrorCode.NONE for s in statuses.values())
        if not waiting:
            respond(statuses)
            return
        operation = DelayedProduce(timeout_ms, statuses, self, respond)
        self.produce_purgatory.try_complete_else_watch(operation, list(statuses))

    def _append_to_leader(self, tp: TopicPartition, records: bytes, acks: int) -> ProducePartitionStatus:
        try:
            partition, log_ = self.leader_log(tp)
            self._check_free_space(tp, log_, len(records))
            if acks == -1:
                self._check_min_isr(tp, partition)
            info = log_.append_as_leader(records, partition.leader_epoch)
        except KafkaError as exc:
            return ProducePartitionStatus(exc.code, -1, -1, exc.message)
        if not info.duplicate:  # a retried duplicate (KIP-98) wrote nothing; its offsets are the original's
            self.maybe_increment_high_watermark(partition, log_)
            self.fetch_ready(tp)  # followers long-polling for new data
        return ProducePartitionStatus(
            ErrorCode.NONE, info.first_offset, info.last_offset + 1, None, log_.log_start_offset
        )

    def _check_min_isr(self, tp: TopicPartition, partition: Partition) -> None:
        """Kafka's appendRecordsToLeader: acks=all is refused before the append while the ISR is
        smaller than the effective min.insync.replicas (KAFKA-15583: bounded by the RF)."""
        configured = self.min_insync_replicas(tp[0])
        effective = partition.effective_min_isr(configured)
        if len(partition.isr) < effective:
            bound = f" (bounded by the replication factor to {effective})" if effective < configured else ""
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{tp[0]}-{tp[1]}: ISR {sorted(partition.isr)} is smaller than "
                f"min.insync.replicas={configured}{bound}",
            )

    def _check_free_space(self, tp: TopicPartition, log_: Log, nbytes: int) -> None:
        """Issue 25: a log dir below its free-space floor takes no client appends. The refusal is
        NOT_ENOUGH_REPLICAS, raised before the append as Kafka raises it for a short ISR: every
        client retries it, and floodmark's knows the batch was not written (docs/design.md "Disk
        space as a budget (issue 25)"). The group coordinator's own appends (Kafka's
        AppendOrigin.Coordinator: small, and what keeps consumer groups working) are only counted."""
        if tp[0] == GROUP_METADATA_TOPIC:
            self.disk_space.appended(log_.log_dir, nbytes)
        elif not self.disk_space.admit(log_.log_dir, nbytes):
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{tp[0]}-{tp[1]}: broker {self.broker_id}'s {self.disk_space.describe(log_.log_dir)}",
            )

    # -- Fetch (Kafka's ReplicaManager.fetchMessages and DelayedFetch) ------------------------------

    def read(
        self,
        tp: TopicPartition,
        replica_id: int,
        fetch: dict,
        max_bytes: int,
        update_fetch_state: bool = True,
    ) -> ReadResult:
        """Read one partition for a consumer (below the HW) or a follower (below the LEO), or for
        a debugging consumer (:meth:`read_for_debugging`). A follower's read records its fetch
        (its LEO, caught-up time; then the HW and an ISR expand) only with ``update_fetch_state``:
        Kafka's Partition.fetchRecords ``updateFetchState = !readFromPurgatory``, so the read of a
        parked fetch's completion, whose entries may be older than the follower's latest fetch,
        never moves follower state."""
        if replica_id == DEBUGGING_REPLICA_ID:
            return self.read_for_debugging(tp, fetch, max_bytes)
        try:
            partition, log_ = self.leader_log(tp, fetch["current_leader_epoch"])
            is_follower = replica_id != CONSUMER_REPLICA_ID
            if is_follower and replica_id not in partition.assigned_replicas:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {replica_id} is not a replica of {tp}"
                )
            limit = None if is_follower else log_.high_watermark
            # KIP-73: a follower out of the ISR of a throttled partition gets nothing while the
            # leader's replication rate is over its bound (an in-sync one is never held back)
            throttled = (
                is_follower and bool(self.quotas.leader.throttled) and self.quotas.leader.is_throttled(tp)
            )
            held = throttled and self.should_leader_throttle(partition, replica_id)
            # Read first: a fetch offset outside the log (a diverged follower above our LEO)
            # raises OFFSET_OUT_OF_RANGE here and must not count as the follower's LEO, nor
            # move the HW or the ISR (Kafka updates the follower's state only after a good read).
            data = log_.read(
                fetch["fetch_offset"], 0 if held else max_bytes, max_offset=limit, min_one_message=not held
            )
            if throttled:
                self.quotas.leader.record(len(data.records), self.time_ms())
            if is_follower and update_fetch_state:
                partition.update_follower_fetch(
                    replica_id, fetch["fetch_offset"], log_.log_end_offset, self.time_ms()
                )
                self.maybe_increment_high_watermark(partition, log_)
                if self.isr_manager is not None:
                    self.isr_manager.maybe_expand_isr(partition, replica_id, log_)
            return ReadResult(
                ErrorCode.NONE, log_.high_watermark, log_.log_start_offset, data.records, log_.log_end_offset
            )
        except KafkaError as exc:
            return ReadResult(exc.code)

    def read_for_debugging(self, tp: TopicPartition, fetch: dict, max_bytes: int) -> ReadResult:
        """Kafka's debugging consumer (replica id -2, Request.DebuggingConsumerId; the
        ReplicaVerificationTool's, docs/operations.md "Verifying replicas"): served by the leader
        and by a follower alike (``fetchOnlyFromLeader = false``), below this replica's own HW
        (Kafka reads committed data only for it), answering this replica's HW. It is no follower:
        no follower fetch state, HW, ISR or replication quota changes."""
        try:
            _, log_ = self.hosted_log(tp, fetch["current_leader_epoch"])
            data = log_.read(fetch["fetch_offset"], max_bytes, max_offset=log_.high_watermark)
            return ReadResult(ErrorCode.NONE, log_.high_watermark, log_.log_start_offset, data.records)
        except KafkaError as exc:
            return ReadResult(exc.code)

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower outside the ISR, a throttled partition, and the
        leader's replication rate over its bound."""
        quota = self.quotas.leader
        return (
            bool(quota.throttled)
            and replica_id not in partition.isr
            and quota.is_throttled(partition.key)
            and quota.is_quota_exceeded(self.time_ms())
        )

    def fetch_messages(self, body: dict, respond: FetchRespond) -> None:
        """Kafka's fetchMessages: read now, answer now or park in the fetch purgatory. A follower's
        fetch session (KIP-227) reads only its dirty partitions and answers only what changed."""
        replica_id = body["replica_id"]
        context = fetch_context(self.fetch_sessions, body, self.time_ms())
        if context.error_code != ErrorCode.NONE:
            respond({}, INVALID_SESSION_ID, context.error_code)
            return

        def answer(results: dict[TopicPartition, ReadResult]) -> None:
            respond(context.answer(results), context.session_id, ErrorCode.NONE)

        requested = context.to_read()
        results = self.read_from_local_log(replica_id, requested, body["max_bytes"])
        # Only this read, at the fetch's arrival, updated the follower's state: only it may mark
        # the session's partitions clean (a parked fetch's completion reads without either).
        mark_clean(context, results, self.partitions)
        ready_bytes = sum(len(r.records) for r in results.values())
        has_error = any(r.error_code != ErrorCode.NONE for r in results.values())
        # Seed 000: answer at once when max wait <= 0, nothing was asked, min bytes are ready, or on
        # error; an incremental fetch also when it has anything new to say (a moved HW)
        if (
            body["max_wait_ms"] <= 0
            or not (requested or context.incremental)
            or ready_bytes >= body["min_bytes"]
            or has_error
            or (context.incremental and context.session.answer_due(results))
        ):
            answer(results)
            return
        statuses = {tp: FetchPartitionStatus(p, results[tp].high_watermark) for tp, p in requested.items()}
        operation = DelayedFetch(body["max_wait_ms"], body, statuses, self, answer, context)
        keys = [context.session.key] if context.incremental else list(requested)
        self.fetch_purgatory.try_complete_else_watch(operation, keys)

    def read_from_local_log(
        self,
        replica_id: int,
        requested: dict[TopicPartition, dict],
        max_bytes: int,
        update_fetch_state: bool = True,
    ) -> dict[TopicPartition, ReadResult]:
        """Kafka's readFromLocalLog: read each requested partition in turn, within ``max_bytes``
        for the whole fetch; for a fetch now, and again when a parked DelayedFetch completes
        (then with ``update_fetch_state`` False: Kafka's ``readFromPurgatory = true``)."""
        results = {}
        remaining = max_bytes
        for tp, fetch in requested.items():
            limit = max(0, min(fetch["partition_max_bytes"], remaining))
            result = self.read(tp, replica_id, fetch, limit, update_fetch_state)
            remaining -= len(result.records)
            results[tp] = result
        return results

    # -- follower side, called by the fetcher ----------------------------------------------------------

    def append_as_follower(
        self, tp: TopicPartition, records: bytes, leader_high_watermark: int
    ) -> Log | None:
        partition = self.partitions.get(tp)
        log_ = self.get_log(tp)
        if partition is None or log_ is None or partition.is_leader:
            return None
        if records:
            self.disk_space.appended(log_.log_dir, len(records))
            log_.append_as_follower(records)
        log_.update_high_watermark(min(log_.log_end_offset, leader_high_watermark))
        return log_

    # -- periodic duties ------------------------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks()

    def shutdown(self) -> None:
        if self.isr_manager is not None:
            self.isr_manager.shutdown()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
