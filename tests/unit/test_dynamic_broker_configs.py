"""Dynamic broker configs (KIP-226; broker/dynamic_broker_config.py) and the replication
throttles' topic configs: AlterConfigs of a BROKER id or of the cluster-wide default writes its
znode then a ``brokers/<entity>`` notification, only the throttle rates and the free-space floor
may change, DescribeConfigs
shows each rate's sources in Kafka's precedence, the broker handler applies own over default
over static, and the throttled-replica lists are validated as Kafka's validator does. On the
same in-memory ZooKeeper as tests/unit/test_topic_configs.py."""

from __future__ import annotations

import json
import resource
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.config_admin import alter_configs, describe_configs
from broker.network.quotas import derived_connection_limits
from broker.replica.replication_quota import UNBOUNDED, ReplicationQuotas
from client.protocol.api import ApiKey, ConfigSource, validate_response
from client.protocol.errors import ErrorCode
from tests.unit.test_topic_configs import (
    BROKER,
    DEFAULT,
    alter_body,
    broker_config,
    by_name,
    describe_body,
    zk_with_topic,
)
from zk.paths import CONFIG_CHANGES_PATH

# -- dynamic broker configs (KIP-226): the replication throttle rates -----------------------------


async def test_dynamic_broker_configs_are_written_per_broker_and_cluster_wide_and_described() -> None:
    zk = zk_with_topic("t")
    rate = "leader.replication.throttled.rate"
    (bad,) = (await alter_configs(zk, alter_body("1", {rate: "-5"}, kind=BROKER)))["responses"]
    assert bad["error_code"] == ErrorCode.INVALID_CONFIG and rate in bad["error_message"]
    (named,) = (await alter_configs(zk, alter_body("x", {rate: "5"}, kind=BROKER)))["responses"]
    assert named["error_code"] == ErrorCode.INVALID_REQUEST
    assert zk.writes == []
    for name, value in (("1", "1000"), ("", "2000")):
        (ok,) = (await alter_configs(zk, alter_body(name, {rate: value}, kind=BROKER)))["responses"]
        assert ok["error_code"] == 0
    assert json.loads(zk.nodes["/config/brokers/1"][0])["config"] == {rate: "1000"}
    assert json.loads(zk.nodes["/config/brokers/<default>"][0])["config"] == {rate: "2000"}
    notes = sorted(p for p in zk.nodes if p.startswith(CONFIG_CHANGES_PATH + "/"))
    assert [json.loads(zk.nodes[p][0])["entity_path"] for p in notes] == ["brokers/1", "brokers/<default>"]

    body = describe_body((BROKER, "1"), (BROKER, ""))
    me, default = validate_response(
        ApiKey.DESCRIBE_CONFIGS,
        await describe_configs(zk, broker_config(), {**body, "include_synonyms": True}),
    )["results"]
    entry = by_name(me["configs"])[rate]
    assert (entry["value"], entry["config_source"], entry["read_only"]) == (
        "1000",
        int(ConfigSource.DYNAMIC_BROKER_CONFIG),
        False,
    )
    assert [(s["value"], s["source"]) for s in entry["synonyms"]] == [
        ("1000", int(ConfigSource.DYNAMIC_BROKER_CONFIG)),
        ("2000", int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)),
        (str(UNBOUNDED), DEFAULT),
    ]
    assert [(c["name"], c["value"]) for c in default["configs"]] == [(rate, "2000")]


async def test_the_broker_handler_applies_own_then_default_then_static_rates() -> None:
    from broker.dynamic_broker_config import BrokerConfigHandler

    zk = zk_with_topic("t")
    quotas = ReplicationQuotas.create(11, 1000, UNBOUNDED, UNBOUNDED)
    handler = BrokerConfigHandler(zk, broker_config(**{"follower.replication.throttled.rate": "7"}), quotas)
    await handler.process_config_changes()
    assert (quotas.leader.bound, quotas.follower.bound) == (UNBOUNDED, 7)
    await alter_configs(zk, alter_body("", {"leader.replication.throttled.rate": "500"}, kind=BROKER))
    await alter_configs(zk, alter_body("1", {"follower.replication.throttled.rate": "9"}, kind=BROKER))
    await handler.process_config_changes()
    assert (quotas.leader.bound, quotas.follower.bound) == (500, 9)


async def test_the_broker_handler_applies_the_free_space_floor_own_then_default_then_static() -> None:
    """``log.dir.min.free.bytes`` is dynamic too (docs/design.md "Disk space as a budget"): the
    handler hands the effective value to the disk space monitor, which measures at once."""
    from broker.dynamic_broker_config import BrokerConfigHandler
    from broker.log.disk_space import DiskSpaceMonitor

    mib = 1 << 20
    fs = SimpleNamespace(f_frsize=1, f_blocks=100 * mib, f_bavail=30 * mib)
    monitor = DiskSpaceMonitor([Path("/data")], 0, lambda: 0, lambda _: fs)
    zk = zk_with_topic("t")
    quotas = ReplicationQuotas.create(11, 1000, UNBOUNDED, UNBOUNDED)
    key = "log.dir.min.free.bytes"
    handler = BrokerConfigHandler(zk, broker_config(**{key: "0"}), quotas, monitor)
    assert (await handler.process_config_changes())[key] == 0 and not monitor.below_floor(Path("/data"))
    (bad,) = (await alter_configs(zk, alter_body("", {key: "-2"}, kind=BROKER)))["responses"]
    assert bad["error_code"] == ErrorCode.INVALID_CONFIG and key in bad["error_message"]
    await alter_configs(zk, alter_body("", {key: str(40 * mib)}, kind=BROKER))
    await handler.process_config_changes()
    assert monitor.below_floor(Path("/data")) and monitor.snapshot()[0].floor == 40 * mib
    await alter_configs(zk, alter_body("1", {key: str(20 * mib)}, kind=BROKER))
    await handler.process_config_changes()
    assert not monitor.below_floor(Path("/data")) and monitor.snapshot()[0].floor == 20 * mib
    await alter_configs(zk, alter_body("1", {}, kind=BROKER))
    await alter_configs(zk, alter_body("", {}, kind=BROKER))
    assert (await handler.process_config_changes())[key] == 0 and monitor.snapshot()[0].floor == 0


async def test_the_connection_limits_are_dynamic_and_minus_one_is_derived_again() -> None:
    """KIP-402's reconfigurable connection quotas: the handler hands max.connections,
    max.connections.per.ip and the overrides (own, default, static) to the socket server's quotas
    once it runs; -1 is derived from the open-file limit in force; a malformed override list is
    INVALID_CONFIG naming the key, and nothing is written."""
    from broker.dynamic_broker_config import BrokerConfigHandler
    from broker.network.quotas import ConnectionQuotas

    zk = zk_with_topic("t")
    quotas = ReplicationQuotas.create(11, 1000, UNBOUNDED, UNBOUNDED)
    connections = ConnectionQuotas(100, 50)
    running: list[ConnectionQuotas] = []
    handler = BrokerConfigHandler(zk, broker_config(), quotas, None, lambda: running[0] if running else None)
    await handler.process_config_changes()  # before the socket server runs: nothing to apply to
    running.append(connections)
    (bad,) = (
        await alter_configs(
            zk, alter_body("", {"max.connections.per.ip.overrides": "127.0.0.2"}, kind=BROKER)
        )
    )["responses"]
    assert (
        bad["error_code"] == ErrorCode.INVALID_CONFIG
        and "max.connections.per.ip.overrides" in bad["error_message"]
    )
    assert zk.writes == []
    limits = {"max.connections": "40", "max.connections.per.ip.overrides": "127.0.0.2:3"}
    await alter_configs(zk, alter_body("", limits, kind=BROKER))
    await alter_configs(zk, alter_body("1", {"max.connections.per.ip": "7"}, kind=BROKER))
    await handler.process_config_changes()
    assert (connections.max_connections, connections.max_connections_per_ip) == (40, 7)
    assert dict(connections.per_ip_overrides) == {"127.0.0.2": 3}
    await alter_configs(zk, alter_body("1", {}, kind=BROKER))
    await alter_configs(zk, alter_body("", {}, kind=BROKER))
    await handler.process_config_changes()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    derived, derived_per_ip = derived_connection_limits(2**31 - 1 if soft == resource.RLIM_INFINITY else soft)
    assert (connections.max_connections, connections.max_connections_per_ip) == (derived, derived_per_ip)
    assert dict(connections.per_ip_overrides) == {}


def test_throttled_replicas_configs_are_validated_and_marked_for_this_broker() -> None:
    from broker.config import ConfigError, validate_topic_configs

    key = "leader.replication.throttled.replicas"
    assert validate_topic_configs({key: "0:1, 1:2"}) == {key: "0:1, 1:2"}
    for bad in ("0-1", "a:1", "0:", "*,0:1"):
        with pytest.raises(ConfigError, match=key):
            validate_topic_configs({key: bad})
    quotas = ReplicationQuotas.create(11, 1000, UNBOUNDED, UNBOUNDED)
    quotas.apply_topic_config("t", {key: "0:1,1:2,2:1", "follower.replication.throttled.replicas": "*"}, 1)
    assert [quotas.leader.is_throttled(("t", p)) for p in range(3)] == [True, False, True]
    assert all(quotas.follower.is_throttled(("t", p)) for p in range(3))
    quotas.apply_topic_config("t", {}, 1)
    assert not quotas.leader.is_throttled(("t", 0)) and not quotas.follower.is_throttled(("t", 0))
