"""A group member's committed offsets (Kafka's ConsumerCoordinator.commitOffsetsSync,
sendOffsetCommitRequest and fetchCommittedOffsets; docs/design.md "Consumer groups").

OffsetCommit is answered only once the coordinator wrote it with acks=all. A member with
subscribed (auto-assigned) partitions commits only under ``generationIfStable()``: while it is
between generations it raises RebalanceInProgressError, and once its generation was reset
(fenced: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) it raises CommitFailedError, sending nothing in
either case. It must not fall back to generation -1 and no member id: that is how a consumer
that assigns its own partitions commits, which an Empty group accepts, so a fenced member's
stale offset would replace the one the partition's next owner committed. A fenced answer to a
commit resets the generation only when it is about the generation the commit was sent under
(Kafka's generationUnchanged()): the member may have joined a newer one meanwhile; after
ILLEGAL_GENERATION the member id is kept (Kafka's resetStateOnResponseError(OFFSET_COMMIT, error,
error != ILLEGAL_GENERATION)). OffsetFetch
reads the offsets the group committed. A mixin of
:class:`client.consumer.group_coordinator.ConsumerCoordinator`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping

from client.consumer.config import ConsumerConfig
from client.consumer.errors import (
    NOT_IN_ACTIVE_GROUP,
    STALE_GENERATION,
    UNDERGOING_REBALANCE,
    CommitFailedError,
    RebalanceInProgressError,
)
from client.consumer.subscription_state import SubscriptionState
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger("client.consumer.group_coordinator")

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""
#: errors after which the coordinator must be looked up again
COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION}
)
#: errors that mean this member's generation is over: rejoin from scratch
FENCED_ERRORS = frozenset(
    {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}
)


class MemberState(enum.Enum):
    """Kafka's AbstractCoordinator.MemberState: where the member is in joining its group."""

    UNJOINED = "unjoined"  # no generation (never joined, left, or fenced)
    PREPARING_REBALANCE = "preparing_rebalance"  # JoinGroup sent
    COMPLETING_REBALANCE = "completing_rebalance"  # JoinGroup answered, SyncGroup not yet
    STABLE = "stable"  # SyncGroup answered: the generation's assignment is known


class OffsetCommits:
    """The ConsumerCoordinator provides these (annotations only: nothing here stands in for them)."""

    config: ConsumerConfig
    group_id: str
    generation: int
    member_id: str
    need_rejoin: bool
    state: MemberState
    subscribed: bool  # partitions assigned by the group (Kafka's hasAutoAssignedPartitions)
    _subscriptions: SubscriptionState
    _send: Callable[..., Awaitable[dict]]  # a request to the coordinator (ConsumerCoordinator._send)
    mark_coordinator_unknown: Callable[[str], None]
    reset_generation: Callable[[bool], None]  # (reset_member_id)

    def generation_if_stable(self) -> tuple[int, str] | None:
        """Kafka's generationIfStable: (generation, member id) once SyncGroup was answered."""
        return (self.generation, self.member_id) if self.state is MemberState.STABLE else None

    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    def _commit_generation(self) -> tuple[int, str]:
        """The generation and member id to commit under, or the error to raise without sending."""
        if not self.subscribed:
            return NO_GENERATION, UNKNOWN_MEMBER_ID  # partitions assigned by hand (assign())
        stable = self.generation_if_stable()
        if stable is not None:
            return stable
        log.info("group %s: failing OffsetCommit: not part of an active group", self.group_id)
        if self.rebalance_in_progress():
            raise RebalanceInProgressError(UNDERGOING_REBALANCE)
        raise CommitFailedError(ErrorCode.UNKNOWN_MEMBER_ID, NOT_IN_ACTIVE_GROUP)

    def _positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(state.position)
            for tp, state in self._subscriptions.assignment.items()
            if state.position is not None
        }

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """OffsetCommit under the current generation (synchronous commit: waits for the answer).
        Raises CommitFailedError or RebalanceInProgressError (see the module docstring)."""
        offsets = self._positions() if offsets is None else offsets
        if not offsets:
            return
        sent = generation, member = self._commit_generation()
        topics: dict[str, list[dict]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp[0], []).append(
                {"partition": tp[1], "committed_offset": om.offset, "committed_leader_epoch": om.leader_epoch,
                 "committed_metadata": om.metadata}
            )  # fmt: skip
        response = await self._send(
            ApiKey.OFFSET_COMMIT,
            {
                "group_id": self.group_id,
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": self.config.group_instance_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["error_code"] != ErrorCode.NONE:
                    self._raise_commit_error(p["error_code"], f"{t['topic']}-{p['partition']}", sent)

    def _raise_commit_error(self, code: int, where: str, sent: tuple[int, str]) -> None:
        """Kafka's OffsetCommitResponseHandler: ``sent`` is the generation committed under."""
        unchanged = (self.generation, self.member_id) == sent
        if code in FENCED_ERRORS:
            log.info("group %s: OffsetCommit of %s under generation %d failed: %s",
                     self.group_id, where, sent[0], ErrorCode(code).name)  # fmt: skip
            if not unchanged:
                # about a generation already gone: the member's newer one stays as it is
                if self.state is MemberState.PREPARING_REBALANCE:
                    raise RebalanceInProgressError(STALE_GENERATION)
                raise CommitFailedError(code)
            if code == ErrorCode.FENCED_INSTANCE_ID:  # KIP-345: another instance took the id
                self.need_rejoin = True
                raise KafkaError(code, f"committing {where} for group {self.group_id}")
            if self.subscribed:  # Kafka keeps the member id on ILLEGAL_GENERATION
                self.reset_generation(code != ErrorCode.ILLEGAL_GENERATION)
            raise CommitFailedError(code)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.need_rejoin = True
            raise RebalanceInProgressError()
        if code in COORDINATOR_ERRORS:
            self.mark_coordinator_unknown("OffsetCommit")
        raise KafkaError(code, f"committing {where} for group {self.group_id}")

    async def fetch_committed(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        if not tps:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        while True:
            response = await self._send(
                ApiKey.OFFSET_FETCH,
                {
                    "group_id": self.group_id,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                },
            )
            code = response["error_code"]
            if code == ErrorCode.NONE:
                break
            if code not in COORDINATOR_ERRORS and code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise KafkaError(code, f"fetching the committed offsets of group {self.group_id}")
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(tps)
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["committed_offset"] >= 0:
                    out[TopicPartition(t["topic"], p["partition"])] = OffsetAndMetadata(
                        p["committed_offset"], p["metadata"] or "", p["committed_leader_epoch"]
                    )
        return out
