"""Auto commit (``enable_auto_commit``), driven by ``poll`` (Kafka's
ConsumerCoordinator.maybeAutoCommitOffsetsAsync and its nextAutoCommitTimer; docs/design.md
"Consumer groups").

There is no background task: each ``poll`` asks :meth:`AutoCommit.maybe_commit_async` before it
fetches, and once ``auto_commit_interval_ms`` has passed an asynchronous OffsetCommit of the
positions *as they are then* is sent. A position moves only when ``poll`` returns records, so
what is committed is what earlier polls returned: a record is committed only after the
application came back for more (at least once; a crash while it processes a batch re-delivers
the batch). The other auto commits are Kafka's too: before a rebalance (onJoinPrepare) and on
``close`` (maybeAutoCommitOffsetsSync), each waiting for the one in flight first so an older
commit can never land after a newer one. The check on the hot path is one comparison of the
loop's time with a deadline. A retriable failure retries after ``retry_backoff_ms``, as Kafka's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from client.protocol.errors import KafkaError
from client.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger("client.consumer.group_coordinator")

Commit = Callable[[Mapping[TopicPartition, OffsetAndMetadata]], Awaitable[None]]


class AutoCommit:
    """The nextAutoCommitTimer and the auto commit in flight (at most one)."""

    def __init__(self, interval_ms: int, retry_backoff_ms: int, group_id: str) -> None:
        self.interval = interval_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.group_id = group_id
        self.next_at = 0.0  # loop time of the next auto commit
        self._in_flight: asyncio.Task | None = None

    def reset(self, now: float) -> None:
        """Kafka's nextAutoCommitTimer.updateAndReset(autoCommitIntervalMs): a new assignment
        waits a whole interval before its first auto commit."""
        self.next_at = now + self.interval

    def maybe_commit_async(
        self, now: float, offsets: Callable[[], Mapping[TopicPartition, OffsetAndMetadata]], commit: Commit
    ) -> None:
        """From ``poll``, before it fetches: commit ``offsets()`` (taken now) when the interval
        has passed. While one is in flight the next waits ``retry_backoff_ms`` more."""
        if now < self.next_at:
            return
        if self._in_flight is not None and not self._in_flight.done():
            self.next_at = now + self.retry_backoff  # after the one in flight, never beside it
            return
        self.next_at = now + self.interval
        taken = offsets()
        if taken:
            self._in_flight = asyncio.get_running_loop().create_task(
                self._commit(commit, taken), name=f"auto-commit-{self.group_id}"
            )

    async def _commit(self, commit: Commit, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        try:
            await commit(offsets)
        except KafkaError as exc:
            if exc.retriable:
                self.next_at = asyncio.get_running_loop().time() + self.retry_backoff
            log.warning(
                "group %s: asynchronous auto commit of %s failed: %s", self.group_id, dict(offsets), exc
            )

    async def wait_in_flight(self) -> None:
        """Wait for the auto commit in flight (its failure is logged, not raised)."""
        task = self._in_flight
        if task is not None and not task.done():
            await asyncio.wait([task])  # never raises the commit's error; our cancellation does

    def abandon(self) -> None:
        if self._in_flight is not None:
            self._in_flight.cancel()
