"""Each config's type as Kafka's ``ConfigDef.Type`` names it: what DescribeConfigs v3+ reports as
``config_type`` with the property's ``documentation`` (KIP-569), and which configs take
IncrementalAlterConfigs' APPEND and SUBTRACT (KIP-339: list-typed ones only; docs/operations.md
"Topic-level overrides").

A topic config's property is its broker key's (``retention.ms`` is typed and documented as
``log.retention.ms``) or its own for the topic-only ones. Our ``int`` properties take any 64-bit
value unless bounded, so they are LONG unless their range fits an int32. The replication throttle
lists (``leader.replication.throttled.replicas`` and ``follower...``) are Kafka LIST configs even
though :mod:`broker.config` keeps them as one checked string: a comma-separated list either way.
"""

from __future__ import annotations

from dataclasses import replace
from enum import IntEnum

from broker.config import BROKER_PROPERTIES, TOPIC_ONLY_PROPERTIES, TOPIC_TO_BROKER
from broker.config_prop import INT_MAX, Prop
from client.protocol.api import ConfigResourceType


class ConfigType(IntEnum):
    """DescribeConfigs' ``config_type`` (Kafka's DescribeConfigsResponse.ConfigType)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


#: Topic configs Kafka declares LIST that broker.config parses as a single string.
LIST_STRINGS = frozenset(TOPIC_ONLY_PROPERTIES)


def topic_prop(name: str) -> Prop | None:
    """The property of topic config ``name`` (named as the topic config), None if unknown."""
    if name in TOPIC_ONLY_PROPERTIES:
        return TOPIC_ONLY_PROPERTIES[name]
    broker_key = TOPIC_TO_BROKER.get(name)
    return None if broker_key is None else replace(BROKER_PROPERTIES[broker_key], name=name)


def config_prop(resource_type: int, name: str) -> Prop | None:
    """The property of config ``name`` of a TOPIC or BROKER resource; None for anything else."""
    if resource_type == ConfigResourceType.TOPIC:
        return topic_prop(name)
    if resource_type == ConfigResourceType.BROKER:
        return BROKER_PROPERTIES.get(name)
    return None


def is_list(prop: Prop) -> bool:
    return prop.kind == "list" or prop.name in LIST_STRINGS


def config_type(prop: Prop | None) -> ConfigType:
    if prop is None:
        return ConfigType.UNKNOWN
    if is_list(prop):
        return ConfigType.LIST
    if prop.kind == "int":
        bounded = prop.low is not None and prop.high is not None
        return (
            ConfigType.INT
            if bounded and prop.low >= -INT_MAX - 1 and prop.high <= INT_MAX
            else ConfigType.LONG
        )
    return {"bool": ConfigType.BOOLEAN, "double": ConfigType.DOUBLE, "str": ConfigType.STRING}.get(
        prop.kind, ConfigType.UNKNOWN
    )


def documentation(prop: Prop | None) -> str | None:
    """The property's doc, None when it has none (Kafka's null documentation)."""
    if prop is None or not prop.doc:
        return None
    return prop.doc
