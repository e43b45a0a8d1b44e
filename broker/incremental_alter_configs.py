"""IncrementalAlterConfigs at the broker (KIP-339; Kafka's ZkAdminManager.incrementalAlterConfigs
with the request checks of 3.x's ConfigAdminManager; docs/operations.md "Incremental changes,
the cluster and log dirs").

Per resource, as ZooKeeper-era Kafka does it: read the resource's overrides from ZooKeeper
(``/config/topics/<t>``, or ``/config/brokers/<id>`` and ``<default>`` for the name ""), apply
each operation to them, and hand the result to AlterConfigs
(:func:`broker.config_admin.alter_configs`), which validates it as it validates its own requests
(an unknown name or a bad value is INVALID_CONFIG and nothing is written; a broker config that
is not dynamic is INVALID_CONFIG "Cannot update these configs dynamically"), writes the whole set
and notifies the brokers; ``validate_only`` stops after the validation. The operations (Kafka's
AlterConfigOp.OpType): SET puts the value, DELETE removes the override (of a name not overridden:
nothing to do), APPEND adds the values a list-typed config lacks, SUBTRACT removes the values
given. APPEND and SUBTRACT start from the override, else from the value the config has now (the
broker's default for the topic key, or the broker's property), and are INVALID_CONFIG for a
config that is not a list (Kafka 3.x; :mod:`broker.config_kinds` says which are).

Refused before anything is read, with INVALID_REQUEST: a resource listed twice (both copies), a
config named twice in one resource, a null value for any operation but DELETE, an unknown
operation, a resource type other than TOPIC and BROKER.

Unlike ZooKeeper-era Kafka, two alters of one resource at once do not lose one's change: the
write is conditional on the version of the overrides' znode read (a create when there was none),
and a write refused because the znode changed meanwhile reads it again and applies the
operations again, up to ``MAX_ATTEMPTS`` times (docs/design.md "Incremental changes without lost
updates"). The operations are idempotent, so a write the ZooKeeper bridge resent after a drop
that had landed the first time is applied again harmlessly.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from broker import config_admin
from broker.config import BrokerConfig
from broker.config_kinds import config_prop, is_list
from broker.config_prop import Prop
from broker.dynamic_broker_config import broker_entity
from client.protocol.admin_schemas import AlterConfigOpType
from client.protocol.api import ConfigResourceType
from client.protocol.errors import ErrorCode, KafkaError
from controller.topic_admin import validate_topic_name
from zk.bridge import ZkBridge
from zk.client import ConfigChanged, get_broker_config_versioned, get_topic_config_versioned

log = logging.getLogger(__name__)

#: Reads and conditional writes of one resource before its alteration fails as contended.
MAX_ATTEMPTS = 10


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def check_operations(configs: Sequence[dict]) -> None:
    """Raises INVALID_REQUEST for a name given twice, an unknown operation or a null value."""
    names = [c["name"] for c in configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    known = {int(op) for op in AlterConfigOpType}
    for c in configs:
        if c["config_operation"] not in known:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Unknown config operation {c['config_operation']} for {c['name']}"
            )
    nulls = [
        c["name"] for c in configs if c["config_operation"] != AlterConfigOpType.DELETE and c["value"] is None
    ]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")


def apply_operations(
    overrides: Mapping[str, str],
    configs: Sequence[dict],
    prop_of: Callable[[str], Prop | None],
    value_now: Callable[[str], str],
) -> dict[str, str]:
    """The overrides after ``configs``' operations, in order. ``prop_of(name)`` is the config's
    property (None: unknown), ``value_now(name)`` its value when it has no override."""
    updated = dict(overrides)
    for c in configs:
        name, value, op = c["name"], c["value"], AlterConfigOpType(c["config_operation"])
        if op is AlterConfigOpType.SET:
            updated[name] = value
            continue
        if op is AlterConfigOpType.DELETE:
            updated.pop(name, None)
            continue
        prop = prop_of(name)
        if prop is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {name}")
        if not is_list(prop):
            verb = "append" if op is AlterConfigOpType.APPEND else "subtract"
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}"
            )
        old = _items(updated[name] if name in updated else value_now(name))
        given = _items(value)
        if op is AlterConfigOpType.APPEND:
            new = old + [item for item in dict.fromkeys(given) if item not in old]
        else:
            new = [item for item in old if item not in given]
        updated[name] = ",".join(new)
    return updated


async def _altered_resource(zk: ZkBridge, config: BrokerConfig, resource: dict) -> tuple[dict, int]:
    """The AlterConfigs resource (every override, as it would be) for one incremental resource,
    and the version of the overrides' znode it was computed from."""
    check_operations(resource["configs"])
    kind, name = resource["resource_type"], resource["resource_name"]
    if kind == ConfigResourceType.TOPIC:
        validate_topic_name(name)
        overrides, version = await get_topic_config_versioned(zk, name)
        defaults = config.topic_defaults()

        def value_now(key: str) -> str:
            return config_admin.format_value(defaults[key]) if key in defaults else ""

    elif kind == ConfigResourceType.BROKER:
        overrides, version = await get_broker_config_versioned(zk, broker_entity(name))

        def value_now(key: str) -> str:
            return config_admin.format_value(config[key])

    else:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"IncrementalAlterConfigs is only supported for topics and brokers, but resource type is {kind}",
        )
    updated = apply_operations(overrides, resource["configs"], lambda key: config_prop(kind, key), value_now)
    altered = {
        "resource_type": kind,
        "resource_name": name,
        "configs": [{"name": key, "value": value} for key, value in updated.items()],
    }
    return altered, version


async def _alter_incrementally(
    zk: ZkBridge, config: BrokerConfig, resource: dict, validate_only: bool
) -> dict:
    """Read, apply, write only if nothing changed meanwhile; else read and apply again."""
    for _ in range(MAX_ATTEMPTS):
        altered, version = await _altered_resource(zk, config, resource)
        try:
            return await config_admin.alter_resource(zk, altered, validate_only, version)
        except ConfigChanged as exc:
            log.info("%s: applying the incremental changes again", exc)
    raise KafkaError(
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"the configs of {resource['resource_name']!r} changed {MAX_ATTEMPTS} times while being altered",
    )


def _refusal(resource: dict, error: KafkaError) -> dict:
    return {
        "error_code": error.code,
        "error_message": error.message,
        "resource_type": resource["resource_type"],
        "resource_name": resource["resource_name"],
    }


async def incremental_alter_configs(zk: ZkBridge, config: BrokerConfig, body: dict) -> dict:
    """The IncrementalAlterConfigs response for a validated request body, one answer per
    resource in the request's order."""
    resources = body["resources"]
    counts = Counter((r["resource_type"], r["resource_name"]) for r in resources)
    responses = []
    for resource in resources:
        try:
            if counts[(resource["resource_type"], resource["resource_name"])] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            responses.append(await _alter_incrementally(zk, config, resource, body["validate_only"]))
        except KafkaError as exc:
            responses.append(_refusal(resource, exc))
        except Exception as exc:  # ZooKeeper unreachable: this resource fails, the others go on
            log.exception("Error processing incremental alter configs request for resource %s", resource)
            responses.append(_refusal(resource, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))))
    return {"throttle_time_ms": 0, "responses": responses}
