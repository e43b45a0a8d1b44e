"""Offset lookups and position resets for the consumer (Kafka's OffsetFetcher, ListOffsets).

:class:`OffsetFetcher` sends ListOffsets (KIP-79 timestamps: EARLIEST -2, LATEST -1, or a time)
to each partition's leader, retrying retriable errors after refreshing metadata, and resets the
positions of partitions that have none per ``auto_offset_reset`` ("earliest" / "latest"; "none"
raises OFFSET_OUT_OF_RANGE). Consumer groups and offset commits are not here: the consumer is
assign-only. See docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from client.consumer.config import ConsumerConfig
from client.consumer.subscription_state import SubscriptionState
from client.metadata import Cluster
from client.protocol.api import CONSUMER_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
from client.protocol.errors import INVALIDATES_METADATA, RETRIABLE, ErrorCode, KafkaError
from client.types import TopicPartition

log = logging.getLogger(__name__)


class OffsetFetcher:
    """ListOffsets for one consumer's partitions, and the ``auto_offset_reset`` rule. ``check``
    raises when the consumer cannot send requests (not started, or closed)."""

    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        check: Callable[[], None],
    ) -> None:
        self.config = config
        self._cluster = cluster
        self._subscriptions = subscriptions
        self._check = check  # raises when the consumer is not started or closed

    async def reset_positions(self, tps: list[TopicPartition], deadline: float | None = None) -> None:
        strategy = self.config.auto_offset_reset
        if strategy == "none":
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"no valid position for {', '.join(map(str, tps))} and auto_offset_reset is 'none'",
            )
        timestamp = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        offsets = await self.list_offsets(dict.fromkeys(tps, timestamp), deadline)
        for tp, (offset, _) in offsets.items():
            state = self._subscriptions.assignment.get(tp)
            if state is not None and state.position is None:
                log.info("resetting %s to %s offset %d", tp, strategy, offset)
                self._subscriptions.set_position(state, offset)

    async def list_offsets(
        self, timestamps: dict[TopicPartition, int], deadline: float | None = None
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader, retrying retriable errors (refreshing metadata
        first) until ``deadline`` (loop time; default ``request_timeout_ms`` from now; at least
        one attempt is made). Returns {tp: (offset, timestamp)}."""
        self._check()
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.config.request_timeout_ms / 1000
        backoff = self.config.retry_backoff_ms / 1000
        pending = dict(timestamps)
        result: dict[TopicPartition, tuple[int, int]] = {}
        last_error: KafkaError | None = None
        while pending:
            if self._cluster.stale or any(self._cluster.leader_for(tp) is None for tp in pending):
                try:
                    await self._cluster.refresh(
                        sorted({tp.topic for tp in pending} | self._subscriptions.topics())
                    )
                except KafkaError as exc:
                    last_error = exc
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                leader = self._cluster.leader_for(tp)
                if leader is None:
                    if self._cluster.partitions_for(tp.topic) is not None and tp.partition not in (
                        self._cluster.partitions_for(tp.topic) or []
                    ):
                        raise KafkaError(
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"partition {tp} does not exist (list offsets)",
                        )
                    last_error = last_error or KafkaError(
                        ErrorCode.LEADER_NOT_AVAILABLE, f"no leader known for {tp} (list offsets)"
                    )
                    continue
                by_leader.setdefault(leader, []).append(tp)
            if by_leader:
                outcomes = await asyncio.gather(
                    *(
                        self._list_offsets_at(node, {tp: pending[tp] for tp in tps})
                        for node, tps in by_leader.items()
                    )
                )
                for done, error in outcomes:
                    for tp, value in done.items():
                        result[tp] = value
                        pending.pop(tp, None)
                    last_error = error or last_error
            if pending:
                if loop.time() + backoff > deadline:
                    where = ", ".join(map(str, sorted(pending)))
                    if last_error is not None:
                        raise KafkaError(
                            last_error.code, f"list offsets for {where} failed: {last_error.message}"
                        )
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"list offsets for {where} timed out")
                await asyncio.sleep(backoff)
        return result

    async def _list_offsets_at(
        self, node: int, timestamps: dict[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, tuple[int, int]], KafkaError | None]:
        topics: dict[str, list[dict]] = {}
        for tp, ts in timestamps.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "timestamp": ts,
                    "current_leader_epoch": self._cluster.leader_epoch_for(tp),
                }
            )
        body = {
            "replica_id": CONSUMER_REPLICA_ID,
            "isolation_level": 0,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
        }
        try:
            conn = await self._cluster.connection(node)
            response = await conn.request(
                ApiKey.LIST_OFFSETS, body, timeout=self.config.request_timeout_ms / 1000
            )
        except KafkaError as exc:
            if exc.code not in RETRIABLE:
                raise
            self._cluster.invalidate()
            return {}, KafkaError(exc.code, f"list offsets at broker {node}: {exc.message}")
        done: dict[TopicPartition, tuple[int, int]] = {}
        error: KafkaError | None = None
        for t in response["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["topic"], p["partition"])
                if tp not in timestamps:
                    continue
                code = p["error_code"]
                if code == ErrorCode.NONE:
                    done[tp] = (p["offset"], p["timestamp"])
                    continue
                message = f"list offsets for {tp} at broker {node} failed"
                if code not in RETRIABLE:
                    raise KafkaError(code, message)
                if code in INVALIDATES_METADATA:
                    self._cluster.invalidate()
                error = KafkaError(code, message)
        return done, error
