"""DelayedProduce and DelayedFetch: the two operations the purgatories hold (Kafka's
DelayedProduce and DelayedFetch; docs/guarantees.md "acks=all and min.insync.replicas").

DelayedProduce (acks=all) completes for each partition when the HW passes the batch's last
offset (Kafka's Partition.checkEnoughReplicasReachOffset: NONE, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is below the effective min.insync.replicas
at that point), the broker is no longer leader (NOT_LEADER_OR_FOLLOWER), or the timeout passes
(REQUEST_TIMED_OUT). Since Kafka 3.7 (KAFKA-15583) the HW does not move while the ISR is under
min ISR, so a shrink below it leaves the write parked: it succeeds if the ISR comes back in time.

DelayedFetch completes when min bytes are available, an error or leadership change hits one
of its partitions, the HW moved for a follower, or max wait passes; it then reads again and
answers with what is there. That read never touches follower state (Kafka's
``ReplicaManager.readFromLog(readFromPurgatory = true)``: ``updateFetchState = false``): no
follower LEO, caught-up time, HW or ISR move, and no partition is marked clean in a fetch session;
only the read at the fetch's arrival does that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from broker.log import Log
from broker.purgatory import DelayedOperation
from broker.replica.fetch_session import FetchContext
from broker.replica.partition import Partition
from client.protocol.api import DEBUGGING_REPLICA_ID
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition


class LeaderReplicas(Protocol):
    """What the delayed operations need of the
    :class:`~broker.replica.replica_manager.ReplicaManager` (Kafka passes DelayedProduce and
    DelayedFetch the replicaManager itself)."""

    def leader_log(self, tp: TopicPartition, current_leader_epoch: int = -1) -> tuple[Partition, Log]: ...

    def hosted_log(
        self, tp: TopicPartition, current_leader_epoch: int = -1, fetch_only_from_leader: bool = False
    ) -> tuple[Partition, Log]: ...

    def min_insync_replicas(self, topic: str) -> int: ...

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool: ...

    def read_from_local_log(
        self,
        replica_id: int,
        requested: dict[TopicPartition, dict],
        max_bytes: int,
        update_fetch_state: bool = True,
    ) -> dict: ...


@dataclass
class ProducePartitionStatus:
    error_code: int
    base_offset: int
    required_offset: int  # the HW this partition's acks=all write waits for (last offset + 1)
    error_message: str | None = None
    log_start_offset: int = -1
    pending: bool = True


class DelayedProduce(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        replica_manager: LeaderReplicas,
        respond: Callable[[dict], None],
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.respond = respond
        for status in statuses.values():
            status.pending = status.error_code == ErrorCode.NONE

    def try_complete(self) -> bool:
        for tp, status in self.statuses.items():
            if status.pending:
                self._check_partition(tp, status)
        if any(status.pending for status in self.statuses.values()):
            return False
        return self.force_complete()

    def _check_partition(self, tp: TopicPartition, status: ProducePartitionStatus) -> None:
        """Kafka's Partition.checkEnoughReplicasReachOffset."""
        try:
            partition, log_ = self.replica_manager.leader_log(tp)
        except KafkaError as exc:
            status.error_code, status.error_message, status.pending = exc.code, exc.message, False
            return
        if log_.high_watermark >= status.required_offset:
            min_isr = partition.effective_min_isr(self.replica_manager.min_insync_replicas(tp[0]))
            maximal_isr = partition.maximal_isr
            if len(maximal_isr) < min_isr:
                status.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                status.error_message = (
                    f"maximal ISR {sorted(maximal_isr)} is below min.insync.replicas={min_isr}"
                )
            status.pending = False

    def on_expiration(self) -> None:
        for status in self.statuses.values():
            if status.pending:
                status.error_code = ErrorCode.REQUEST_TIMED_OUT
                status.error_message = "not replicated to the ISR before the request timeout"
                status.pending = False

    def on_complete(self) -> None:
        self.respond(self.statuses)


@dataclass
class FetchPartitionStatus:
    fetch: dict  # the request's partition entry
    high_watermark: int = -1  # the leader's HW when the fetch was parked


class DelayedFetch(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        body: dict,
        statuses: dict[TopicPartition, FetchPartitionStatus],
        replica_manager: LeaderReplicas,
        respond: Callable[[dict], None],
        context: FetchContext | None = None,
    ) -> None:
        """``context``: the fetch's session (KIP-227); an incremental fetch also completes when a
        partition of its session is touched after it parked, and reads the session's dirty ones."""
        super().__init__(delay_ms)
        self.body = body
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.respond = respond
        self.session = context.session if context is not None and context.incremental else None

    def try_complete(self) -> bool:
        """Seed 000: complete when a partition errs (leadership moved, epoch fenced), or enough
        bytes are past the fetch offsets (below the HW for consumers, the LEO for followers)."""
        if self.session is not None and not self.session.dirty.keys() <= self.statuses.keys():
            return self.force_complete()  # a partition of the session was touched: news
        is_follower = self.body["replica_id"] >= 0
        # Kafka's fetchOnlyFromLeader: only a debugging consumer (-2) may wait on a follower
        only_leader = self.body["replica_id"] != DEBUGGING_REPLICA_ID
        available = 0
        for tp, status in self.statuses.items():
            try:
                partition, log_ = self.replica_manager.hosted_log(
                    tp, status.fetch["current_leader_epoch"], fetch_only_from_leader=only_leader
                )
            except KafkaError:
                return self.force_complete()
            end = log_.log_end_offset if is_follower else log_.high_watermark
            fetch_offset = status.fetch["fetch_offset"]
            if is_follower and self.replica_manager.should_leader_throttle(
                partition, self.body["replica_id"]
            ):
                continue  # held back by the replication throttle: nothing it could get counts (Kafka's rule)
            if fetch_offset > end or fetch_offset < log_.log_start_offset:
                return self.force_complete()  # out of range: answer with the error now
            if is_follower and log_.high_watermark != status.high_watermark:
                # The HW moved: answer the follower now, so it learns the new HW at once rather
                # than up to replica.fetch.wait.max.ms later. This is floodmark's own rule, not
                # Kafka's: Kafka's DelayedFetch never completes a follower fetch because the HW
                # moved (its case H is the diverging-epoch check); see docs/design.md "Replication races".
                return self.force_complete()
            if end > fetch_offset:
                available += _estimate_bytes(log_, fetch_offset, end, status.fetch["partition_max_bytes"])
        if available >= self.body["min_bytes"]:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        """Read again and answer (Kafka's DelayedFetch.onComplete: ``readFromLog`` with
        ``readFromPurgatory = true``): the read moves no follower state and ``respond`` marks
        nothing clean; the follower's next fetch reads what changed and records it."""
        if self.session is not None:
            requested = self.session.to_read()
        else:
            requested = {tp: status.fetch for tp, status in self.statuses.items()}
        self.respond(
            self.replica_manager.read_from_local_log(
                self.body["replica_id"], requested, self.body["max_bytes"], update_fetch_state=False
            )
        )


def _estimate_bytes(log_, start: int, end: int, limit: int) -> int:
    """Bytes between two offsets, at most ``limit``: a real read, since min.bytes is usually 1
    and the first batch then settles it."""
    return len(log_.read(start, limit, max_offset=end, min_one_message=True).records)
