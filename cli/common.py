"""What every ``floodmark`` subcommand shares (docs/operations.md "The floodmark CLI"): bootstrap
resolution, option parsing, running a coroutine on uvloop, and the error type that prints as one
line.

Bootstrap servers come from ``--bootstrap-server``, then ``FLOODMARK_BOOTSTRAP``, then the
``bootstrap`` key of the local cluster's state file ``./.floodmark/cluster.json``. The state file
is read here as plain JSON (its format is the contract): the client library never imports
``chaos``; only the ``cluster`` command group, the CLI's composition root, does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import sys
from collections.abc import Awaitable, Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import click

T = TypeVar("T")

BOOTSTRAP_ENV = "FLOODMARK_BOOTSTRAP"
DEFAULT_DATA_DIR = Path(".floodmark")
STATE_FILE = "cluster.json"

log = logging.getLogger(__name__)


class CliError(click.ClickException):
    """An expected failure: printed as ``Error: <message>`` on stderr, exit code 1."""


# -- bootstrap servers ---------------------------------------------------------------------------


def resolve_bootstrap(
    flag: str | None, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> str:
    """--bootstrap-server, else $FLOODMARK_BOOTSTRAP, else ./.floodmark/cluster.json, else an error."""
    if flag:
        return flag
    environ = os.environ if environ is None else environ
    if environ.get(BOOTSTRAP_ENV):
        return environ[BOOTSTRAP_ENV]
    state_file = (cwd or Path.cwd()) / DEFAULT_DATA_DIR / STATE_FILE
    if state_file.exists():
        try:
            bootstrap = json.loads(state_file.read_text())["bootstrap"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CliError(f"cannot read the bootstrap servers from {state_file}: {exc}") from None
        if bootstrap:
            return str(bootstrap)
    raise CliError(
        f"no bootstrap servers: pass --bootstrap-server HOST:PORT, set {BOOTSTRAP_ENV}, "
        f"or start a local cluster here with `floodmark cluster up`"
    )


def bootstrap_option(func: Any) -> Any:
    return click.option(
        "--bootstrap-server",
        "bootstrap_server",
        metavar="HOST:PORT[,HOST:PORT]",
        help=f"Brokers to connect to (default: ${BOOTSTRAP_ENV}, then ./.floodmark/cluster.json).",
    )(func)


# -- option values -------------------------------------------------------------------------------


def parse_pairs(values: Iterable[str], option: str) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; a value without ``=`` is a usage error naming the option."""
    pairs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=option)
        pairs[key.strip()] = value.strip()
    return pairs


def client_kwargs(props: Mapping[str, str]) -> dict[str, Any]:
    """Kafka-style client properties (``linger.ms=5``) as keyword arguments (``linger_ms=5``)."""
    return {key.replace(".", "_").replace("-", "_"): _typed(value) for key, value in props.items()}


def _typed(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def acks_value(acks: str) -> int | str:
    """``all``/``-1`` -> ``"all"``; ``1`` -> 1; ``0`` -> 0 (the producer's ``acks`` argument)."""
    return "all" if acks in ("all", "-1") else int(acks)


ACKS_CHOICE = click.Choice(["all", "-1", "1", "0"])


def binary_stream(name: str) -> BinaryIO:
    """The byte stream under sys.stdin / sys.stdout (records are bytes; CliRunner swaps these too)."""
    return getattr(sys, name).buffer


# -- async plumbing ------------------------------------------------------------------------------


#: CPython's generation-0 collection threshold during a perf run (the default is 700).
LOAD_GENERATOR_GC_THRESHOLD = (50_000, 20, 100)


@contextlib.contextmanager
def load_generator_gc() -> Iterator[None]:
    """A perf run holds up to 50,000 records with their futures and callbacks, and
    CPython's cyclic collector, run every 700 net allocations, kept rescanning them: about a third
    of the perf client's CPU went to it (py-spy, docs/benchmarks.md "The perf client's garbage
    collector"), and the client is what bounds a produce run. So the run freezes what start-up
    allocated and collects the young generation every 50,000 allocations instead (Kafka's perf
    tools likewise run with the collector settings of its launch script, kafka-run-class.sh)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*LOAD_GENERATOR_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine to completion on a fresh uvloop event loop."""
    import uvloop

    return uvloop.run(coro)


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable: lets commands call methods the client library may
    define as plain or as async (``assign``, ``seek``) without caring which."""
    if isinstance(value, Awaitable):
        return await value
    return value


async def submit(producer: Any, topic: str, value: bytes | None, key: bytes | None = None) -> asyncio.Future:
    """Hand one record to the producer; return an awaitable that resolves to its RecordMetadata
    (or raises its KafkaError). Works whether ``send`` returns the future or a coroutine of it."""
    result = producer.send(topic, value, key=key)
    if asyncio.iscoroutine(result):
        result = await result
    if isinstance(result, asyncio.Future):
        return result
    future = asyncio.get_running_loop().create_future()
    if isinstance(result, Awaitable):
        inner = asyncio.ensure_future(result)
        inner.add_done_callback(lambda done: _chain(done, future))
    else:
        future.set_result(result)
    return future


def _chain(source: asyncio.Future, target: asyncio.Future) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


async def close_quietly(component: Any) -> None:
    """Close a producer / consumer / admin client in a ``finally``: a failure to close must not
    hide the error that got us there."""
    if component is None:
        return
    try:
        await maybe_await(component.close())
    except Exception as exc:  # noqa: BLE001 - best effort on the way out
        log.debug("close failed: %s", exc)
