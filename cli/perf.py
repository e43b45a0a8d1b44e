"""``floodmark perf produce|consume``: Kafka's ProducerPerformance and ConsumerPerformance.

The output lines are Kafka's, number formats included, so results read like Kafka's:

- produce, every 5 s: ``X records sent, Y records/sec (Z MB/sec), A ms avg latency, M ms max latency.``
  and at the end ``N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,
  P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th.`` Latency is ack time minus send time per
  record; percentiles are Kafka's: the sorted samples at index ``int(n * p)``, at most 500,000
  samples (every ``num_records // 500000``-th record), printed as whole milliseconds.
- consume: Kafka's CSV header and one data line.

``--json`` prints the same numbers as one JSON object on stdout (progress lines go to stderr),
for bench scripts. The stats, throttle and formatting are pure, with the clock passed in.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import click

from cli.common import (
    ACKS_CHOICE,
    CliError,
    acks_value,
    bootstrap_option,
    client_kwargs,
    close_quietly,
    load_generator_gc,
    maybe_await,
    parse_pairs,
    resolve_bootstrap,
    run,
    submit,
)

REPORT_INTERVAL_S = 5.0
MAX_SAMPLES = 500_000
MAX_IN_FLIGHT = 50_000
MIN_SLEEP_S = 0.002
MB = 1024 * 1024
CONSUMER_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def percentiles(samples: Sequence[float], ps: Sequence[float]) -> list[float]:
    """Kafka ProducerPerformance's percentiles: sort, then take index ``int(p * n)``."""
    ordered = sorted(samples)
    if not ordered:
        return [0.0 for _ in ps]
    return [ordered[min(int(p * len(ordered)), len(ordered) - 1)] for p in ps]


# -- producer statistics -------------------------------------------------------------------------


@dataclass
class ProducerSummary:
    records: int
    failed: int
    bytes: int
    elapsed_s: float
    records_per_sec: float
    mb_per_sec: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float

    def line(self) -> str:
        """Kafka's final ProducerPerformance line (%d, %f, %.2f, %.2f, %.2f, then whole-ms percentiles)."""
        return (
            f"{self.records} records sent, {self.records_per_sec:f} records/sec ({self.mb_per_sec:.2f} MB/sec), "
            f"{self.avg_latency_ms:.2f} ms avg latency, {self.max_latency_ms:.2f} ms max latency, "
            f"{int(self.p50_ms)} ms 50th, {int(self.p95_ms)} ms 95th, {int(self.p99_ms)} ms 99th, "
            f"{int(self.p999_ms)} ms 99.9th."
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProducerStats:
    """Kafka's ProducerPerformance.Stats: totals, a 5 s reporting window, sampled latencies."""

    num_records: int
    start: float  # seconds, from the same clock as every ``now`` passed in
    report_interval: float = REPORT_INTERVAL_S
    count: int = 0
    failed: int = 0
    bytes: int = 0
    total_latency: float = 0.0
    max_latency: float = 0.0
    samples: list[float] = field(default_factory=list)
    window_start: float = 0.0
    window_count: int = 0
    window_bytes: int = 0
    window_total_latency: float = 0.0
    window_max_latency: float = 0.0

    def __post_init__(self) -> None:
        self.sampling = max(1, self.num_records // min(max(self.num_records, 1), MAX_SAMPLES))
        self.window_start = self.start

    def record(self, latency_ms: float, nbytes: int, now: float) -> str | None:
        """Count one acknowledged record; returns a window line when the interval has passed."""
        if self.count % self.sampling == 0:
            self.samples.append(latency_ms)
        self.count += 1
        self.bytes += nbytes
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += nbytes
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if now - self.window_start >= self.report_interval:
            line = self.window_line(now)
            self.window_start, self.window_count, self.window_bytes = now, 0, 0
            self.window_total_latency = self.window_max_latency = 0.0
            return line
        return None

    def window_line(self, now: float) -> str:
        elapsed = now - self.window_start
        avg = self.window_total_latency / self.window_count if self.window_count else 0.0
        return (
            f"{self.window_count} records sent, {_rate(self.window_count, elapsed):.1f} records/sec "
            f"({_rate(self.window_bytes, elapsed) / MB:.2f} MB/sec), {avg:.1f} ms avg latency, "
            f"{self.window_max_latency:.1f} ms max latency."
        )

    def summary(self, now: float) -> ProducerSummary:
        elapsed = now - self.start
        p50, p95, p99, p999 = percentiles(self.samples, (0.5, 0.95, 0.99, 0.999))
        return ProducerSummary(
            records=self.count,
            failed=self.failed,
            bytes=self.bytes,
            elapsed_s=elapsed,
            records_per_sec=_rate(self.count, elapsed),
            mb_per_sec=_rate(self.bytes, elapsed) / MB,
            avg_latency_ms=self.total_latency / self.count if self.count else 0.0,
            max_latency_ms=self.max_latency,
            p50_ms=p50,
            p95_ms=p95,
            p99_ms=p99,
            p999_ms=p999,
        )


@dataclass
class Throttler:
    """Keeps the send rate at ``throughput`` records/s (<= 0: unlimited), like Kafka's ThroughputThrottler."""

    throughput: float
    start: float

    def delay(self, sent: int, now: float) -> float:
        """Seconds to sleep before sending record number ``sent`` (0-based); 0 when on schedule."""
        if self.throughput <= 0:
            return 0.0
        due = self.start + sent / self.throughput
        return due - now if due - now >= MIN_SLEEP_S else 0.0


def make_payload(size: int, rng: random.Random) -> bytes:
    """Kafka's payload: random upper-case letters, one payload for every record."""
    return "".join(rng.choices(string.ascii_uppercase, k=size)).encode()


# -- consumer statistics -------------------------------------------------------------------------


def kafka_time(ms: int) -> str:
    """Kafka ConsumerPerformance's default date format, yyyy-MM-dd HH:mm:ss:SSS (local time)."""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S:") + f"{ms % 1000:03d}"


@dataclass
class ConsumerResult:
    start_ms: int
    end_ms: int
    bytes: int
    messages: int
    rebalance_ms: int
    expected: int = 0
    timed_out: bool = False

    @property
    def fetch_ms(self) -> int:
        return self.end_ms - self.start_ms - self.rebalance_ms

    def numbers(self) -> dict[str, float]:
        elapsed_s = (self.end_ms - self.start_ms) / 1000
        fetch_s = self.fetch_ms / 1000
        mb = self.bytes / MB
        return {
            "data_consumed_mb": mb,
            "mb_per_sec": _rate(mb, elapsed_s),
            "messages": self.messages,
            "messages_per_sec": _rate(self.messages, elapsed_s),
            "rebalance_time_ms": self.rebalance_ms,
            "fetch_time_ms": self.fetch_ms,
            "fetch_mb_per_sec": _rate(mb, fetch_s),
            "fetch_messages_per_sec": _rate(self.messages, fetch_s),
        }

    def csv_line(self) -> str:
        n = self.numbers()
        return (
            f"{kafka_time(self.start_ms)}, {kafka_time(self.end_ms)}, {n['data_consumed_mb']:.4f}, "
            f"{n['mb_per_sec']:.4f}, {self.messages}, {n['messages_per_sec']:.4f}, {self.rebalance_ms}, "
            f"{self.fetch_ms}, {n['fetch_mb_per_sec']:.4f}, {n['fetch_messages_per_sec']:.4f}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "start_time": kafka_time(self.start_ms),
            "end_time": kafka_time(self.end_ms),
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            **self.numbers(),
            "bytes": self.bytes,
            "expected": self.expected,
            "timed_out": self.timed_out,
        }


# -- commands ------------------------------------------------------------------------------------


@click.group()
def perf() -> None:
    """Kafka-style performance tests."""


def _throughput(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if value != -1 and value <= 0:
        raise click.BadParameter("must be -1 (unlimited) or a positive number of records/s")
    return value


@perf.command(name="produce")
@bootstrap_option
@click.option("--topic", required=True, help="Topic to write to.")
@click.option("--num-records", type=click.IntRange(min=1), required=True, help="Records to send.")
@click.option("--record-size", type=click.IntRange(min=0), required=True, help="Bytes per record value.")
@click.option(
    "--throughput",
    type=float,
    default=-1,
    show_default=True,
    callback=_throughput,
    help="Records/s cap, -1 for none.",
)
@click.option(
    "--acks", type=ACKS_CHOICE, help="Acknowledgement level (default: acks from --producer-props, else all)."
)
@click.option(
    "--producer-props",
    "producer_props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Producer settings, e.g. linger.ms=5.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.argument("more_props", nargs=-1, metavar="")
def perf_produce(
    bootstrap_server: str | None,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    acks: str | None,
    producer_props: tuple[str, ...],
    as_json: bool,
    more_props: tuple[str, ...],
) -> None:
    """Send NUM-RECORDS records of RECORD-SIZE bytes and report throughput and latency.

    Like Kafka, --producer-props takes several KEY=VALUE words: --producer-props acks=1 linger.ms=5.
    """
    props = parse_pairs((*producer_props, *more_props), "--producer-props")
    acks_setting = acks if acks is not None else props.pop("acks", "all")
    if acks_setting not in ("all", "-1", "1", "0"):
        raise click.BadParameter(
            f"acks must be all, -1, 1 or 0, not {acks_setting!r}", param_hint="--producer-props"
        )
    props.pop("acks", None)
    bootstrap = resolve_bootstrap(bootstrap_server)
    payload = make_payload(record_size, random.Random())

    def progress(line: str) -> None:
        click.echo(line, err=as_json)

    with load_generator_gc():
        summary = run(
            _perf_produce(
                bootstrap,
                topic,
                num_records,
                payload,
                throughput,
                acks_value(acks_setting),
                client_kwargs(props),
                progress,
            )
        )
    if as_json:
        doc = {
            **summary.to_json(),
            "topic": topic,
            "record_size": record_size,
            "acks": acks_setting,
            "throughput": throughput,
        }
        click.echo(json.dumps(doc))
    else:
        click.echo(summary.line())
    if summary.failed:
        raise CliError(f"{summary.failed} of {num_records} records were not acknowledged")


async def _perf_produce(
    bootstrap: str,
    topic: str,
    num_records: int,
    payload: bytes,
    throughput: float,
    acks: int | str,
    props: dict[str, Any],
    progress: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> ProducerSummary:
    from client.producer import Producer
    from client.protocol.errors import KafkaError

    producer = Producer(bootstrap, acks=acks, **props)
    await producer.start()
    try:
        stats = ProducerStats(num_records, start=clock())
        throttle = Throttler(throughput, start=stats.start)
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        errors: list[str] = []

        def done(sent_at: float, future: asyncio.Future) -> None:
            slots.release()
            now = clock()
            error = None if future.cancelled() else future.exception()
            if future.cancelled() or error is not None:
                stats.failed += 1
                if len(errors) < 5:
                    errors.append(str(error or "cancelled"))
                    click.echo(f"error: {errors[-1]}", err=True)
                return
            line = stats.record((now - sent_at) * 1000, len(payload), now)
            if line:
                progress(line)

        for i in range(num_records):
            if wait := throttle.delay(i, clock()):
                await asyncio.sleep(wait)
            await slots.acquire()
            sent_at = clock()
            try:
                future = await submit(producer, topic, payload)
            except KafkaError as exc:
                slots.release()
                stats.failed += 1
                click.echo(f"error: {exc}", err=True)
                continue
            future.add_done_callback(lambda f, t=sent_at: done(t, f))
        await producer.flush()
        for _ in range(MAX_IN_FLIGHT):  # every slot back: every done-callback has run
            await slots.acquire()
        return stats.summary(clock())
    finally:
        await close_quietly(producer)


@perf.command(name="consume")
@bootstrap_option
@click.option("--topic", required=True, help="Topic to read.")
@click.option("--messages", type=click.IntRange(min=1), required=True, help="Records to consume.")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=10000,
    show_default=True,
    help="Give up after this long without a record.",
)
@click.option(
    "--from-latest", is_flag=True, help="Start at the end of each partition instead of the beginning."
)
@click.option(
    "--consumer-property", "consumer_props", multiple=True, metavar="KEY=VALUE", help="Consumer setting."
)
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as one JSON object.")
def perf_consume(
    bootstrap_server: str | None,
    topic: str,
    messages: int,
    timeout_ms: int,
    from_latest: bool,
    consumer_props: tuple[str, ...],
    as_json: bool,
) -> None:
    """Consume MESSAGES records from every partition of TOPIC and report throughput."""
    props = client_kwargs(parse_pairs(consumer_props, "--consumer-property"))
    bootstrap = resolve_bootstrap(bootstrap_server)
    with load_generator_gc():
        result = run(_perf_consume(bootstrap, topic, messages, timeout_ms, from_latest, props))
    if result.timed_out:
        click.echo(
            f"WARNING: Exiting before consuming the expected number of messages: timeout ({timeout_ms} ms) exceeded. "
            "You can use the --timeout-ms option to increase the timeout.",
            err=True,
        )
    if as_json:
        click.echo(json.dumps({**result.to_json(), "topic": topic}))
    else:
        click.echo(CONSUMER_HEADER)
        click.echo(result.csv_line())


async def _perf_consume(
    bootstrap: str, topic: str, messages: int, timeout_ms: int, from_latest: bool, props: dict[str, Any]
) -> ConsumerResult:
    from client.consumer import Consumer
    from client.protocol.errors import ErrorCode, KafkaError
    from client.types import TopicPartition

    consumer = Consumer(bootstrap, **props)
    start_ms = int(time.time() * 1000)
    count = nbytes = 0
    try:
        await maybe_await(consumer.start())
        found = await consumer.partitions_for_topic(topic)
        ids = sorted(getattr(p, "partition", p) for p in (found or ()))
        if not ids:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} does not exist")
        tps = [TopicPartition(topic, p) for p in ids]
        await maybe_await(consumer.assign(tps))
        if from_latest:
            await maybe_await(consumer.seek_to_end(*tps))
        else:
            await maybe_await(consumer.seek_to_beginning(*tps))
        rebalance_ms = int(time.time() * 1000) - start_ms
        last_record = time.monotonic()
        timed_out = False
        while count < messages:
            records = await consumer.poll(timeout_ms=1000, max_records=min(messages - count, 10_000))
            if records:
                last_record = time.monotonic()
                for record in records:
                    count += 1
                    nbytes += len(record.key or b"") + len(record.value or b"")
            elif (time.monotonic() - last_record) * 1000 > timeout_ms:
                timed_out = True
                break
        end_ms = int(time.time() * 1000)
    finally:
        await close_quietly(consumer)
    return ConsumerResult(
        start_ms, end_ms, nbytes, count, rebalance_ms, expected=messages, timed_out=timed_out
    )
