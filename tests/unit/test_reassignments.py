"""The AdminClient's partition reassignments (KIP-455's alterPartitionReassignments and
listPartitionReassignments) over real sockets against tests/unit/fake_cluster.py, and their wire
schemas (client/protocol/admin_schemas.py, re-exported by client/protocol/api.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from client import AdminClient, TopicPartition
from client.protocol import api
from client.protocol.api import ApiKey, InvalidBody, validate_request, validate_response
from client.protocol.errors import ErrorCode, KafkaError
from client.reassignments import target_replicas
from client.types import PartitionReassignment
from tests.unit.fake_cluster import FakeCluster

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


@pytest.fixture
async def fake():
    cluster = await FakeCluster(node_ids=(1, 2, 3, 4)).start()
    cluster.create("t", 3)  # t-0 [1, 2, 3], t-1 [2, 3, 4], t-2 [3, 4, 1]
    yield cluster
    await cluster.stop()


def admin(fake: FakeCluster) -> AdminClient:
    return AdminClient(fake.bootstrap, retry_backoff_ms=10)


# -- wire schemas ---------------------------------------------------------------------------------


def test_the_reassignment_apis_have_kafkas_keys_and_are_advertised() -> None:
    assert ApiKey.ALTER_PARTITION_REASSIGNMENTS == 45 and ApiKey.LIST_PARTITION_REASSIGNMENTS == 46
    assert {45, 46} <= set(api.SUPPORTED_APIS)


def test_request_schemas_default_their_timeout_and_take_nil_topics_for_list() -> None:
    alter = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [4, 5]}]}]}
    assert validate_request(45, 0, alter)["timeout_ms"] == 60000
    assert validate_request(46, 0, {"topics": None}) == {"timeout_ms": 60000, "topics": None}
    with pytest.raises(InvalidBody, match=r"replicas\[1\] must be int"):
        validate_request(
            45, 0, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [4, "5"]}]}]}
        )
    with pytest.raises(InvalidBody, match="LIST_PARTITION_REASSIGNMENTS.topics is missing"):
        validate_request(46, 0, {})


def test_response_schemas_default_throttle_and_message() -> None:
    body = validate_response(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        {
            "error_code": 0,
            "responses": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}],
        },
    )
    assert body["throttle_time_ms"] == 0 and body["error_message"] is None
    assert body["responses"][0]["partitions"][0]["error_message"] is None
    listed = {
        "error_code": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "replicas": [4, 1],
                        "adding_replicas": [4],
                        "removing_replicas": [1],
                    }
                ],
            }
        ],
    }
    assert validate_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, listed)["topics"] == listed["topics"]


def test_api_still_exports_what_other_modules_import_from_it() -> None:
    for name in (
        "InvalidBody",
        "validate",
        "validate_request",
        "validate_response",
        "error_body",
        "ApiKey",
        "ConfigResourceType",
        "ConfigSource",
        "CONSUMER_REPLICA_ID",
        "EARLIEST_TIMESTAMP",
        "LATEST_TIMESTAMP",
        "NO_LEADER",
        "SUPPORTED_APIS",
        "UnsupportedVersion",
        "UnknownApi",
        "Array",
        "Nullable",
        "Opt",
        "Map",
        "REQUESTS",
        "RESPONSES",
    ):
        assert hasattr(api, name), name
    assert set(api.REQUESTS) == set(api.RESPONSES)


def test_the_admin_schemas_do_not_import_api() -> None:
    """api.py merges admin_schemas.py into its tables and re-exports schema.py and api_keys.py, so
    none of them may import api.py (a cycle)."""
    protocol = Path(__file__).parents[2] / "client" / "protocol"
    for module in ("admin_schemas.py", "schema.py", "api_keys.py"):
        tree = ast.parse((protocol / module).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "client.protocol.api" not in imported, module
        assert not any(i.startswith("client.") and not i.startswith("client.protocol.") for i in imported)


# -- alter and list -------------------------------------------------------------------------------


async def test_alter_starts_reassignments_that_list_reports_until_they_complete(fake):
    async with admin(fake) as a:
        assert await a.alter_partition_reassignments({T0: [4, 2, 3], T1: (1, 2, 3)}) == {T0: None, T1: None}
        listed = await a.list_partition_reassignments()
        assert listed == {
            T0: PartitionReassignment([4, 2, 3, 1], [4], [1]),
            T1: PartitionReassignment([1, 2, 3, 4], [1], [4]),
        }
        assert target_replicas(listed[T0]) == [4, 2, 3]
        assert await a.list_partition_reassignments([T1, T2]) == {T1: listed[T1]}
        assert await a.list_partition_reassignments([]) == {}
        fake.complete_reassignments()
        assert await a.list_partition_reassignments() == {}
        (desc,) = await a.describe_topics(["t"])
        assert [p.replicas for p in desc.partitions] == [[4, 2, 3], [1, 2, 3], [3, 4, 1]]
    (sent,) = fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    assert sent.body == {
        "timeout_ms": 60000,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "replicas": [4, 2, 3]},
                    {"partition_index": 1, "replicas": [1, 2, 3]},
                ],
            }
        ],
    }
    lists = fake.of(ApiKey.LIST_PARTITION_REASSIGNMENTS)
    assert lists[0].body["topics"] is None
    assert lists[1].body["topics"] == [{"name": "t", "partition_indexes": [1, 2]}]
    assert lists[2].body["topics"] == []


async def test_a_lost_request_is_sent_again(fake):
    fake.drop_next |= {ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS}
    async with admin(fake) as a:
        assert await a.alter_partition_reassignments({T2: [1, 2, 3]}, timeout_ms=5000) == {T2: None}
        assert await a.list_partition_reassignments(timeout_ms=5000) == {
            T2: PartitionReassignment([1, 2, 3, 4], [2], [4])
        }
    assert len(fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS)) == 2
    assert len(fake.of(ApiKey.LIST_PARTITION_REASSIGNMENTS)) == 2


async def test_an_unreachable_cluster_is_one_error_after_the_timeout():
    cluster = await FakeCluster().start()
    bootstrap = cluster.bootstrap
    await cluster.stop()
    a = AdminClient(bootstrap, retry_backoff_ms=10)
    with pytest.raises(
        KafkaError, match="NETWORK_EXCEPTION: list partition reassignments: no broker reachable"
    ):
        await a.list_partition_reassignments(timeout_ms=200)
    await a.close()


@pytest.mark.parametrize(
    ("tp", "replicas", "code", "message"),
    [
        (
            TopicPartition("missing", 0),
            [1],
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "The partition does not exist.",
        ),
        (TopicPartition("t", 7), [1], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
        (T1, [4, 4], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate replica ids"),
        (T1, [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list"),
        (T1, [1, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Unknown broker id(s) [9]"),
    ],
)
async def test_alter_is_all_or_nothing(fake, tp, replicas, code, message):
    async with admin(fake) as a:
        results = await a.alter_partition_reassignments({T0: [4, 2, 3], tp: replicas})
    assert results[tp].code == code and message in results[tp].message
    assert results[T0].code == ErrorCode.INVALID_REQUEST
    assert results[T0].message == f"not written: {tp} refused"
    assert fake.reassignments == {}


async def test_a_partition_being_reassigned_is_refused(fake):
    async with admin(fake) as a:
        assert await a.alter_partition_reassignments({T0: [4, 2, 3]}) == {T0: None}
        again = await a.alter_partition_reassignments({T0: [1, 2, 3], T1: [1, 2, 3]})
    assert again[T0].code == ErrorCode.REASSIGNMENT_IN_PROGRESS
    assert again[T1].code == ErrorCode.INVALID_REQUEST
    assert fake.reassignments == {("t", 0): [4, 2, 3]}


async def test_an_empty_alter_sends_nothing(fake):
    async with admin(fake) as a:
        assert await a.alter_partition_reassignments({}) == {}
    assert fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS) == []


async def test_a_request_level_error_is_raised(fake, monkeypatch):
    async def refuse(node: int, body: dict) -> dict:
        return {
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "error_message": "ZooKeeper is down",
            "topics": [],
        }

    async def refuse_alter(node: int, body: dict) -> dict:
        return {"error_code": int(ErrorCode.NOT_CONTROLLER), "responses": []}

    monkeypatch.setattr(fake, "_list_partition_reassignments", refuse)
    monkeypatch.setattr(fake, "_alter_partition_reassignments", refuse_alter)
    async with admin(fake) as a:
        with pytest.raises(
            KafkaError, match="UNKNOWN_SERVER_ERROR: list partition reassignments: ZooKeeper is down"
        ):
            await a.list_partition_reassignments()
        with pytest.raises(KafkaError) as info:
            await a.alter_partition_reassignments({T0: [4, 2, 3]})
    assert info.value.code == ErrorCode.NOT_CONTROLLER
    assert str(info.value) == "NOT_CONTROLLER: alter partition reassignments: the broker refused the request"


async def test_a_partition_missing_from_the_answer_is_an_error(fake, monkeypatch):
    async def forget(node: int, body: dict) -> dict:
        return {"error_code": 0, "responses": []}

    monkeypatch.setattr(fake, "_alter_partition_reassignments", forget)
    async with admin(fake) as a:
        results = await a.alter_partition_reassignments({T0: [4, 2, 3]})
    assert results[T0].code == ErrorCode.UNKNOWN_SERVER_ERROR and "not in the response" in results[T0].message


# -- lost answers ---------------------------------------------------------------------------------


async def test_an_alter_resent_after_a_lost_answer_counts_as_done(fake):
    """The first AlterPartitionReassignments lands but its answer is lost; the resend is refused
    (REASSIGNMENT_IN_PROGRESS) because of that very success: listed in progress towards exactly
    the replicas asked, it counts as done."""
    fake.drop_response_next.add(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    async with admin(fake) as a:
        results = await a.alter_partition_reassignments({T0: [4, 2, 3], T1: [1, 2, 3]}, timeout_ms=5000)
    assert results == {T0: None, T1: None}
    assert len(fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS)) == 2
    assert fake.reassignments == {("t", 0): [4, 2, 3], ("t", 1): [1, 2, 3]}


async def test_a_lost_answer_then_someone_elses_reassignment_stays_an_error(fake):
    async with admin(fake) as a:
        await a.alter_partition_reassignments({T0: [4, 2, 3]})
        fake.drop_response_next.add(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
        results = await a.alter_partition_reassignments({T0: [1, 2, 4]}, timeout_ms=5000)
    assert results[T0].code == ErrorCode.REASSIGNMENT_IN_PROGRESS
    assert fake.reassignments == {("t", 0): [4, 2, 3]}


async def test_a_lost_answer_to_a_reassignment_partly_completed_counts_as_done(fake):
    """After the lost answer t-0 completed at once (its replicas are the target, nothing in
    progress) and t-1 is still moving: the resend is refused, yet both landed."""
    fake.drop_response_next.add(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    original = fake._alter_partition_reassignments

    async def alter_then_complete_t0(node: int, body: dict) -> dict:
        response = await original(node, body)
        if ("t", 0) in fake.reassignments:
            fake.topics["t"][0].replicas = fake.reassignments.pop(("t", 0))
        return response

    fake._alter_partition_reassignments = alter_then_complete_t0
    async with admin(fake) as a:
        results = await a.alter_partition_reassignments({T0: [4, 2, 3], T1: [1, 2, 3]}, timeout_ms=5000)
    assert results == {T0: None, T1: None}
    assert fake.topics["t"][0].replicas == [4, 2, 3] and fake.reassignments == {("t", 1): [1, 2, 3]}
