"""Request and response schemas of the group APIs (Kafka's protocol JSON for FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups and DeleteGroups; seed 004; docs/design.md "Consumer groups").

The fields are Kafka's, at the newest versions this coordinator serves: member and generation
ids, ``group_instance_id`` (KIP-345), the protocol type and name, and the member metadata and
assignment bytes, opaque to the coordinator (a consumer puts Kafka's ConsumerProtocol encoding
in them, :mod:`client.protocol.consumer_protocol`). So a Kafka-protocol listener can serve the
same coordinator by mapping its versions onto these bodies. Two departures, both spelt out:

* topics and partitions are nested as ``{topic, partitions: [{partition, ...}]}`` like every
  other body of this protocol (Kafka's JSON says ``name`` / ``partition_index`` here);
* JoinGroup carries ``require_known_member_id``, which Kafka derives from the request version
  (v4+, KIP-394): a first join without a member id is answered MEMBER_ID_REQUIRED with the id
  to come back with.

Written in the vocabulary of :mod:`client.protocol.schema`; :mod:`client.protocol.api` merges
:data:`GROUP_REQUESTS` and :data:`GROUP_RESPONSES` into its tables.
"""

from __future__ import annotations

from typing import Any

from client.protocol.api_keys import ApiKey
from client.protocol.schema import Array, Nullable, Opt

#: FindCoordinator ``key_type``s (Kafka's CoordinatorType).
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

_THROTTLE = {"throttle_time_ms": Opt("int", 0)}


def _topics(partition_fields: dict) -> Array:
    return Array({"topic": "str", "partitions": Array({"partition": "int", **partition_fields})})


GROUP_REQUESTS: dict[ApiKey, Any] = {
    ApiKey.FIND_COORDINATOR: {"key": "str", "key_type": Opt("int", GROUP_KEY_TYPE)},
    ApiKey.JOIN_GROUP: {
        "group_id": "str",
        "session_timeout_ms": "int",
        "rebalance_timeout_ms": Opt("int", -1),  # -1: the session timeout (JoinGroup v0)
        "member_id": "str",
        "group_instance_id": Opt(Nullable("str")),
        "protocol_type": "str",
        "protocols": Array({"name": "str", "metadata": "bytes"}),
        "require_known_member_id": Opt("bool", True),
    },
    ApiKey.SYNC_GROUP: {
        "group_id": "str",
        "generation_id": "int",
        "member_id": "str",
        "group_instance_id": Opt(Nullable("str")),
        "protocol_type": Opt(Nullable("str")),
        "protocol_name": Opt(Nullable("str")),
        "assignments": Array({"member_id": "str", "assignment": "bytes"}),
    },
    ApiKey.HEARTBEAT: {
        "group_id": "str",
        "generation_id": "int",
        "member_id": "str",
        "group_instance_id": Opt(Nullable("str")),
    },
    # v3+ (KIP-345) names the members; v0-v2's single member_id is accepted too.
    ApiKey.LEAVE_GROUP: {
        "group_id": "str",
        "member_id": Opt("str", ""),
        "members": Opt(Array({"member_id": "str", "group_instance_id": Opt(Nullable("str"))}), []),
    },
    ApiKey.OFFSET_COMMIT: {
        "group_id": "str",
        "generation_id": Opt("int", -1),  # -1: a consumer that assigns its partitions itself
        "member_id": Opt("str", ""),
        "group_instance_id": Opt(Nullable("str")),
        "retention_time_ms": Opt("int", -1),
        "topics": _topics(
            {
                "committed_offset": "int",
                "committed_leader_epoch": Opt("int", -1),
                "committed_metadata": Opt(Nullable("str")),
            }
        ),
    },
    ApiKey.OFFSET_FETCH: {
        "group_id": "str",
        "topics": Nullable(Array({"topic": "str", "partitions": Array("int")})),  # nil: all
    },
    ApiKey.LIST_GROUPS: {"states_filter": Opt(Array("str"), [])},
    ApiKey.DESCRIBE_GROUPS: {"groups": Array("str")},
    ApiKey.DELETE_GROUPS: {"groups_names": Array("str")},
}

GROUP_RESPONSES: dict[ApiKey, Any] = {
    ApiKey.FIND_COORDINATOR: {
        **_THROTTLE,
        "error_code": "int",
        "error_message": Opt(Nullable("str")),
        "node_id": "int",
        "host": "str",
        "port": "int",
    },
    ApiKey.JOIN_GROUP: {
        **_THROTTLE,
        "error_code": "int",
        "generation_id": "int",
        "protocol_type": Opt(Nullable("str")),
        "protocol_name": Nullable("str"),
        "leader": "str",
        "member_id": "str",
        "members": Array(
            {"member_id": "str", "group_instance_id": Opt(Nullable("str")), "metadata": "bytes"}
        ),
    },
    ApiKey.SYNC_GROUP: {
        **_THROTTLE,
        "error_code": "int",
        "protocol_type": Opt(Nullable("str")),
        "protocol_name": Opt(Nullable("str")),
        "assignment": "bytes",
    },
    ApiKey.HEARTBEAT: {**_THROTTLE, "error_code": "int"},
    ApiKey.LEAVE_GROUP: {
        **_THROTTLE,
        "error_code": "int",
        "members": Opt(
            Array({"member_id": "str", "group_instance_id": Opt(Nullable("str")), "error_code": "int"}),
            [],
        ),
    },
    ApiKey.OFFSET_COMMIT: {**_THROTTLE, "topics": _topics({"error_code": "int"})},
    ApiKey.OFFSET_FETCH: {
        **_THROTTLE,
        "error_code": "int",
        "topics": _topics(
            {
                "committed_offset": "int",
                "committed_leader_epoch": Opt("int", -1),
                "metadata": Nullable("str"),
                "error_code": "int",
            }
        ),
    },
    ApiKey.LIST_GROUPS: {
        **_THROTTLE,
        "error_code": "int",
        "groups": Array({"group_id": "str", "protocol_type": "str", "group_state": Opt("str", "")}),
    },
    ApiKey.DESCRIBE_GROUPS: {
        **_THROTTLE,
        "groups": Array(
            {
                "error_code": "int",
                "group_id": "str",
                "group_state": "str",
                "protocol_type": "str",
                "protocol_data": "str",
                "members": Array(
                    {
                        "member_id": "str",
                        "group_instance_id": Opt(Nullable("str")),
                        "client_id": "str",
                        "client_host": "str",
                        "member_metadata": "bytes",
                        "member_assignment": "bytes",
                    }
                ),
            }
        ),
    },
    ApiKey.DELETE_GROUPS: {**_THROTTLE, "results": Array({"group_id": "str", "error_code": "int"})},
}
