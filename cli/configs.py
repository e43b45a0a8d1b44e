"""``floodmark configs``: kafka-configs.sh for topics (and a broker's static config), over
DescribeConfigs and AlterConfigs (KIP-133; docs/operations.md "Topic-level overrides").

``--describe`` prints Kafka's ConfigCommand layout: ``Dynamic configs for topic T are:`` then one
``  k=v sensitive=false synonyms={SOURCE:name=value, ...}`` line per override (``--all``: every
config, ``All configs for topic T are:``). ``--alter`` does what ConfigCommand.alterConfig does
with ``--bootstrap-server``: read the topic's current overrides, add ``--add-config``, remove
``--delete-config`` (a name that is not overridden is an error), and send the whole set in one
AlterConfigs, which replaces every override; then ``Completed updating config for topic T.``
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import click

from cli.common import CliError, bootstrap_option, close_quietly, resolve_bootstrap, run

ENTITY_TYPES = ("topics", "brokers")
#: Kafka's ConfigCommand: commas inside [...] belong to a list value (``k=[a,b]``).
_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")


def parse_add_config(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` -> ``{"k1": "v1", "k2": "a,b"}`` (Kafka's parseConfigsToBeAdded)."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in _SPLIT.split(text)):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f'Invalid entity config: all configs to be added must be in the format "key=val", got {item!r}'
            )
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_delete_config(text: str) -> list[str]:
    """``k1,k2`` -> ``["k1", "k2"]``."""
    return [name.strip() for name in text.split(",") if name.strip()]


def merge_overrides(
    current: Mapping[str, str], add: Mapping[str, str], delete: Iterable[str]
) -> dict[str, str]:
    """The overrides after ``--add-config`` and ``--delete-config`` (ConfigCommand.alterConfig:
    current ++ added -- deleted); deleting a name that has no override is refused."""
    delete = list(delete)
    missing = [name for name in delete if name not in current]
    if missing:
        raise CliError(f"Invalid config(s): {','.join(missing)} (not overridden)")
    merged = {**current, **add}
    for name in delete:
        merged.pop(name, None)
    return merged


def describe_lines(entity_type: str, name: str, entries: Iterable[Any], describe_all: bool) -> list[str]:
    """Kafka's ``kafka-configs.sh --describe`` lines for one entity's ConfigEntries (already
    filtered to the dynamic ones unless ``describe_all``)."""
    from client.protocol.api import ConfigSource

    lines = [f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {name} are:"]
    for entry in sorted(entries, key=lambda e: e.name):
        synonyms = ", ".join(f"{ConfigSource(s.source).name}:{s.name}={s.value}" for s in entry.synonyms)
        lines.append(
            f"  {entry.name}={entry.value} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}"
        )
    return lines


def _resource(entity_type: str, name: str) -> Any:
    from client.protocol.api import ConfigResourceType
    from client.types import ConfigResource

    kind = ConfigResourceType.TOPIC if entity_type == "topics" else ConfigResourceType.BROKER
    return ConfigResource(kind, name)


def _dynamic_source(entity_type: str) -> int:
    from client.protocol.api import ConfigSource

    return (
        ConfigSource.DYNAMIC_TOPIC_CONFIG if entity_type == "topics" else ConfigSource.DYNAMIC_BROKER_CONFIG
    )


async def topic_overrides(admin: Any, topics: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each topic's overrides (its DYNAMIC_TOPIC_CONFIG entries), as ``floodmark topics describe``
    prints them."""
    names = sorted(set(topics))
    if not names:
        return {}
    resources = {name: _resource("topics", name) for name in names}
    described = await admin.describe_configs(list(resources.values()))
    source = _dynamic_source("topics")
    return {
        name: {e.name: e.value for e in described[r].entries if e.source == source}
        for name, r in resources.items()
        if r in described
    }


@click.command()
@bootstrap_option
@click.option("--entity-type", type=click.Choice(ENTITY_TYPES), required=True, help="What to configure.")
@click.option("--entity-name", help="The topic name or broker id (--describe without it: every topic).")
@click.option("--describe", "do_describe", is_flag=True, help="Print the entity's dynamic configs.")
@click.option(
    "--all", "describe_all", is_flag=True, help="With --describe: every config, not only overrides."
)
@click.option("--alter", "do_alter", is_flag=True, help="Change the entity's overrides.")
@click.option(
    "--add-config", metavar="K=V[,K2=V2]", help="With --alter: overrides to set (k=[a,b] for a list)."
)
@click.option("--delete-config", metavar="K[,K2]", help="With --alter: overrides to remove.")
def configs(
    bootstrap_server: str | None,
    entity_type: str,
    entity_name: str | None,
    do_describe: bool,
    describe_all: bool,
    do_alter: bool,
    add_config: str | None,
    delete_config: str | None,
) -> None:
    """Describe or alter topic configs, as kafka-configs.sh does."""
    if do_describe == do_alter:
        raise click.UsageError("exactly one of --describe and --alter is required")
    if do_alter:
        if entity_type != "topics":
            raise click.UsageError("--alter supports --entity-type topics only: broker configs are static")
        if not entity_name:
            raise click.UsageError("--alter needs --entity-name")
        if add_config is None and delete_config is None:
            raise click.UsageError(
                "At least one of --add-config or --delete-config must be specified with --alter"
            )
        add = parse_add_config(add_config or "")
        delete = parse_delete_config(delete_config or "")
        bootstrap = resolve_bootstrap(bootstrap_server)
        run(_alter(bootstrap, entity_name, add, delete))
        click.echo(f"Completed updating config for {entity_type[:-1]} {entity_name}.")
        return
    if entity_type == "brokers" and not entity_name:
        raise click.UsageError("--describe of brokers needs --entity-name (a broker id)")
    bootstrap = resolve_bootstrap(bootstrap_server)
    for line in run(_describe(bootstrap, entity_type, entity_name, describe_all)):
        click.echo(line)


async def _describe(bootstrap: str, entity_type: str, name: str | None, describe_all: bool) -> list[str]:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        names = [name] if name else await admin.list_topics()
        resources = [_resource(entity_type, n) for n in names]
        described = await admin.describe_configs(resources, include_synonyms=True) if resources else {}
    finally:
        await close_quietly(admin)
    source = _dynamic_source(entity_type)
    lines: list[str] = []
    for n, r in zip(names, resources, strict=True):
        entries = [e for e in described[r].entries if describe_all or e.source == source]
        lines += describe_lines(entity_type, n, entries, describe_all)
    return lines


async def _alter(bootstrap: str, topic: str, add: dict[str, str], delete: list[str]) -> None:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        current = (await topic_overrides(admin, [topic]))[topic]
        merged = merge_overrides(current, add, delete)
        await admin.alter_configs({_resource("topics", topic): merged})
    finally:
        await close_quietly(admin)
