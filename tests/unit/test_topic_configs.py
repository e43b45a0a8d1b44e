"""Topic configs without a cluster (KIP-133, KIP-226): DescribeConfigs' sources and synonyms,
AlterConfigs' validation and replace semantics, the config change listener's sequence handling
and purge (Kafka's ZkNodeChangeNotificationListener), TopicConfigHandler applying overrides to
logs, and ``floodmark configs``. ZooKeeper is a small in-memory stand-in here; the real thing is
tests/integration/test_topic_configs.py."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from broker.config import BrokerConfig
from broker.config_admin import alter_configs, broker_config_entries, describe_configs, topic_config_entries
from broker.dynamic_config import (
    DynamicConfigManager,
    NotificationSequence,
    TopicConfigHandler,
    is_expired,
    sequence_number,
)
from broker.log import LogConfig
from broker.replica.replication_quota import UNBOUNDED, ReplicationQuotas
from cli.common import CliError
from cli.configs import describe_lines, merge_overrides, parse_add_config, parse_delete_config
from cli.main import build_cli
from client.protocol.api import ApiKey, ConfigResourceType, ConfigSource, validate_request, validate_response
from client.protocol.errors import ErrorCode
from client.types import Config, ConfigEntry, ConfigResource, ConfigSynonym
from zk.data import encode_config_change, encode_topic_config
from zk.paths import CONFIG_CHANGES_PATH, config_change_path, config_topic_path, topic_path

TOPIC, BROKER = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
DYNAMIC, STATIC, DEFAULT = (
    int(ConfigSource.DYNAMIC_TOPIC_CONFIG),
    int(ConfigSource.STATIC_BROKER_CONFIG),
    int(ConfigSource.DEFAULT_CONFIG),
)


def broker_config(**props: str) -> BrokerConfig:
    return BrokerConfig({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", **props})


class FakeZk:
    """The few ZkBridge calls zk/client.py's config functions make, on a dict of znodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}  # path -> (data, ctime)
        self.seq = 0
        self.watches: list[Any] = []
        self.listeners: list[Any] = []
        self.writes: list[str] = []

    def stat(self, path: str) -> SimpleNamespace:
        return SimpleNamespace(version=0, ctime=self.nodes[path][1])

    async def get(self, path: str, watch: Any = None) -> tuple[bytes, Any] | None:
        return (self.nodes[path][0], self.stat(path)) if path in self.nodes else None

    async def exists(self, path: str, watch: Any = None) -> Any:
        return self.stat(path) if path in self.nodes else None

    async def set(self, path: str, value: bytes, version: int = -1) -> Any:
        from kazoo.exceptions import NoNodeError

        if path not in self.nodes:
            raise NoNodeError(path)
        self.nodes[path] = (value, self.nodes[path][1])
        self.writes.append(path)

    async def create(self, path: str, value: bytes = b"", sequence: bool = False, **_: Any) -> str:
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
        self.nodes[path] = (value, 0)
        self.writes.append(path)
        return path

    async def get_children(self, path: str, watch: Any = None) -> list[str]:
        if watch is not None:
            self.watches.append(watch)
        prefix = path + "/"
        return [p[len(prefix) :] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix) :]]

    async def delete(self, path: str, version: int = -1) -> None:
        self.nodes.pop(path, None)

    async def ensure_path(self, path: str) -> None:
        pass

    def add_state_listener(self, fn: Any) -> None:
        self.listeners.append(fn)


def zk_with_topic(name: str = "t", overrides: dict[str, str] | None = None) -> FakeZk:
    zk = FakeZk()
    zk.nodes[topic_path(name)] = (b'{"version":1,"partitions":{"0":[1]}}', 0)
    zk.nodes[config_topic_path(name)] = (encode_topic_config(overrides or {}), 0)
    return zk


# -- DescribeConfigs: values, sources, synonyms -------------------------------------------------


def by_name(entries: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in entries}


def test_an_override_a_static_broker_key_and_a_default_each_name_their_source() -> None:
    config = broker_config(**{"min.insync.replicas": "2", "log.retention.hours": "1"})
    entries = by_name(topic_config_entries(config, {"segment.bytes": "1048576"}, include_synonyms=True))
    segment = entries["segment.bytes"]
    assert (segment["value"], segment["config_source"], segment["read_only"]) == ("1048576", DYNAMIC, False)
    assert segment["synonyms"] == [
        {"name": "segment.bytes", "value": "1048576", "source": DYNAMIC},
        {"name": "log.segment.bytes", "value": "1073741824", "source": DEFAULT},
    ]
    isr = entries["min.insync.replicas"]
    assert (isr["value"], isr["config_source"]) == ("2", STATIC)
    assert isr["synonyms"] == [
        {"name": "min.insync.replicas", "value": "2", "source": STATIC},
        {"name": "min.insync.replicas", "value": "1", "source": DEFAULT},
    ]
    # Kafka's synonyms: log.retention.hours stands in for retention.ms, its value in milliseconds
    retention = entries["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("3600000", STATIC)
    assert retention["synonyms"] == [
        {"name": "log.retention.hours", "value": "1", "source": STATIC},
        {"name": "log.retention.hours", "value": "168", "source": DEFAULT},
    ]
    unclean = entries["unclean.leader.election.enable"]
    assert (unclean["value"], unclean["config_source"]) == ("false", DEFAULT)


def test_configuration_keys_and_synonyms_are_optional() -> None:
    entries = topic_config_entries(broker_config(), {}, keys={"retention.ms", "no.such"})
    assert [(e["name"], e["value"], e["synonyms"]) for e in entries] == [("retention.ms", "604800000", [])]
    every = topic_config_entries(broker_config(), {})
    assert [e["name"] for e in every] == sorted(e["name"] for e in every) and len(every) == 19
    throttled = by_name(every)["leader.replication.throttled.replicas"]
    assert (throttled["value"], throttled["config_source"]) == ("", DEFAULT)  # a topic-only config


def test_a_broker_describes_its_static_config_read_only() -> None:
    entries = by_name(broker_config_entries(broker_config(**{"num.partitions": "3"})))
    assert entries["num.partitions"] == {
        "name": "num.partitions",
        "value": "3",
        "read_only": True,
        "config_source": STATIC,
        "is_sensitive": False,
        "synonyms": [],
    }
    assert entries["num.io.threads"]["config_source"] == DEFAULT


def describe_body(*resources: tuple[int, str], keys: list[str] | None = None) -> dict:
    return validate_request(
        ApiKey.DESCRIBE_CONFIGS,
        0,
        {
            "resources": [
                {"resource_type": t, "resource_name": n, "configuration_keys": keys} for t, n in resources
            ],
            "include_synonyms": True,
        },
    )


async def test_describe_configs_answers_each_resource_with_its_own_error() -> None:
    zk = zk_with_topic("t", {"min.insync.replicas": "3"})
    body = describe_body((TOPIC, "t"), (TOPIC, "gone"), (BROKER, "1"), (BROKER, "2"), (7, "x"))
    response = validate_response(ApiKey.DESCRIBE_CONFIGS, await describe_configs(zk, broker_config(), body))
    t, gone, me, other, unknown = response["results"]
    assert t["error_code"] == 0 and by_name(t["configs"])["min.insync.replicas"]["value"] == "3"
    assert by_name(t["configs"])["min.insync.replicas"]["config_source"] == DYNAMIC
    assert (gone["error_code"], gone["error_message"]) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "Topic 'gone' does not exist.",
    )
    assert me["error_code"] == 0
    assert [c["name"] for c in me["configs"] if not c["read_only"]] == [
        "follower.replication.throttled.rate",
        "leader.replication.throttled.rate",
        "log.dir.min.free.bytes",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
    ]  # the dynamic broker configs (KIP-226); everything else needs a restart
    assert other["error_code"] == ErrorCode.INVALID_REQUEST and "expected 1" in other["error_message"]
    assert unknown["error_code"] == ErrorCode.INVALID_REQUEST and unknown["configs"] == []


# -- AlterConfigs: replace, validate, write config then notification ----------------------------


def alter_body(
    name: str, configs: dict[str, str | None], validate_only: bool = False, kind: int = TOPIC
) -> dict:
    return validate_request(
        ApiKey.ALTER_CONFIGS,
        0,
        {
            "resources": [
                {
                    "resource_type": kind,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": validate_only,
        },
    )


async def test_alter_replaces_the_overrides_then_writes_the_notification() -> None:
    zk = zk_with_topic("t", {"retention.ms": "1000"})
    response = await alter_configs(zk, alter_body("t", {"min.insync.replicas": "2"}))
    assert validate_response(ApiKey.ALTER_CONFIGS, response)["responses"][0]["error_code"] == 0
    from zk.data import decode_topic_config

    assert decode_topic_config(zk.nodes[config_topic_path("t")][0]) == {"min.insync.replicas": "2"}
    notification = config_change_path("config_change_0000000000")
    assert zk.writes == [config_topic_path("t"), notification]  # Kafka's order
    assert zk.nodes[notification][0] == encode_config_change("topics/t")


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        ({"no.such.config": "1"}, ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
        ({"min.insync.replicas": "many"}, ErrorCode.INVALID_CONFIG, "min.insync.replicas"),
        ({"min.insync.replicas": "0"}, ErrorCode.INVALID_CONFIG, "Value must be in [1,"),
        ({"retention.ms": None}, ErrorCode.INVALID_REQUEST, "Null value not supported for : retention.ms"),
    ],
)
async def test_a_refused_alter_writes_nothing(configs: dict, code: int, message: str) -> None:
    zk = zk_with_topic("t", {"retention.ms": "1000"})
    before = dict(zk.nodes)
    (answer,) = (await alter_configs(zk, alter_body("t", configs)))["responses"]
    assert answer["error_code"] == code and message in answer["error_message"]
    assert zk.nodes == before and zk.writes == []


async def test_validate_only_unknown_topic_and_broker_resources() -> None:
    zk = zk_with_topic("t")
    assert (await alter_configs(zk, alter_body("t", {"retention.ms": "5"}, validate_only=True)))["responses"][
        0
    ]["error_code"] == 0
    assert zk.writes == []
    (gone,) = (await alter_configs(zk, alter_body("gone", {"retention.ms": "5"})))["responses"]
    assert gone["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (broker,) = (await alter_configs(zk, alter_body("1", {"num.partitions": "5"}, kind=BROKER)))["responses"]
    assert (broker["error_code"], broker["error_message"]) == (
        ErrorCode.INVALID_CONFIG,
        "Cannot update these configs dynamically: num.partitions",
    )
    assert zk.writes == []


# -- the config change listener -----------------------------------------------------------------


def test_sequence_numbers_and_which_notifications_are_new() -> None:
    assert sequence_number("config_change_0000000012") == 12
    assert sequence_number("something_else") == -1
    seq = NotificationSequence()
    seq.start_after(["config_change_0000000003", "config_change_0000000001"])
    names = ["config_change_0000000010", "config_change_0000000002", "config_change_0000000004"]
    assert seq.new(names) == ["config_change_0000000004", "config_change_0000000010"]
    seq.executed("config_change_0000000004")
    assert seq.new(names) == ["config_change_0000000010"]
    assert is_expired(0, 15 * 60 * 1000 + 1) and not is_expired(0, 15 * 60 * 1000)


class FakeLog:
    def __init__(self) -> None:
        self.config = LogConfig()

    def update_config(self, config: LogConfig) -> None:
        self.config = config


def replica_manager(logs: dict[tuple[str, int], FakeLog]) -> Any:
    return SimpleNamespace(
        log_manager=SimpleNamespace(all_logs=lambda: dict(logs)),
        topic_overrides={},
        topic_configs={},
        broker_id=1,
        quotas=ReplicationQuotas.create(11, 1000, UNBOUNDED, UNBOUNDED),
    )


def test_topic_config_handler_updates_every_local_log_of_the_topic() -> None:
    logs = {("t", 0): FakeLog(), ("t", 1): FakeLog(), ("u", 0): FakeLog()}
    rm = replica_manager(logs)
    handler = TopicConfigHandler(rm, broker_config())
    assert handler.process_config_changes("t", {"segment.bytes": "2048", "min.insync.replicas": "3"})
    assert [logs[("t", p)].config.segment_bytes for p in (0, 1)] == [2048, 2048]
    assert logs[("u", 0)].config == LogConfig()  # untouched
    assert rm.topic_configs["t"]["min.insync.replicas"] == 3
    assert not handler.process_config_changes("elsewhere", {"segment.bytes": "2048"})  # not hosted here
    assert not handler.process_config_changes("t", {"segment.bytes": "1"})  # invalid: kept as it was
    assert logs[("t", 0)].config.segment_bytes == 2048


async def test_the_listener_applies_new_notifications_once_and_purges_old_ones() -> None:
    zk = zk_with_topic("t", {"retention.ms": "1000"})
    zk.nodes[config_change_path("config_change_0000000000")] = (encode_config_change("topics/t"), 0)
    zk.seq = 1
    logs = {("t", 0): FakeLog()}
    now = [1_000]
    manager = DynamicConfigManager(
        zk, TopicConfigHandler(replica_manager(logs), broker_config()), lambda: now[0]
    )
    await manager.startup()
    try:
        # start-up: the present state applied, the present notification counted as processed
        assert logs[("t", 0)].config.retention_ms == 1000 and manager.sequence.last_executed == 0
        assert zk.watches, "the children watch is registered"
        await alter_configs(zk, alter_body("t", {"retention.ms": "2000"}))
        zk.nodes[config_change_path(f"config_change_{zk.seq:010d}")] = (b"not json", 5)  # skipped
        zk.seq += 1
        await alter_configs(zk, alter_body("t", {"retention.ms": "3000"}))
        await manager.process_notifications()
        assert logs[("t", 0)].config.retention_ms == 3000 and manager.sequence.last_executed == 3
        # an older config written behind the listener's back is not re-applied: nothing new
        zk.nodes[config_topic_path("t")] = (encode_topic_config({"retention.ms": "7"}), 0)
        await manager.process_notifications()
        assert logs[("t", 0)].config.retention_ms == 3000
        now[0] = 15 * 60 * 1000 + 3  # everything created at ctime 0 has expired; the one at 5 not yet
        await manager.process_notifications()
        left = await zk.get_children(CONFIG_CHANGES_PATH)
        assert left == ["config_change_0000000002"]
    finally:
        await manager.shutdown()


async def test_a_watch_event_or_reconnection_starts_a_pass_and_a_failed_pass_is_retried() -> None:
    zk = zk_with_topic("t")
    logs = {("t", 0): FakeLog()}
    manager = DynamicConfigManager(zk, TopicConfigHandler(replica_manager(logs), broker_config()), lambda: 0)
    await manager.startup()
    real_get_children, failures = zk.get_children, []

    async def flaky_get_children(path: str, watch: Any = None) -> list[str]:
        if not failures:  # the first listing fails as a ZooKeeper outage would
            failures.append(path)
            raise ConnectionError("no ZooKeeper")
        return await real_get_children(path, watch)

    zk.get_children = flaky_get_children
    try:
        await alter_configs(zk, alter_body("t", {"segment.bytes": "4096"}))
        watches_before = len(zk.watches)
        manager._on_zk_state("CONNECTED")  # as after a dropped connection (a watch event does the same)
        for _ in range(100):
            if logs[("t", 0)].config.segment_bytes == 4096:
                break
            await asyncio.sleep(0.02)
        assert logs[("t", 0)].config.segment_bytes == 4096 and failures
        assert len(zk.watches) > watches_before  # the watch was registered again
    finally:
        await manager.shutdown()


# -- floodmark configs ----------------------------------------------------------------------------


def test_add_and_delete_config_parse_and_merge_as_kafka_configs_does() -> None:
    assert parse_add_config("a=1, b = x=y ,c=[p,q]") == {"a": "1", "b": "x=y", "c": "p,q"}
    with pytest.raises(CliError, match="key=val"):
        parse_add_config("a")
    assert parse_delete_config("a, b,,") == ["a", "b"]
    current = {"retention.ms": "1000", "segment.bytes": "2048"}
    assert merge_overrides(current, {"min.insync.replicas": "2", "retention.ms": "5"}, ["segment.bytes"]) == {
        "retention.ms": "5",
        "min.insync.replicas": "2",
    }
    with pytest.raises(CliError, match=r"Invalid config\(s\): cleanup.policy"):
        merge_overrides(current, {}, ["cleanup.policy"])


def test_describe_lines_follow_kafka_configs() -> None:
    entry = ConfigEntry(
        "min.insync.replicas",
        "2",
        DYNAMIC,
        synonyms=(
            ConfigSynonym("min.insync.replicas", "2", DYNAMIC),
            ConfigSynonym("min.insync.replicas", "1", DEFAULT),
        ),
    )
    assert describe_lines("topics", "t", [entry], describe_all=False) == [
        "Dynamic configs for topic t are:",
        "  min.insync.replicas=2 sensitive=false synonyms="
        "{DYNAMIC_TOPIC_CONFIG:min.insync.replicas=2, DEFAULT_CONFIG:min.insync.replicas=1}",
    ]


@pytest.fixture
def fake_admin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    state: dict[str, Any] = {"overrides": {"t": {"retention.ms": "1000"}}, "altered": []}

    class AdminClient:
        def __init__(self, bootstrap: str, **_: Any) -> None:
            pass

        async def start(self) -> None:
            pass

        async def close(self) -> None:
            pass

        async def list_topics(self) -> list[str]:
            return sorted(state["overrides"])

        async def describe_configs(self, resources, include_synonyms=False) -> dict:
            return {
                r: Config(
                    tuple(
                        ConfigEntry(k, v, DYNAMIC, synonyms=(ConfigSynonym(k, v, DYNAMIC),))
                        for k, v in state["overrides"][r.name].items()
                    )
                    + (ConfigEntry("segment.bytes", "1073741824", DEFAULT),)
                )
                for r in resources
            }

        async def alter_configs(self, configs, validate_only=False) -> None:
            for resource, values in configs.items():
                state["altered"].append((resource, dict(values)))

    module = types.ModuleType("client.admin")
    module.AdminClient = AdminClient
    monkeypatch.setitem(sys.modules, "client.admin", module)
    monkeypatch.chdir(tmp_path)
    return state


def test_the_configs_command_describes_and_alters(fake_admin: dict[str, Any]) -> None:
    cli, base = build_cli(), ["configs", "--bootstrap-server", "h:1", "--entity-type", "topics"]
    described = CliRunner().invoke(cli, [*base, "--entity-name", "t", "--describe"])
    assert described.exit_code == 0, described.output
    assert described.stdout.splitlines() == [
        "Dynamic configs for topic t are:",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
    ]
    every = CliRunner().invoke(cli, [*base, "--describe", "--all"])
    assert (
        every.stdout.splitlines()[0] == "All configs for topic t are:" and len(every.stdout.splitlines()) == 3
    )
    altered = CliRunner().invoke(
        cli,
        [
            *base,
            "--entity-name",
            "t",
            "--alter",
            "--add-config",
            "min.insync.replicas=2",
            "--delete-config",
            "retention.ms",
        ],
    )
    assert altered.exit_code == 0, altered.output
    assert altered.stdout == "Completed updating config for topic t.\n"
    assert fake_admin["altered"] == [(ConfigResource(TOPIC, "t"), {"min.insync.replicas": "2"})]
    refused = CliRunner().invoke(
        cli, [*base, "--entity-name", "t", "--alter", "--delete-config", "segment.bytes"]
    )
    assert refused.exit_code == 1 and refused.stderr.strip().startswith(
        "Error: Invalid config(s): segment.bytes"
    )
    usage = CliRunner().invoke(cli, [*base, "--entity-name", "t", "--alter"])
    assert usage.exit_code == 2 and "At least one of --add-config or --delete-config" in usage.stderr
