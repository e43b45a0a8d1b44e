"""DescribeConfigs (KIP-133, KIP-226's synonyms, KIP-569's type and documentation), AlterConfigs
and IncrementalAlterConfigs (KIP-339) as the Kafka listener serves them (docs/design.md "Two wire
protocols"; the handlers: broker/config_admin.py and broker/incremental_alter_configs.py,
docs/operations.md "Topic-level overrides").

DescribeConfigs v1-v4: v0 (``is_default`` instead of ``config_source``) is gone from Kafka 4.0's
schemas, and librdkafka 2.x asks for v1 (AlterConfigs <=2, IncrementalAlterConfigs <=1); v3 adds
``config_type`` and ``documentation``, which come from the property (:mod:`broker.config_kinds`;
documentation only when the request asks for it, null when the property has none); v4 is v3
flexible. AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1
are every version there is; their fields are ours.
"""

from __future__ import annotations

from typing import Any

from broker.config_kinds import config_prop, config_type, documentation
from broker.kafka_protocol.entities import make, response_module
from broker.kafka_protocol.kafka_api import KafkaApi
from client.protocol.api import ApiKey


def _describe_configs_body(request: Any, version: int) -> dict:
    return {
        "resources": [
            {
                "resource_type": int(r.resource_type),
                "resource_name": str(r.resource_name),
                "configuration_keys": None
                if r.configuration_keys is None
                else [str(k) for k in r.configuration_keys],
            }
            for r in request.resources
        ],
        "include_synonyms": bool(getattr(request, "include_synonyms", False)),
    }


def _config_entry(m: Any, resource_type: int, entry: dict, with_docs: bool) -> Any:
    prop = config_prop(resource_type, entry["name"])
    return make(
        m.DescribeConfigsResourceResult,
        name=entry["name"],
        value=entry["value"],
        read_only=entry["read_only"],
        config_source=entry["config_source"],
        is_sensitive=entry["is_sensitive"],
        synonyms=tuple(
            make(m.DescribeConfigsSynonym, name=s["name"], value=s["value"], source=s["source"])
            for s in entry["synonyms"]
        ),
        config_type=int(config_type(prop)),
        documentation=documentation(prop) if with_docs else None,
    )


def _describe_configs_response(body: dict, request: Any, version: int) -> Any:
    m = response_module(ApiKey.DESCRIBE_CONFIGS, version)
    with_docs = bool(getattr(request, "include_documentation", False))
    results = tuple(
        make(
            m.DescribeConfigsResult,
            error_code=r["error_code"],
            error_message=r.get("error_message"),
            resource_type=r["resource_type"],
            resource_name=r["resource_name"],
            configs=tuple(_config_entry(m, r["resource_type"], e, with_docs) for e in r["configs"]),
        )
        for r in body["results"]
    )
    return make(m.DescribeConfigsResponse, throttle_time=body.get("throttle_time_ms", 0), results=results)


def _alter_configs_body(request: Any, version: int) -> dict:
    return {
        "resources": [
            {
                "resource_type": int(r.resource_type),
                "resource_name": str(r.resource_name),
                "configs": [{"name": str(c.name), "value": c.value} for c in r.configs],
            }
            for r in request.resources
        ],
        "validate_only": bool(request.validate_only),
    }


def _incremental_alter_configs_body(request: Any, version: int) -> dict:
    return {
        "resources": [
            {
                "resource_type": int(r.resource_type),
                "resource_name": str(r.resource_name),
                "configs": [
                    {"name": str(c.name), "config_operation": int(c.config_operation), "value": c.value}
                    for c in r.configs
                ],
            }
            for r in request.resources
        ],
        "validate_only": bool(request.validate_only),
    }


def _alter_response(key: ApiKey, top: str) -> Any:
    """The to_response of AlterConfigs and IncrementalAlterConfigs (named ``top`` in kio)."""

    def to_response(body: dict, request: Any, version: int) -> Any:
        m = response_module(key, version)
        responses = tuple(
            make(
                m.AlterConfigsResourceResponse,
                error_code=r["error_code"],
                error_message=r.get("error_message"),
                resource_type=r["resource_type"],
                resource_name=r["resource_name"],
            )
            for r in body["responses"]
        )
        return make(getattr(m, top), throttle_time=body.get("throttle_time_ms", 0), responses=responses)

    return to_response


CONFIG_APIS: tuple[KafkaApi, ...] = (
    KafkaApi(ApiKey.DESCRIBE_CONFIGS, 1, 4, _describe_configs_body, _describe_configs_response),
    KafkaApi(
        ApiKey.ALTER_CONFIGS,
        0,
        2,
        _alter_configs_body,
        _alter_response(ApiKey.ALTER_CONFIGS, "AlterConfigsResponse"),
    ),
    KafkaApi(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        0,
        1,
        _incremental_alter_configs_body,
        _alter_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsResponse"),
    ),
)
