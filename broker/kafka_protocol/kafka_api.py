"""One API as the Kafka listener serves it: the versions it advertises and the two
translations between Kafka's messages and the bodies our handlers take and give
(docs/design.md "Two wire protocols").

``to_body(request, version)`` turns kio's decoded request into the request body of
client/protocol/api.py (our field names and nesting); the handler answers with a response body of
the same module (checked against its schema, so optional fields are filled in), and
``to_response(body, request, version)`` turns it into kio's response class of
that version (through :func:`broker.kafka_protocol.entities.make`). The decoded request is handed
back so an answer can echo what was asked (a topic id, a fetch session). A response body that is
only ``{"error_code", "error_message"}`` (a request the handler refused whole) never reaches
``to_response``: the codec answers it with :func:`~broker.kafka_protocol.entities.error_entity`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from client.protocol.api import ApiKey


@dataclass(frozen=True)
class KafkaApi:
    key: ApiKey
    min_version: int
    max_version: int
    to_body: Callable[[Any, int], dict]
    to_response: Callable[[dict, Any, int], Any]

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def api_table(*groups: Iterable[KafkaApi]) -> dict[ApiKey, KafkaApi]:
    table: dict[ApiKey, KafkaApi] = {}
    for group in groups:
        for api in group:
            if api.key in table:
                raise ValueError(f"{api.key.name} is translated twice")
            table[api.key] = api
    return table
