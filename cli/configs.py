"""``floodmark configs``: kafka-configs.sh for topics and brokers, over DescribeConfigs and
AlterConfigs (KIP-133, KIP-226's dynamic broker configs; docs/operations.md "Topic-level
overrides" and "Reassigning partitions").

``--describe`` prints Kafka's ConfigCommand layout: ``Dynamic configs for topic T are:`` (or
``broker B``) then one ``  k=v sensitive=false synonyms={SOURCE:name=value, ...}`` line per
override of that entity (``--all``: every config, ``All configs for ...``); ``--entity-type
brokers --entity-default`` is the cluster-wide default entity (``Default configs for brokers in
the cluster are:``), and brokers without a name describe every live broker then the default.

``--alter`` does what ConfigCommand.alterConfig does with ``--bootstrap-server``: read the
entity's current overrides (the entries whose source is that entity's dynamic one:
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, or DYNAMIC_DEFAULT_BROKER_CONFIG for the default),
add ``--add-config``, remove ``--delete-config`` (a name that is not overridden is an error), and
send the whole set in one AlterConfigs, which replaces every override of the entity; then
``Completed updating config for topic T.`` / ``... for broker B.`` / ``Completed updating default
config for brokers in the cluster.``. The broker decides which broker configs are dynamic (the
replication throttle rates) and refuses the others with INVALID_CONFIG.
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
#: The name of the brokers' default entity (Kafka's ``--entity-default``, ConfigEntityName.Default).
DEFAULT_BROKER = ""


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
    current: Mapping[str, str | None], add: Mapping[str, str], delete: Iterable[str]
) -> dict[str, str]:
    """The overrides after ``--add-config`` and ``--delete-config`` (ConfigCommand.alterConfig:
    current ++ added -- deleted); deleting a name that has no override is refused, and so is
    leaving a sensitive override whose value the broker does not show."""
    delete = list(delete)
    missing = [name for name in delete if name not in current]
    if missing:
        raise CliError(f"Invalid config(s): {','.join(missing)} (not overridden)")
    merged = {**current, **add}
    for name in delete:
        merged.pop(name, None)
    hidden = sorted(name for name, value in merged.items() if value is None)
    if hidden:
        raise CliError(
            "All sensitive broker config entries must be specified for --alter, missing entries: "
            + ",".join(hidden)
        )
    return {name: value for name, value in merged.items() if value is not None}


def completed_line(entity_type: str, name: str) -> str:
    """ConfigCommand's last line of a successful ``--alter``."""
    if not name:
        return f"Completed updating default config for {entity_type} in the cluster."
    return f"Completed updating config for {entity_type[:-1]} {name}."


def describe_lines(entity_type: str, name: str, entries: Iterable[Any], describe_all: bool) -> list[str]:
    """Kafka's ``kafka-configs.sh --describe`` lines for one entity's ConfigEntries (already
    filtered to the dynamic ones unless ``describe_all``); ``name`` "" is the brokers' default."""
    from client.protocol.api import ConfigSource

    if entity_type == "brokers" and name == DEFAULT_BROKER:
        head = f"Default configs for {entity_type} in the cluster are:"
    else:
        head = f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {name} are:"
    lines = [head]
    for entry in sorted(entries, key=lambda e: e.name):
        synonyms = ", ".join(f"{ConfigSource(s.source).name}:{s.name}={s.value}" for s in entry.synonyms)
        lines.append(
            f"  {entry.name}={entry.value} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}"
        )
    return lines


def resource(entity_type: str, name: str) -> Any:
    """The ConfigResource of a topic, a broker id, or the brokers' default ("")."""
    from client.protocol.api import ConfigResourceType
    from client.types import ConfigResource

    kind = ConfigResourceType.TOPIC if entity_type == "topics" else ConfigResourceType.BROKER
    return ConfigResource(kind, name)


def dynamic_source(entity_type: str, name: str) -> int:
    """The config source of an entity's own overrides (ConfigCommand's configSourceFilter)."""
    from client.protocol.api import ConfigSource

    if entity_type == "topics":
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if name == DEFAULT_BROKER:
        return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return ConfigSource.DYNAMIC_BROKER_CONFIG


async def entity_overrides(
    admin: Any, entity_type: str, names: Iterable[str]
) -> dict[str, dict[str, str | None]]:
    """Each entity's overrides: its entries from its own dynamic source (a broker's entries from
    the default or from server.properties are not its overrides). Brokers are described one
    DescribeConfigs per broker, each at that broker (the AdminClient routes them)."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    resources = {name: resource(entity_type, name) for name in wanted}
    described = await admin.describe_configs(list(resources.values()))
    return {
        name: {e.name: e.value for e in described[r].entries if e.source == dynamic_source(entity_type, name)}
        for name, r in resources.items()
        if r in described
    }


async def topic_overrides(admin: Any, topics: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each topic's overrides (its DYNAMIC_TOPIC_CONFIG entries), as ``floodmark topics describe``
    prints them."""
    return await entity_overrides(admin, "topics", topics)


async def alter_overrides(
    admin: Any, entity_type: str, name: str, add: Mapping[str, str], delete: Iterable[str]
) -> dict[str, str]:
    """ConfigCommand's read-merge-write of one entity: its current overrides, ``add`` set and
    ``delete`` removed, sent whole (AlterConfigs replaces every override). The set sent."""
    current = (await entity_overrides(admin, entity_type, [name])).get(name, {})
    merged = merge_overrides(current, add, delete)
    await admin.alter_configs({resource(entity_type, name): merged})
    return merged


def _check_entity(
    entity_type: str, entity_name: str | None, entity_default: bool, do_alter: bool
) -> str | None:
    """ConfigCommandOptions.checkArgs for the entity: the name to use ("" for the default, None
    for every entity), or a usage error in Kafka's words."""
    if entity_name is not None and entity_default:
        raise click.UsageError("--entity-name and --entity-default cannot be used together")
    if entity_default and entity_type != "brokers":
        raise click.UsageError(f"--entity-default is for --entity-type brokers, not {entity_type}")
    if entity_type == "brokers" and entity_name is not None and not entity_name.isdigit():
        raise click.UsageError(
            f"The entity name for brokers must be a valid integer broker id, but it is: {entity_name}"
        )
    name = DEFAULT_BROKER if entity_default else entity_name
    if do_alter and name is None:
        raise click.UsageError(
            "an entity name must be specified with --alter of topics"
            if entity_type == "topics"
            else "an entity-name or default entity must be specified with --alter of brokers"
        )
    return name


@click.command()
@bootstrap_option
@click.option("--entity-type", type=click.Choice(ENTITY_TYPES), required=True, help="What to configure.")
@click.option(
    "--entity-name", help="The topic name or broker id (--describe without it: every topic or broker)."
)
@click.option(
    "--entity-default",
    is_flag=True,
    help="With --entity-type brokers: the cluster-wide default of every broker.",
)
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
    entity_default: bool,
    do_describe: bool,
    describe_all: bool,
    do_alter: bool,
    add_config: str | None,
    delete_config: str | None,
) -> None:
    """Describe or alter topic and broker configs, as kafka-configs.sh does."""
    if do_describe == do_alter:
        raise click.UsageError("exactly one of --describe and --alter is required")
    name = _check_entity(entity_type, entity_name, entity_default, do_alter)
    if do_alter:
        assert name is not None
        if add_config is None and delete_config is None:
            raise click.UsageError(
                "At least one of --add-config or --delete-config must be specified with --alter"
            )
        add = parse_add_config(add_config or "")
        delete = parse_delete_config(delete_config or "")
        bootstrap = resolve_bootstrap(bootstrap_server)
        run(_alter(bootstrap, entity_type, name, add, delete))
        click.echo(completed_line(entity_type, name))
        return
    bootstrap = resolve_bootstrap(bootstrap_server)
    for line in run(_describe(bootstrap, entity_type, name, describe_all)):
        click.echo(line)


async def _describe(bootstrap: str, entity_type: str, name: str | None, describe_all: bool) -> list[str]:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        if name is not None:
            names = [name]
        elif entity_type == "topics":
            names = await admin.list_topics()
        else:  # Kafka's describe of brokers: every live broker, then the default entity
            brokers = (await admin.describe_cluster()).brokers
            names = [str(b.node_id) for b in brokers] + [DEFAULT_BROKER]
        resources = [resource(entity_type, n) for n in names]
        described = await admin.describe_configs(resources, include_synonyms=True) if resources else {}
    finally:
        await close_quietly(admin)
    lines: list[str] = []
    for n, r in zip(names, resources, strict=True):
        source = dynamic_source(entity_type, n)
        entries = [e for e in described[r].entries if describe_all or e.source == source]
        lines += describe_lines(entity_type, n, entries, describe_all)
    return lines


async def _alter(bootstrap: str, entity_type: str, name: str, add: dict[str, str], delete: list[str]) -> None:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        await alter_overrides(admin, entity_type, name, add, delete)
    finally:
        await close_quietly(admin)
