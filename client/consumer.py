"""The asyncio consumer with manual assignment (SPEC 6): assign, seek, poll, offsets.

``poll`` returns buffered records first; otherwise it sends one Fetch per leader broker for all
assigned partitions that broker leads (at most one fetch in flight per broker, and a partition
is never in two fetches at once), waits up to ``timeout_ms`` for any of them, decodes the
RecordBatch v2 bytes (CRC-checked when ``check_crcs``), skips records below the position
inside the first batch (a fetch starts at the batch holding the offset), and returns them in
per-partition offset order. After returning records it already sends the next fetches
(pipelining), so the broker's long poll overlaps the caller's processing.

Per-partition errors: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH (everything in ``errors.INVALIDATES_METADATA``) and connection loss refresh
metadata and retry the partition after ``retry_backoff_ms``; OFFSET_OUT_OF_RANGE resets the
position per ``auto_offset_reset`` ("earliest" / "latest" via ListOffsets; "none" raises);
any other non-retriable error, or a corrupt batch, is raised from ``poll``.

Positions are the next offset to return; a partition without one is reset per
``auto_offset_reset`` on the next ``poll`` or ``position``. Consumer groups (subscribe,
commits) are not here: this consumer is assign-only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from client.metadata import Cluster
from client.producer import config_with_overrides
from client.protocol.api import CONSUMER_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
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


@dataclass
class ConsumerConfig:
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1048576
    fetch_max_bytes: int = 52428800
    max_poll_records: int = 500
    auto_offset_reset: str = "latest"  # "earliest" | "latest" | "none"
    client_id: str = "floodmark-consumer"
    request_timeout_ms: int = 30000
    retry_backoff_ms: int = 100
    check_crcs: bool = True
    #: Beyond the brief, with Kafka's meaning.
    metadata_max_age_ms: int = 300000

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {self.auto_offset_reset!r}"
            )
        for name in (
            "max_partition_fetch_bytes",
            "fetch_max_bytes",
            "max_poll_records",
            "request_timeout_ms",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("fetch_min_bytes", "fetch_max_wait_ms", "retry_backoff_ms", "metadata_max_age_ms"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {getattr(self, name)!r}")


@dataclass(eq=False)
class _PartitionState:
    position: int | None = None
    records: list[ConsumerRecord] = field(default_factory=list)
    index: int = 0  # next record of ``records`` to return
    next_fetch_offset: int = 0  # the position once ``records`` is used up
    fetching: bool = False
    backoff_until: float = 0.0
    high_watermark: int = -1
    error: KafkaError | None = None

    @property
    def buffered(self) -> int:
        return len(self.records) - self.index

    def clear(self) -> None:
        self.records = []
        self.index = 0


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


class Consumer:
    """Use ``async with Consumer("h:9092", auto_offset_reset="earliest") as c: c.assign([...])``."""

    def __init__(self, bootstrap_servers, config: ConsumerConfig | None = None, **overrides) -> None:
        self.config = config_with_overrides(config or ConsumerConfig(), overrides, "consumer")
        c = self.config
        self._cluster = Cluster(
            bootstrap_servers,
            c.client_id,
            request_timeout_ms=c.request_timeout_ms,
            metadata_max_age_ms=c.metadata_max_age_ms,
            retry_backoff_ms=c.retry_backoff_ms,
        )
        self._assignment: dict[TopicPartition, _PartitionState] = {}
        self._fetches: dict[int, asyncio.Task] = {}
        self._metadata_task: asyncio.Task | None = None
        self._signal: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rotation = 0
        self._started = False
        self._closed = False

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
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
        tasks = [t for t in (self._metadata_task, *self._fetches.values()) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._cluster.close()

    # -- assignment and positions ---------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions that stay assigned are kept."""
        new: dict[TopicPartition, _PartitionState] = {}
        for item in partitions:
            tp = TopicPartition(*item)
            if not isinstance(tp.topic, str) or not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"not a topic partition: {item!r}")
            new[tp] = self._assignment.get(tp) or _PartitionState()
        self._assignment = new
        self._notify()

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._assignment.get(TopicPartition(*tp))
        if state is None:
            raise ValueError(f"partition {TopicPartition(*tp)} is not assigned to this consumer")
        return state

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
        state = self._state(tp)
        self._set_position(state, offset)

    def _set_position(self, state: _PartitionState, offset: int | None) -> None:
        state.position = offset
        state.clear()
        state.error = None
        state.backoff_until = 0.0
        self._notify()

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._seek_to(tps, EARLIEST_TIMESTAMP)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._seek_to(tps, LATEST_TIMESTAMP)

    async def _seek_to(self, tps: tuple[TopicPartition, ...], timestamp: int) -> None:
        targets = [TopicPartition(*tp) for tp in tps] or list(self._assignment)
        for tp in targets:
            self._state(tp)
        offsets = await self._list_offsets(dict.fromkeys(targets, timestamp))
        for tp, (offset, _) in offsets.items():
            self._set_position(self._state(tp), offset)

    async def position(self, tp: TopicPartition) -> int:
        state = self._state(tp)
        if state.position is None:
            await self._reset_positions([TopicPartition(*tp)])
        return state.position

    def highwater(self, tp: TopicPartition) -> int:
        """The partition's high watermark as of the last fetch (-1 before any)."""
        return self._state(tp).high_watermark

    async def _reset_positions(self, tps: list[TopicPartition], deadline: float | None = None) -> None:
        strategy = self.config.auto_offset_reset
        if strategy == "none":
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"no valid position for {', '.join(map(str, tps))} and auto_offset_reset is 'none'",
            )
        timestamp = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        offsets = await self._list_offsets(dict.fromkeys(tps, timestamp), deadline)
        for tp, (offset, _) in offsets.items():
            state = self._assignment.get(tp)
            if state is not None and state.position is None:
                log.info("resetting %s to %s offset %d", tp, strategy, offset)
                self._set_position(state, offset)

    # -- offsets lookups --------------------------------------------------------------------------
    async def partitions_for_topic(self, topic: str) -> list[int]:
        return list(await self._cluster.wait_for_topic(topic, self.config.request_timeout_ms))

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        result = await self._list_offsets(dict.fromkeys(map(_tp, tps), EARLIEST_TIMESTAMP))
        return {tp: offset for tp, (offset, _) in result.items()}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        result = await self._list_offsets(dict.fromkeys(map(_tp, tps), LATEST_TIMESTAMP))
        return {tp: offset for tp, (offset, _) in result.items()}

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """The earliest (offset, timestamp) whose timestamp is >= the given one; None if none."""
        for tp, ts in times.items():
            if not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be a non-negative integer, got {ts!r}")
        result = await self._list_offsets({_tp(tp): ts for tp, ts in times.items()})
        return {tp: (None if offset < 0 else (offset, ts)) for tp, (offset, ts) in result.items()}

    async def _list_offsets(
        self, timestamps: dict[TopicPartition, int], deadline: float | None = None
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader, retrying retriable errors (refreshing metadata
        first) until ``deadline`` (loop time; default ``request_timeout_ms`` from now; at least
        one attempt is made). Returns {tp: (offset, timestamp)}."""
        self._require_started()
        loop = self._loop
        if deadline is None:
            deadline = loop.time() + self.config.request_timeout_ms / 1000
        backoff = self.config.retry_backoff_ms / 1000
        pending = dict(timestamps)
        result: dict[TopicPartition, tuple[int, int]] = {}
        last_error: KafkaError | None = None
        while pending:
            if self._cluster.stale or any(self._cluster.leader_for(tp) is None for tp in pending):
                try:
                    await self._cluster.refresh(sorted({tp.topic for tp in pending} | self._topics()))
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

    # -- poll -----------------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to ``timeout_ms`` for some."""
        self._require_started()
        loop = self._loop
        max_records = max_records or self.config.max_poll_records
        deadline = loop.time() + max(0, timeout_ms) / 1000
        while True:
            self._raise_partition_errors()
            retry_reset_at = None
            missing = [tp for tp, state in self._assignment.items() if state.position is None]
            if missing:
                try:
                    await self._reset_positions(missing, deadline)
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.warning("consumer could not reset positions: %s", exc)
                    retry_reset_at = loop.time() + self.config.retry_backoff_ms / 1000
            records = self._drain(max_records)
            wake_at = self._send_fetches()
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            for at in (wake_at, retry_reset_at):
                if at is not None:
                    remaining = min(remaining, max(0.0, at - loop.time()))
            await self._wait(remaining)

    def _drain(self, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        items = list(self._assignment.items())
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

    def _raise_partition_errors(self) -> None:
        for _tp, state in self._assignment.items():
            if state.error is not None and not state.buffered:
                error, state.error = state.error, None
                state.backoff_until = self._loop.time() + self.config.retry_backoff_ms / 1000
                raise error

    def _send_fetches(self) -> float | None:
        """Start one fetch per leader broker that has none in flight. Returns when a partition's
        backoff ends (loop time), if one is waiting."""
        now = self._loop.time()
        c = self.config
        wake_at: float | None = None
        need_metadata = self._cluster.needs_refresh()
        by_node: dict[int, list[tuple[TopicPartition, int]]] = {}
        for tp, state in self._assignment.items():
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
                self._assignment[tp].fetching = True
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
            self._fetches[node] = self._loop.create_task(self._fetch(node, dict(parts), body))
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
                state = self._assignment.get(tp)
                if state is not None:
                    state.fetching = False
            if self._fetches.get(node) is asyncio.current_task():
                del self._fetches[node]
            self._notify()

    def _current(self, tp: TopicPartition, offset: int) -> _PartitionState | None:
        """The partition's state if a fetch result at ``offset`` still applies to it (it is still
        assigned, was not seeked meanwhile, and has nothing buffered)."""
        state = self._assignment.get(tp)
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
            state.backoff_until = self._loop.time() + self.config.retry_backoff_ms / 1000
            return
        state.error = KafkaError(code, text)

    def _refresh_metadata_soon(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = self._loop.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            await self._cluster.maybe_refresh(sorted(self._topics()))
        except KafkaError as exc:
            log.warning("consumer metadata refresh failed: %s", exc)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._notify()

    def _topics(self) -> set[str]:
        return {tp.topic for tp in self._assignment}

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
