"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs' Kafka translations
(broker/kafka_protocol/admin_apis_configs.py) at the oldest and newest version each advertises, and
every version in between: values, sources and synonyms, KIP-569's config type and documentation
(sent only when asked), the operations of KIP-339. The round trips and their oracle:
tests/unit/kafka_admin_roundtrip.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.config_kinds import ConfigType
from broker.kafka_protocol import entities
from client.protocol.api import ApiKey, ConfigSource
from tests.unit.kafka_admin_roundtrip import (
    BROKER,
    RANGES,
    TOPIC,
    as_read,
    body_of,
    decoded,
    ends,
    request_module,
)

# -- the three APIs -----------------------------------------------------------------------------


def entry(name: str, value: str, source: ConfigSource, synonyms: list) -> dict:
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "config_source": int(source),
        "is_sensitive": False,
        "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in synonyms],
    }


#: A topic described with its synonyms, and a broker resource refused.
DESCRIBED = {
    "results": [
        {
            "error_code": 0,
            "error_message": None,
            "resource_type": TOPIC,
            "resource_name": "t",
            "configs": [
                entry(
                    "retention.ms",
                    "1000",
                    ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    [
                        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
                    ],
                ),
                entry(
                    "leader.replication.throttled.replicas",
                    "0:1",
                    ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    [("leader.replication.throttled.replicas", "0:1", ConfigSource.DYNAMIC_TOPIC_CONFIG)],
                ),
                entry("min.cleanable.dirty.ratio", "0.5", ConfigSource.DEFAULT_CONFIG, []),
                entry("unclean.leader.election.enable", "false", ConfigSource.DEFAULT_CONFIG, []),
            ],
        },
        {
            "error_code": 42,
            "error_message": "Unexpected broker id, expected 2 but received 1",
            "resource_type": BROKER,
            "resource_name": "1",
            "configs": [],
        },
    ]
}


@pytest.mark.parametrize("version", ends(ApiKey.DESCRIBE_CONFIGS))
def test_describe_configs(version: int) -> None:
    m = request_module(ApiKey.DESCRIBE_CONFIGS, version)
    request = entities.make(
        m.DescribeConfigsRequest,
        resources=(
            m.DescribeConfigsResource(
                resource_type=TOPIC, resource_name="t", configuration_keys=("retention.ms", "cleanup.policy")
            ),
            m.DescribeConfigsResource(resource_type=BROKER, resource_name="1", configuration_keys=None),
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    assert body_of(ApiKey.DESCRIBE_CONFIGS, version, request) == {
        "resources": [
            {
                "resource_type": TOPIC,
                "resource_name": "t",
                "configuration_keys": ["retention.ms", "cleanup.policy"],
            },
            {"resource_type": BROKER, "resource_name": "1", "configuration_keys": None},
        ],
        "include_synonyms": True,
    }

    got = decoded(
        ApiKey.DESCRIBE_CONFIGS, version, DESCRIBED, as_read(ApiKey.DESCRIBE_CONFIGS, version, request)
    )
    topic, broker = got["results"]
    refusal = (42, "Unexpected broker id, expected 2 but received 1", BROKER, "1")
    assert (
        tuple(broker[k] for k in ("error_code", "error_message", "resource_type", "resource_name")) == refusal
    )
    assert (topic["error_code"], topic["resource_type"], topic["resource_name"]) == (0, TOPIC, "t")
    retention, throttled, ratio, unclean = topic["configs"]
    assert (retention["name"], retention["value"], retention["config_source"], retention["read_only"]) == (
        "retention.ms",
        "1000",
        int(ConfigSource.DYNAMIC_TOPIC_CONFIG),
        False,
    )
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", "1000", 1),
        ("log.retention.hours", "168", 5),
    ]
    if version >= 3:  # KIP-569: the property's type and doc
        types = [c["config_type"] for c in topic["configs"]]
        assert types == [ConfigType.LONG, ConfigType.LIST, ConfigType.DOUBLE, ConfigType.BOOLEAN]
        assert retention["documentation"] is None  # log.retention.ms has no doc
        assert throttled["documentation"].startswith("Replicas whose leader-side replication is throttled")


def test_describe_configs_sends_documentation_only_when_asked() -> None:
    m = request_module(ApiKey.DESCRIBE_CONFIGS, 4)
    resource = m.DescribeConfigsResource(resource_type=TOPIC, resource_name="t", configuration_keys=None)
    request = m.DescribeConfigsRequest(
        resources=(resource,), include_synonyms=False, include_documentation=False
    )
    config = {
        "name": "follower.replication.throttled.replicas",
        "value": "",
        "read_only": False,
        "config_source": 5,
        "is_sensitive": False,
        "synonyms": [],
    }
    answer = {
        "results": [
            {
                "error_code": 0,
                "error_message": None,
                "resource_type": TOPIC,
                "resource_name": "t",
                "configs": [config],
            }
        ]
    }
    (entry,) = decoded(ApiKey.DESCRIBE_CONFIGS, 4, answer, request)["results"][0]["configs"]
    assert (entry["config_type"], entry["documentation"]) == (ConfigType.LIST, None)


def alter_requests(key: ApiKey, version: int) -> Any:
    m = request_module(key, version)
    top = "AlterConfigsRequest" if key is ApiKey.ALTER_CONFIGS else "IncrementalAlterConfigsRequest"
    configs = [("retention.ms", 0, "5"), ("segment.ms", 1, None), ("cleanup.policy", 2, "compact")]
    return getattr(m, top)(
        resources=(
            m.AlterConfigsResource(
                resource_type=TOPIC,
                resource_name="t",
                configs=tuple(
                    entities.make(m.AlterableConfig, name=n, config_operation=op, value=v)
                    for n, op, v in configs
                ),
            ),
            m.AlterConfigsResource(
                resource_type=BROKER,
                resource_name="",
                configs=(
                    entities.make(
                        m.AlterableConfig,
                        name="leader.replication.throttled.rate",
                        config_operation=0,
                        value="100",
                    ),
                ),
            ),
        ),
        validate_only=True,
    )


ALTER_ANSWER = {
    "responses": [
        {"error_code": 0, "error_message": None, "resource_type": TOPIC, "resource_name": "t"},
        {
            "error_code": 40,
            "error_message": "Cannot update these configs dynamically: x",
            "resource_type": BROKER,
            "resource_name": "",
        },
    ]
}


@pytest.mark.parametrize("version", ends(ApiKey.ALTER_CONFIGS))
def test_alter_configs(version: int) -> None:
    body = body_of(ApiKey.ALTER_CONFIGS, version, alter_requests(ApiKey.ALTER_CONFIGS, version))
    assert body == {
        "resources": [
            {
                "resource_type": TOPIC,
                "resource_name": "t",
                "configs": [
                    {"name": "retention.ms", "value": "5"},
                    {"name": "segment.ms", "value": None},  # refused by the handler, as Kafka does
                    {"name": "cleanup.policy", "value": "compact"},
                ],
            },
            {
                "resource_type": BROKER,
                "resource_name": "",
                "configs": [{"name": "leader.replication.throttled.rate", "value": "100"}],
            },
        ],
        "validate_only": True,
    }
    got = decoded(ApiKey.ALTER_CONFIGS, version, ALTER_ANSWER)
    assert [
        (r["error_code"], r["error_message"], r["resource_type"], r["resource_name"])
        for r in got["responses"]
    ] == [
        (0, None, TOPIC, "t"),
        (40, "Cannot update these configs dynamically: x", BROKER, ""),
    ]


@pytest.mark.parametrize("version", ends(ApiKey.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_configs(version: int) -> None:
    request = alter_requests(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    body = body_of(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, request)
    assert body["validate_only"] is True
    assert body["resources"][0]["configs"] == [
        {"name": "retention.ms", "config_operation": 0, "value": "5"},
        {"name": "segment.ms", "config_operation": 1, "value": None},
        {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
    ]
    assert body["resources"][1] == {
        "resource_type": BROKER,
        "resource_name": "",
        "configs": [{"name": "leader.replication.throttled.rate", "config_operation": 0, "value": "100"}],
    }
    got = decoded(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, ALTER_ANSWER)
    assert [
        (r["error_code"], r["error_message"], r["resource_type"], r["resource_name"])
        for r in got["responses"]
    ] == [
        (0, None, TOPIC, "t"),
        (40, "Cannot update these configs dynamically: x", BROKER, ""),
    ]


#: The tests above, at each version strictly inside the advertised range.
BETWEEN = {
    ApiKey.DESCRIBE_CONFIGS: test_describe_configs,
    ApiKey.ALTER_CONFIGS: test_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: test_incremental_alter_configs,
}


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k in BETWEEN for v in range(RANGES[k][0] + 1, RANGES[k][1])],
)
def test_the_versions_between(key: ApiKey, version: int) -> None:
    BETWEEN[key](version)
