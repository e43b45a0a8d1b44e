"""IncrementalAlterConfigs (KIP-339), DescribeCluster (KIP-700) and DescribeLogDirs (KIP-113,
KIP-827) at the broker, without a cluster (broker/incremental_alter_configs.py,
broker/cluster_admin_apis.py): each operation on the stored overrides, the refusals Kafka makes
and that nothing is written after one, the brokers on the request's listener, each log dir with
its partitions and sizes. ZooKeeper is tests/unit/test_topic_configs.py's in-memory stand-in; the
broker parts are real (KafkaApis, ReplicaManager, LogManager, MetadataCache).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.apis import KafkaApis
from broker.cluster_admin_apis import MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE, describe_log_dirs
from broker.config import BrokerConfig
from broker.config_kinds import config_prop
from broker.incremental_alter_configs import apply_operations, incremental_alter_configs
from broker.log import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.replica_manager import ReplicaManager
from client.protocol.admin_schemas import AUTHORIZED_OPERATIONS_OMITTED
from client.protocol.api import ApiKey, ConfigResourceType, validate_request, validate_response
from client.protocol.errors import ErrorCode
from client.protocol.records import build_batch
from client.types import TopicPartition
from tests.unit.test_topic_configs import FakeZk, zk_with_topic
from zk.data import BrokerInfo, EndPoint, decode_topic_config, encode_topic_config
from zk.paths import DEFAULT_BROKER_ENTITY, config_broker_path, config_topic_path

TOPIC, BROKER = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def broker_config(**props: str) -> BrokerConfig:
    return BrokerConfig({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", **props})


def body(*resources: tuple[int, str, list[tuple[str, int, str | None]]], validate_only: bool = False) -> dict:
    return validate_request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        0,
        {
            "resources": [
                {
                    "resource_type": kind,
                    "resource_name": name,
                    "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs],
                }
                for kind, name, configs in resources
            ],
            "validate_only": validate_only,
        },
    )


async def alter(
    zk: FakeZk, request: dict, config: BrokerConfig | None = None
) -> list[tuple[int, str | None]]:
    response = validate_response(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        await incremental_alter_configs(zk, config or broker_config(), request),
    )
    return [(r["error_code"], r["error_message"]) for r in response["responses"]]


def overrides(zk: FakeZk, topic: str = "t") -> dict[str, str]:
    return decode_topic_config(zk.nodes[config_topic_path(topic)][0])


# -- the operations ------------------------------------------------------------------------------


async def test_set_and_delete_change_only_the_configs_named() -> None:
    zk = zk_with_topic("t", {"retention.ms": "1000", "segment.ms": "5000"})
    request = body(
        (
            TOPIC,
            "t",
            [("min.insync.replicas", SET, "2"), ("segment.ms", DELETE, None), ("flush.ms", DELETE, None)],
        )
    )
    assert await alter(zk, request) == [(0, None)]
    assert overrides(zk) == {"retention.ms": "1000", "min.insync.replicas": "2"}
    assert zk.writes[-1].startswith("/config/changes/")  # AlterConfigs' write, then its notification


async def test_append_and_subtract_start_from_the_override_else_the_value_now() -> None:
    zk = zk_with_topic("t", {"leader.replication.throttled.replicas": "0:1"})
    request = body(
        (
            TOPIC,
            "t",
            [
                ("leader.replication.throttled.replicas", APPEND, "1:2,0:1,2:3"),
                ("follower.replication.throttled.replicas", APPEND, "0:2"),
                ("cleanup.policy", APPEND, "compact"),  # from log.cleanup.policy: delete
            ],
        )
    )
    assert await alter(zk, request) == [(0, None)]
    assert overrides(zk) == {
        "leader.replication.throttled.replicas": "0:1,1:2,2:3",  # 0:1 once
        "follower.replication.throttled.replicas": "0:2",
        "cleanup.policy": "delete,compact",
    }
    assert await alter(
        zk, body((TOPIC, "t", [("leader.replication.throttled.replicas", SUBTRACT, "0:1,9:9")]))
    ) == [(0, None)]
    assert overrides(zk)["leader.replication.throttled.replicas"] == "1:2,2:3"


def test_append_starts_from_the_brokers_value_for_the_topic() -> None:
    config = broker_config(**{"log.cleanup.policy": "compact"})
    defaults = config.topic_defaults()
    updated = apply_operations(
        {},
        [{"name": "cleanup.policy", "config_operation": APPEND, "value": "delete"}],
        lambda key: config_prop(TOPIC, key),
        lambda key: ",".join(defaults[key]),
    )
    assert updated == {"cleanup.policy": "compact,delete"}


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        (
            [("retention.ms", APPEND, "5")],
            ErrorCode.INVALID_CONFIG,
            "Config value append is not allowed for config key: retention.ms",
        ),
        (
            [("min.insync.replicas", SUBTRACT, "1")],
            ErrorCode.INVALID_CONFIG,
            "Config value subtract is not allowed",
        ),
        ([("no.such", APPEND, "x")], ErrorCode.INVALID_CONFIG, "Unknown config name: no.such"),
        ([("no.such", SET, "x")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such"),
        ([("min.insync.replicas", SET, "0")], ErrorCode.INVALID_CONFIG, "Value must be in [1,"),
        (
            [("retention.ms", SET, None)],
            ErrorCode.INVALID_REQUEST,
            "Null value not supported for : retention.ms",
        ),
        (
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            ErrorCode.INVALID_REQUEST,
            "duplicate config keys",
        ),
        ([("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST, "Unknown config operation 7"),
    ],
)
async def test_a_refused_resource_writes_nothing(configs: list, code: int, message: str) -> None:
    zk = zk_with_topic("t", {"retention.ms": "1000"})
    before = dict(zk.nodes)
    ((got_code, got_message),) = await alter(zk, body((TOPIC, "t", configs)))
    assert got_code == code and message in (got_message or "")
    assert zk.nodes == before and zk.writes == []


async def test_each_resource_is_answered_in_order_and_a_duplicate_refuses_both_copies() -> None:
    zk = zk_with_topic("t")
    zk.nodes[config_broker_path(DEFAULT_BROKER_ENTITY)] = (encode_topic_config({}), 0)
    request = body(
        (TOPIC, "gone", [("retention.ms", SET, "5")]),
        (BROKER, "", [("leader.replication.throttled.rate", SET, "100")]),
        (TOPIC, "t", [("retention.ms", SET, "5")]),
        (TOPIC, "t", [("segment.ms", SET, "5")]),
        (BROKER, "", [("leader.replication.throttled.rate", APPEND, "1")]),
        (ConfigResourceType.GROUP, "g", [("x", SET, "1")]),
    )
    answers = await alter(zk, request)
    assert [code for code, _ in answers] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,  # listed twice: both copies
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
    ]
    assert answers[2][1] == "Each resource must appear at most once."
    assert zk.writes == []
    request = body(
        (BROKER, "", [("leader.replication.throttled.rate", SET, "100")]),
        (TOPIC, "t", [("retention.ms", SET, "5")]),
    )
    assert await alter(zk, request) == [(0, None), (0, None)]
    assert decode_topic_config(zk.nodes[config_broker_path(DEFAULT_BROKER_ENTITY)][0]) == {
        "leader.replication.throttled.rate": "100"
    }
    assert overrides(zk) == {"retention.ms": "5"}


async def test_broker_configs_take_only_dynamic_keys_and_no_list_operations() -> None:
    zk = FakeZk()
    assert await alter(zk, body((BROKER, "1", [("num.partitions", SET, "3")]))) == [
        (ErrorCode.INVALID_CONFIG, "Cannot update these configs dynamically: num.partitions")
    ]
    ((code, message),) = await alter(
        zk, body((BROKER, "1", [("follower.replication.throttled.rate", APPEND, "5")]))
    )
    assert code == ErrorCode.INVALID_CONFIG and "append is not allowed" in message
    ((code, _),) = await alter(zk, body((BROKER, "one", [("follower.replication.throttled.rate", SET, "5")])))
    assert code == ErrorCode.INVALID_REQUEST
    assert zk.writes == []


async def test_validate_only_checks_without_writing() -> None:
    zk = zk_with_topic("t", {"retention.ms": "1000"})
    assert await alter(zk, body((TOPIC, "t", [("retention.ms", DELETE, None)]), validate_only=True)) == [
        (0, None)
    ]
    assert zk.writes == [] and overrides(zk) == {"retention.ms": "1000"}


# -- DescribeLogDirs ---------------------------------------------------------------------------------


@dataclass
class StubLog:
    log_dir: Path
    size_in_bytes: int


def fs(total_blocks: int, free_blocks: int) -> os.statvfs_result:
    stat = SimpleNamespace(f_blocks=total_blocks, f_bavail=free_blocks, f_frsize=4096)
    return stat  # type: ignore[return-value]


def test_each_dir_lists_the_partitions_it_holds_with_their_sizes() -> None:
    a, b, gone = Path("/data/a"), Path("/data/b"), Path("/data/gone")
    logs = {
        TopicPartition("t", 1): StubLog(a, 300),
        TopicPartition("t", 0): StubLog(a, 100),
        TopicPartition("u", 0): StubLog(b, 7),
    }
    results = describe_log_dirs([a, b, gone], lambda d: d == gone, logs, None, lambda path: fs(1000, 250))
    assert results == [
        {
            "error_code": 0,
            "log_dir": "/data/a",
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "partition_size": 100,
                            "offset_lag": 0,
                            "is_future_key": False,
                        },
                        {
                            "partition_index": 1,
                            "partition_size": 300,
                            "offset_lag": 0,
                            "is_future_key": False,
                        },
                    ],
                }
            ],
            "total_bytes": 1000 * 4096,
            "usable_bytes": 250 * 4096,
        },
        {
            "error_code": 0,
            "log_dir": "/data/b",
            "topics": [
                {
                    "name": "u",
                    "partitions": [
                        {"partition_index": 0, "partition_size": 7, "offset_lag": 0, "is_future_key": False}
                    ],
                }
            ],
            "total_bytes": 1000 * 4096,
            "usable_bytes": 250 * 4096,
        },
        {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": "/data/gone", "topics": []},
    ]
    wanted = {TopicPartition("t", 1), TopicPartition("x", 0)}
    only = describe_log_dirs([a, b], lambda d: False, logs, wanted, lambda path: fs(1, 1))
    assert [
        [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in r["topics"]] for r in only
    ] == [
        [("t", [1])],
        [],
    ]


def test_a_file_system_that_cannot_be_read_is_a_storage_error() -> None:
    def broken(path: str) -> os.statvfs_result:
        raise OSError(5, "Input/output error")

    (result,) = describe_log_dirs([Path("/data/a")], lambda d: False, {}, None, broken)
    assert (result["error_code"], result.get("total_bytes")) == (ErrorCode.KAFKA_STORAGE_ERROR, None)


# -- through KafkaApis ----------------------------------------------------------------------------------


@dataclass
class FakeRequest:
    api_key: ApiKey
    body: dict
    listener_name: str = "PLAINTEXT"
    answers: list[dict] = field(default_factory=list)

    def respond(self, body: dict) -> None:
        self.answers.append(body)


@pytest.fixture
def apis(tmp_path: Path) -> KafkaApis:
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    cfg = BrokerConfig({"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "log.dirs": dirs})

    async def topic_config(topic: str) -> dict[str, str]:
        return {}

    cache = MetadataCache(1)
    brokers = [
        BrokerInfo(
            1, "h1", 9092, None, endpoints=(EndPoint("PLAINTEXT", "h1", 9092), EndPoint("KAFKA", "k1", 19092))
        ),
        BrokerInfo(2, "h2", 9092, "r2", endpoints=(EndPoint("PLAINTEXT", "h2", 9092),)),
    ]
    cache.update(
        {"controller_id": 2, "live_brokers": [b.wire("PLAINTEXT") for b in brokers], "partition_states": []}
    )
    rm = ReplicaManager(
        cfg,
        LogManager(cfg.log_dirs, cfg.log_config(), lambda: 0),
        cache,
        lambda: 0,
        lambda e: None,
        topic_config,
    )
    no_controller: Any = None
    no_zk: Any = None
    return KafkaApis(cfg, rm, cache, no_controller, no_zk, lambda: "cluster-1", random.Random(0))


async def ask(apis: KafkaApis, key: ApiKey, body: dict, listener: str = "PLAINTEXT") -> dict:
    request = FakeRequest(key, validate_request(key, 0, body), listener)
    await apis.handle(request)  # type: ignore[arg-type]
    (answer,) = request.answers
    return answer


async def test_describe_cluster_names_the_brokers_on_the_requests_listener(apis: KafkaApis) -> None:
    answer = validate_response(ApiKey.DESCRIBE_CLUSTER, await ask(apis, ApiKey.DESCRIBE_CLUSTER, {}))
    assert (answer["error_code"], answer["cluster_id"], answer["controller_id"]) == (0, "cluster-1", 2)
    assert answer["brokers"] == [
        {"broker_id": 1, "host": "h1", "port": 9092, "rack": None},
        {"broker_id": 2, "host": "h2", "port": 9092, "rack": "r2"},
    ]
    assert answer["cluster_authorized_operations"] == AUTHORIZED_OPERATIONS_OMITTED
    on_kafka = await ask(
        apis, ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True}, "KAFKA"
    )
    assert on_kafka["brokers"] == [{"broker_id": 1, "host": "k1", "port": 19092, "rack": None}]
    assert on_kafka["cluster_authorized_operations"] == AUTHORIZED_OPERATIONS_OMITTED


@pytest.mark.parametrize(
    ("endpoint_type", "code"),
    [(2, MISMATCHED_ENDPOINT_TYPE), (0, UNSUPPORTED_ENDPOINT_TYPE), (9, UNSUPPORTED_ENDPOINT_TYPE)],
)
async def test_describe_cluster_serves_the_broker_endpoint_type_only(
    apis: KafkaApis, endpoint_type: int, code: int
) -> None:
    answer = await ask(apis, ApiKey.DESCRIBE_CLUSTER, {"endpoint_type": endpoint_type})
    assert set(answer) == {"error_code", "error_message"} and answer["error_code"] == code


async def test_describe_log_dirs_reads_the_brokers_logs(apis: KafkaApis, tmp_path: Path) -> None:
    log_manager = apis.rm.log_manager
    first = log_manager.get_or_create_log("t", 0)
    second = log_manager.get_or_create_log("t", 1)
    assert first.log_dir != second.log_dir  # one per dir: the dir with fewest partitions
    first.append_as_leader(build_batch([(None, b"x" * 100, 0, [])]), 0)
    answer = validate_response(
        ApiKey.DESCRIBE_LOG_DIRS, await ask(apis, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
    )
    by_dir = {r["log_dir"]: r for r in answer["results"]}
    assert set(by_dir) == {str(tmp_path / "a"), str(tmp_path / "b")}
    sizes = {
        (p["partition_index"], p["partition_size"] > 0)
        for r in answer["results"]
        for t in r["topics"]
        for p in t["partitions"]
    }
    assert sizes == {(0, True), (1, False)}
    statvfs = os.statvfs(tmp_path)
    assert by_dir[str(first.log_dir)]["total_bytes"] == statvfs.f_blocks * statvfs.f_frsize
    asked = await ask(apis, ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"topic": "t", "partitions": [1]}]})
    held = [
        (t["name"], p["partition_index"])
        for r in asked["results"]
        for t in r["topics"]
        for p in t["partitions"]
    ]
    assert held == [("t", 1)]
