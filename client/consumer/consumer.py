"""The user-facing asyncio consumer with manual assignment (Kafka's KafkaConsumer, aiokafka's
AIOKafkaConsumer): assign, seek, poll, offsets.

``poll`` returns buffered records first; otherwise the
:class:`~client.consumer.fetcher.Fetcher` sends the next fetches and ``poll`` waits up to
``timeout_ms`` for any of them. After returning records it already sends the next fetches
(pipelining), so the broker's long poll overlaps the caller's processing. Positions live in the
:class:`~client.consumer.subscription_state.SubscriptionState`; a partition without one is reset
per ``auto_offset_reset`` by the :class:`~client.consumer.offsets.OffsetFetcher` on the next
``poll`` or ``position``. With a ``group_id`` it is also a group member (seed 004):
``subscribe`` to topics or a pattern and the
:class:`~client.consumer.group_coordinator.ConsumerCoordinator` gets the partitions from the
group, ``commit`` / ``committed`` keep offsets at the coordinator, and auto commit runs by
default (``enable_auto_commit``), from ``poll`` only (Kafka's maybeAutoCommitOffsetsAsync, before
the fetch), so it commits records earlier polls returned. ``subscribe`` only changes the
subscription: the assignment stays until the next ``poll``'s rebalance revokes it (Kafka's
LegacyKafkaConsumer.subscribe); ``unsubscribe`` and ``close`` revoke before leaving (Kafka's
onLeavePrepare). See docs/guarantees.md and docs/design.md "Consumer groups".
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping

from client.config import config_with_overrides
from client.consumer.config import ConsumerConfig
from client.consumer.fetcher import Fetcher
from client.consumer.group_coordinator import ConsumerCoordinator
from client.consumer.offsets import OffsetFetcher
from client.consumer.rebalance_listener import ConsumerRebalanceListener
from client.consumer.subscription_state import SubscriptionState
from client.metadata import ClientRuntime, Cluster
from client.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from client.protocol.errors import KafkaError
from client.types import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


class Consumer:
    """Use ``async with Consumer("h:9092", auto_offset_reset="earliest") as c: c.assign([...])``."""

    def __init__(
        self,
        bootstrap_servers,
        config: ConsumerConfig | None = None,
        runtime: ClientRuntime | None = None,
        **overrides,
    ) -> None:
        """``runtime``: connections, clocks and randomness (default: the real ones)."""
        self.config = config_with_overrides(config or ConsumerConfig(), overrides, "consumer")
        c = self.config
        self._cluster = Cluster.for_client(bootstrap_servers, c, runtime)
        self._subscriptions = SubscriptionState(self._notify)
        self._fetcher = Fetcher(c, self._cluster, self._subscriptions, self._notify)
        self._offsets = OffsetFetcher(c, self._cluster, self._subscriptions, self._require_started)
        self._coordinator = (
            ConsumerCoordinator(c, self._cluster, self._subscriptions, self._require_started)
            if c.group_id is not None
            else None
        )
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
        try:
            if self._coordinator is not None and self._started:
                await self._coordinator.close()  # raises a rebalance listener's error, once left
        finally:
            self._closed = True
            tasks = self._fetcher.tasks()
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            await self._cluster.close()

    def abandon(self) -> None:
        """Stop at once as a killed process would: no commit, no LeaveGroup, every connection
        dropped, so the coordinator expels this member after ``session_timeout_ms``. For fault
        injection (the simulator's and chaos runs' consumer crashes); the consumer is closed."""
        self._closed = True
        if self._coordinator is not None:
            self._coordinator.abandon()
        for task in self._fetcher.tasks():
            task.cancel()
        self._cluster.abandon()

    # -- assignment and positions ---------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions that stay assigned are kept."""
        if self._coordinator is not None and self._coordinator.subscribed:
            raise RuntimeError("assign() cannot be mixed with subscribe(): call unsubscribe() first")
        self._subscriptions.assign(partitions)

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the group (``group_id``) for these topics, or every topic matching ``pattern``;
        the group's leader decides which partitions this member reads (seed 004). Only the
        subscription changes here (Kafka's KafkaConsumer.subscribe): the partitions assigned stay
        until the next ``poll``'s rebalance revokes them (``on_partitions_revoked`` sees them,
        a commit there or the auto commit before it commits their positions)."""
        if self._coordinator is None:
            raise RuntimeError("subscribe() needs a group_id: pass group_id=... to the consumer")
        names = {topics} if isinstance(topics, str) else set(topics)
        if bool(names) == (pattern is not None):
            raise ValueError("subscribe() takes topics or a pattern, not both nor neither")
        self._coordinator.subscribe(names, re.compile(pattern) if pattern is not None else None, listener)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group, generation and member id (Kafka's KafkaConsumer.groupMetadata)."""
        group = self._require_group()
        return ConsumerGroupMetadata(
            group.group_id, group.generation, group.member_id, self.config.group_instance_id
        )

    def subscription(self) -> set[str]:
        return set(self._coordinator.subscribed_topics()) if self._coordinator else set()

    async def unsubscribe(self) -> None:
        """Give up every partition (``on_partitions_revoked`` first, while they are still
        assigned) and leave the group (Kafka's onLeavePrepare, then maybeLeaveGroup)."""
        if self._coordinator is not None:
            await self._coordinator.unsubscribe()
        self._subscriptions.assign([])

    # -- committed offsets ------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit the positions of every assigned partition (or the given offsets) for the group,
        and wait until the coordinator has written them (acks=all)."""
        self._require_started()
        coordinator = self._require_group()
        given = None
        if offsets is not None:
            given = {
                _tp(tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
                for tp, om in offsets.items()
            }
        await coordinator.commit(given)

    def commit_async(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> asyncio.Task:
        """``commit`` in the background; the task's result (or exception) says how it went."""
        return asyncio.get_running_loop().create_task(self.commit(offsets))

    async def committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        """The group's committed offset of ``tp`` (None when there is none)."""
        self._require_started()
        return (await self._require_group().fetch_committed([_tp(tp)]))[_tp(tp)]

    def _require_group(self) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise RuntimeError("this consumer has no group_id: committed offsets belong to a group")
        return self._coordinator

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
            group = self._coordinator
            if group is not None:
                if group.subscribed:
                    if not await group.poll(deadline - loop.time()):
                        return []
                else:  # partitions assigned by hand: auto commit still runs (Kafka's poll)
                    group.maybe_auto_commit_offsets_async()
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
            auto_commit_at = group.auto_commit.next_at if group is not None and group.auto_commit else None
            for at in (wake_at, retry_reset_at, auto_commit_at):
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
