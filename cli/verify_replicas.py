"""``floodmark verify-replicas``: Kafka's ReplicaVerificationTool (``kafka.tools.ReplicaVerificationTool``,
``kafka-replica-verification.sh``; docs/operations.md "Verifying replicas (`floodmark verify-replicas`)").

Every replica of every partition of the matching topics is fetched, one fetcher per broker, as
Kafka's debugging consumer (replica id -2, ``DEBUGGING_REPLICA_ID``), which a follower serves as
well as the leader, each replica below its own high watermark. Each round every fetcher fetches
once, from the partition's verified offset; then :class:`ReplicaBuffer` (Kafka's class of the
name) walks the replicas' batches side by side: while every replica has a next batch below its
HW, the batches must cover the same offsets (base and last offset) and carry the same CRC, and
the verified offset moves past them. The lag of a partition is the largest HW any replica
reported minus its verified offset; every ``--report-interval-ms`` the tool prints Kafka's line::

    2024-05-01 12:00:03,120: max lag is 0 for partition [orders,2] at offset 40 among 3 partitions

A mismatch prints Kafka's line (``partition [t,p]: replica 1's offset 9 doesn't match replica 2's
offset 7``, or ``partition [t,p] has unmatched checksum at offset 9; replica 1's checksum C1;
replica 2's checksum C2``); the round finishes, and the tool exits 1. Kafka exits at once on an
offset mismatch and only prints a checksum mismatch; here any divergence fails the run, after
every partition of that round was checked. Partitions are printed as ``[t,p]`` (Kafka 1.x's
TopicAndPartition; Kafka 2.x prints ``t-p``). A clean run lasts ``--time-limit-ms`` (default -1:
until interrupted, as Kafka's), then prints the last round's report line and exits 0.

The comparison is pure (:func:`verify_partition`, :class:`ReplicaBuffer`, the clock passed in);
the fetchers (:func:`verify_replicas`) only move bytes. Caveats, as Kafka's: the replica sets
are read once at start; a broker that is down, or a replica that errs (an offset out of its
range), delays the verification of its partitions until it answers again.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import click

from cli.common import CliError, bootstrap_option, close_quietly, resolve_bootstrap, run

#: ListOffsets' special timestamps, as --time takes them (Kafka's LATEST_TIMESTAMP, EARLIEST_TIMESTAMP).
LATEST, EARLIEST = -1, -2
CLIENT_ID = "replicaVerificationTool"  # Kafka's ReplicaVerificationTool.clientId
#: Kafka's ConsumerConfig.DEFAULT_MAX_PARTITION_FETCH_BYTES, the default --fetch-size.
DEFAULT_FETCH_SIZE = 1024 * 1024
REQUEST_TIMEOUT_S = 30.0

Tp = tuple[str, int]


def format_time(ms: int) -> str:
    """Kafka's ``yyyy-MM-dd HH:mm:ss,SSS`` (SimpleDateFormat, local time zone)."""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") + f",{ms % 1000:03d}"


def partition_name(tp: Tp | None) -> str:
    return "null" if tp is None else f"[{tp[0]},{tp[1]}]"


def topic_filter(raw: str) -> re.Pattern[str]:
    """Kafka's TopicFilter.IncludeList: commas become ``|``, spaces and surrounding quotes go, and
    the regex must match the whole topic name."""
    regex = raw.strip().replace(",", "|").replace(" ", "")
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", regex))
    try:
        return re.compile(regex)
    except re.error:
        raise click.BadParameter(f"{regex} is an invalid regex.", param_hint="--topic-white-list") from None


# -- the comparison (Kafka's ReplicaBuffer.verifyCheckSum) --------------------------------------


@dataclass(frozen=True)
class ReplicaFetch:
    """One replica's answer for one partition: its HW and the batches from the fetch offset.
    A failed fetch is ``ReplicaFetch(-1)`` (Kafka's empty partition response)."""

    high_watermark: int
    records: bytes = b""


@dataclass(frozen=True)
class MessageInfo:
    """One replica's batch as compared (Kafka's MessageInfo, with the base offset too)."""

    replica_id: int
    base_offset: int
    last_offset: int
    next_offset: int
    checksum: int


@dataclass(frozen=True)
class Mismatch:
    """Two replicas' batches at the same place that differ: in offsets, else in checksum."""

    tp: Tp
    first: MessageInfo
    other: MessageInfo

    @property
    def offsets_differ(self) -> bool:
        return (self.first.base_offset, self.first.last_offset) != (
            self.other.base_offset,
            self.other.last_offset,
        )

    def line(self) -> str:
        """Kafka's line for it, without the time."""
        a, b, name = self.first, self.other, partition_name(self.tp)
        if not self.offsets_differ:
            return (
                f"partition {name} has unmatched checksum at offset {b.last_offset}; replica "
                f"{a.replica_id}'s checksum {a.checksum}; replica {b.replica_id}'s checksum {b.checksum}"
            )
        line = (
            f"partition {name}: replica {a.replica_id}'s offset {a.last_offset} doesn't match "
            f"replica {b.replica_id}'s offset {b.last_offset}"
        )
        if a.base_offset != b.base_offset:
            line += f" (their batches start at {a.base_offset} and {b.base_offset})"
        return line


class ReplicaDataError(ValueError):
    """A replica answered bytes that are not whole RecordBatch v2 batches."""


@dataclass(frozen=True)
class PartitionCheck:
    fetch_offset: int  # the verified offset after this round
    max_high_watermark: int
    mismatches: tuple[Mismatch, ...] = ()


def _batches(tp: Tp, replica_id: int, offset: int, records: bytes) -> Iterator[MessageInfo]:
    from client.protocol.errors import KafkaError
    from client.protocol.records import iter_batches

    try:
        for _, h in iter_batches(records, check_crc=False):  # Kafka compares the stored CRCs
            yield MessageInfo(replica_id, h.base_offset, h.last_offset, h.next_offset, h.crc)
    except KafkaError as exc:
        raise ReplicaDataError(
            f"Error in processing replica {replica_id} in partition {partition_name(tp)} "
            f"at offset {offset}: {exc.message}"
        ) from None


def verify_partition(tp: Tp, fetch_offset: int, fetched: Mapping[int, ReplicaFetch]) -> PartitionCheck:
    """Walk the replicas' batches side by side, replicas in id order, the first one the reference
    (Kafka's loop): while every replica has a next batch wholly below its own HW, compare each
    with the reference and move the verified offset past it. A checksum mismatch is reported and
    the walk goes on, as in Kafka; an offset mismatch ends this partition's walk."""
    replicas = sorted(fetched)
    batches = {r: _batches(tp, r, fetch_offset, fetched[r].records) for r in replicas}
    max_hw = max(f.high_watermark for f in fetched.values())
    offset, mismatches = fetch_offset, []
    while True:
        first: MessageInfo | None = None
        in_all_replicas = True
        for replica in replicas:
            batch = next(batches[replica], None)
            if batch is None or batch.last_offset >= fetched[replica].high_watermark:
                in_all_replicas = False
                continue
            if first is None:
                first = batch
                continue
            if batch.checksum != first.checksum or (batch.base_offset, batch.last_offset) != (
                first.base_offset,
                first.last_offset,
            ):
                mismatches.append(Mismatch(tp, first, batch))
                if mismatches[-1].offsets_differ:
                    return PartitionCheck(offset, max_hw, tuple(mismatches))
        if not in_all_replicas or first is None:
            return PartitionCheck(offset, max_hw, tuple(mismatches))
        offset = first.next_offset


@dataclass(frozen=True)
class RoundResult:
    mismatches: tuple[Mismatch, ...]
    report: str | None  # the lag line, when one was due


@dataclass
class ReplicaBuffer:
    """The verified offset of every partition and the lag report (Kafka's ReplicaBuffer).

    ``max lag`` is, over the partitions of the last round, the largest (highest HW any replica
    reported - verified offset); the line names that partition and its verified offset (the first
    such partition in (topic, partition) order wins a tie). It is printed when more than
    ``report_interval_ms`` passed since the last one (or the start)."""

    expected_replicas: Mapping[Tp, int]
    fetch_offsets: dict[Tp, int]
    report_interval_ms: int
    last_report_ms: int
    max_lag: int = -1
    offset_with_max_lag: int = -1
    max_lag_partition: Tp | None = None
    reported_last_round: bool = field(default=False)

    def verify(self, fetched: Mapping[Tp, Mapping[int, ReplicaFetch]], now_ms: int) -> RoundResult:
        self.max_lag = -1
        mismatches: list[Mismatch] = []
        for tp in sorted(self.expected_replicas):
            replies = fetched.get(tp, {})
            if len(replies) != self.expected_replicas[tp]:
                raise ValueError(
                    f"fetched {len(replies)} replicas for {partition_name(tp)}, "
                    f"but expected {self.expected_replicas[tp]} replicas"
                )
            check = verify_partition(tp, self.fetch_offsets[tp], replies)
            self.fetch_offsets[tp] = check.fetch_offset
            mismatches.extend(check.mismatches)
            if check.max_high_watermark - check.fetch_offset > self.max_lag:
                self.offset_with_max_lag = check.fetch_offset
                self.max_lag = check.max_high_watermark - check.fetch_offset
                self.max_lag_partition = tp
        report = None
        if now_ms - self.last_report_ms > self.report_interval_ms:
            report = self.report_line(now_ms)
            self.last_report_ms = now_ms
        self.reported_last_round = report is not None
        return RoundResult(tuple(mismatches), report)

    def report_line(self, now_ms: int) -> str:
        return (
            f"{format_time(now_ms)}: max lag is {self.max_lag} for partition "
            f"{partition_name(self.max_lag_partition)} at offset {self.offset_with_max_lag} "
            f"among {len(self.expected_replicas)} partitions"
        )


# -- the fetchers (Kafka's ReplicaFetcher, one per broker) --------------------------------------


@dataclass(frozen=True)
class Settings:
    fetch_size: int = DEFAULT_FETCH_SIZE
    max_wait_ms: int = 1000
    report_interval_ms: int = 30_000
    time_limit_ms: int = -1
    initial_offset_time: int = LATEST


def fetch_request(offsets: Mapping[Tp, int], fetch_size: int, max_wait_ms: int) -> dict:
    """A Fetch as the debugging consumer, min bytes 1 (Kafka's ``FetchRequest.Builder.forReplica``
    with DEBUGGING_CONSUMER_ID)."""
    from client.protocol.api import DEBUGGING_REPLICA_ID

    topics: dict[str, list[dict]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append(
            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": fetch_size}
        )
    return {
        "replica_id": DEBUGGING_REPLICA_ID,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }


def fetch_answers(response: dict, asked: list[Tp]) -> dict[Tp, ReplicaFetch]:
    """Each asked partition's answer; one missing or refused is Kafka's empty response (HW -1)."""
    got = {
        (t["topic"], p["partition"]): ReplicaFetch(p["high_watermark"], p["records"])
        for t in response["topics"]
        for p in t["partitions"]
        if p["error_code"] == 0
    }
    return {tp: got.get(tp, ReplicaFetch(-1)) for tp in asked}


async def _fetch_from(
    admin: Any, broker: int, tps: list[Tp], offsets: Mapping[Tp, int], settings: Settings, max_wait_ms: int
) -> dict[Tp, ReplicaFetch]:
    from client.protocol.api import ApiKey
    from client.protocol.errors import KafkaError

    body = fetch_request({tp: offsets[tp] for tp in tps}, settings.fetch_size, max_wait_ms)
    try:
        conn = await admin.cluster.connection(broker)
        response = await conn.request(ApiKey.FETCH, body, timeout=REQUEST_TIMEOUT_S + max_wait_ms / 1000)
    except KafkaError:
        admin.cluster.drop_connection(broker)
        await asyncio.sleep(max_wait_ms / 1000)  # the wait a parked fetch would have taken
        return {tp: ReplicaFetch(-1) for tp in tps}
    return fetch_answers(response, tps)


async def _replicas(admin: Any, include: re.Pattern[str]) -> dict[Tp, list[int]]:
    """Every partition of the matching topics (internal ones too, as Kafka) and its replicas."""
    found = {
        (d.name, p.partition): list(p.replicas)
        for d in await admin.describe_topics()
        if d.error_code == 0 and include.fullmatch(d.name)
        for p in d.partitions
    }
    if not found:
        raise CliError(
            "No topics found. --topic-white-list, if specified, is either filtering out all topics "
            "or there is no topic."
        )
    return found


async def _initial_offsets(bootstrap: str, tps: list[Tp], when: int) -> dict[Tp, int]:
    """Kafka's initialOffsets, by a consumer: the HW (-1), the log start (-2), else the first
    offset at or after the timestamp (the HW when there is none)."""
    from client.consumer import Consumer
    from client.types import TopicPartition

    wanted = [TopicPartition(*tp) for tp in tps]
    consumer = Consumer(bootstrap, client_id=CLIENT_ID)
    try:
        await consumer.start()
        if when == EARLIEST:
            return {tuple(tp): o for tp, o in (await consumer.beginning_offsets(wanted)).items()}
        ends = {tuple(tp): o for tp, o in (await consumer.end_offsets(wanted)).items()}
        if when == LATEST:
            return ends
        found = await consumer.offsets_for_times(dict.fromkeys(wanted, when))
        return {tuple(tp): ends[tuple(tp)] if hit is None else hit[0] for tp, hit in found.items()}
    finally:
        await close_quietly(consumer)


async def verify_replicas(
    bootstrap: str,
    include: re.Pattern[str],
    settings: Settings,
    echo: Callable[[str], None],
    clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> int:
    """Run the verification; returns the number of mismatches found (0: a clean run to the limit)."""
    from client.admin import AdminClient

    admin = AdminClient(bootstrap, client_id=CLIENT_ID)
    try:
        await admin.start()
        replicas = await _replicas(admin, include)
        by_broker: dict[int, list[Tp]] = {}
        for tp, brokers in sorted(replicas.items()):
            for broker in brokers:
                by_broker.setdefault(broker, []).append(tp)
        offsets = await _initial_offsets(bootstrap, sorted(replicas), settings.initial_offset_time)
        start = clock_ms()
        buffer = ReplicaBuffer(
            {tp: len(r) for tp, r in replicas.items()}, offsets, settings.report_interval_ms, start
        )
        echo(f"{format_time(start)}: verification process is started.")
        deadline = None if settings.time_limit_ms < 0 else start + settings.time_limit_ms
        while True:
            wait = (
                settings.max_wait_ms
                if deadline is None
                else max(0, min(settings.max_wait_ms, deadline - clock_ms()))
            )
            answers = await asyncio.gather(
                *(
                    _fetch_from(admin, b, tps, buffer.fetch_offsets, settings, wait)
                    for b, tps in by_broker.items()
                )
            )
            fetched: dict[Tp, dict[int, ReplicaFetch]] = {}
            for broker, answer in zip(by_broker, answers, strict=True):
                for tp, reply in answer.items():
                    fetched.setdefault(tp, {})[broker] = reply
            now = clock_ms()
            result = buffer.verify(fetched, now)
            for mismatch in result.mismatches:
                echo(f"{format_time(now)}: {mismatch.line()}")
            if result.mismatches:
                return len(result.mismatches)
            if result.report is not None:
                echo(result.report)
            if deadline is not None and now >= deadline:
                if not buffer.reported_last_round:
                    echo(buffer.report_line(now))
                return 0
    finally:
        await close_quietly(admin)


@click.command(name="verify-replicas")
@bootstrap_option
@click.option(
    "--topic-white-list",
    default=".*",
    show_default=True,
    help="Regex of the topics to verify (Kafka's include list: commas mean |; it must match the whole name).",
)
@click.option(
    "--report-interval-ms",
    type=click.IntRange(min=0),
    default=30_000,
    show_default=True,
    help="The reporting interval.",
)
@click.option(
    "--time-limit-ms",
    type=click.IntRange(min=-1),
    default=-1,
    show_default=True,
    help="Stop after this long and exit 0 when nothing diverged; -1: run until interrupted.",
)
@click.option(
    "--fetch-size",
    type=click.IntRange(min=1),
    default=DEFAULT_FETCH_SIZE,
    show_default=True,
    help="Bytes per partition in each fetch.",
)
@click.option(
    "--max-wait-ms",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="The longest each fetch waits for data.",
)
@click.option(
    "--time",
    "initial_offset_time",
    type=click.IntRange(min=-2),
    default=LATEST,
    show_default=True,
    metavar="TIMESTAMP",
    help="Where the verification starts: -1 the high watermark (only new records), -2 the log start, else a timestamp (ms).",
)
def verify_replicas_command(
    bootstrap_server: str | None,
    topic_white_list: str,
    report_interval_ms: int,
    time_limit_ms: int,
    fetch_size: int,
    max_wait_ms: int,
    initial_offset_time: int,
) -> None:
    """Check that every replica holds the same batches (kafka-replica-verification.sh)."""
    include = topic_filter(topic_white_list)
    settings = Settings(fetch_size, max_wait_ms, report_interval_ms, time_limit_ms, initial_offset_time)
    bootstrap = resolve_bootstrap(bootstrap_server)
    found = run(verify_replicas(bootstrap, include, settings, click.echo))
    if found:
        raise CliError(f"{found} replica mismatch(es): the replicas diverged")
