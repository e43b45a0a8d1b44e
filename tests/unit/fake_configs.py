"""DescribeConfigs and AlterConfigs for tests/unit/fake_cluster.py: topic overrides and dynamic
broker configs (KIP-133, KIP-226) kept in two dicts, served with the broker's contract.

* TOPIC: the topic's overrides (DYNAMIC_TOPIC_CONFIG) and a few defaults (DEFAULT_CONFIG);
  AlterConfigs replaces every override (Kafka's non-incremental AlterConfigs), refuses an unknown
  name and a throttled-replicas value that is not Kafka's ThrottledReplicaListValidator format
  (``""``, ``"*"`` or ``"p:b,p:b"``) with INVALID_CONFIG.
* BROKER ``"<id>"``: described only by that broker (INVALID_REQUEST elsewhere), every property:
  ``broker.id`` and ``num.partitions`` read-only, the dynamic keys (the two replication throttle
  rates) from the broker's own override (DYNAMIC_BROKER_CONFIG), else the default entity's
  (DYNAMIC_DEFAULT_BROKER_CONFIG), else their default (DEFAULT_CONFIG, unthrottled), and any other
  override a test wrote into :attr:`broker_configs`. BROKER ``""`` (the cluster-wide default, at
  any broker): its overrides only. AlterConfigs of either, at any broker, replaces the entity's
  overrides; a key outside :attr:`dynamic_broker_keys` is INVALID_CONFIG "Cannot update these
  configs dynamically: <keys>".
"""

from __future__ import annotations

import re

from client.protocol.api import ConfigResourceType, ConfigSource
from client.protocol.errors import ErrorCode, KafkaError

UNTHROTTLED = "9223372036854775807"
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
TOPIC_DEFAULTS = {
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "min.insync.replicas": "1",
    "retention.ms": "604800000",
}
_REPLICA_LIST = re.compile(r"^(\*|\d+:\d+(,\d+:\d+)*)?$")


def _entry(name: str, value: str | None, source: ConfigSource, read_only: bool, synonyms: list) -> dict:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": int(source),
        "is_sensitive": False,
        "synonyms": synonyms,
    }


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict:
    return {"name": name, "value": value, "source": int(source)}


class FakeConfigs:
    """The config APIs of FakeCluster (a mixin: the cluster owns ``topics`` and the dicts)."""

    topics: dict
    #: Each topic's overrides, as /config/topics/<t> would hold them.
    topic_configs: dict[str, dict[str, str]]
    #: Dynamic broker overrides by entity: "<id>" for one broker, "" for the cluster default.
    broker_configs: dict[str, dict[str, str]]
    #: The broker configs AlterConfigs may change (a test may widen it).
    dynamic_broker_keys: set[str]

    # -- DescribeConfigs ---------------------------------------------------------------------
    def _topic_entries(self, topic: str) -> list[dict]:
        if topic not in self.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
        overrides = self.topic_configs.get(topic, {})
        entries = []
        for name in sorted({*TOPIC_DEFAULTS, *overrides}):
            synonyms = [_synonym(name, TOPIC_DEFAULTS.get(name), ConfigSource.DEFAULT_CONFIG)]
            if name in overrides:
                synonyms.insert(0, _synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
            top = synonyms[0]
            entries.append(_entry(name, top["value"], ConfigSource(top["source"]), False, synonyms))
        return entries

    def _broker_entries(self, node: int, name: str) -> list[dict]:
        default = self.broker_configs.get("", {})
        if name == "":
            source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            return [_entry(k, v, source, False, [_synonym(k, v, source)]) for k, v in sorted(default.items())]
        if not name.isdigit() or int(name) != node:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {node} but received {name}: "
                "send a broker's DescribeConfigs to that broker",
            )
        own = self.broker_configs.get(name, {})
        entries = [
            _entry("broker.id", name, ConfigSource.STATIC_BROKER_CONFIG, True, []),
            _entry("num.partitions", "1", ConfigSource.DEFAULT_CONFIG, True, []),
        ]
        for key in sorted({*self.dynamic_broker_keys, *own}):
            synonyms = []
            if key in own:
                synonyms.append(_synonym(key, own[key], ConfigSource.DYNAMIC_BROKER_CONFIG))
            if key in default:
                synonyms.append(_synonym(key, default[key], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
            if key in RATE_KEYS:
                synonyms.append(_synonym(key, UNTHROTTLED, ConfigSource.DEFAULT_CONFIG))
            if not synonyms:  # a dynamic key a test added, set nowhere
                continue
            top = synonyms[0]
            entries.append(_entry(key, top["value"], ConfigSource(top["source"]), False, synonyms))
        return entries

    async def _describe_configs(self, node: int, body: dict) -> dict:
        results = []
        for r in body["resources"]:
            kind, name, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
            item = {"resource_type": kind, "resource_name": name, "error_code": 0, "error_message": None}
            try:
                if kind == ConfigResourceType.TOPIC:
                    entries = self._topic_entries(name)
                elif kind == ConfigResourceType.BROKER:
                    entries = self._broker_entries(node, name)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")
            except KafkaError as exc:
                item.update(error_code=int(exc.code), error_message=exc.message, configs=[])
            else:
                for e in entries:
                    e["synonyms"] = e["synonyms"] if body["include_synonyms"] else []
                item["configs"] = [e for e in entries if keys is None or e["name"] in keys]
            results.append(item)
        return {"throttle_time_ms": 0, "results": results}

    # -- AlterConfigs ------------------------------------------------------------------------
    def _checked_topic(self, name: str, configs: dict[str, str]) -> None:
        if name not in self.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        unknown = sorted(set(configs) - set(TOPIC_DEFAULTS))
        if unknown:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {unknown[0]}")
        for key in REPLICAS_KEYS:
            if key in configs and not _REPLICA_LIST.match(configs[key]):
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {configs[key]} for configuration {key}: must be the literal '*' or a "
                    "list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
                )

    def _checked_broker(self, name: str, configs: dict[str, str]) -> None:
        if name and not name.isdigit():
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name!r}")
        static = sorted(set(configs) - self.dynamic_broker_keys)
        if static:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Cannot update these configs dynamically: {', '.join(static)}"
            )
        for key, value in configs.items():
            if key in RATE_KEYS and not (value.isdigit() and int(value) <= int(UNTHROTTLED)):
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {value} for configuration {key}: Not a LONG >= 0",
                )

    async def _alter_configs(self, node: int, body: dict) -> dict:
        responses = []
        for r in body["resources"]:
            kind, name = r["resource_type"], r["resource_name"]
            item = {"resource_type": kind, "resource_name": name, "error_code": 0, "error_message": None}
            configs = {c["name"]: c["value"] for c in r["configs"]}
            try:
                if any(v is None for v in configs.values()):
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported")
                if kind == ConfigResourceType.TOPIC:
                    self._checked_topic(name, configs)
                    store = self.topic_configs
                elif kind == ConfigResourceType.BROKER:
                    self._checked_broker(name, configs)
                    store = self.broker_configs
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")
            except KafkaError as exc:
                item.update(error_code=int(exc.code), error_message=exc.message)
            else:
                if not body["validate_only"]:
                    store[name] = configs
                    if not configs:
                        del store[name]
            responses.append(item)
        return {"throttle_time_ms": 0, "responses": responses}
