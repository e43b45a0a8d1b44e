"""``floodmark topics create|list|describe|alter|delete``, printing what kafka-topics.sh prints.

``alter --partitions N`` adds partitions (CreatePartitions, KIP-195); ``--replica-assignment``
takes kafka-topics.sh's form (``1:2,2:3,3:1``: partitions by comma, their brokers by colon) for
every partition, the existing ones included, and sends the new ones, as TopicCommand does.

``describe`` uses Kafka's text layout (a header line per topic with its overrides as
``Configs: k=v,k2=v2``, read by DescribeConfigs as TopicCommand does; then one tab-indented line
per partition; ``Leader: none`` when there is no leader) or ``--json``. With
``--under-replicated-partitions`` (ISR smaller than the replica list) or
``--unavailable-partitions`` (no leader, or a leader that is not a live broker) only matching
partitions are printed, without the topic header lines, as Kafka's TopicCommand does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from cli.common import bootstrap_option, close_quietly, parse_pairs, resolve_bootstrap, run
from cli.configs import topic_overrides


@dataclass(frozen=True)
class Filters:
    under_replicated: bool = False
    unavailable: bool = False

    @property
    def active(self) -> bool:
        return self.under_replicated or self.unavailable


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


# -- create --------------------------------------------------------------------------------------


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partitions", type=click.IntRange(min=1), required=True, help="Number of partitions.")
@click.option(
    "--replication-factor", type=click.IntRange(min=1), required=True, help="Replicas per partition."
)
@click.option(
    "--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config override (repeatable)."
)
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly when the topic already exists.")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def create(
    bootstrap_server: str | None,
    topic: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    if_not_exists: bool,
    timeout_ms: int,
) -> None:
    """Create a topic."""
    topic_configs = parse_pairs(configs, "--config")
    bootstrap = resolve_bootstrap(bootstrap_server)
    created = run(
        _create(bootstrap, topic, partitions, replication_factor, topic_configs, if_not_exists, timeout_ms)
    )
    if created:
        click.echo(f"Created topic {topic}.")


async def _create(
    bootstrap: str,
    topic: str,
    partitions: int,
    rf: int,
    configs: dict[str, str],
    if_not_exists: bool,
    timeout_ms: int,
) -> bool:
    from client.admin import AdminClient
    from client.protocol.errors import ErrorCode, KafkaError

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        await admin.create_topic(topic, partitions, rf, configs, timeout_ms)
    except KafkaError as exc:
        if if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return False
        raise
    finally:
        await close_quietly(admin)
    return True


# -- alter ---------------------------------------------------------------------------------------


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic name.")
@click.option(
    "--partitions", type=click.IntRange(min=1), required=True, help="The new, larger partition count."
)
@click.option(
    "--replica-assignment",
    default=None,
    metavar="B:B,B:B,...",
    help="Brokers of every partition (existing ones first), partitions by comma, replicas by colon.",
)
@click.option("--timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def alter(
    bootstrap_server: str | None, topic: str, partitions: int, replica_assignment: str | None, timeout_ms: int
) -> None:
    """Add partitions to a topic (a partition count only grows)."""
    listed = parse_replica_assignment(replica_assignment) if replica_assignment is not None else None
    if listed is not None and len(listed) != partitions:
        raise click.UsageError(
            f"--replica-assignment lists {len(listed)} partition(s) but --partitions is {partitions}"
        )
    bootstrap = resolve_bootstrap(bootstrap_server)
    run(_alter(bootstrap, topic, partitions, listed, timeout_ms))
    click.echo(
        "WARNING: If partitions are increased for a topic that has a key, the partition logic or "
        "ordering of the messages will be affected"
    )
    click.echo("Adding partitions succeeded!")


def parse_replica_assignment(text: str) -> list[list[int]]:
    """kafka-topics.sh's ``--replica-assignment``: ``1:2,2:3`` -> [[1, 2], [2, 3]]."""
    try:
        return [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a list of broker ids such as 1:2,2:3", param_hint="--replica-assignment"
        ) from None


async def _alter(
    bootstrap: str, topic: str, partitions: int, listed: list[list[int]] | None, timeout_ms: int
) -> None:
    from client.admin import AdminClient
    from client.protocol.errors import ErrorCode, KafkaError

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        assignments = None
        if listed is not None:
            (description,) = await admin.describe_topics([topic])
            if getattr(description, "error_code", 0):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
            assignments = {topic: listed[len(description.partitions) :]}
        results = await admin.create_partitions({topic: partitions}, assignments, timeout_ms)
    finally:
        await close_quietly(admin)
    error = results.get(topic)
    if error is not None:
        raise error


# -- list ----------------------------------------------------------------------------------------


@topics.command(name="list")
@bootstrap_option
def list_(bootstrap_server: str | None) -> None:
    """List topic names, one a line."""
    bootstrap = resolve_bootstrap(bootstrap_server)
    for name in run(_list(bootstrap)):
        click.echo(name)


async def _list(bootstrap: str) -> list[str]:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        return list(await admin.list_topics())
    finally:
        await close_quietly(admin)


# -- describe ------------------------------------------------------------------------------------


@topics.command()
@bootstrap_option
@click.option("--topic", help="Only this topic (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of Kafka's text format.")
@click.option(
    "--under-replicated-partitions",
    is_flag=True,
    help="Only partitions whose ISR is smaller than their replicas.",
)
@click.option("--unavailable-partitions", is_flag=True, help="Only partitions without a live leader.")
def describe(
    bootstrap_server: str | None,
    topic: str | None,
    as_json: bool,
    under_replicated_partitions: bool,
    unavailable_partitions: bool,
) -> None:
    """Describe topics: leader, replicas and ISR of every partition."""
    bootstrap = resolve_bootstrap(bootstrap_server)
    filters = Filters(under_replicated=under_replicated_partitions, unavailable=unavailable_partitions)
    descriptions, live, configs = run(_describe(bootstrap, topic, filters))
    if as_json:
        click.echo(json.dumps(describe_json(descriptions, filters, live, configs), indent=2))
    else:
        for line in describe_text(descriptions, filters, live, configs):
            click.echo(line)


async def _describe(
    bootstrap: str, topic: str | None, filters: Filters
) -> tuple[list[Any], set[int] | None, dict[str, dict[str, str]]]:
    from client.admin import AdminClient
    from client.protocol.errors import KafkaError

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        descriptions = list(await admin.describe_topics([topic] if topic else None))
        for desc in descriptions:
            if getattr(desc, "error_code", 0):
                raise KafkaError(desc.error_code, f"topic {desc.name}")
        live = None
        if filters.unavailable:
            cluster = await admin.describe_cluster()
            live = {broker.node_id for broker in cluster.brokers}
        configs = await topic_overrides(admin, [d.name for d in descriptions])
    finally:
        await close_quietly(admin)
    return sorted(descriptions, key=lambda d: d.name), live, configs


def _matches(partition: Any, filters: Filters, live: set[int] | None) -> bool:
    if not filters.active:
        return True
    under = len(partition.isr) < len(partition.replicas)
    leader = partition.leader
    unavailable = leader is None or leader < 0 or (live is not None and leader not in live)
    return (filters.under_replicated and under) or (filters.unavailable and unavailable)


def _partitions(desc: Any) -> list[Any]:
    return sorted(desc.partitions, key=lambda p: p.partition)


def _configs(desc: Any, configs: Mapping[str, Mapping[str, str]] | None) -> dict[str, str]:
    if configs is not None:
        return dict(configs.get(desc.name) or {})
    return dict(getattr(desc, "configs", None) or {})


def _ids(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in values)


def describe_text(
    descriptions: Iterable[Any],
    filters: Filters = Filters(),
    live: set[int] | None = None,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> list[str]:
    """Kafka's kafka-topics.sh --describe lines for these TopicDescriptions; ``configs`` is each
    topic's overrides (default: the descriptions' own ``configs``)."""
    lines: list[str] = []
    for desc in descriptions:
        partitions = _partitions(desc)
        if not filters.active:
            rf = len(partitions[0].replicas) if partitions else 0
            overrides = ",".join(f"{k}={v}" for k, v in sorted(_configs(desc, configs).items()))
            lines.append(
                f"Topic: {desc.name}\tTopicId: {getattr(desc, 'topic_id', None) or '-'}\t"
                f"PartitionCount: {len(partitions)}\t"
                f"ReplicationFactor: {rf}\tConfigs: {overrides}"
            )
        for p in partitions:
            if not _matches(p, filters, live):
                continue
            leader = p.leader if p.leader is not None and p.leader >= 0 else "none"
            lines.append(
                f"\tTopic: {desc.name}\tPartition: {p.partition}\tLeader: {leader}\t"
                f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
            )
    return lines


def describe_json(
    descriptions: Iterable[Any],
    filters: Filters = Filters(),
    live: set[int] | None = None,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """``[{"topic", "partitions": [{"partition", "leader", "leader_epoch", "replicas", "isr",
    "offline_replicas"}], "configs"}]``; with filters, only topics that have a matching partition."""
    out = []
    for desc in descriptions:
        partitions = [
            {
                "partition": p.partition,
                "leader": p.leader if p.leader is not None else -1,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "offline_replicas": list(getattr(p, "offline_replicas", None) or []),
            }
            for p in _partitions(desc)
            if _matches(p, filters, live)
        ]
        if filters.active and not partitions:
            continue
        out.append({"topic": desc.name, "partitions": partitions, "configs": _configs(desc, configs)})
    return out


# -- delete --------------------------------------------------------------------------------------


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic name.")
def delete(bootstrap_server: str | None, topic: str) -> None:
    """Delete a topic (the controller removes it asynchronously, as in Kafka)."""
    bootstrap = resolve_bootstrap(bootstrap_server)
    run(_delete(bootstrap, topic))
    click.echo(f"Topic {topic} is marked for deletion.")


async def _delete(bootstrap: str, topic: str) -> None:
    from client.admin import AdminClient

    admin = AdminClient(bootstrap)
    try:
        await admin.start()
        results = await admin.delete_topics([topic])
    finally:
        await close_quietly(admin)
    error = (results or {}).get(topic)
    if error is not None:
        raise error
