"""The offsets topic as the coordinator uses it (Kafka's GroupMetadataManager; seed 004;
docs/design.md "Consumer groups").

A group lives in partition ``abs(String.hashCode(group.id)) % offsets.topic.num.partitions`` of
``__consumer_offsets`` (Java's hash, so a group lands where Kafka would put it), and the broker
leading that partition is its coordinator. This module owns the groups of the partitions this
broker leads:

* **writes**: a group's metadata after each SyncGroup (and when it empties) and every offset
  commit go to the partition as records (:mod:`broker.coordinator.group_records`) with acks=all
  and ``offsets.commit.timeout.ms``; the caller hears the outcome by callback, with the
  replication errors mapped as Kafka maps them (NOT_COORDINATOR when leadership moved,
  COORDINATOR_NOT_AVAILABLE when the ISR is short; a timed-out group write is
  REBALANCE_IN_PROGRESS, a timed-out commit REQUEST_TIMED_OUT);
* **loading** (``onElection``): when this broker becomes the partition's leader, its log is read
  from its log start offset in chunks, off nobody's critical path, the last record per key
  winning; until then the partition's groups answer COORDINATOR_LOAD_IN_PROGRESS. The read moves
  batch by batch to each batch's next offset (Kafka's ``currOffset = batch.nextOffset``): the
  cleaner keeps the last batch of a cleaned segment even when it removed all its records (an
  empty batch) and keeps every batch's last offset when it removes its last records, so a read
  that moved by records would stand still on such a batch. A load that fails is retried with a
  bounded backoff while it is the partition's latest load, and never publishes an empty
  coordinator (docs/design.md "Consumer groups");
* **unloading** (``onResignation``): when leadership moves away, its groups are dropped here and
  answer NOT_COORDINATOR, and the new leader loads them.

Window: a partition resigned (or re-elected, even at the same epoch) while its load was
reading, or while it waited to retry. Each load holds a token of its own; after each wait and
before publishing its groups it checks it is still the partition's latest load (no resignation,
no election since) and stops, throwing its groups away, when not
(tests/unit/test_group_metadata_manager.py and tests/unit/test_group_load_compacted.py force it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.coordinator.coordinator_config import GroupConfig
from broker.coordinator.group_metadata import CommittedOffset, GroupMetadata
from broker.coordinator.group_records import (
    GroupKey,
    OffsetKey,
    OffsetsRecordError,
    group_from_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
    read_group_value,
    read_key,
    read_offset_value,
)
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.records import build_batch, decode_batches
from client.types import TopicPartition

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"
#: Bytes read from the log per step of a load (Kafka's offsets.load.buffer.size).
LOAD_CHUNK_BYTES = 5 * 1024 * 1024
#: The backoff between two attempts of a failed load, doubling up to the max (the defaults of
#: Kafka's retry.backoff.ms and retry.backoff.max.ms, KIP-580).
LOAD_RETRY_BACKOFF_MS = 100
LOAD_RETRY_BACKOFF_MAX_MS = 1000

#: (error code, base offset) per partition written, as the replica manager reports it.
AppendCallback = Callable[[int, int], None]
#: Appends one batch to a partition with acks=all and a timeout, then calls back.
Append = Callable[[TopicPartition, bytes, int, AppendCallback], None]
#: Reads whole batches from ``offset`` (b"" at the end), or raises when the log is gone.
ReadLog = Callable[[TopicPartition, int, int], bytes]
#: The partition's log start offset (Kafka's ``log.logStartOffset``), or raises when the log is gone.
LogStartOffset = Callable[[TopicPartition], int]
#: Waits the given seconds (asyncio.sleep; a test steps it itself).
Sleep = Callable[[float], Awaitable[None]]


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")  # a lone surrogate is one code unit, as in Java
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's GroupMetadataManager.partitionFor, with Utils.abs (MIN_VALUE maps to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def map_store_error(code: int, offsets: bool) -> int:
    """Kafka's mapping of a failed offsets-topic write to what the member hears (storeOffsets'
    and storeGroup's; REQUEST_TIMED_OUT passes through, :meth:`GroupMetadataManager.store_group`
    maps it itself)."""
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    return code


@dataclass
class LoadedPartition:
    groups: dict[str, GroupMetadata]
    removed_groups: set[str]


class GroupMetadataManager:
    def __init__(
        self,
        config: GroupConfig,
        append: Append,
        read_log: ReadLog,
        time_ms: Callable[[], int],
        *,
        log_start_offset: LogStartOffset,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self._append = append
        self._read_log = read_log
        self._log_start_offset = log_start_offset
        self._sleep = sleep
        self.time_ms = time_ms
        self.groups: dict[str, GroupMetadata] = {}
        #: partitions led here, with the leader epoch of the election that made it so
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()
        #: the token of each partition's latest load: an unload or a newer load replaces it
        self._loads: dict[int, object] = {}

    # -- ownership -------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def topic_partition_for(self, group_id: str) -> TopicPartition:
        return TopicPartition(GROUP_METADATA_TOPIC, self.partition_for(group_id))

    def is_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def is_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    def groups_of(self, partition: int) -> list[GroupMetadata]:
        return [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]

    # -- loading and unloading -------------------------------------------------------------------

    async def load(
        self, partition: int, epoch: int, on_loaded: Callable[[list[GroupMetadata]], None]
    ) -> None:
        """Become the partition's coordinator (Kafka's loadGroupsForPartition): read its log,
        then publish its groups unless the partition resigned or was re-elected meanwhile. A
        read that fails is retried (:meth:`_load_until_read`); until one succeeds the groups
        answer COORDINATOR_LOAD_IN_PROGRESS, never as an empty coordinator."""
        if self.owned.get(partition, -1) > epoch:
            return
        self.owned[partition] = epoch
        self.loading.add(partition)
        token = self._loads[partition] = object()
        tp = TopicPartition(GROUP_METADATA_TOPIC, partition)
        loaded = await self._load_until_read(tp, lambda: self._loads.get(partition) is token)
        if loaded is None or self._loads.get(partition) is not token:
            log.info("%s changed leadership while its groups loaded: the load is discarded", tp)
            return
        del self._loads[partition]
        self.loading.discard(partition)
        for group_id in loaded.removed_groups:
            self.groups.pop(group_id, None)
        for group in loaded.groups.values():
            self.groups[group.group_id] = group
        log.info("loaded %d groups of %s at epoch %d", len(loaded.groups), tp, epoch)
        on_loaded(list(loaded.groups.values()))

    async def _load_until_read(
        self, tp: TopicPartition, latest: Callable[[], bool]
    ) -> LoadedPartition | None:
        """Read the partition, again after a failure, with a backoff doubling from
        LOAD_RETRY_BACKOFF_MS to LOAD_RETRY_BACKOFF_MAX_MS, for as long as this is the
        partition's latest load (a resignation or a newer election ends it: None). Kafka's
        loadGroupsAndOffsets would log the error and serve the partition with no groups (every
        committed offset lost to its members); 3.7's CoordinatorRuntime (KIP-848) marks it FAILED
        and answers NOT_COORDINATOR until the next election. A retry instead recovers from what
        fails a load here (the log start moving under the read, a log not hosted yet or any
        more, which a LeaderAndIsr or StopReplica then settles) without an election."""
        backoff_ms = LOAD_RETRY_BACKOFF_MS
        attempt = 1
        while True:
            try:
                return await self._read_partition(tp)
            except Exception as exc:  # noqa: BLE001 - any failure: retry, never publish a partial load
                if not latest():
                    return None
                log.error(
                    "loading groups of %s failed (attempt %d): %r; its groups answer "
                    "COORDINATOR_LOAD_IN_PROGRESS, retrying in %d ms",
                    tp,
                    attempt,
                    exc,
                    backoff_ms,
                )
            await self._sleep(backoff_ms / 1000)
            if not latest():
                return None
            backoff_ms = min(backoff_ms * 2, LOAD_RETRY_BACKOFF_MAX_MS)
            attempt += 1

    async def _read_partition(self, tp: TopicPartition) -> LoadedPartition:
        """Kafka's doLoadGroupsAndOffsets: from the log start offset to the end, batch by batch,
        the position moving to each batch's next offset (the cleaner's empty batches and
        batches whose last records it removed included)."""
        offsets: dict[str, dict[TopicPartition, CommittedOffset | None]] = {}
        values: dict[str, bytes | None] = {}
        position = self._log_start_offset(tp)
        while True:
            data = self._read_log(tp, position, LOAD_CHUNK_BYTES)
            if not data:
                break
            start = position
            for header, records in decode_batches(data):
                for record in records:
                    self._apply_record(record.key, record.value, record.offset, offsets, values)
                position = max(position, header.next_offset)
            if position == start:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE, f"the read of {tp} at offset {start} ends at or below it"
                )
            await asyncio.sleep(0)  # let the loop serve everyone else between chunks
        now = self.time_ms()
        groups: dict[str, GroupMetadata] = {}
        removed: set[str] = set()
        for group_id in dict.fromkeys([*values, *offsets]):  # log order, never str-hash order
            value = values.get(group_id)
            group = (
                group_from_value(group_id, read_group_value(value), now) if value else GroupMetadata(group_id)
            )
            for key, committed in offsets.get(group_id, {}).items():
                if committed is not None:
                    group.load_offset(key, committed)
            if group.members or group.offsets or value is not None:
                groups[group_id] = group
            else:
                removed.add(group_id)
        return LoadedPartition(groups, removed)

    @staticmethod
    def _apply_record(
        key: bytes | None,
        value: bytes | None,
        record_offset: int,
        offsets: dict[str, dict[TopicPartition, CommittedOffset | None]],
        values: dict[str, bytes | None],
    ) -> None:
        if key is None:
            return
        try:
            parsed = read_key(key)
            if isinstance(parsed, OffsetKey):
                committed = None if value is None else read_offset_value(value, record_offset)
                offsets.setdefault(parsed.group_id, {})[parsed.tp] = committed
            elif isinstance(parsed, GroupKey):
                values[parsed.group_id] = value
        except OffsetsRecordError as exc:
            log.error("skipping a record of %s at offset %d: %s", GROUP_METADATA_TOPIC, record_offset, exc)

    def unload(self, partition: int, epoch: int) -> list[GroupMetadata]:
        """Stop coordinating the partition's groups (Kafka's removeGroupsForPartition): returns
        them so the coordinator can answer their waiting members NOT_COORDINATOR."""
        if self.owned.get(partition, -1) > epoch >= 0:
            return []  # a resignation older than the election we act on
        self.owned.pop(partition, None)
        self.loading.discard(partition)
        self._loads.pop(partition, None)
        gone = self.groups_of(partition)
        for group in gone:
            del self.groups[group.group_id]
        return gone

    # -- writes ----------------------------------------------------------------------------------

    def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]], done: AppendCallback) -> None:
        now = self.time_ms()
        batch = build_batch((key, value, now, []) for key, value in records)
        self._append(self.topic_partition_for(group_id), batch, self.config.offsets_commit_timeout_ms, done)

    def store_group(
        self, group: GroupMetadata, assignment: dict[str, bytes], done: Callable[[int], None]
    ) -> None:
        """Write the group's metadata with its members' assignments (Kafka's storeGroup: a write
        that timed out sends the members back to JoinGroup, REBALANCE_IN_PROGRESS)."""
        record = (group_key(group.group_id), group_value(group, assignment))

        def written(code: int, _offset: int) -> None:
            timed_out = code == ErrorCode.REQUEST_TIMED_OUT
            done(ErrorCode.REBALANCE_IN_PROGRESS if timed_out else map_store_error(code, False))

        self._write(group.group_id, [record], written)

    def store_offsets(
        self,
        group: GroupMetadata,
        offsets: dict[TopicPartition, CommittedOffset],
        done: Callable[[int, int], None],
    ) -> None:
        """Write committed offsets (Kafka's storeOffsets); ``done(error, base_offset)``."""
        records = [(offset_key(group.group_id, tp), offset_value(c)) for tp, c in offsets.items()]
        self._write(group.group_id, records, lambda code, base: done(map_store_error(code, True), base))

    def delete_group(self, group: GroupMetadata, done: Callable[[int], None]) -> None:
        """Tombstones for the group and every offset it committed (Kafka's deleteGroups)."""
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group.group_id, tp), None) for tp in group.offsets
        ]
        records.append((group_key(group.group_id), None))
        self._write(group.group_id, records, lambda code, _offset: done(map_store_error(code, False)))

    def delete_offsets(
        self, group: GroupMetadata, tps: list[TopicPartition], done: Callable[[int], None]
    ) -> None:
        records: list[tuple[bytes, bytes | None]] = [(offset_key(group.group_id, tp), None) for tp in tps]
        self._write(group.group_id, records, lambda code, _offset: done(map_store_error(code, False)))
