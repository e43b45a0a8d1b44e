"""Kafka's group APIs on the Kafka listener (broker/kafka_protocol/group_apis.py).

Requests are built with kio (the oldest versions also encoded by kafka-python's hand-written
classes), written to bytes and read back by kio's compiled reader, as the codec reads them; the
translated body must pass our own request schema and carry the values asked. Answers are written
in our response schema, translated, written by kio's writer and decoded by an independent oracle:
kafka-python's hand-written Structs (kafka.protocol.old) up to the versions they define, its
JSON-schema classes beyond. The oracle re-encodes what it decoded and must give the same bytes,
so nothing was left over or misread.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from kafka.protocol.admin import groups as kp_admin
from kafka.protocol.consumer import group as kp_group
from kafka.protocol.metadata import find_coordinator as kp_find
from kafka.protocol.old import admin as old_admin
from kafka.protocol.old import commit as old_commit
from kafka.protocol.old import find_coordinator as old_find
from kafka.protocol.old import group as old_group
from kio.index import load_payload_module
from kio.serial import entity_writer
from kio.static.constants import EntityType

from broker.kafka_protocol.entities import make, request_class, request_reader, response_writer
from broker.kafka_protocol.group_apis import GROUP_APIS
from broker.kafka_protocol.kafka_api import api_table
from client.protocol.api import ApiKey, validate_request, validate_response
from client.protocol.errors import ErrorCode

APIS = api_table(GROUP_APIS)

#: API -> (kafka-python's hand-written module, class name, its newest version; JSON-schema class)
ORACLES: dict[ApiKey, tuple[Any, str, int, Any]] = {
    ApiKey.FIND_COORDINATOR: (old_find, "FindCoordinatorResponse", 2, kp_find.FindCoordinatorResponse),
    ApiKey.JOIN_GROUP: (old_group, "JoinGroupResponse", 5, kp_group.JoinGroupResponse),
    ApiKey.SYNC_GROUP: (old_group, "SyncGroupResponse", 3, kp_group.SyncGroupResponse),
    ApiKey.HEARTBEAT: (old_group, "HeartbeatResponse", 3, kp_group.HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (old_group, "LeaveGroupResponse", 3, kp_group.LeaveGroupResponse),
    ApiKey.OFFSET_COMMIT: (old_commit, "OffsetCommitResponse", 7, kp_group.OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (old_commit, "OffsetFetchResponse", 5, kp_group.OffsetFetchResponse),
    ApiKey.LIST_GROUPS: (old_admin, "ListGroupsResponse", 2, kp_admin.ListGroupsResponse),
    ApiKey.DESCRIBE_GROUPS: (old_admin, "DescribeGroupsResponse", 3, kp_admin.DescribeGroupsResponse),
    ApiKey.DELETE_GROUPS: (old_admin, "DeleteGroupsResponse", 1, kp_admin.DeleteGroupsResponse),
}


def request_module(api_key: ApiKey, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def read_request(api_key: ApiKey, version: int, data: bytes) -> Any:
    entity, size = request_reader(api_key, version)(data, 0)
    assert size == len(data)
    return entity


def kio_request(api_key: ApiKey, version: int, /, **values: Any) -> Any:
    """A request built by kio, written and read back by kio's reader (what the codec hands on)."""
    cls = request_class(api_key, version)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, make(cls, **values))
    return read_request(api_key, version, buffer.getvalue())


def to_body(api_key: ApiKey, request: Any, version: int) -> dict:
    """The translated body: every field present and of our schema's type."""
    body = APIS[api_key].to_body(request, version)
    assert validate_request(api_key, 0, body) == body
    return body


def answered(api_key: ApiKey, body: dict, request: Any, version: int) -> dict:
    """Our answer as the codec writes it (checked and defaulted by our schema, translated,
    written by kio), as kafka-python decodes it: plain dicts and lists, bytes kept."""
    entity = APIS[api_key].to_response(validate_response(api_key, body), request, version)
    buffer = io.BytesIO()
    response_writer(api_key, version)(buffer, entity)
    data = buffer.getvalue()
    module, name, newest_old, cls = ORACLES[api_key]
    if version <= newest_old:
        struct = getattr(module, f"{name}_v{version}").decode(data)
        assert struct.encode() == data
        return struct.to_object()
    message = cls.decode(data, version=version)
    message._header = None  # decode() leaves the slot unset, and encode() reads it
    assert message.encode(version=version) == data
    return message.to_dict(json=False)


def rows(fields: str, *values: tuple) -> list[dict]:
    """Dicts of the given space-separated field names, one per tuple of values."""
    return [dict(zip(fields.split(), v, strict=True)) for v in values]


def test_the_table_serves_each_group_api_once_at_the_chosen_versions() -> None:
    assert {api.key.name: (api.min_version, api.max_version) for api in GROUP_APIS} == {
        "FIND_COORDINATOR": (0, 3), "JOIN_GROUP": (0, 9), "SYNC_GROUP": (0, 5), "HEARTBEAT": (0, 4),
        "LEAVE_GROUP": (0, 5), "OFFSET_COMMIT": (2, 8), "OFFSET_FETCH": (1, 7), "LIST_GROUPS": (0, 4),
        "DESCRIBE_GROUPS": (0, 5), "DELETE_GROUPS": (0, 2),
    }  # fmt: skip


# -- FindCoordinator -----------------------------------------------------------------------------


def test_find_coordinator_requests() -> None:
    data = old_find.FindCoordinatorRequest_v0(key="payments").encode()
    request = read_request(ApiKey.FIND_COORDINATOR, 0, data)
    assert to_body(ApiKey.FIND_COORDINATOR, request, 0) == {"key": "payments", "key_type": 0}
    request = kio_request(ApiKey.FIND_COORDINATOR, 3, key="tx-1", key_type=1)
    assert to_body(ApiKey.FIND_COORDINATOR, request, 3) == {"key": "tx-1", "key_type": 1}


def test_find_coordinator_answers() -> None:
    found = {"error_code": 0, "error_message": None, "node_id": 2, "host": "b2", "port": 9093}
    request = kio_request(ApiKey.FIND_COORDINATOR, 0, key="g")
    assert (
        answered(ApiKey.FIND_COORDINATOR, found, request, 0)
        == rows("error_code node_id host port", (0, 2, "b2", 9093))[0]
    )
    body = {
        "throttle_time_ms": 7,
        "error_code": 15,
        "error_message": "creating",
        "node_id": -1,
        "host": "",
        "port": -1,
    }
    assert (
        answered(ApiKey.FIND_COORDINATOR, body, kio_request(ApiKey.FIND_COORDINATOR, 3, key="g"), 3) == body
    )


# -- JoinGroup -----------------------------------------------------------------------------------


def join_body(version: int, **changes: Any) -> dict:
    body = {
        "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": rows("name metadata", ("range", b"\x00\x01"), ("roundrobin", b"\x02")),
        "require_known_member_id": version >= 4,
    }  # fmt: skip
    return {**body, **changes}


def test_join_group_v0_uses_the_session_timeout_for_rebalances_and_never_asks_for_a_member_id() -> None:
    data = old_group.JoinGroupRequest_v0(
        group_id="g", session_timeout_ms=10000, member_id="", protocol_type="consumer",
        protocols=[("range", b"\x00\x01"), ("roundrobin", b"\x02")],
    ).encode()  # fmt: skip
    body = to_body(ApiKey.JOIN_GROUP, read_request(ApiKey.JOIN_GROUP, 0, data), 0)
    assert body == join_body(0, rebalance_timeout_ms=10000)
    assert body["require_known_member_id"] is False


@pytest.mark.parametrize("version", [1, 3, 4, 5, 9])
def test_join_group_asks_for_a_known_member_id_from_v4(version: int) -> None:
    m = request_module(ApiKey.JOIN_GROUP, version)
    request = kio_request(
        ApiKey.JOIN_GROUP, version, group_id="g", session_timeout=10000, rebalance_timeout=30000,
        member_id="", group_instance_id="host-a", protocol_type="consumer", reason="rebalance needed",
        protocols=(make(m.JoinGroupRequestProtocol, name="range", metadata=b"\x00\x01"),
                   make(m.JoinGroupRequestProtocol, name="roundrobin", metadata=b"\x02")),
    )  # fmt: skip
    instance = "host-a" if version >= 5 else None  # static membership is v5+ (KIP-345)
    assert to_body(ApiKey.JOIN_GROUP, request, version) == join_body(version, group_instance_id=instance)


JOINED = {
    "throttle_time_ms": 3, "error_code": 0, "generation_id": 4, "protocol_type": "consumer",
    "protocol_name": "range", "leader": "m-1", "member_id": "m-1",
    "members": rows("member_id group_instance_id metadata", ("m-1", "host-a", b"s1"), ("m-2", None, b"s2")),
}  # fmt: skip
#: A first join without a member id, told the id to come back with (KIP-394).
JOIN_REFUSED = {
    **JOINED, "error_code": 79, "generation_id": -1, "protocol_type": None, "protocol_name": None,
    "leader": "", "member_id": "c-uuid", "members": [],
}  # fmt: skip


def join_request(version: int) -> Any:
    return kio_request(
        ApiKey.JOIN_GROUP, version, group_id="g", session_timeout=1, member_id="", protocol_type="c"
    )


def test_join_group_v0_answer_to_the_leader() -> None:
    assert answered(ApiKey.JOIN_GROUP, JOINED, join_request(0), 0) == {
        "error_code": 0, "generation_id": 4, "protocol_name": "range", "leader": "m-1", "member_id": "m-1",
        "members": rows("member_id metadata", ("m-1", b"s1"), ("m-2", b"s2")),
    }  # fmt: skip


def test_join_group_v5_names_static_members_and_no_protocol_with_an_empty_string() -> None:
    assert answered(ApiKey.JOIN_GROUP, JOINED, join_request(5), 5)["members"] == JOINED["members"]
    refused = {k: v for k, v in JOIN_REFUSED.items() if k != "protocol_type"}
    assert answered(ApiKey.JOIN_GROUP, JOIN_REFUSED, join_request(5), 5) == {**refused, "protocol_name": ""}


def test_join_group_v9_answers() -> None:
    assert answered(ApiKey.JOIN_GROUP, JOINED, join_request(9), 9) == {**JOINED, "skip_assignment": False}
    # from v7 the protocol stays null
    assert answered(ApiKey.JOIN_GROUP, JOIN_REFUSED, join_request(9), 9) == {
        **JOIN_REFUSED, "skip_assignment": False
    }  # fmt: skip


# -- SyncGroup, Heartbeat ------------------------------------------------------------------------


def test_sync_group_requests() -> None:
    data = old_group.SyncGroupRequest_v0(
        group_id="g", generation_id=4, member_id="m-1", assignments=[("m-1", b"a1"), ("m-2", b"a2")]
    ).encode()
    assert to_body(ApiKey.SYNC_GROUP, read_request(ApiKey.SYNC_GROUP, 0, data), 0) == {
        "group_id": "g", "generation_id": 4, "member_id": "m-1", "group_instance_id": None,
        "protocol_type": None, "protocol_name": None,
        "assignments": rows("member_id assignment", ("m-1", b"a1"), ("m-2", b"a2")),
    }  # fmt: skip
    request = kio_request(
        ApiKey.SYNC_GROUP, 5, group_id="g", generation_id=4, member_id="m-2", group_instance_id="host-b",
        protocol_type="consumer", protocol_name="range",
    )  # fmt: skip
    assert to_body(ApiKey.SYNC_GROUP, request, 5) == {
        "group_id": "g", "generation_id": 4, "member_id": "m-2", "group_instance_id": "host-b",
        "protocol_type": "consumer", "protocol_name": "range", "assignments": [],
    }  # fmt: skip


def test_sync_group_answers() -> None:
    body = {"throttle_time_ms": 1, "error_code": 0, "protocol_type": "consumer", "protocol_name": "range",
            "assignment": b"\x00\x01x"}  # fmt: skip
    request = kio_request(ApiKey.SYNC_GROUP, 0, group_id="g", generation_id=4, member_id="m-1")
    assert answered(ApiKey.SYNC_GROUP, body, request, 0) == {"error_code": 0, "assignment": b"\x00\x01x"}
    assert answered(ApiKey.SYNC_GROUP, body, request, 5) == body


def test_heartbeat_requests_and_answers() -> None:
    data = old_group.HeartbeatRequest_v0(group_id="g", generation_id=4, member_id="m-1").encode()
    expected = {"group_id": "g", "generation_id": 4, "member_id": "m-1", "group_instance_id": None}
    assert to_body(ApiKey.HEARTBEAT, read_request(ApiKey.HEARTBEAT, 0, data), 0) == expected
    request = kio_request(
        ApiKey.HEARTBEAT, 4, group_id="g", generation_id=4, member_id="m-1", group_instance_id="i"
    )
    assert to_body(ApiKey.HEARTBEAT, request, 4) == {**expected, "group_instance_id": "i"}
    body = {"throttle_time_ms": 11, "error_code": ErrorCode.REBALANCE_IN_PROGRESS}
    assert answered(ApiKey.HEARTBEAT, body, request, 0) == {"error_code": 27}
    assert answered(ApiKey.HEARTBEAT, body, request, 4) == {"throttle_time_ms": 11, "error_code": 27}


# -- LeaveGroup ----------------------------------------------------------------------------------


def leave_request(version: int, *members: tuple[str, str | None]) -> Any:
    m = request_module(ApiKey.LEAVE_GROUP, version)
    identities = tuple(
        make(m.MemberIdentity, member_id=member_id, group_instance_id=instance, reason="shutdown")
        for member_id, instance in members
    )
    return kio_request(ApiKey.LEAVE_GROUP, version, group_id="g", members=identities)


def test_leave_group_requests() -> None:
    data = old_group.LeaveGroupRequest_v0(group_id="g", member_id="m-1").encode()
    body = to_body(ApiKey.LEAVE_GROUP, read_request(ApiKey.LEAVE_GROUP, 0, data), 0)
    assert body == {"group_id": "g", "member_id": "m-1", "members": []}
    assert to_body(ApiKey.LEAVE_GROUP, leave_request(5, ("m-1", None), ("", "host-b")), 5) == {
        "group_id": "g", "member_id": "",
        "members": rows("member_id group_instance_id", ("m-1", None), ("", "host-b")),
    }  # fmt: skip


def test_leave_group_v0_answer_is_the_members_error_or_the_groups() -> None:
    request = kio_request(ApiKey.LEAVE_GROUP, 0, group_id="g", member_id="m-9")
    body = {"error_code": 0, "members": rows("member_id group_instance_id error_code", ("m-9", None, 25))}
    assert answered(ApiKey.LEAVE_GROUP, body, request, 0) == {"error_code": 25}
    body = {"error_code": ErrorCode.NOT_COORDINATOR, "members": []}
    assert answered(ApiKey.LEAVE_GROUP, body, request, 0) == {"error_code": 16}


def test_leave_group_v5_answers_per_member() -> None:
    members = rows("member_id group_instance_id error_code", ("m-1", None, 0), ("", "host-b", 25))
    body = {"throttle_time_ms": 2, "error_code": 0, "members": members}
    assert answered(ApiKey.LEAVE_GROUP, body, leave_request(5, ("m-1", None), ("", "host-b")), 5) == body


def test_leave_group_v3_with_no_members_leaves_nobody_without_error() -> None:
    request = leave_request(3)
    assert to_body(ApiKey.LEAVE_GROUP, request, 3)["members"] == []
    # the handler reads such a body as a v0 leave of member "", which it does not know
    handled = {"error_code": 25, "members": rows("member_id group_instance_id error_code", ("", None, 25))}
    expected = {"throttle_time_ms": 0, "error_code": 0, "members": []}
    assert answered(ApiKey.LEAVE_GROUP, handled, request, 3) == expected
    refused = {"error_code": ErrorCode.NOT_COORDINATOR, "members": []}
    assert answered(ApiKey.LEAVE_GROUP, refused, request, 3) == {**expected, "error_code": 16}


# -- OffsetCommit --------------------------------------------------------------------------------

COMMIT_FIELDS = "partition committed_offset committed_leader_epoch committed_metadata"


def commit_request(version: int, **values: Any) -> Any:
    m = request_module(ApiKey.OFFSET_COMMIT, version)
    partition = make(m.OffsetCommitRequestPartition, partition_index=2, committed_offset=99,
                     committed_leader_epoch=6, committed_metadata="x")  # fmt: skip
    topics = (make(m.OffsetCommitRequestTopic, name="orders", partitions=(partition,)),)
    return kio_request(ApiKey.OFFSET_COMMIT, version, group_id="g", member_id="m-1", topics=topics, **values)


def test_offset_commit_v2_from_kafka_python_keeps_its_retention_time() -> None:
    data = old_commit.OffsetCommitRequest_v2(
        group_id="g", generation_id_or_member_epoch=4, member_id="m-1", retention_time_ms=86_400_000,
        topics=[("orders", [(0, 120, "meta"), (3, 7, None)]), ("audit", [(1, 5, "")])],
    ).encode()  # fmt: skip
    assert to_body(ApiKey.OFFSET_COMMIT, read_request(ApiKey.OFFSET_COMMIT, 2, data), 2) == {
        "group_id": "g", "generation_id": 4, "member_id": "m-1", "group_instance_id": None,
        "retention_time_ms": 86_400_000,
        "topics": [
            {"topic": "orders", "partitions": rows(COMMIT_FIELDS, (0, 120, -1, "meta"), (3, 7, -1, None))},
            {"topic": "audit", "partitions": rows(COMMIT_FIELDS, (1, 5, -1, ""))},
        ],
    }  # fmt: skip


def test_offset_commit_v8_request() -> None:
    request = commit_request(8, generation_id_or_member_epoch=5, group_instance_id="host-a")
    assert to_body(ApiKey.OFFSET_COMMIT, request, 8) == {
        "group_id": "g", "generation_id": 5, "member_id": "m-1", "group_instance_id": "host-a",
        "retention_time_ms": -1,
        "topics": [{"topic": "orders", "partitions": rows(COMMIT_FIELDS, (2, 99, 6, "x"))}],
    }  # fmt: skip


def test_offset_commit_defaults_mean_a_self_assigning_consumer_and_the_brokers_retention() -> None:
    body = to_body(ApiKey.OFFSET_COMMIT, commit_request(4), 4)
    assert (body["generation_id"], body["retention_time_ms"]) == (-1, -1)
    body = to_body(ApiKey.OFFSET_COMMIT, commit_request(5), 5)
    assert body["topics"][0]["partitions"][0]["committed_leader_epoch"] == -1  # v6 added it


@pytest.mark.parametrize("version", [2, 8])
def test_offset_commit_answers(version: int) -> None:
    body = {"throttle_time_ms": 5, "topics": [
        {"topic": "audit", "partitions": rows("partition error_code", (1, 3))},
        {"topic": "orders", "partitions": rows("partition error_code", (0, 0), (3, 0))},
    ]}  # fmt: skip
    decoded = answered(ApiKey.OFFSET_COMMIT, body, commit_request(version), version)
    assert decoded.get("throttle_time_ms") == (5 if version >= 3 else None)
    assert decoded["topics"] == [
        {"name": "audit", "partitions": rows("partition_index error_code", (1, 3))},
        {"name": "orders", "partitions": rows("partition_index error_code", (0, 0), (3, 0))},
    ]


# -- OffsetFetch ---------------------------------------------------------------------------------


def fetch_request(version: int) -> Any:
    m = request_module(ApiKey.OFFSET_FETCH, version)
    topics = (make(m.OffsetFetchRequestTopic, name="orders", partition_indexes=(0, 3)),)
    return kio_request(ApiKey.OFFSET_FETCH, version, group_id="g", topics=topics)


def test_offset_fetch_requests() -> None:
    data = old_commit.OffsetFetchRequest_v1(
        group_id="g", topics=[("orders", [0, 3]), ("audit", [1])]
    ).encode()
    assert to_body(ApiKey.OFFSET_FETCH, read_request(ApiKey.OFFSET_FETCH, 1, data), 1) == {
        "group_id": "g", "topics": rows("topic partitions", ("orders", [0, 3]), ("audit", [1])),
    }  # fmt: skip
    request = kio_request(ApiKey.OFFSET_FETCH, 7, group_id="g", topics=None, require_stable=True)
    assert to_body(ApiKey.OFFSET_FETCH, request, 7) == {"group_id": "g", "topics": None}  # every offset
    assert to_body(ApiKey.OFFSET_FETCH, fetch_request(7), 7)["topics"] == rows(
        "topic partitions", ("orders", [0, 3])
    )


FETCHED = {
    "throttle_time_ms": 9, "error_code": 0,
    "topics": [{"topic": "orders", "partitions": rows(
        "partition committed_offset committed_leader_epoch metadata error_code",
        (0, 120, 6, "m", 0), (3, -1, -1, "", 0),
    )}],
}  # fmt: skip


def fetched(fields: str, *partitions: tuple) -> list[dict]:
    """The oracle's topics: one, "orders", with these partitions."""
    return [{"name": "orders", "partitions": rows(fields, *partitions)}]


def test_offset_fetch_v1_answer() -> None:
    decoded = answered(ApiKey.OFFSET_FETCH, FETCHED, fetch_request(1), 1)
    fields = "partition_index committed_offset metadata error_code"
    assert decoded == {"topics": fetched(fields, (0, 120, "m", 0), (3, -1, "", 0))}


def test_offset_fetch_v1_puts_a_group_error_on_every_partition_asked_for() -> None:
    body = {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "topics": []}
    decoded = answered(ApiKey.OFFSET_FETCH, body, fetch_request(1), 1)
    fields = "partition_index committed_offset metadata error_code"
    assert decoded == {"topics": fetched(fields, (0, -1, "", 14), (3, -1, "", 14))}


@pytest.mark.parametrize("version", [5, 7])
def test_offset_fetch_answers_with_the_leader_epoch_and_a_top_level_error(version: int) -> None:
    fields = "partition_index committed_offset committed_leader_epoch metadata error_code"
    assert answered(ApiKey.OFFSET_FETCH, FETCHED, fetch_request(version), version) == {
        "throttle_time_ms": 9, "error_code": 0,
        "topics": fetched(fields, (0, 120, 6, "m", 0), (3, -1, -1, "", 0)),
    }  # fmt: skip
    body = {"error_code": ErrorCode.NOT_COORDINATOR, "topics": []}
    decoded = answered(ApiKey.OFFSET_FETCH, body, fetch_request(version), version)
    assert (decoded["error_code"], decoded["topics"]) == (16, [])


# -- ListGroups, DescribeGroups, DeleteGroups ----------------------------------------------------


def test_list_groups() -> None:
    data = old_admin.ListGroupsRequest_v0().encode()
    assert to_body(ApiKey.LIST_GROUPS, read_request(ApiKey.LIST_GROUPS, 0, data), 0) == {"states_filter": []}
    request = kio_request(ApiKey.LIST_GROUPS, 4, states_filter=("Stable", "Empty"))
    assert to_body(ApiKey.LIST_GROUPS, request, 4) == {"states_filter": ["Stable", "Empty"]}
    groups = rows("group_id protocol_type group_state", ("a", "consumer", "Stable"), ("b", "", "Empty"))
    body = {"error_code": 14, "groups": groups}
    listed = rows("group_id protocol_type", ("a", "consumer"), ("b", ""))
    assert answered(ApiKey.LIST_GROUPS, body, request, 0) == {"error_code": 14, "groups": listed}
    assert answered(ApiKey.LIST_GROUPS, body, request, 4) == {**body, "throttle_time_ms": 0}


def test_describe_groups_requests() -> None:
    data = old_admin.DescribeGroupsRequest_v0(groups=["a", "b"]).encode()
    request = read_request(ApiKey.DESCRIBE_GROUPS, 0, data)
    assert to_body(ApiKey.DESCRIBE_GROUPS, request, 0) == {"groups": ["a", "b"]}
    request = kio_request(ApiKey.DESCRIBE_GROUPS, 5, groups=("a",), include_authorized_operations=True)
    assert to_body(ApiKey.DESCRIBE_GROUPS, request, 5) == {"groups": ["a"]}


MEMBER = {"member_id": "m-1", "group_instance_id": "host-a", "client_id": "c1", "client_host": "/10.0.0.1",
          "member_metadata": b"sub", "member_assignment": b"asg"}  # fmt: skip
DESCRIBED = {"groups": [
    {"error_code": 0, "group_id": "a", "group_state": "Stable", "protocol_type": "consumer",
     "protocol_data": "range", "members": [MEMBER]},
    {"error_code": 16, "group_id": "b", "group_state": "", "protocol_type": "", "protocol_data": "",
     "members": []},
]}  # fmt: skip


def describe_request(version: int, asked: bool = False) -> Any:
    return kio_request(
        ApiKey.DESCRIBE_GROUPS, version, groups=("a", "b"), include_authorized_operations=asked
    )


def test_describe_groups_v0_answer() -> None:
    a, b = answered(ApiKey.DESCRIBE_GROUPS, DESCRIBED, describe_request(0), 0)["groups"]
    member = {k: v for k, v in MEMBER.items() if k != "group_instance_id"}  # v4 added it
    assert (a, b) == ({**DESCRIBED["groups"][0], "members": [member]}, DESCRIBED["groups"][1])


# kafka-python reads the bit field as the set of AclOperation codes, Integer.MIN_VALUE as None.
# {3, 6, 8}: READ, DELETE, DESCRIBE, all a group supports, as Kafka allows them with no authorizer.
@pytest.mark.parametrize(
    ("version", "asked", "operations"), [(3, True, {3, 6, 8}), (5, True, {3, 6, 8}), (5, False, None)]
)
def test_describe_groups_answers_give_the_operations_only_when_asked(
    version: int, asked: bool, operations: set[int] | None
) -> None:
    a, b = answered(ApiKey.DESCRIBE_GROUPS, DESCRIBED, describe_request(version, asked), version)["groups"]
    assert a["members"][0]["member_id"] == "m-1"
    assert a["members"][0].get("group_instance_id") == ("host-a" if version >= 4 else None)
    assert (a["group_state"], a["protocol_data"], a["authorized_operations"]) == (
        "Stable",
        "range",
        operations,
    )
    assert (b["error_code"], b["authorized_operations"]) == (16, None)  # an error describes no operations


def test_delete_groups() -> None:
    data = old_admin.DeleteGroupsRequest_v0(groups_names=["a", "b", "a"]).encode()
    body = to_body(ApiKey.DELETE_GROUPS, read_request(ApiKey.DELETE_GROUPS, 0, data), 0)
    assert body == {"groups_names": ["a", "b"]}  # a name given twice is deleted once, as Kafka does
    request = kio_request(ApiKey.DELETE_GROUPS, 2, groups_names=("c",))
    assert to_body(ApiKey.DELETE_GROUPS, request, 2) == {"groups_names": ["c"]}
    body = {"throttle_time_ms": 1, "results": rows("group_id error_code", ("a", 0), ("b", 68))}
    assert answered(ApiKey.DELETE_GROUPS, body, request, 0) == body
    assert answered(ApiKey.DELETE_GROUPS, body, request, 2) == body
