"""Parsing the output of ``floodmark perf produce|consume`` (Kafka's perf-tool formats).

The producer's final line is Kafka ProducerPerformance's::

    N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,
    P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th.

(the periodic window lines have no percentiles, so they never match). The consumer prints
Kafka ConsumerPerformance's CSV header and one data line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
PRODUCE_SUMMARY = re.compile(
    rf"(\d+) records sent, {_NUM} records/sec \({_NUM} MB/sec\), {_NUM} ms avg latency, "
    rf"{_NUM} ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\."
)
CONSUME_HEADER_START = "start.time, end.time,"


class ParseError(ValueError):
    """The tool's output has no summary line (it failed, or its format changed)."""


@dataclass(frozen=True)
class ProduceResult:
    records: int
    records_per_sec: float
    mb_per_sec: float
    avg_ms: float
    max_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int


@dataclass(frozen=True)
class ConsumeResult:
    start_time: str
    end_time: str
    data_mb: float
    mb_per_sec: float
    messages: int
    messages_per_sec: float
    rebalance_ms: int
    fetch_ms: int
    fetch_mb_per_sec: float
    fetch_messages_per_sec: float


def parse_produce(output: str) -> ProduceResult:
    """The last summary line of ``floodmark perf produce`` output."""
    matches = PRODUCE_SUMMARY.findall(output)
    if not matches:
        raise ParseError("no 'records sent ... 99.9th.' summary line in the perf produce output")
    n, rps, mbps, avg, mx, p50, p95, p99, p999 = matches[-1]
    return ProduceResult(
        records=int(n),
        records_per_sec=float(rps),
        mb_per_sec=float(mbps),
        avg_ms=float(avg),
        max_ms=float(mx),
        p50_ms=int(p50),
        p95_ms=int(p95),
        p99_ms=int(p99),
        p999_ms=int(p999),
    )


def parse_consume(output: str) -> ConsumeResult:
    """The data line that follows the CSV header of ``floodmark perf consume`` output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith(CONSUME_HEADER_START):
            fields = [f.strip() for f in lines[i + 1].split(",")]
            if len(fields) != 10:
                break
            try:
                return ConsumeResult(
                    start_time=fields[0],
                    end_time=fields[1],
                    data_mb=float(fields[2]),
                    mb_per_sec=float(fields[3]),
                    messages=int(fields[4]),
                    messages_per_sec=float(fields[5]),
                    rebalance_ms=int(fields[6]),
                    fetch_ms=int(fields[7]),
                    fetch_mb_per_sec=float(fields[8]),
                    fetch_messages_per_sec=float(fields[9]),
                )
            except ValueError:
                break
    raise ParseError("no ConsumerPerformance CSV header + data line in the perf consume output")
