"""DescribeConfigs and AlterConfigs (KIP-133) as the AdminClient sends and reads them: Kafka's
routing of config resources to brokers, each resource's answer (its error raised), and the
``ConfigEntry`` of an answer's entry.
"""

from __future__ import annotations

from collections.abc import Iterable

from client.protocol.api import ConfigResourceType
from client.protocol.errors import ErrorCode, KafkaError
from client.types import ConfigEntry, ConfigResource, ConfigSynonym


def by_node(resources: Iterable[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
    """Kafka's routing: a BROKER resource to that broker, everything else to any broker."""
    out: dict[int | None, list[ConfigResource]] = {}
    for r in resources:
        if not isinstance(r, ConfigResource):
            raise TypeError(f"expected a ConfigResource, got {r!r}")
        node = int(r.name) if r.type == ConfigResourceType.BROKER and r.name.isdigit() else None
        out.setdefault(node, []).append(r)
    return out


def describe_resource(resource_type: int, name: str) -> str:
    """``topic 't'``, ``broker '1'``; the BROKER name "" is the cluster-wide default entity."""
    if resource_type == ConfigResourceType.BROKER and name == "":
        return "the default broker config"
    try:
        kind = ConfigResourceType(resource_type).name.lower()
    except ValueError:
        kind = f"resource type {resource_type}"
    return f"{kind} {name!r}"


def answers(items: list[dict], asked: list[ConfigResource], what: str) -> list[dict]:
    """The response's per-resource items; the first error (or a resource missing) raised."""
    by_resource = {(i["resource_type"], i["resource_name"]): i for i in items}
    for r in asked:
        item = by_resource.get((int(r.type), r.name))
        if item is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"{what} of {describe_resource(r.type, r.name)}: not in the response",
            )
        if item["error_code"] != ErrorCode.NONE:
            message = f"{what} of {describe_resource(r.type, r.name)} failed"
            if item.get("error_message"):
                message += f": {item['error_message']}"
            raise KafkaError(item["error_code"], message)
    return [by_resource[(int(r.type), r.name)] for r in asked]


def config_entry(entry: dict) -> ConfigEntry:
    return ConfigEntry(
        entry["name"],
        entry["value"],
        entry["config_source"],
        entry["read_only"],
        entry["is_sensitive"],
        tuple(ConfigSynonym(s["name"], s["value"], s["source"]) for s in entry["synonyms"]),
    )
