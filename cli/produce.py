"""``floodmark produce``: one record per stdin line, like kafka-console-producer.

With ``--key-separator SEP`` (or ``--parse-key``, whose default separator is Kafka's tab) each
line is ``key SEP value``, split at the first SEP; a line without SEP stops the command, as
Kafka's LineMessageReader does. Every record's acknowledgement is awaited before exit: when any
record was not acknowledged, the failures are reported on stderr and the exit code is 1.

Stdin is read by a daemon thread into a small bounded queue, so a slow or interactive input
never blocks the event loop that the producer's batching and acks run on, and Ctrl-C never
waits for a blocked read.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import click

from cli.common import (
    ACKS_CHOICE,
    CliError,
    acks_value,
    binary_stream,
    bootstrap_option,
    client_kwargs,
    close_quietly,
    parse_pairs,
    resolve_bootstrap,
    run,
    submit,
)

DEFAULT_KEY_SEPARATOR = "\t"
CHUNK_BYTES = 64 * 1024
QUEUED_CHUNKS = 16
MAX_PENDING = 10_000
MAX_REPORTED_ERRORS = 10


@click.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to write to.")
@click.option("--acks", type=ACKS_CHOICE, default="all", show_default=True, help="Acknowledgement level.")
@click.option(
    "--key-separator", help="Split each line into key SEP value at the first SEP (implies --parse-key)."
)
@click.option(
    "--parse-key", is_flag=True, help="Lines are key<TAB>value (or key SEP value with --key-separator)."
)
@click.option(
    "--producer-property",
    "producer_props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Producer setting, e.g. linger.ms=5. A record is retried for up to delivery.timeout.ms "
    "(default 120000, Kafka's): with --acks all and fewer in-sync replicas than min.insync.replicas "
    "each retry is warned, and the record fails when the timeout is spent.",
)
def produce(
    bootstrap_server: str | None,
    topic: str,
    acks: str,
    key_separator: str | None,
    parse_key: bool,
    producer_props: tuple[str, ...],
) -> None:
    """Write stdin to TOPIC, one record per line."""
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    separator = key_separator if key_separator is not None else (DEFAULT_KEY_SEPARATOR if parse_key else None)
    props = client_kwargs(parse_pairs(producer_props, "--producer-property"))
    bootstrap = resolve_bootstrap(bootstrap_server)
    stdin = binary_stream("stdin")
    sep = separator.encode() if separator is not None else None
    outcome = run(_produce(bootstrap, topic, acks_value(acks), sep, props, stdin))
    if outcome.failed:
        raise CliError(f"{outcome.failed} of {outcome.sent} records were not acknowledged")


def split_key(line: bytes, separator: bytes | None, line_number: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line; key None when keys are not parsed."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        shown = line.decode(errors="replace")
        raise CliError(f"No key separator found on line number {line_number}: '{shown}'")
    return key, value


@dataclass
class Outcome:
    sent: int = 0
    failed: int = 0
    pending: set[asyncio.Future] = field(default_factory=set)

    def on_done(self, line_number: int, future: asyncio.Future) -> None:
        self.pending.discard(future)
        if future.cancelled():
            error: BaseException | None = asyncio.CancelledError()
        else:
            error = future.exception()
        if error is not None:
            self.failed += 1
            if self.failed <= MAX_REPORTED_ERRORS:
                click.echo(f"error: record on line {line_number} was not acknowledged: {error}", err=True)
            elif self.failed == MAX_REPORTED_ERRORS + 1:
                click.echo("error: more records failed; not reporting each one", err=True)


async def _produce(
    bootstrap: str,
    topic: str,
    acks: int | str,
    separator: bytes | None,
    props: dict[str, Any],
    stdin: BinaryIO,
) -> Outcome:
    from client.producer import Producer
    from client.protocol.errors import KafkaError

    outcome = Outcome()
    producer = Producer(bootstrap, acks=acks, **props)
    try:
        await producer.start()
        line_number = 0
        async for line in read_lines(stdin):
            line_number += 1
            key, value = split_key(line, separator, line_number)
            while len(outcome.pending) >= MAX_PENDING:
                await asyncio.wait(set(outcome.pending), return_when=asyncio.FIRST_COMPLETED)
            outcome.sent += 1
            try:
                future = await submit(producer, topic, value, key)
            except KafkaError as exc:
                outcome.failed += 1
                click.echo(f"error: record on line {line_number} was not sent: {exc}", err=True)
                continue
            outcome.pending.add(future)
            future.add_done_callback(lambda f, n=line_number: outcome.on_done(n, f))
        await producer.flush()
        if outcome.pending:
            await asyncio.wait(set(outcome.pending))
        await asyncio.sleep(0)  # let the last done-callbacks run
    finally:
        await close_quietly(producer)
    return outcome


async def read_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of ``stream`` without their line ending (``\\n``, ``\\r\\n``), read off the loop."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | OSError | None] = asyncio.Queue(QUEUED_CHUNKS)
    thread = threading.Thread(target=_pump, args=(stream, loop, queue), name="stdin-reader", daemon=True)
    thread.start()
    pending = b""
    while (chunk := await queue.get()) is not None:
        if isinstance(chunk, OSError):
            raise chunk
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r")
    if pending:
        yield pending.removesuffix(b"\r")


def _pump(
    stream: BinaryIO, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | OSError | None]
) -> None:
    """The reader thread: chunks into ``queue`` (blocking while it is full), then None at EOF."""

    def put(item: bytes | OSError | None) -> None:
        coro = queue.put(item)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise
        future.result()

    read = getattr(stream, "read1", None) or stream.readline
    last: bytes | OSError | None = None
    try:
        while chunk := read(CHUNK_BYTES):
            put(chunk)
    except OSError as exc:
        last = exc
    except Exception:  # noqa: BLE001 - the loop is gone (Ctrl-C): nobody is listening any more
        return
    with contextlib.suppress(Exception):
        put(last)
