"""Dynamic broker configs (Kafka's KIP-226 DynamicBrokerConfig and BrokerConfigHandler; here the
replication throttle rates, docs/design.md "Replication throttling", the log dirs' free-space
floor, "Disk space as a budget (issue 25)", and KIP-402's connection quotas, "Dynamic
connection limits").

AlterConfigs for a BROKER resource, at any broker: the name is a broker id (``/config/brokers/<id>``)
or empty, the cluster-wide default (``/config/brokers/<default>``, kafka-configs.sh's
``--entity-default``). As for topics, the request's set replaces every dynamic override of that
entity; only :data:`~broker.config.DYNAMIC_BROKER_CONFIGS` may be set (anything else is Kafka's
INVALID_CONFIG "Cannot update these configs dynamically"), each value checked as the broker
property it overrides. Then a ``brokers/<entity>`` notification in /config/changes, which every
broker's :class:`~broker.dynamic_config.DynamicConfigManager` hands to :class:`BrokerConfigHandler`:
the broker reads its own entity and the default and applies, per key, its own override, else the
default, else server.properties, to the replication quota managers, the disk space monitor and
the socket server's connection quotas (a limit at -1 derived from the open-file limit now).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable
from typing import Any

from broker.config import BROKER_PROPERTIES, BrokerConfig, ConfigError
from broker.config_prop import INT_MAX
from broker.listener_config import connection_limits, parse_per_ip_overrides
from broker.log.disk_space import DiskSpaceMonitor
from broker.network.quotas import ConnectionQuotas
from broker.replica.replication_quota import ReplicationQuotas
from client.protocol.errors import ErrorCode, KafkaError
from zk.bridge import ZkBridge
from zk.client import change_broker_config, get_broker_config
from zk.paths import DEFAULT_BROKER_ENTITY

log = logging.getLogger(__name__)

THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
CONNECTION_LIMITS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")
#: Broker configs AlterConfigs may change at run time, per broker or cluster-wide (KIP-226).
DYNAMIC_BROKER_CONFIGS = (*THROTTLE_RATES, "log.dir.min.free.bytes", *CONNECTION_LIMITS)


def broker_entity(name: str) -> str:
    """The znode name of a BROKER resource: a broker id, or ``<default>`` for an empty name."""
    if name == "":
        return DEFAULT_BROKER_ENTITY
    try:
        broker_id = int(name)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name!r}"
        ) from None
    if broker_id < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Broker id must not be negative, but it is: {broker_id}")
    return str(broker_id)


def validate_dynamic_broker_configs(configs: dict[str, str]) -> dict[str, Any]:
    """Raises KafkaError(INVALID_CONFIG) for a key that is not dynamic or a bad value."""
    static = sorted(k for k in configs if k not in DYNAMIC_BROKER_CONFIGS)
    if static:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"Cannot update these configs dynamically: {', '.join(static)}"
        )
    try:
        values = {key: BROKER_PROPERTIES[key].parse(value) for key, value in configs.items()}
        parse_per_ip_overrides(values.get("max.connections.per.ip.overrides", ""))
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return values


async def alter_broker_configs(
    zk: ZkBridge, name: str, configs: dict[str, str], validate_only: bool, version: int | None = None
) -> None:
    """Validate and write a broker entity's dynamic configs (with ``version``: only if its znode
    is still at that version, else :class:`~zk.client.ConfigChanged`)."""
    entity = broker_entity(name)
    validate_dynamic_broker_configs(configs)
    if validate_only:
        return
    await change_broker_config(zk, entity, configs, version)
    log.info("Updated the dynamic configs of broker entity %s: %s", entity, configs)


async def dynamic_overrides(zk: ZkBridge, broker_id: int) -> tuple[dict[str, str], dict[str, str]]:
    """(this broker's own dynamic overrides, the cluster-wide default ones)."""
    return await get_broker_config(zk, str(broker_id)), await get_broker_config(zk, DEFAULT_BROKER_ENTITY)


def effective(config: BrokerConfig, own: dict[str, str], default: dict[str, str]) -> dict[str, Any]:
    """Each dynamic key's value: the broker's override, else the default, else server.properties.
    An override that does not parse (written by hand) is skipped with an error logged."""
    values = {}
    for key in DYNAMIC_BROKER_CONFIGS:
        values[key] = config[key]
        for source in (default, own):
            if key in source:
                try:
                    values[key] = BROKER_PROPERTIES[key].parse(source[key])
                except ConfigError as exc:
                    log.error("ignoring the dynamic config %s=%r: %s", key, source[key], exc)
    return values


class BrokerConfigHandler:
    """Kafka's BrokerConfigHandler: applies the dynamic rates to the replication quota managers,
    the free-space floor to the disk space monitor and the connection limits to the socket
    server's quotas."""

    def __init__(
        self,
        zk: ZkBridge,
        config: BrokerConfig,
        quotas: ReplicationQuotas,
        disk_space: DiskSpaceMonitor | None = None,
        connection_quotas: Callable[[], ConnectionQuotas | None] = lambda: None,
    ) -> None:
        self.zk = zk
        self.config = config
        self.quotas = quotas
        self.disk_space = disk_space
        #: the socket server's quotas once it runs (the server processes the changes again then)
        self.connection_quotas = connection_quotas
        #: one pass at a time: two passes interleaved at their reads could apply the older one last
        self._lock = asyncio.Lock()

    async def process_config_changes(self) -> dict[str, Any]:
        async with self._lock:
            return await self._process()

    async def _process(self) -> dict[str, Any]:
        own, default = await dynamic_overrides(self.zk, self.config.broker_id)
        values = effective(self.config, own, default)
        self.quotas.leader.update_quota(values["leader.replication.throttled.rate"])
        self.quotas.follower.update_quota(values["follower.replication.throttled.rate"])
        if self.disk_space is not None:
            self.disk_space.reconfigure(values["log.dir.min.free.bytes"])
        connections = self.connection_quotas()
        if connections is not None:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = INT_MAX if soft == resource.RLIM_INFINITY else soft
            max_connections, per_ip, overrides = connection_limits(
                *(values[k] for k in CONNECTION_LIMITS), limit
            )
            connections.update(max_connections, per_ip, dict(overrides))
        log.info("dynamic broker configs of broker %s: %s", self.config.broker_id, values)
        return values
