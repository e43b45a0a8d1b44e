"""Fetching records for the consumer (Kafka's Fetcher, aiokafka's ``consumer/fetcher.py``).

:class:`Fetcher` sends one Fetch per leader broker for all assigned partitions that broker
leads (at most one fetch in flight per broker, and a partition is never in two fetches at once),
decodes the RecordBatch v2 bytes (CRC-checked when ``check_crcs``), skips records below the
position inside the first batch (a fetch starts at the batch holding the offset), and buffers
them in each partition's state; :meth:`Fetcher.fetched_records` hands them out in per-partition
offset order, rotating over partitions.

Per-partition errors: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH
(KIP-320), UNKNOWN_LEADER_EPOCH (everything in ``errors.INVALIDATES_METADATA``) and connection
loss refresh metadata and retry the partition after ``retry_backoff_ms``; OFFSET_OUT_OF_RANGE
clears the position so ``poll`` resets it per ``auto_offset_reset`` ("none" raises); any other
non-retriable error, or a corrupt batch, is kept and raised from ``poll`` once the records before
it are consumed. See docs/guarantees.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from client.consumer.config import ConsumerConfig
from client.consumer.subscription_state import SubscriptionState, TopicPartitionState
from client.metadata import Cluster
from client.protocol.api import CONSUMER_REPLICA_ID, ApiKey
from client.protocol.errors import INVALIDATES_METADATA, RETRIABLE, ErrorCode, KafkaError
from client.protocol.records import (
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    CorruptRecordError,
    decode_batch,
    iter_batches,
    parse_header,
)
from client.types import ConsumerRecord, TopicPartition

log = logging.getLogger(__name__)

#: Errors that mean "ask metadata again, then retry this partition".
_REFRESH = INVALIDATES_METADATA | {ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION}


def whole_batches_end(buf: bytes | memoryview) -> int:
    """Length of the prefix of ``buf`` made of whole batches (a fetch may end mid-batch)."""
    pos = 0
    n = len(buf)
    while n - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > n:
            break
        pos += header.size
    return pos


class Fetcher:
    """The fetches of one consumer. ``notify`` wakes a waiting ``poll`` when a fetch ends or
    metadata was refreshed; ``loop`` is set when the consumer starts."""

    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        notify: Callable[[], None],
    ) -> None:
        self.config = config
        self._cluster = cluster
        self._subscriptions = subscriptions
        self._notify = notify
        self._fetches: dict[int, asyncio.Task] = {}
        self._metadata_task: asyncio.Task | None = None
        self._rotation = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    def tasks(self) -> list[asyncio.Task]:
        """The fetches and the metadata refresh in flight, for the consumer to cancel at close."""
        return [t for t in (self._metadata_task, *self._fetches.values()) if t is not None]

    def fetched_records(self, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        items = list(self._subscriptions.assignment.items())
        if not items:
            return out
        self._rotation = (self._rotation + 1) % len(items)
        for _tp, state in items[self._rotation :] + items[: self._rotation]:
            if state.index >= len(state.records) or len(out) >= max_records:
                continue
            take = min(len(state.records) - state.index, max_records - len(out))
            chunk = state.records[state.index : state.index + take]
            out.extend(chunk)
            state.index += take
            if state.index >= len(state.records):
                state.clear()
                state.position = max(chunk[-1].offset + 1, state.next_fetch_offset)
            else:
                state.position = chunk[-1].offset + 1
        return out

    def raise_partition_errors(self) -> None:
        for _tp, state in self._subscriptions.assignment.items():
            if state.error is not None and not state.buffered:
                error, state.error = state.error, None
                state.backoff_until = self.loop.time() + self.config.retry_backoff_ms / 1000
                raise error

    def send_fetches(self) -> float | None:
        """Start one fetch per leader broker that has none in flight. Returns when a partition's
        backoff ends (loop time), if one is waiting."""
        now = self.loop.time()
        c = self.config
        wake_at: float | None = None
        need_metadata = self._cluster.needs_refresh()
        by_node: dict[int, list[tuple[TopicPartition, int]]] = {}
        for tp, state in self._subscriptions.assignment.items():
            if state.position is None or state.fetching or state.buffered or state.error is not None:
                continue
            if state.backoff_until > now:
                wake_at = state.backoff_until if wake_at is None else min(wake_at, state.backoff_until)
                continue
            leader = self._cluster.leader_for(tp)
            if leader is None:
                self._cluster.invalidate()
                need_metadata = True
                continue
            if leader in self._fetches:
                continue
            by_node.setdefault(leader, []).append((tp, state.position))
        if need_metadata:
            self._refresh_metadata_soon()
        for node, parts in by_node.items():
            topics: dict[str, list[dict]] = {}
            for tp, offset in parts:
                self._subscriptions.assignment[tp].fetching = True
                topics.setdefault(tp.topic, []).append(
                    {
                        "partition": tp.partition,
                        "fetch_offset": offset,
                        "current_leader_epoch": self._cluster.leader_epoch_for(tp),
                        "log_start_offset": -1,
                        "partition_max_bytes": c.max_partition_fetch_bytes,
                    }
                )
            body = {
                "replica_id": CONSUMER_REPLICA_ID,
                "max_wait_ms": c.fetch_max_wait_ms,
                "min_bytes": c.fetch_min_bytes,
                "max_bytes": c.fetch_max_bytes,
                "isolation_level": 0,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            }
            self._fetches[node] = self.loop.create_task(self._fetch(node, dict(parts), body))
        return wake_at

    async def _fetch(self, node: int, offsets: dict[TopicPartition, int], body: dict) -> None:
        try:
            try:
                conn = await self._cluster.connection(node)
                response = await conn.request(
                    ApiKey.FETCH,
                    body,
                    timeout=(self.config.request_timeout_ms + self.config.fetch_max_wait_ms) / 1000,
                )
            except KafkaError as exc:
                if exc.code == ErrorCode.REQUEST_TIMED_OUT:
                    self._cluster.drop_connection(node)
                for tp, offset in offsets.items():
                    self._partition_error(tp, offset, node, exc.code, exc.message)
                return
            top = response.get("error_code") or 0
            seen = set()
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["topic"], p["partition"])
                    if tp not in offsets:
                        continue
                    seen.add(tp)
                    code = top or p["error_code"]
                    if code == ErrorCode.NONE:
                        self._accept(tp, offsets[tp], node, p)
                    else:
                        self._partition_error(tp, offsets[tp], node, code, None)
        finally:
            for tp in offsets:
                state = self._subscriptions.assignment.get(tp)
                if state is not None:
                    state.fetching = False
            if self._fetches.get(node) is asyncio.current_task():
                del self._fetches[node]
            self._notify()

    def _current(self, tp: TopicPartition, offset: int) -> TopicPartitionState | None:
        """The partition's state if a fetch result at ``offset`` still applies to it (it is still
        assigned, was not seeked meanwhile, and has nothing buffered)."""
        state = self._subscriptions.assignment.get(tp)
        if state is None or state.position != offset or state.buffered:
            return None
        return state

    def _accept(self, tp: TopicPartition, offset: int, node: int, p: dict) -> None:
        state = self._current(tp, offset)
        if state is None:
            return
        state.high_watermark = p["high_watermark"]
        data = p["records"]
        if not data:
            return
        view = memoryview(data)
        end = whole_batches_end(view)
        if end == 0:
            state.error = KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"fetch of {tp} at offset {offset} from broker {node} returned part of a batch larger than "
                f"max_partition_fetch_bytes={self.config.max_partition_fetch_bytes}",
            )
            return
        topic, partition = tp
        records: list[ConsumerRecord] = []
        next_offset = offset
        try:
            for pos, header in iter_batches(view[:end], check_crc=self.config.check_crcs):
                if header.next_offset <= offset:
                    continue
                next_offset = max(next_offset, header.next_offset)
                if header.attributes & CONTROL_MASK:
                    continue
                epoch = header.partition_leader_epoch
                for r in decode_batch(view[pos : pos + header.size]):
                    if r.offset >= offset:
                        records.append(
                            ConsumerRecord(
                                topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers, epoch
                            )
                        )
        except CorruptRecordError as exc:
            # Keep what came before the corrupt batch; raise once those are consumed.
            state.error = KafkaError(exc.code, f"fetch of {tp} from broker {node}: {exc.message}")
            if records:
                next_offset = records[-1].offset + 1
            else:
                return
        state.records = records
        state.index = 0
        state.next_fetch_offset = next_offset
        if not records:
            state.position = next_offset  # only control records or records below the position

    def _partition_error(
        self, tp: TopicPartition, offset: int, node: int, code: int, message: str | None
    ) -> None:
        state = self._current(tp, offset)
        if state is None:
            return
        text = f"fetch of {tp} at offset {offset} from broker {node} failed" + (
            f": {message}" if message else ""
        )
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.config.auto_offset_reset == "none":
                state.error = KafkaError(code, text + " and auto_offset_reset is 'none'")
            else:
                log.info("%s: offset out of range, resetting (%s)", tp, self.config.auto_offset_reset)
                state.position = None  # poll resets it
            return
        if code in _REFRESH or code in RETRIABLE:
            if code in _REFRESH:
                self._cluster.invalidate()
            log.debug("consumer retrying after %s", KafkaError(code, text))
            state.backoff_until = self.loop.time() + self.config.retry_backoff_ms / 1000
            return
        state.error = KafkaError(code, text)

    def _refresh_metadata_soon(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = self.loop.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            await self._cluster.maybe_refresh(sorted(self._subscriptions.topics()))
        except KafkaError as exc:
            log.warning("consumer metadata refresh failed: %s", exc)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._notify()
