"""Committed offsets at the coordinator (Kafka's GroupCoordinator.handleCommitOffsets and
handleFetchOffsets, and GroupMetadataManager's offset expiration, KIP-211; seed 004;
docs/design.md "Consumer groups").

An OffsetCommit from a member of the current generation (or from a consumer that assigns its
partitions itself: generation -1 on an Empty group) is written to ``__consumer_offsets`` with
acks=all; the offsets become visible to OffsetFetch only once the write is acknowledged, so a
coordinator failover never loses an offset the member was told is committed. Stale members are
fenced exactly as Kafka fences them: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, and
REBALANCE_IN_PROGRESS while the group is between JoinGroup and SyncGroup.

Window: two commits of one partition in flight at once whose writes complete out of order. Each
offset remembers where its record lies in the log and the later record wins
(:meth:`~broker.coordinator.group_metadata.GroupMetadata.load_offset`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState
from client.protocol.errors import ErrorCode
from client.types import TopicPartition

#: OffsetFetch's answer for a partition with no committed offset (Kafka's INVALID_OFFSET).
NO_OFFSET = -1

Errors = dict[TopicPartition, int]


def commit_error(group: GroupMetadata, body: dict) -> int | None:
    """Kafka's doCommitOffsets checks; None when the commit may be written."""
    member_id, generation = body["member_id"], body["generation_id"]
    if group.is_(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if group.is_static_member_fenced(member_id, body["group_instance_id"]):
        return ErrorCode.FENCED_INSTANCE_ID
    if generation < 0 and group.is_(GroupState.EMPTY):
        return None  # the consumer assigns its own partitions: no group membership to check
    if not group.has(member_id):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    if group.is_(GroupState.COMPLETING_REBALANCE):
        return ErrorCode.REBALANCE_IN_PROGRESS  # a member of the new generation, before its SyncGroup
    return None


def handle_offset_commit(
    coordinator: GroupCoordinator,
    body: dict,
    offsets: dict[TopicPartition, dict],
    respond: Callable[[Errors], None],
) -> None:
    """``offsets``: partition -> its request entry (committed_offset, committed_leader_epoch,
    committed_metadata), already checked against the topics that exist."""
    group_id = body["group_id"]
    error = coordinator.group_error(group_id, allow_empty=True)
    group = coordinator.manager.groups.get(group_id)
    if error is None and group is None:
        if body["generation_id"] >= 0:  # a member of a generation this coordinator never saw
            error = ErrorCode.ILLEGAL_GENERATION
        else:
            group = GroupMetadata(group_id, state_timestamp_ms=coordinator.time_ms())
            coordinator.manager.groups[group_id] = group
    if error is None and group is not None:
        error = commit_error(group, body)
    if error is not None or group is None:
        respond({tp: int(error or ErrorCode.UNKNOWN_SERVER_ERROR) for tp in offsets})
        return
    if group.has(body["member_id"]):
        coordinator.schedule_heartbeat(group, group.members[body["member_id"]])
    _store(coordinator, group, body, offsets, respond)


def _store(
    coordinator: GroupCoordinator,
    group: GroupMetadata,
    body: dict,
    entries: dict[TopicPartition, dict],
    respond: Callable[[Errors], None],
) -> None:
    now = coordinator.time_ms()
    retention = body["retention_time_ms"]
    errors: Errors = {}
    valid: dict[TopicPartition, CommittedOffset] = {}
    for tp, entry in entries.items():
        metadata = entry["committed_metadata"] or ""
        if len(metadata) > coordinator.config.max_metadata_size:
            errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            continue
        valid[tp] = CommittedOffset(
            offset=entry["committed_offset"],
            leader_epoch=entry["committed_leader_epoch"],
            metadata=metadata,
            commit_timestamp_ms=now,
            expire_timestamp_ms=now + retention if retention >= 0 else None,
        )
    if not valid:
        respond(errors)
        return
    group.prepare_offset_commit(valid)

    def written(code: int, base_offset: int) -> None:
        placed = {tp: _at(committed, base_offset + i) for i, (tp, committed) in enumerate(valid.items())}
        group.complete_offset_commit(valid, placed, code == ErrorCode.NONE)
        respond({**errors, **{tp: int(code) for tp in valid}})

    coordinator.manager.store_offsets(group, valid, written)


def _at(committed: CommittedOffset, record_offset: int) -> CommittedOffset:
    return CommittedOffset(
        committed.offset,
        committed.leader_epoch,
        committed.metadata,
        committed.commit_timestamp_ms,
        committed.expire_timestamp_ms,
        record_offset,
    )


def handle_offset_fetch(
    coordinator: GroupCoordinator, group_id: str, partitions: list[TopicPartition] | None
) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
    """(error, offsets): ``partitions`` None asks for every committed offset of the group; a
    partition with nothing committed maps to None (answered as offset -1)."""
    error = coordinator.group_error(group_id, allow_empty=True)
    if error is not None:
        return error, {}
    group = coordinator.manager.groups.get(group_id)
    if group is None or group.is_(GroupState.DEAD):
        return ErrorCode.NONE, dict.fromkeys(partitions or [])
    if partitions is None:
        return ErrorCode.NONE, dict(group.offsets)
    return ErrorCode.NONE, {tp: group.offsets.get(tp) for tp in partitions}


def expire_offsets(coordinator: GroupCoordinator) -> int:
    """KIP-211: the offsets of a group that has been Empty for ``offsets.retention.minutes`` (or
    past an explicit retention of their commit) are deleted, and a group with nothing left goes
    too. Returns how many offsets were expired."""
    now = coordinator.time_ms()
    retention = coordinator.config.offsets_retention_ms
    expired = 0
    for group in list(coordinator.manager.groups.values()):
        if not coordinator.manager.is_local(group.group_id) or coordinator.manager.is_loading(group.group_id):
            continue
        if not group.is_(GroupState.EMPTY) or group.pending_offset_commits:
            continue
        gone = [
            tp
            for tp, c in group.offsets.items()
            if (c.expire_timestamp_ms is not None and c.expire_timestamp_ms <= now)
            or (
                c.expire_timestamp_ms is None
                and max(group.state_timestamp_ms, c.commit_timestamp_ms) + retention <= now
            )
        ]
        if gone:
            for tp in gone:
                del group.offsets[tp]
            coordinator.manager.delete_offsets(group, gone, lambda _code: None)
            expired += len(gone)
        if not group.offsets and not group.members:
            group.transition_to(GroupState.DEAD, now)
            del coordinator.manager.groups[group.group_id]
            coordinator.manager.delete_group(group, lambda _code: None)
    return expired


def handle_deleted_partitions(coordinator: GroupCoordinator, partitions: Iterable[TopicPartition]) -> int:
    """Kafka's GroupCoordinator.handleDeletedPartitions (cleanupGroupMetadata with removeOffsets):
    a deleted topic's committed offsets leave every group this broker coordinates, with
    tombstones in ``__consumer_offsets`` so a later load does not bring them back; an Empty group
    left with nothing is deleted. A topic re-created under the name then starts from
    ``auto.offset.reset``, not from the deleted topic's offsets. Groups of partitions still
    loading are not reached (as in Kafka). Returns how many offsets were removed."""
    wanted = set(partitions)
    now = coordinator.time_ms()
    removed = 0
    for group in list(coordinator.manager.groups.values()):
        if not coordinator.manager.is_local(group.group_id) or coordinator.manager.is_loading(group.group_id):
            continue
        gone = group.remove_offsets(
            tp for tp in list(group.offsets) + list(group.pending_offset_commits) if tp in wanted
        )
        if gone:
            coordinator.manager.delete_offsets(group, gone, lambda _code: None)
            removed += len(gone)
        if group.is_(GroupState.EMPTY) and not group.has_offsets() and not group.members:
            group.transition_to(GroupState.DEAD, now)
            del coordinator.manager.groups[group.group_id]
            coordinator.manager.delete_group(group, lambda _code: None)
    return removed
