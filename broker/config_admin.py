"""DescribeConfigs and AlterConfigs at the broker (Kafka 2.x's AdminManager.describeConfigs and
alterConfigs, KIP-133, with KIP-226's config sources and synonyms; docs/design.md "Topic configs").

Describe, for a TOPIC: every topic-level config with its effective value and where it comes
from, the highest-precedence source first in ``synonyms``: the topic's override in
/config/topics/<t> (DYNAMIC_TOPIC_CONFIG), the broker key's value in server.properties
(STATIC_BROKER_CONFIG), else the broker key's default (DEFAULT_CONFIG), named as Kafka names them
(``retention.ms`` falls back to ``log.retention.ms`` then ``log.retention.hours``); the
replication throttles' topic-only configs have their own default. For a BROKER id (sent to that
broker): its config, read-only but for the dynamic replication throttle rates, whose dynamic
overrides (the broker's, then the cluster-wide one) come first; for the BROKER name "" (any
broker): the cluster-wide dynamic overrides.

Alter, for a TOPIC: Kafka's non-incremental semantics, the request's set replaces every
override of the topic. For a BROKER: :mod:`broker.dynamic_broker_config`. Validated as at creation (``validate_topic_configs``: an unknown name or a
bad value is INVALID_CONFIG and nothing is written); then /config/topics/<t> and a
/config/changes notification (zk/client.py ``change_topic_config``), which every broker's
:mod:`broker.dynamic_config` applies to its logs of the topic.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from broker import dynamic_broker_config
from broker.config import (
    BROKER_PROPERTIES,
    TOPIC_ONLY_PROPERTIES,
    TOPIC_TO_BROKER,
    BrokerConfig,
    ConfigError,
    validate_topic_configs,
)
from broker.dynamic_broker_config import DYNAMIC_BROKER_CONFIGS
from client.protocol.api import ConfigResourceType, ConfigSource
from client.protocol.errors import ErrorCode, KafkaError
from controller.topic_admin import validate_topic_name
from zk.bridge import ZkBridge
from zk.client import ConfigChanged, change_topic_config, get_topic_config, topic_exists

log = logging.getLogger(__name__)

#: Topic config -> the broker keys that supply its default, highest precedence first (Kafka's
#: LogConfig synonyms: ``log.retention.ms`` wins over ``log.retention.hours``).
TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {
    **{topic_key: (broker_key,) for topic_key, broker_key in TOPIC_TO_BROKER.items()},
    **{topic_key: () for topic_key in TOPIC_ONLY_PROPERTIES},
    "retention.ms": ("log.retention.ms", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
}


def format_value(value: Any) -> str:
    """A config value as Kafka prints it: ``true``/``false``, lists comma-separated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict:
    return {"name": name, "value": value, "source": int(source)}


def topic_config_synonyms(config: BrokerConfig, name: str, overrides: Mapping[str, str]) -> list[dict]:
    """Where topic config ``name``'s value may come from, highest precedence first: its override,
    each broker synonym set in server.properties, and the last synonym's default."""
    out = []
    if name in overrides:
        try:
            value = format_value(validate_topic_configs({name: overrides[name]})[name])
        except ConfigError:
            value = overrides[name]  # written by hand, past validation: shown as stored
        out.append(_synonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
    broker_keys = TOPIC_SYNONYMS[name]
    if not broker_keys:  # a topic-only config: its own default
        out.append(
            _synonym(name, format_value(TOPIC_ONLY_PROPERTIES[name].default), ConfigSource.DEFAULT_CONFIG)
        )
        return out
    for key in broker_keys:
        if key in config.given:
            out.append(_synonym(key, format_value(config[key]), ConfigSource.STATIC_BROKER_CONFIG))
    default_key = broker_keys[-1]
    out.append(
        _synonym(
            default_key, format_value(BROKER_PROPERTIES[default_key].default), ConfigSource.DEFAULT_CONFIG
        )
    )
    return out


def topic_config_entries(
    config: BrokerConfig,
    overrides: Mapping[str, str],
    keys: Collection[str] | None = None,
    include_synonyms: bool = False,
) -> list[dict]:
    """DescribeConfigs' entries for a topic with these overrides: every topic-level config (only
    ``keys`` when given), sorted by name. The value is the effective one: the override's, else
    the broker's (a static ``log.retention.hours`` shows as ``retention.ms`` in milliseconds)."""
    entries = []
    for name in sorted(TOPIC_SYNONYMS):
        if keys is not None and name not in keys:
            continue
        synonyms = topic_config_synonyms(config, name, overrides)
        top = synonyms[0]
        if top["source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG or name in TOPIC_ONLY_PROPERTIES:
            value = top["value"]
        else:
            value = format_value(config[TOPIC_TO_BROKER[name]])
        entries.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": top["source"],
                "is_sensitive": False,
                "synonyms": synonyms if include_synonyms else [],
            }
        )
    return entries


def broker_config_entries(
    config: BrokerConfig,
    keys: Collection[str] | None = None,
    include_synonyms: bool = False,
    own: Mapping[str, str] | None = None,
    default: Mapping[str, str] | None = None,
) -> list[dict]:
    """DescribeConfigs' entries for this broker: every broker property, sorted, with its synonyms
    highest precedence first: a dynamic override of this broker (DYNAMIC_BROKER_CONFIG), the
    cluster-wide one (DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties (STATIC_BROKER_CONFIG),
    the default. Only the dynamic configs (the replication throttle rates) are not read-only."""
    explicit = config.explicit()
    own, default = own or {}, default or {}
    entries = []
    for name in sorted(BROKER_PROPERTIES):
        if keys is not None and name not in keys:
            continue
        synonyms = []
        if name in own:
            synonyms.append(_synonym(name, own[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in default:
            synonyms.append(_synonym(name, default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        # server.properties (or a key derived from one that was set), then the default
        static = name in explicit
        source = ConfigSource.STATIC_BROKER_CONFIG if static else ConfigSource.DEFAULT_CONFIG
        synonyms.append(_synonym(name, format_value(config[name]), source))
        if static:
            synonyms.append(
                _synonym(name, format_value(BROKER_PROPERTIES[name].default), ConfigSource.DEFAULT_CONFIG)
            )
        entries.append(
            {
                "name": name,
                "value": synonyms[0]["value"],
                "read_only": name not in DYNAMIC_BROKER_CONFIGS,
                "config_source": synonyms[0]["source"],
                "is_sensitive": False,
                "synonyms": synonyms if include_synonyms else [],
            }
        )
    return entries


def dynamic_default_entries(
    default: Mapping[str, str], keys: Collection[str] | None = None, include_synonyms: bool = False
) -> list[dict]:
    """DescribeConfigs' entries for the cluster-wide broker entity (name ""): its overrides only."""
    return [
        {
            "name": name,
            "value": value,
            "read_only": False,
            "config_source": int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            "is_sensitive": False,
            "synonyms": [_synonym(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
            if include_synonyms
            else [],
        }
        for name, value in sorted(default.items())
        if keys is None or name in keys
    ]


def _result(resource: dict, error: KafkaError | None, **extra: Any) -> dict:
    return {
        "error_code": int(error.code) if error else int(ErrorCode.NONE),
        "error_message": error.message if error else None,
        "resource_type": resource["resource_type"],
        "resource_name": resource["resource_name"],
        **extra,
    }


def _check_broker_name(config: BrokerConfig, name: str) -> None:
    """A BROKER resource must name this broker: each broker describes its own static config."""
    broker_id = int(dynamic_broker_config.broker_entity(name))  # "" was answered before
    if broker_id != config.broker_id:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {config.broker_id} but received {broker_id}: "
            "send a broker's DescribeConfigs to that broker",
        )


async def _existing_topic(zk: ZkBridge, name: str) -> None:
    validate_topic_name(name)
    if not await topic_exists(zk, name):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")


async def describe_configs(zk: ZkBridge, config: BrokerConfig, body: dict) -> dict:
    """The DescribeConfigs response for a validated request body."""
    results = []
    for resource in body["resources"]:
        keys = resource["configuration_keys"]
        keys = None if keys is None else set(keys)
        try:
            kind, name = resource["resource_type"], resource["resource_name"]
            if kind == ConfigResourceType.TOPIC:
                await _existing_topic(zk, name)
                overrides = await get_topic_config(zk, name)
                configs = topic_config_entries(config, overrides, keys, body["include_synonyms"])
            elif kind == ConfigResourceType.BROKER and name == "":
                _, default = await dynamic_broker_config.dynamic_overrides(zk, config.broker_id)
                configs = dynamic_default_entries(default, keys, body["include_synonyms"])
            elif kind == ConfigResourceType.BROKER:
                _check_broker_name(config, name)
                own, default = await dynamic_broker_config.dynamic_overrides(zk, config.broker_id)
                configs = broker_config_entries(config, keys, body["include_synonyms"], own, default)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")
        except KafkaError as exc:
            results.append(_result(resource, exc, configs=[]))
        except Exception as exc:
            log.exception("Error processing describe configs request for resource %s", resource)
            results.append(
                _result(resource, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)), configs=[])
            )
        else:
            results.append(_result(resource, None, configs=configs))
    return {"throttle_time_ms": 0, "results": results}


async def alter_configs(zk: ZkBridge, body: dict) -> dict:
    """The AlterConfigs response for a validated request body."""
    responses = [await alter_resource(zk, r, body["validate_only"]) for r in body["resources"]]
    return {"throttle_time_ms": 0, "responses": responses}


async def alter_resource(
    zk: ZkBridge, resource: dict, validate_only: bool, version: int | None = None
) -> dict:
    """One resource's AlterConfigs answer. With ``version`` (IncrementalAlterConfigs), the
    overrides are written only if their znode is still at that version: a refused write raises
    :class:`~zk.client.ConfigChanged`, for the caller to read and apply again."""
    try:
        await _alter(zk, resource, validate_only, version)
    except ConfigChanged:
        raise
    except KafkaError as exc:
        return _result(resource, exc)
    except Exception as exc:
        log.exception("Error processing alter configs request for resource %s", resource)
        return _result(resource, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)))
    return _result(resource, None)


async def _alter(zk: ZkBridge, resource: dict, validate_only: bool, version: int | None) -> None:
    kind, name = resource["resource_type"], resource["resource_name"]
    nulls = [c["name"] for c in resource["configs"] if c["value"] is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    if kind == ConfigResourceType.BROKER:
        configs = {c["name"]: c["value"] for c in resource["configs"]}
        await dynamic_broker_config.alter_broker_configs(zk, name, configs, validate_only, version)
        return
    if kind != ConfigResourceType.TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"AlterConfigs is only supported for topics and brokers, but resource type is {kind}",
        )
    configs = {c["name"]: c["value"] for c in resource["configs"]}
    await _existing_topic(zk, name)
    try:
        validate_topic_configs(configs)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if validate_only:
        return
    await change_topic_config(zk, name, configs, version)
    log.info("Updated the config overrides of topic %s: %s", name, configs)
