"""``floodmark state-change-log merge``: Kafka's StateChangeLogMerger (``kafka.tools.StateChangeLogMerger``)
over the brokers' JSON-lines state-change logs (docs/operations.md "Merging state-change logs
(`floodmark state-change-log merge`)").

Every broker writes ``state-change.log`` (broker/state_change_log.py), one JSON object per line in
the order it wrote them, each with ``time_ms`` and ``broker``. This command reads the files named by
``--logs F1,F2`` or found by ``--logs-regex R``, keeps the records in the ``--start-time`` ..
``--end-time`` range (both inclusive, UTC, Kafka's ``yyyy-MM-dd HH:mm:ss,SSS``) that name
``--topic`` (and one of ``--partitions``), and prints them merged by time: a k-way merge
(``heapq.merge``, as Kafka's priority queue of line iterators) holding one record per file, ties in
file order then line order. Each record prints as one line, like Kafka's log4j lines::

    [2026-11-24 06:41:09,123] broker=2 event=LeaderAndIsrReceived topic=orders partition=0 leader=1 isr=[1,3,2]

``broker`` and the ``event`` or ``decision`` come first, the other fields follow in the order the
broker wrote them; strings print bare unless they hold a space, ``"`` or ``=`` (then JSON-quoted),
everything else as compact JSON. Lines that are not a JSON object with an integer ``time_ms`` are
skipped and counted on stderr.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from cli.common import CliError

TIME_FORMAT = "yyyy-MM-dd HH:mm:ss,SSS"
_TIME_SHAPE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: 10000-01-01 00:00:00 UTC: a time_ms from here on cannot be printed in TIME_FORMAT.
MAX_TIME_MS = 253_402_300_800_000
#: Fields printed right after the time, in this order; the others keep the order they were written in.
LEADING_FIELDS = ("broker", "event", "decision")
_BARE_STRING = re.compile(r'[^\s"=]+')
_REGEX_SYNTAX = set(".^$*+?{}[]\\|()")
_DIGITS = re.compile(r"[0-9]+")


# -- times ---------------------------------------------------------------------------------------


def parse_time(text: str) -> int:
    """``"2026-11-24 06:41:09,123"`` (UTC) -> epoch milliseconds; ValueError when not that shape."""
    text = text.replace('"', " ").strip()  # as Kafka's tool, which accepts the time quoted
    if not _TIME_SHAPE.fullmatch(text):
        raise ValueError(text)
    seconds, millis = text.split(",")
    moment = datetime.strptime(seconds, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1) + int(millis)


def format_time(time_ms: int) -> str:
    """Epoch milliseconds -> ``"2026-11-24 06:41:09,123"`` (UTC), Kafka's log4j date format."""
    moment = _EPOCH + timedelta(milliseconds=time_ms)
    return f"{moment:%Y-%m-%d %H:%M:%S},{time_ms % 1000:03d}"


class KafkaTime(click.ParamType):
    """A click option value in TIME_FORMAT, converted to epoch milliseconds."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not a time in the format {TIME_FORMAT} (UTC), e.g. '2026-11-24 06:41:09,123'",
                param,
                ctx,
            )


# -- which records -------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def named_partitions(record: dict) -> Iterator[tuple[str, int | None]]:
    """The (topic, partition) pairs a record names; partition None names the whole topic.

    * ``topic`` with ``partition``: that partition;
    * ``topic`` without ``partition``: each partition keying one of its dict fields (topic_created's
      ``assignment``, partitions_added's ``partitions``: ``{"0": [1, 2]}``), else the whole topic;
    * a ``topics`` list: each topic, whole;
    * any other list: each ``"<topic>-<partition>"`` string in it (``partitions``,
      ``offline_partitions``).
    """
    topic = record.get("topic")
    if isinstance(topic, str):
        if _is_int(record.get("partition")):
            yield topic, record["partition"]
        else:
            keyed = [
                int(key)
                for value in record.values()
                if isinstance(value, dict)
                for key in value
                if _DIGITS.fullmatch(key)
            ]
            yield from ((topic, p) for p in keyed) if keyed else [(topic, None)]
    for key, value in record.items():
        if not isinstance(value, list):
            continue
        for item in value:
            if not isinstance(item, str):
                continue
            if key == "topics":
                yield item, None
                continue
            name, dash, number = item.rpartition("-")
            if dash and name and _DIGITS.fullmatch(number):
                yield name, int(number)


@dataclass(frozen=True)
class RecordFilter:
    """The records to print: ``start_ms <= time_ms <= end_ms`` and, with ``topic``, naming it (see
    named_partitions); with ``partitions`` too, naming one of them or the whole topic."""

    start_ms: int
    end_ms: int
    topic: str | None = None
    partitions: frozenset[int] = frozenset()

    def matches(self, record: dict) -> bool:
        if not self.start_ms <= record["time_ms"] <= self.end_ms:
            return False
        if self.topic is None:
            return True
        return any(
            name == self.topic and (not self.partitions or p is None or p in self.partitions)
            for name, p in named_partitions(record)
        )


# -- reading and merging -------------------------------------------------------------------------


def parse_line(line: str) -> dict | None:
    """One state-change record, or None when the line is not a JSON object with an integer time_ms."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    time_ms = record.get("time_ms")
    if not _is_int(time_ms) or not 0 <= time_ms < MAX_TIME_MS:
        return None
    return record


class LogReader:
    """One open state-change log: its matching records, in file order, counting unreadable lines."""

    def __init__(self, path: str, stream: Iterable[str]) -> None:
        self.path = path
        self.stream = stream
        self.skipped = 0

    def records(self, wanted: RecordFilter) -> Iterator[dict]:
        for line in self.stream:
            if not line.strip():
                continue
            record = parse_line(line)
            if record is None:
                self.skipped += 1
            elif wanted.matches(record):
                yield record


def open_logs(paths: list[str], stack: contextlib.ExitStack) -> list[LogReader]:
    """Every file opened before anything is printed: a missing one is one ``Error:`` line."""
    readers = []
    for path in paths:
        try:
            stream = stack.enter_context(open(path, encoding="utf-8", errors="replace"))  # noqa: SIM115
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
        readers.append(LogReader(path, stream))
    return readers


def merge_records(readers: list[LogReader], wanted: RecordFilter) -> Iterator[dict]:
    """The matching records of all readers by time_ms; each file is read in order, one record at a
    time (heapq.merge is stable: equal times come in reader order, then line order)."""
    return heapq.merge(*(r.records(wanted) for r in readers), key=lambda record: record["time_ms"])


# -- output --------------------------------------------------------------------------------------


def _value(value: object) -> str:
    if isinstance(value, str) and _BARE_STRING.fullmatch(value) and value.isprintable():
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def format_record(record: dict) -> str:
    """``[<time>] broker=2 event=... k=v ...`` (see the module docstring)."""
    leading = [k for k in LEADING_FIELDS if k in record]
    rest = [k for k in record if k not in LEADING_FIELDS and k != "time_ms"]
    fields = " ".join(f"{k}={_value(record[k])}" for k in leading + rest)
    return f"[{format_time(record['time_ms'])}] {fields}"


# -- which files ---------------------------------------------------------------------------------


def _natural(name: str) -> list[Any]:
    """Sort key that puts broker-2 before broker-10."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"([0-9]+)", name))]


def _listing(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory), key=_natural)
    except OSError:  # unreadable or not there: nothing in it matches
        return []


def find_logs(pattern: str) -> list[str]:
    """The files whose path matches ``pattern``, component by component: each ``/``-separated part is
    a regex matched against the whole name at that depth (``.`` and ``..`` are the usual
    directories), names at one depth in natural order; the last part names files, the others
    directories. ``/tmp/sclm/broker-.*/state-change.log`` lists /tmp/sclm only."""
    parts = [p for p in pattern.split("/") if p]
    try:
        compiled = [None if p in (".", "..") else re.compile(p) for p in parts]
    except re.error as exc:
        raise click.BadParameter(
            f"{pattern!r} is not a regular expression: {exc}", param_hint="--logs-regex"
        ) from None
    found = [Path("/") if pattern.startswith("/") else Path(".")]
    for depth, (part, regex) in enumerate(zip(parts, compiled, strict=True)):
        last = depth == len(parts) - 1
        if regex is None or not _REGEX_SYNTAX & set(part):
            candidates = [d / part for d in found]
        else:
            candidates = [d / name for d in found for name in _listing(d) if regex.fullmatch(name)]
        found = [c for c in candidates if (c.is_file() if last else c.is_dir())]
    return [str(p) for p in found] if parts else []


# -- the command ---------------------------------------------------------------------------------


def _partitions(value: str | None) -> frozenset[int]:
    if value is None:
        return frozenset()
    items = [item.strip() for item in value.split(",")]
    if not all(_DIGITS.fullmatch(item) for item in items):
        raise click.BadParameter(
            f"{value!r} is not a comma-separated list of partition ids", param_hint="--partitions"
        )
    numbers = [int(item) for item in items]
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise click.BadParameter(
            f"the list of partitions contains repeated entries: {','.join(map(str, repeated))}",
            param_hint="--partitions",
        )
    return frozenset(numbers)


def _log_paths(logs: str | None, logs_regex: str | None) -> list[str]:
    if (logs is None) == (logs_regex is None):
        raise click.UsageError("give exactly one of --logs and --logs-regex")
    if logs is not None:
        paths = [item.strip() for item in logs.split(",") if item.strip()]
        if not paths:
            raise click.BadParameter("no file named", param_hint="--logs")
        return paths
    assert logs_regex is not None
    paths = find_logs(logs_regex)
    if not paths:
        raise CliError(f"no file matches --logs-regex {logs_regex}")
    return paths


@click.group(name="state-change-log")
def state_change_log() -> None:
    """Read the brokers' state-change logs (Kafka's StateChangeLogMerger)."""


@state_change_log.command(name="merge")
@click.option(
    "--logs", metavar="FILE1,FILE2,...", default=None, help="Comma-separated state-change logs to merge."
)
@click.option(
    "--logs-regex",
    metavar="REGEX",
    default=None,
    help="The logs to merge, by a regex over their paths, matched '/'-part by '/'-part "
    "(e.g. 'DIR/broker-.*/state-change.log').",
)
@click.option("--topic", default=None, help="Only records naming this topic.")
@click.option(
    "--partitions", metavar="0,1,...", default=None, help="Only records naming these partitions of --topic."
)
@click.option(
    "--start-time",
    "start_ms",
    type=KafkaTime(),
    default=None,
    help=f"The earliest record to print, '{TIME_FORMAT}' UTC (default: the epoch).",
)
@click.option(
    "--end-time",
    "end_ms",
    type=KafkaTime(),
    default=None,
    help=f"The latest record to print, '{TIME_FORMAT}' UTC (default: now).",
)
def merge(
    logs: str | None,
    logs_regex: str | None,
    topic: str | None,
    partitions: str | None,
    start_ms: int | None,
    end_ms: int | None,
) -> None:
    """Merge the brokers' state-change logs in time order (kafka.tools.StateChangeLogMerger)."""
    if partitions is not None and topic is None:
        raise click.UsageError("--partitions needs --topic")
    wanted = RecordFilter(
        start_ms=0 if start_ms is None else start_ms,
        end_ms=time.time_ns() // 1_000_000 if end_ms is None else end_ms,
        topic=topic,
        partitions=_partitions(partitions),
    )
    if wanted.start_ms > wanted.end_ms:
        raise click.BadParameter("--start-time is after --end-time", param_hint="--start-time")
    paths = _log_paths(logs, logs_regex)
    with contextlib.ExitStack() as stack:
        readers = open_logs(paths, stack)
        for record in merge_records(readers, wanted):
            click.echo(format_record(record))
    for reader in readers:
        if reader.skipped:
            click.echo(f"skipped {reader.skipped} unreadable line(s) in {reader.path}", err=True)
