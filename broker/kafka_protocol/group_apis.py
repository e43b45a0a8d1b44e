"""Kafka's group APIs on the Kafka listener: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and DeleteGroups, the classic
group protocol of Kafka's GroupCoordinator as KafkaApis serves it (docs/design.md "Two wire
protocols"; the coordinator itself is docs/design.md "Consumer groups").

Each translator maps one Kafka request onto the body of client/protocol/group_schemas.py that
broker/group_apis.py hands to the coordinator, and the coordinator's answer back onto the
response class of the version asked. Where Kafka's answer depends on the request version, the
version rule is Kafka's (its KafkaApis, GroupCoordinatorAdapter and the request/response classes):

- JoinGroup: v0 has no rebalance timeout, so the session timeout stands in
  (JoinGroupRequest.maybeOverrideRebalanceTimeout); MEMBER_ID_REQUIRED (KIP-394) only from v4;
  before v7 the protocol name is not nullable, so "no protocol" is ``""`` (Kafka's NoProtocol);
  v9's ``skip_assignment`` is always false (KIP-814: this coordinator never answers a rejoining
  static leader without a new assignment round). v8's ``reason`` is not kept.
- LeaveGroup: v0-v2 leave one member and carry its error as the response's only error code
  (LeaveGroupResponse's "populate member level error"); v3+ (KIP-345) answer per member.
- OffsetCommit: the retention time of v2-v4 is honoured (KIP-211 dropped it in v5); the leader
  epoch (KIP-320) is v6+, the group instance id v7+.
- OffsetFetch: v1 has no top-level error code, so a group-level error goes on every partition
  asked for (OffsetFetchResponse for versions before 2); v7's ``require_stable`` (KIP-447) always
  holds here: with no transactions, no offset is ever pending a transaction.
- DescribeGroups: the authorized operations (v3+, KIP-430) are given only when asked for and the
  group was described without error; with no authorizer every operation a group supports is
  allowed (Kafka's AuthHelper.authorizedOperations: READ, DESCRIBE, DELETE).
- DeleteGroups: a name given twice is deleted once (KafkaApis' ``distinct``).

Versions not served, and why: FindCoordinator v4+ (KIP-699) batches keys and OffsetFetch v8+
batches groups, while one request here is one coordinator call; clients then send one key or
group per request, as they do to Kafka 2.x. OffsetCommit v9+, ListGroups v5+ and the share
group FindCoordinator are KIP-848's and KIP-932's new protocols; DescribeGroups v6 adds a
per-group error message. OffsetCommit v0-v1 and OffsetFetch v0 (offsets in ZooKeeper) are
gone from kio, as from Kafka 4.
"""

from __future__ import annotations

from typing import Any

from broker.kafka_protocol.entities import make, response_class, response_module, to_ms
from broker.kafka_protocol.kafka_api import KafkaApi
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode

#: Kafka's "not requested" value of the authorized-operations fields (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
#: AclOperation codes a group supports (AclEntry.supportedOperations(GROUP) in ZooKeeper-era
#: Kafka), as Utils.to32BitField packs them: what an absent authorizer allows.
_READ, _DELETE, _DESCRIBE = 3, 6, 8
GROUP_AUTHORIZED_OPERATIONS = (1 << _READ) | (1 << _DELETE) | (1 << _DESCRIBE)
#: Kafka's GroupCoordinator.NoProtocol: the protocol name before JoinGroup v7 made it nullable.
NO_PROTOCOL = ""
#: OffsetFetch's answer for a partition with no offset (OffsetFetchResponse.INVALID_OFFSET).
INVALID_OFFSET = -1


# -- FindCoordinator -----------------------------------------------------------------------------


def find_coordinator_body(request: Any, version: int) -> dict:
    return {"key": request.key, "key_type": request.key_type if version >= 1 else 0}


def find_coordinator_response(body: dict, request: Any, version: int) -> Any:
    return make(
        response_class(ApiKey.FIND_COORDINATOR, version),
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        error_message=body["error_message"],
        node_id=body["node_id"],
        host=body["host"],
        port=body["port"],
    )


# -- JoinGroup, SyncGroup, Heartbeat -------------------------------------------------------------


def join_group_body(request: Any, version: int) -> dict:
    session_ms = to_ms(request.session_timeout)
    return {
        "group_id": request.group_id,
        "session_timeout_ms": session_ms,
        "rebalance_timeout_ms": to_ms(request.rebalance_timeout) if version >= 1 else session_ms,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 5 else None,
        "protocol_type": request.protocol_type,
        "protocols": [{"name": p.name, "metadata": bytes(p.metadata)} for p in request.protocols],
        "require_known_member_id": version >= 4,
    }


def join_group_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.JOIN_GROUP, version)
    protocol_name = body["protocol_name"]
    return make(
        m.JoinGroupResponse,
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        generation_id=body["generation_id"],
        protocol_type=body["protocol_type"],
        protocol_name=protocol_name if version >= 7 or protocol_name is not None else NO_PROTOCOL,
        leader=body["leader"],
        skip_assignment=False,
        member_id=body["member_id"],
        members=tuple(
            make(
                m.JoinGroupResponseMember,
                member_id=member["member_id"],
                group_instance_id=member["group_instance_id"],
                metadata=member["metadata"],
            )
            for member in body["members"]
        ),
    )


def sync_group_body(request: Any, version: int) -> dict:
    return {
        "group_id": request.group_id,
        "generation_id": request.generation_id,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 3 else None,
        "protocol_type": request.protocol_type if version >= 5 else None,
        "protocol_name": request.protocol_name if version >= 5 else None,
        "assignments": [
            {"member_id": a.member_id, "assignment": bytes(a.assignment)} for a in request.assignments
        ],
    }


def sync_group_response(body: dict, request: Any, version: int) -> Any:
    return make(
        response_class(ApiKey.SYNC_GROUP, version),
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        protocol_type=body["protocol_type"],
        protocol_name=body["protocol_name"],
        assignment=body["assignment"],
    )


def heartbeat_body(request: Any, version: int) -> dict:
    return {
        "group_id": request.group_id,
        "generation_id": request.generation_id,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 3 else None,
    }


def heartbeat_response(body: dict, request: Any, version: int) -> Any:
    return make(
        response_class(ApiKey.HEARTBEAT, version),
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
    )


# -- LeaveGroup ----------------------------------------------------------------------------------


def leave_group_body(request: Any, version: int) -> dict:
    if version < 3:
        return {"group_id": request.group_id, "member_id": request.member_id, "members": []}
    return {
        "group_id": request.group_id,
        "member_id": "",
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id} for m in request.members
        ],
    }


def leave_group_response(body: dict, request: Any, version: int) -> Any:
    cls = response_class(ApiKey.LEAVE_GROUP, version)
    members = body["members"]
    if version < 3:  # one member: its error is the answer (LeaveGroupResponse.getError)
        errors = [body["error_code"], *(m["error_code"] for m in members)]
        code = next((e for e in errors if e != ErrorCode.NONE), ErrorCode.NONE)
        return make(cls, throttle_time=body["throttle_time_ms"], error_code=code)
    if not request.members and members:
        # An empty member list leaves nobody (Kafka); the handler read it as v0's member "".
        members = []
        body = {**body, "error_code": ErrorCode.NONE}
    m = response_module(ApiKey.LEAVE_GROUP, version)
    return make(
        cls,
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        members=tuple(
            make(
                m.MemberResponse,
                member_id=member["member_id"],
                group_instance_id=member["group_instance_id"],
                error_code=member["error_code"],
            )
            for member in members
        ),
    )


# -- OffsetCommit, OffsetFetch -------------------------------------------------------------------


def offset_commit_body(request: Any, version: int) -> dict:
    return {
        "group_id": request.group_id,
        "generation_id": request.generation_id_or_member_epoch,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 7 else None,
        "retention_time_ms": to_ms(request.retention_time) if version <= 4 else -1,
        "topics": [
            {
                "topic": t.name,
                "partitions": [
                    {
                        "partition": p.partition_index,
                        "committed_offset": p.committed_offset,
                        "committed_leader_epoch": p.committed_leader_epoch if version >= 6 else -1,
                        "committed_metadata": p.committed_metadata,
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


def offset_commit_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.OFFSET_COMMIT, version)
    return make(
        m.OffsetCommitResponse,
        throttle_time=body["throttle_time_ms"],
        topics=tuple(
            make(
                m.OffsetCommitResponseTopic,
                name=t["topic"],
                partitions=tuple(
                    make(
                        m.OffsetCommitResponsePartition,
                        partition_index=p["partition"],
                        error_code=p["error_code"],
                    )
                    for p in t["partitions"]
                ),
            )
            for t in body["topics"]
        ),
    )


def offset_fetch_body(request: Any, version: int) -> dict:
    topics = request.topics
    return {
        "group_id": request.group_id,
        "topics": None
        if topics is None
        else [{"topic": t.name, "partitions": list(t.partition_indexes)} for t in topics],
    }


def offset_fetch_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.OFFSET_FETCH, version)
    topics = body["topics"]
    if version < 2 and body["error_code"] != ErrorCode.NONE:
        topics = _partition_errors(request, body["error_code"])
    return make(
        m.OffsetFetchResponse,
        throttle_time=body["throttle_time_ms"],
        topics=tuple(
            make(
                m.OffsetFetchResponseTopic,
                name=t["topic"],
                partitions=tuple(
                    make(
                        m.OffsetFetchResponsePartition,
                        partition_index=p["partition"],
                        committed_offset=p["committed_offset"],
                        committed_leader_epoch=p["committed_leader_epoch"],
                        metadata=p["metadata"],
                        error_code=p["error_code"],
                    )
                    for p in t["partitions"]
                ),
            )
            for t in topics
        ),
        error_code=body["error_code"],
    )


def _partition_errors(request: Any, code: int) -> list[dict]:
    """OffsetFetch before v2: a group-level error on every partition asked for."""
    return [
        {
            "topic": t.name,
            "partitions": [
                {
                    "partition": p,
                    "committed_offset": INVALID_OFFSET,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": code,
                }
                for p in t.partition_indexes
            ],
        }
        for t in request.topics or ()
    ]


# -- ListGroups, DescribeGroups, DeleteGroups ----------------------------------------------------


def list_groups_body(request: Any, version: int) -> dict:
    return {"states_filter": list(request.states_filter) if version >= 4 else []}


def list_groups_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.LIST_GROUPS, version)
    return make(
        m.ListGroupsResponse,
        throttle_time=body["throttle_time_ms"],
        error_code=body["error_code"],
        groups=tuple(
            make(
                m.ListedGroup,
                group_id=g["group_id"],
                protocol_type=g["protocol_type"],
                group_state=g["group_state"],
            )
            for g in body["groups"]
        ),
    )


def describe_groups_body(request: Any, version: int) -> dict:
    return {"groups": list(request.groups)}


def describe_groups_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.DESCRIBE_GROUPS, version)
    asked = version >= 3 and request.include_authorized_operations
    return make(
        m.DescribeGroupsResponse,
        throttle_time=body["throttle_time_ms"],
        groups=tuple(
            make(
                m.DescribedGroup,
                error_code=g["error_code"],
                group_id=g["group_id"],
                group_state=g["group_state"],
                protocol_type=g["protocol_type"],
                protocol_data=g["protocol_data"],
                members=tuple(
                    make(
                        m.DescribedGroupMember,
                        member_id=member["member_id"],
                        group_instance_id=member["group_instance_id"],
                        client_id=member["client_id"],
                        client_host=member["client_host"],
                        member_metadata=member["member_metadata"],
                        member_assignment=member["member_assignment"],
                    )
                    for member in g["members"]
                ),
                authorized_operations=GROUP_AUTHORIZED_OPERATIONS
                if asked and g["error_code"] == ErrorCode.NONE
                else AUTHORIZED_OPERATIONS_OMITTED,
            )
            for g in body["groups"]
        ),
    )


def delete_groups_body(request: Any, version: int) -> dict:
    return {"groups_names": list(dict.fromkeys(request.groups_names))}


def delete_groups_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.DELETE_GROUPS, version)
    return make(
        m.DeleteGroupsResponse,
        throttle_time=body["throttle_time_ms"],
        results=tuple(
            make(m.DeletableGroupResult, group_id=r["group_id"], error_code=r["error_code"])
            for r in body["results"]
        ),
    )


GROUP_APIS: tuple[KafkaApi, ...] = (
    KafkaApi(ApiKey.FIND_COORDINATOR, 0, 3, find_coordinator_body, find_coordinator_response),
    KafkaApi(ApiKey.JOIN_GROUP, 0, 9, join_group_body, join_group_response),
    KafkaApi(ApiKey.SYNC_GROUP, 0, 5, sync_group_body, sync_group_response),
    KafkaApi(ApiKey.HEARTBEAT, 0, 4, heartbeat_body, heartbeat_response),
    KafkaApi(ApiKey.LEAVE_GROUP, 0, 5, leave_group_body, leave_group_response),
    KafkaApi(ApiKey.OFFSET_COMMIT, 2, 8, offset_commit_body, offset_commit_response),
    KafkaApi(ApiKey.OFFSET_FETCH, 1, 7, offset_fetch_body, offset_fetch_response),
    KafkaApi(ApiKey.LIST_GROUPS, 0, 4, list_groups_body, list_groups_response),
    KafkaApi(ApiKey.DESCRIBE_GROUPS, 0, 5, describe_groups_body, describe_groups_response),
    KafkaApi(ApiKey.DELETE_GROUPS, 0, 2, delete_groups_body, delete_groups_response),
)
