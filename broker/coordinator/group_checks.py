"""Who may talk to a group, as Kafka's GroupCoordinator decides it before acting (its
doSyncGroup and handleHeartbeat checks, in Kafka's order; seed 004; docs/design.md "Consumer
groups").

Pure functions of a group and a request body returning the error to answer, or None when the
request may proceed. The order matters and is Kafka's: a Dead group first (it moved away while
the request was on its way: COORDINATOR_NOT_AVAILABLE), then a fenced static instance (KIP-345:
FENCED_INSTANCE_ID), then membership (UNKNOWN_MEMBER_ID), then the generation
(ILLEGAL_GENERATION), and only then the group's state.
"""

from __future__ import annotations

from broker.coordinator.group_metadata import GroupMetadata, GroupState
from client.protocol.errors import ErrorCode


def member_error(group: GroupMetadata, body: dict) -> int | None:
    """The checks SyncGroup and Heartbeat share: Dead, fenced, unknown member, stale generation."""
    member_id = body["member_id"]
    if group.is_(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if group.is_static_member_fenced(member_id, body["group_instance_id"]):
        return ErrorCode.FENCED_INSTANCE_ID
    if not group.has(member_id):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if body["generation_id"] != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    return None


def sync_error(group: GroupMetadata, body: dict) -> int | None:
    """Kafka's doSyncGroup checks. A SyncGroup naming a protocol type or name other than the
    group's is INCONSISTENT_GROUP_PROTOCOL (KIP-559, Kafka 2.5)."""
    error = member_error(group, body)
    if error is not None:
        return error
    if body.get("protocol_type") is not None and body["protocol_type"] != group.protocol_type:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if body.get("protocol_name") is not None and body["protocol_name"] != group.protocol_name:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if group.is_(GroupState.EMPTY):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.is_(GroupState.PREPARING_REBALANCE):
        return ErrorCode.REBALANCE_IN_PROGRESS
    return None


def heartbeat_error(group: GroupMetadata | None, body: dict) -> int | None:
    """Kafka's handleHeartbeat checks (REBALANCE_IN_PROGRESS during PreparingRebalance is
    answered after the heartbeat counts, so it is not here)."""
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    error = member_error(group, body)
    if error is None and group.is_(GroupState.EMPTY):
        return ErrorCode.UNKNOWN_MEMBER_ID
    return error
