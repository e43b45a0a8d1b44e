"""A group member's committed offsets (Kafka's ConsumerCoordinator.commitOffsetsSync and
fetchCommittedOffsets; docs/design.md "Consumer groups"): OffsetCommit under the member's
generation (generation -1 and no member id for a consumer that assigns its own partitions),
answered only once the coordinator wrote it with acks=all, and OffsetFetch of the offsets the
group committed. A mixin of :class:`client.consumer.group_coordinator.ConsumerCoordinator`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from client.consumer.config import ConsumerConfig
from client.consumer.subscription_state import SubscriptionState
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import OffsetAndMetadata, TopicPartition

NO_GENERATION = -1
#: errors after which the coordinator must be looked up again
COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION}
)
#: errors that mean this member's generation is over: rejoin from scratch
FENCED_ERRORS = frozenset(
    {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}
)


class OffsetCommits:
    """The ConsumerCoordinator provides these (annotations only: nothing here stands in for them)."""

    config: ConsumerConfig
    group_id: str
    generation: int
    member_id: str
    need_rejoin: bool
    _subscriptions: SubscriptionState
    _send: Callable[..., Awaitable[dict]]  # a request to the coordinator (ConsumerCoordinator._send)
    mark_coordinator_unknown: Callable[[str], None]

    def _positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(state.position)
            for tp, state in self._subscriptions.assignment.items()
            if state.position is not None
        }

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """OffsetCommit under the current generation (synchronous commit: waits for the answer)."""
        offsets = self._positions() if offsets is None else offsets
        if not offsets:
            return
        topics: dict[str, list[dict]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp[0], []).append(
                {"partition": tp[1], "committed_offset": om.offset, "committed_leader_epoch": om.leader_epoch,
                 "committed_metadata": om.metadata}
            )  # fmt: skip
        generation, member = (
            (self.generation, self.member_id) if self.generation != NO_GENERATION else (-1, "")
        )
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
                    code = p["error_code"]
                    if code in FENCED_ERRORS or code == ErrorCode.REBALANCE_IN_PROGRESS:
                        self.need_rejoin = True
                    if code in COORDINATOR_ERRORS:
                        self.mark_coordinator_unknown("OffsetCommit")
                    raise KafkaError(
                        code, f"committing {t['topic']}-{p['partition']} for group {self.group_id}"
                    )

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
