"""``floodmark consume``: print a topic's records, one a line, like kafka-console-consumer.

Without ``--group`` all partitions are assigned (or the one ``--partition`` names). The start
is the end of each partition, the beginning with ``--from-beginning``, or ``--offset``
(a number, ``earliest`` or ``latest``; it needs ``--partition``). The command stops after
``--max-messages`` records or after ``--timeout-ms`` without a record, and otherwise runs until
Ctrl-C, as Kafka's does: there is no timeout unless one is given. At the end it prints
``Processed a total of N messages`` on stderr, whatever the reason it stopped.

With ``--group G`` it is a member of consumer group G (Kafka's ConsoleConsumer with
``--group``; docs/operations.md "Consumer groups"): it subscribes to the topic and reads the
partitions the group gives it, from the group's committed offsets, else the end (the beginning
with ``--from-beginning``: Kafka's ``auto.offset.reset=earliest``, used only where nothing is
committed). It commits exactly what it printed: for each partition, the offset after the last
record it printed, every ``auto.commit.interval.ms`` (5 s, Kafka's default) while it runs, so
the group's lag falls as it reads, as with Kafka's console consumer, when partitions are taken
away in a rebalance, and on exit (max messages, timeout, Ctrl-C); then it leaves the group. Auto commit is off unless ``enable.auto.commit=true``
is given (which also commits positions on its own schedule). ``--partition`` and ``--offset``
do not go with ``--group``, as in Kafka.

``--consumer-property`` takes Kafka's names (``auto.offset.reset``, ``session.timeout.ms``,
``partition.assignment.strategy`` with ``range`` / ``roundrobin`` or Kafka's assignor class
names ...), mapped onto the ConsumerConfig fields; an unknown name is a usage error.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import click

from cli.common import (
    binary_stream,
    bootstrap_option,
    close_quietly,
    maybe_await,
    parse_pairs,
    resolve_bootstrap,
    run,
)

DEFAULT_KEY_SEPARATOR = "\t"
IDLE_POLL_MS = 1000
MAX_POLL_RECORDS = 500
#: partition.assignment.strategy values: our names and Kafka's assignor classes.
ASSIGNORS = {
    "range": "range",
    "roundrobin": "roundrobin",
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
}
PROPERTY_HINT = "--consumer-property"


class OffsetParam(click.ParamType):
    """A non-negative offset, or ``earliest`` / ``latest``."""

    name = "offset"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text in ("earliest", "latest"):
            return text
        if text.isdigit():
            return int(text)
        self.fail(f"{value!r} is not a non-negative number, 'earliest' or 'latest'", param, ctx)


@dataclass
class Progress:
    count: int = 0
    #: with a group: (topic, partition) -> the offset after the last record printed, not yet committed
    pending: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    bootstrap: str
    topic: str
    partition: int | None
    start: int | str
    max_messages: int | None
    timeout_ms: int | None
    separator: bytes | None
    settings: dict[str, Any]

    @property
    def group(self) -> str | None:
        return self.settings.get("group_id")


def _convert(key: str, name: str, kind: str, raw: str) -> Any:
    """One property value as its ConsumerConfig field's type (``kind``: the annotation)."""
    if name == "partition_assignment_strategy":
        names = [s.strip() for s in raw.split(",") if s.strip()]
        unknown = [n for n in names if n not in ASSIGNORS]
        if unknown or not names:
            raise click.BadParameter(
                f"{key}={raw!r}: assignors are {', '.join(ASSIGNORS)}", param_hint=PROPERTY_HINT
            )
        return tuple(ASSIGNORS[n] for n in names)
    if kind == "bool":
        if raw.lower() not in ("true", "false"):
            raise click.BadParameter(f"{key}={raw!r}: expected true or false", param_hint=PROPERTY_HINT)
        return raw.lower() == "true"
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise click.BadParameter(
                f"{key}={raw!r}: expected an integer", param_hint=PROPERTY_HINT
            ) from None
    return raw


def consumer_settings(props: Mapping[str, str]) -> dict[str, Any]:
    """Kafka's consumer property names and values (``session.timeout.ms=6000``) as ConsumerConfig
    keyword arguments (``session_timeout_ms=6000``), checked by building the config."""
    from client.consumer.config import ConsumerConfig

    fields = {f.name: str(f.type) for f in dataclasses.fields(ConsumerConfig)}
    settings: dict[str, Any] = {}
    for key, raw in props.items():
        name = key.replace(".", "_").replace("-", "_")
        if name not in fields:
            known = ", ".join(sorted(n.replace("_", ".") for n in fields))
            raise click.BadParameter(
                f"unknown consumer property {key!r} (known: {known})", param_hint=PROPERTY_HINT
            )
        settings[name] = _convert(key, name, fields[name], raw)
    try:
        ConsumerConfig(**settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=PROPERTY_HINT) from None
    return settings


def group_settings(
    props: Mapping[str, str], group: str | None, partition: int | None, from_beginning: bool
) -> dict[str, Any]:
    """The consumer's settings: the properties, and with a group (``--group`` or ``group.id``)
    Kafka's ConsoleConsumer rules: one group id, no ``--partition``, ``--from-beginning`` as
    ``auto.offset.reset=earliest``, auto commit off unless asked for."""
    settings = consumer_settings(props)
    given = settings.get("group_id")
    if group is not None and given is not None and given != group:
        raise click.UsageError(
            "The group ids provided in different places (directly using '--group', via "
            f"'--consumer-property') do not match. Detected group ids: '{group}', '{given}'"
        )
    group = group or given
    if group is None:
        return settings
    if partition is not None:
        raise click.UsageError("Options group and partition cannot be specified together.")
    reset = settings.get("auto_offset_reset")
    if from_beginning and reset not in (None, "earliest"):
        raise click.UsageError(
            f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'"
        )
    settings["group_id"] = group
    settings["auto_offset_reset"] = "earliest" if from_beginning else reset or "latest"
    settings.setdefault("enable_auto_commit", False)
    return settings


@click.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to read.")
@click.option(
    "--group", default=None, help="Consumer group to join: read its partitions, commit what is printed."
)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the end.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after this many records.")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="Stop after this long without a record (default: never). It also bounds the wait for the "
    "topic's metadata, which is otherwise request.timeout.ms (30 s): a topic that does not exist fails then.",
)
@click.option("--print-key", is_flag=True, help="Print key SEP value instead of the value alone.")
@click.option(
    "--key-separator", default=DEFAULT_KEY_SEPARATOR, show_default="tab", help="Separator for --print-key."
)
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition (not with --group).")
@click.option(
    "--offset", type=OffsetParam(), help="Start offset: a number, earliest or latest (needs --partition)."
)
@click.option(
    "--consumer-property",
    "consumer_props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Consumer setting by Kafka's name, e.g. fetch.max.wait.ms=100 (repeatable).",
)
def consume(
    bootstrap_server: str | None,
    topic: str,
    group: str | None,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    key_separator: str,
    partition: int | None,
    offset: int | str | None,
    consumer_props: tuple[str, ...],
) -> None:
    """Print the records of TOPIC to stdout, one a line."""
    if offset is not None and partition is None:
        raise click.UsageError("--partition is required when --offset is given")
    if offset is not None and from_beginning:
        raise click.UsageError("--from-beginning and --offset cannot be given together")
    settings = group_settings(parse_pairs(consumer_props, PROPERTY_HINT), group, partition, from_beginning)
    bootstrap = resolve_bootstrap(bootstrap_server)
    start: int | str = offset if offset is not None else ("earliest" if from_beginning else "latest")
    separator = key_separator.encode() if print_key else None
    job = Job(bootstrap, topic, partition, start, max_messages, timeout_ms, separator, settings)
    out = binary_stream("stdout")
    progress = Progress()
    try:
        run(_consume(job, out, progress))
    finally:
        click.echo(f"Processed a total of {progress.count} messages", err=True)


def _bytes(value: Any) -> bytes:
    if value is None:
        return b"null"
    return value.encode() if isinstance(value, str) else bytes(value)


def format_record(record: Any, key_separator: bytes | None) -> bytes:
    """One output line: the value, or key SEP value; ``null`` for a missing key or value (as Kafka)."""
    if key_separator is None:
        return _bytes(record.value) + b"\n"
    return _bytes(record.key) + key_separator + _bytes(record.value) + b"\n"


class CommitPrinted:
    """A rebalance listener (Kafka's ConsumerRebalanceListener) that commits what was printed of
    the partitions taken away, before the group hands them to another member."""

    def __init__(self, consumer: Any, progress: Progress) -> None:
        self.consumer = consumer
        self.progress = progress

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        from client.protocol.errors import KafkaError

        offsets = {
            tp: self.progress.pending.pop(tuple(tp)) for tp in revoked if tuple(tp) in self.progress.pending
        }
        try:
            await commit_printed(self.consumer, offsets)
        except KafkaError as exc:
            click.echo(f"WARN: committing the offsets of revoked partitions failed: {exc}", err=True)

    async def on_partitions_assigned(self, assigned: set[Any]) -> None:
        pass


async def commit_while_running(consumer: Any, progress: Progress) -> None:
    """The periodic commit of what was printed (the console consumer's auto commit): a failure
    (a rebalance under way, the coordinator moving) is warned and the offsets are kept for the
    next commit, the revocation's or the exit's."""
    from client.protocol.errors import KafkaError

    offsets = dict(progress.pending)
    try:
        await commit_printed(consumer, offsets)
    except KafkaError as exc:
        click.echo(f"WARN: committing the printed offsets failed (retried later): {exc}", err=True)
        return
    for tp, offset in offsets.items():
        if progress.pending.get(tp) == offset:  # not moved on (nor revoked) meanwhile
            del progress.pending[tp]


async def commit_printed(consumer: Any, offsets: Mapping[tuple[str, int], int]) -> None:
    """Commit, for each partition, the offset after the last record printed from it."""
    from client.types import TopicPartition

    if offsets:
        await maybe_await(consumer.commit({TopicPartition(*tp): offset for tp, offset in offsets.items()}))


async def _start(consumer: Any, job: Job, progress: Progress) -> None:
    """Subscribe (with a group) or assign the partitions and seek to the start."""
    from client.protocol.errors import ErrorCode, KafkaError
    from client.types import TopicPartition

    found = await consumer.partitions_for_topic(job.topic, job.timeout_ms)
    ids = sorted(getattr(p, "partition", p) for p in (found or ()))
    if not ids:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {job.topic} does not exist")
    if job.group is not None:
        consumer.subscribe([job.topic], listener=CommitPrinted(consumer, progress))
        return
    if job.partition is not None:
        if job.partition not in ids:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {job.topic} has no partition {job.partition} (it has {len(ids)})",
            )
        ids = [job.partition]
    tps = [TopicPartition(job.topic, p) for p in ids]
    await maybe_await(consumer.assign(tps))
    if job.start == "earliest":
        await maybe_await(consumer.seek_to_beginning(*tps))
    elif job.start == "latest":
        await maybe_await(consumer.seek_to_end(*tps))
    else:
        await maybe_await(consumer.seek(tps[0], job.start))


async def _consume(job: Job, out: BinaryIO, progress: Progress) -> None:
    from client.consumer import Consumer

    consumer = Consumer(job.bootstrap, **job.settings)
    started = time.monotonic()  # --timeout-ms bounds the whole wait, the topic's metadata included
    try:
        await maybe_await(consumer.start())
        await _start(consumer, job, progress)
        last_record = last_commit = started
        commit_every_s = job.settings.get("auto_commit_interval_ms", 5000) / 1000
        while job.max_messages is None or progress.count < job.max_messages:
            wait_ms = IDLE_POLL_MS
            if job.timeout_ms is not None:
                wait_ms = max(0, int((last_record + job.timeout_ms / 1000 - time.monotonic()) * 1000))
            if job.group is not None and progress.pending:  # wake for the next periodic commit
                wait_ms = min(wait_ms, max(0, int((last_commit + commit_every_s - time.monotonic()) * 1000)))
            limit = (
                MAX_POLL_RECORDS
                if job.max_messages is None
                else min(MAX_POLL_RECORDS, job.max_messages - progress.count)
            )
            records = list(await consumer.poll(timeout_ms=wait_ms, max_records=limit) or ())[:limit]
            if records:
                last_record = time.monotonic()
                out.write(b"".join(format_record(r, job.separator) for r in records))
                out.flush()
                progress.count += len(records)
                if job.group is not None:
                    for r in records:
                        progress.pending[(r.topic, r.partition)] = r.offset + 1
            if job.group is not None and time.monotonic() - last_commit >= commit_every_s:
                last_commit = time.monotonic()
                await commit_while_running(consumer, progress)
            elif job.timeout_ms is not None and time.monotonic() >= last_record + job.timeout_ms / 1000:
                break
    finally:
        try:
            if job.group is not None:
                await commit_printed(consumer, progress.pending)
                progress.pending.clear()
        finally:
            await close_quietly(consumer)
