"""The coordinator's answers to the group tools (Kafka's GroupCoordinator.handleListGroups,
handleDescribeGroup and handleDeleteGroups; docs/design.md "Consumer groups").

ListGroups names the groups this broker coordinates (the tools ask every broker), DescribeGroups
gives a group's state, protocol and members (with their subscriptions and assignments once the
group is Stable, as Kafka does), and DeleteGroups removes an Empty group: its tombstones are
written with acks=all before the answer, and a group whose write failed is put back, so a
"deleted" group never reappears after a coordinator failover and a failed delete loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.group_metadata import GroupMetadata, GroupState
from client.protocol.errors import ErrorCode


def list_groups(coordinator: GroupCoordinator, states: list[str]) -> tuple[int, list[dict]]:
    manager = coordinator.manager
    if not coordinator.active:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if manager.loading else ErrorCode.NONE
    wanted = {s.lower() for s in states}
    groups = [
        {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value}
        for g in manager.groups.values()
        if manager.is_local(g.group_id) and not manager.is_loading(g.group_id)
        and (not wanted or g.state.value.lower() in wanted)
    ]  # fmt: skip
    return error, sorted(groups, key=lambda g: g["group_id"])


def describe_group(coordinator: GroupCoordinator, group_id: str) -> dict:
    error = coordinator.group_error(group_id, allow_empty=True)
    group = coordinator.manager.groups.get(group_id)
    if error is not None or group is None:
        return {  # Kafka: an error describes no state at all, an unknown group a Dead one
            "error_code": int(error or ErrorCode.NONE),
            "group_id": group_id,
            "group_state": "" if error is not None else GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    stable = group.is_(GroupState.STABLE) and group.protocol_name is not None
    return {
        "error_code": ErrorCode.NONE,
        "group_id": group_id,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": group.protocol_name or "" if stable else "",
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in group.summary_members()
        ],
    }


def delete_groups(
    coordinator: GroupCoordinator, group_ids: list[str], respond: Callable[[dict[str, int]], None]
) -> None:
    """Answers once every eligible group's tombstones are written (or failed). A name given twice
    is deleted once (Kafka's ``groupIds.distinct``)."""
    results: dict[str, int] = {}
    waiting: list[GroupMetadata] = []
    for group_id in dict.fromkeys(group_ids):
        error = coordinator.group_error(group_id, allow_empty=True)
        group = coordinator.manager.groups.get(group_id)
        if error is None and (group is None or group.is_(GroupState.DEAD)):
            error = ErrorCode.GROUP_ID_NOT_FOUND
        elif error is None and group is not None and not group.is_(GroupState.EMPTY):
            error = ErrorCode.NON_EMPTY_GROUP
        if error is not None or group is None:
            results[group_id] = int(error or ErrorCode.GROUP_ID_NOT_FOUND)
        else:
            waiting.append(group)
    if not waiting:
        respond(results)
        return
    left = [len(waiting)]
    for group in waiting:
        group.transition_to(GroupState.DEAD, coordinator.time_ms())
        del coordinator.manager.groups[group.group_id]

        def written(code: int, group: GroupMetadata = group) -> None:
            results[group.group_id] = int(code)
            if code != ErrorCode.NONE:
                _restore(coordinator, group)
            left[0] -= 1
            if left[0] == 0:
                respond(results)

        coordinator.manager.delete_group(group, written)


def _restore(coordinator: GroupCoordinator, dead: GroupMetadata) -> None:
    """The tombstones did not land: the group and its offsets are still in the log, so they stay
    in memory too (a fresh Empty object, Dead being final), unless a new group took the id."""
    manager = coordinator.manager
    if dead.group_id in manager.groups or not manager.is_local(dead.group_id):
        return
    group = GroupMetadata(
        dead.group_id,
        state_timestamp_ms=coordinator.time_ms(),
        generation_id=dead.generation_id,
        protocol_type=dead.protocol_type,
        offsets=dict(dead.offsets),
    )
    manager.groups[group.group_id] = group
