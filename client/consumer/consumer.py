"""The user-facing asyncio consumer with manual assignment (Kafka's KafkaConsumer, aiokafka's
AIOKafkaConsumer): assign, seek, poll, offsets.

``poll`` returns buffered records first; otherwise the
:class:`~client.consumer.fetcher.Fetcher` sends the next fetches and ``poll`` waits up to
``timeout_ms`` for any of them. After returning records it already sends the next fetches
(pipelining), so the broker's long poll overlaps the caller's processing. Positions live in the
:class:`~client.consumer.subscription_state.SubscriptionState`; a partition without one is reset
per ``auto_offset_reset`` by the :class:`~client.consumer.offsets.OffsetFetcher` on the next
``poll`` or ``position``. Consumer groups (subscribe, commits) are not here: this consumer is
assign-only. See docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from client.config import config_with_overrides
from client.consumer.config import ConsumerConfig
from client.consumer.fetcher import Fetcher
from client.consumer.offsets import OffsetFetcher
from client.consumer.subscription_state import SubscriptionState
from client.metadata import Cluster
from client.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from client.protocol.errors import KafkaError
from client.types import ConsumerRecord, TopicPartition

log = logging.getLogger(__name__)


class Consumer:
    """Use ``async with Consumer("h:9092", auto_offset_reset="earliest") as c: c.assign([...])``."""

    def __init__(self, bootstrap_servers, config: ConsumerConfig | None = None, **overrides) -> None:
        self.config = config_with_overrides(config or ConsumerConfig(), overrides, "consumer")
        c = self.config
        self._cluster = Cluster.for_client(bootstrap_servers, c)
        self._subscriptions = SubscriptionState(self._notify)
        self._fetcher = Fetcher(c, self._cluster, self._subscriptions, self._notify)
        self._offsets = OffsetFetcher(c, self._cluster, self._subscriptions, self._require_started)
        self._signal: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._loop = self._fetcher.loop = asyncio.get_running_loop()
        await self._cluster.start()
        self._started = True

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = self._fetcher.tasks()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._cluster.close()

    # -- assignment and positions ---------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions that stay assigned are kept."""
        self._subscriptions.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assigned()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
        state = self._subscriptions.state(tp)
        self._subscriptions.set_position(state, offset)

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._seek_to(tps, EARLIEST_TIMESTAMP)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._seek_to(tps, LATEST_TIMESTAMP)

    async def _seek_to(self, tps: tuple[TopicPartition, ...], timestamp: int) -> None:
        targets = [TopicPartition(*tp) for tp in tps] or list(self._subscriptions.assignment)
        for tp in targets:
            self._subscriptions.state(tp)
        offsets = await self._offsets.list_offsets(dict.fromkeys(targets, timestamp))
        for tp, (offset, _) in offsets.items():
            self._subscriptions.set_position(self._subscriptions.state(tp), offset)

    async def position(self, tp: TopicPartition) -> int:
        state = self._subscriptions.state(tp)
        if state.position is None:
            await self._offsets.reset_positions([TopicPartition(*tp)])
        return state.position

    def highwater(self, tp: TopicPartition) -> int:
        """The partition's high watermark as of the last fetch (-1 before any)."""
        return self._subscriptions.state(tp).high_watermark

    # -- offsets lookups --------------------------------------------------------------------------
    async def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The topic's partition ids, waiting for its metadata up to ``timeout_ms`` (default:
        ``request_timeout_ms``)."""
        wait = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        return list(await self._cluster.wait_for_topic(topic, wait))

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        result = await self._offsets.list_offsets(dict.fromkeys(map(_tp, tps), EARLIEST_TIMESTAMP))
        return {tp: offset for tp, (offset, _) in result.items()}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        result = await self._offsets.list_offsets(dict.fromkeys(map(_tp, tps), LATEST_TIMESTAMP))
        return {tp: offset for tp, (offset, _) in result.items()}

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """The earliest (offset, timestamp) whose timestamp is >= the given one; None if none."""
        for tp, ts in times.items():
            if not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be a non-negative integer, got {ts!r}")
        result = await self._offsets.list_offsets({_tp(tp): ts for tp, ts in times.items()})
        return {tp: (None if offset < 0 else (offset, ts)) for tp, (offset, ts) in result.items()}

    # -- poll -----------------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to ``timeout_ms`` for some."""
        self._require_started()
        loop = self._loop
        max_records = max_records or self.config.max_poll_records
        deadline = loop.time() + max(0, timeout_ms) / 1000
        while True:
            self._fetcher.raise_partition_errors()
            retry_reset_at = None
            missing = [tp for tp, state in self._subscriptions.assignment.items() if state.position is None]
            if missing:
                try:
                    await self._offsets.reset_positions(missing, deadline)
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.warning("consumer could not reset positions: %s", exc)
                    retry_reset_at = loop.time() + self.config.retry_backoff_ms / 1000
            records = self._fetcher.fetched_records(max_records)
            wake_at = self._fetcher.send_fetches()
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            for at in (wake_at, retry_reset_at):
                if at is not None:
                    remaining = min(remaining, max(0.0, at - loop.time()))
            await self._wait(remaining)

    # -- waking poll ------------------------------------------------------------------------------
    def _notify(self) -> None:
        signal = self._signal
        if signal is not None and not signal.done():
            signal.set_result(None)

    async def _wait(self, timeout: float) -> None:
        self._signal = signal = self._loop.create_future()
        timer = self._loop.call_later(timeout, self._notify)
        try:
            await signal
        finally:
            timer.cancel()
            if self._signal is signal:
                self._signal = None

    def _require_started(self) -> None:
        if self._closed:
            raise RuntimeError("consumer is closed")
        if not self._started:
            raise RuntimeError("consumer is not started: call await consumer.start() first")


def _tp(item) -> TopicPartition:
    return TopicPartition(*item)
