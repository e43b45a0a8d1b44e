"""``floodmark consume``: print a topic's records, one a line, like kafka-console-consumer.

All partitions are assigned (or the one ``--partition`` names; no consumer group). The start
is the end of each partition, the beginning with ``--from-beginning``, or ``--offset``
(a number, ``earliest`` or ``latest``; it needs ``--partition``). The command stops after
``--max-messages`` records or after ``--timeout-ms`` without a record, and otherwise runs until
Ctrl-C, as Kafka's does: there is no timeout unless one is given. At the end it prints
``Processed a total of N messages`` on stderr, whatever the reason it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import click

from cli.common import (
    binary_stream,
    bootstrap_option,
    client_kwargs,
    close_quietly,
    maybe_await,
    parse_pairs,
    resolve_bootstrap,
    run,
)

DEFAULT_KEY_SEPARATOR = "\t"
IDLE_POLL_MS = 1000
MAX_POLL_RECORDS = 500


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


@click.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to read.")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the end.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after this many records.")
@click.option(
    "--timeout-ms", type=click.IntRange(min=0), help="Stop after this long without a record (default: never)."
)
@click.option("--print-key", is_flag=True, help="Print key SEP value instead of the value alone.")
@click.option(
    "--key-separator", default=DEFAULT_KEY_SEPARATOR, show_default="tab", help="Separator for --print-key."
)
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option(
    "--offset", type=OffsetParam(), help="Start offset: a number, earliest or latest (needs --partition)."
)
@click.option(
    "--consumer-property",
    "consumer_props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Consumer setting, e.g. fetch.max.wait.ms=100.",
)
def consume(
    bootstrap_server: str | None,
    topic: str,
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
    props = client_kwargs(parse_pairs(consumer_props, "--consumer-property"))
    bootstrap = resolve_bootstrap(bootstrap_server)
    start: int | str = offset if offset is not None else ("earliest" if from_beginning else "latest")
    separator = key_separator.encode() if print_key else None
    out = binary_stream("stdout")
    progress = Progress()
    try:
        run(
            _consume(
                bootstrap, topic, partition, start, max_messages, timeout_ms, separator, props, out, progress
            )
        )
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


async def _consume(
    bootstrap: str,
    topic: str,
    partition: int | None,
    start: int | str,
    max_messages: int | None,
    timeout_ms: int | None,
    separator: bytes | None,
    props: dict[str, Any],
    out: BinaryIO,
    progress: Progress,
) -> None:
    from client.consumer import Consumer
    from client.protocol.errors import ErrorCode, KafkaError
    from client.types import TopicPartition

    consumer = Consumer(bootstrap, **props)
    started = time.monotonic()  # --timeout-ms bounds the whole wait, the topic's metadata included
    try:
        await maybe_await(consumer.start())
        found = await consumer.partitions_for_topic(topic, timeout_ms)
        ids = sorted(getattr(p, "partition", p) for p in (found or ()))
        if not ids:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} does not exist")
        if partition is not None:
            if partition not in ids:
                raise KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {topic} has no partition {partition} (it has {len(ids)})",
                )
            ids = [partition]
        tps = [TopicPartition(topic, p) for p in ids]
        await maybe_await(consumer.assign(tps))
        if start == "earliest":
            await maybe_await(consumer.seek_to_beginning(*tps))
        elif start == "latest":
            await maybe_await(consumer.seek_to_end(*tps))
        else:
            await maybe_await(consumer.seek(tps[0], start))

        last_record = started
        while max_messages is None or progress.count < max_messages:
            wait_ms = IDLE_POLL_MS
            if timeout_ms is not None:
                wait_ms = max(0, int((last_record + timeout_ms / 1000 - time.monotonic()) * 1000))
            limit = (
                MAX_POLL_RECORDS
                if max_messages is None
                else min(MAX_POLL_RECORDS, max_messages - progress.count)
            )
            records = list(await consumer.poll(timeout_ms=wait_ms, max_records=limit) or ())[:limit]
            if records:
                last_record = time.monotonic()
                out.write(b"".join(format_record(r, separator) for r in records))
                out.flush()
                progress.count += len(records)
            elif timeout_ms is not None and time.monotonic() >= last_record + timeout_ms / 1000:
                break
    finally:
        await close_quietly(consumer)
