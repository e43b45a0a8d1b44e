"""Every API the Kafka listener serves, with its versions, and ApiVersions, which advertises
exactly them (docs/operations.md "Using Kafka's clients" lists the ranges).

SASL, ACLs, transactions and the KRaft-only APIs are not here: asked for, they are answered
UNSUPPORTED_VERSION by the codec, in the shape of their own response.
"""

from __future__ import annotations

from typing import Any

from broker.kafka_protocol.admin_apis import ADMIN_APIS
from broker.kafka_protocol.data_apis import DATA_APIS
from broker.kafka_protocol.entities import make, response_class, response_module
from broker.kafka_protocol.group_apis import GROUP_APIS
from broker.kafka_protocol.kafka_api import KafkaApi, api_table
from client.protocol.api import ApiKey

#: ApiVersions' own range: v3 is the first flexible one (KIP-511's client software name).
API_VERSIONS_RANGE = (0, 3)


def api_versions_body(request: Any, version: int) -> dict:
    return {}


def _api_versions_response(table: dict[ApiKey, KafkaApi]) -> Any:
    def to_response(body: dict, request: Any, version: int) -> Any:
        return api_versions_entity(table, version, body["error_code"])

    return to_response


def api_versions_entity(table: dict[ApiKey, KafkaApi], version: int, code: int) -> Any:
    """The ApiVersions answer at ``version`` (also v0 with UNSUPPORTED_VERSION, Kafka's answer to
    a client asking with a version the broker does not know)."""
    m = response_module(ApiKey.API_VERSIONS, version)
    return make(
        response_class(ApiKey.API_VERSIONS, version),
        error_code=code,
        api_keys=tuple(
            make(m.ApiVersion, api_key=int(api.key), min_version=api.min_version, max_version=api.max_version)
            for api in sorted(table.values(), key=lambda a: a.key)
        ),
        throttle_time=0,
        finalized_features_epoch=-1,
    )


def build_kafka_apis() -> dict[ApiKey, KafkaApi]:
    table = api_table(DATA_APIS, GROUP_APIS, ADMIN_APIS)
    table[ApiKey.API_VERSIONS] = KafkaApi(
        ApiKey.API_VERSIONS, *API_VERSIONS_RANGE, api_versions_body, _api_versions_response(table)
    )
    return table
