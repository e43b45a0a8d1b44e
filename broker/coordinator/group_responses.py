"""The shapes the group coordinator answers with and the hooks it is driven through (Kafka's
JoinGroupResult and SyncGroupResult, and the timer of its purgatories; docs/design.md "Consumer
groups")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from broker.coordinator.group_metadata import GroupMetadata

UNKNOWN_MEMBER_ID = ""
#: How long a new member's JoinGroup may wait in a rebalance before it is dropped (Kafka's
#: GroupCoordinator.NewMemberJoinTimeoutMs): a client that gave up will come back.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

Respond = Callable[[dict], None]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


def join_error(member_id: str, code: int) -> dict:
    return {
        "error_code": int(code),
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "member_id": member_id,
        "members": [],
    }


def join_answer(group: GroupMetadata, member_id: str) -> dict:
    """A successful JoinGroup answer: the leader gets every member's metadata, followers none."""
    return {
        "error_code": 0,
        "generation_id": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader_id or "",
        "member_id": member_id,
        "members": group.current_member_metadata() if group.is_leader(member_id) else [],
    }


def sync_answer(code: int, group: GroupMetadata | None = None, assignment: bytes = b"") -> dict:
    return {
        "error_code": int(code),
        "protocol_type": group.protocol_type if group else None,
        "protocol_name": group.protocol_name if group else None,
        "assignment": assignment,
    }
