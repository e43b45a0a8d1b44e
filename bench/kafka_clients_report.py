"""The cases, the measurements and the report of bench/kafka_clients.py (docs/benchmarks.md
"Kafka's clients against the msgpack client (issue 24)"): what one case through one listener
measured (``Sample``), the medians over rounds, the per-round Kafka/msgpack ratios of broker CPU
per record, the markdown table and the JSON document."""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import machine

PARTITIONS = 6
RECORD_SIZE = 100
LINGER_MS = 5
BATCH_SIZE = 16384
MSGPACK, KAFKA = "msgpack", "kafka"


@dataclass(frozen=True)
class Case:
    """One comparison: the same work through each listener (``key``-msgpack, ``key``-kafka)."""

    key: str
    label: str
    kind: str  # "produce" or "consume"
    replication_factor: int = 3
    acks: str = "all"
    processes: int = 1
    kafka_batch_size: int = BATCH_SIZE  # librdkafka's batch.size (the msgpack client keeps BATCH_SIZE)
    idempotent: bool | None = None  # enable.idempotence of both producers; None: exactly for acks=all

    @property
    def idempotence(self) -> bool:
        return self.acks == "all" if self.idempotent is None else self.idempotent

    @property
    def topic_configs(self) -> list[str]:
        return ["min.insync.replicas=2"] if self.replication_factor == 3 else []


@dataclass
class Sample:
    """One case through one listener in one round."""

    case: str
    side: str
    round: int
    records: int = 0
    records_per_sec: float = 0.0
    broker_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    window_s: float = 0.0
    produce_requests: int | None = None
    fetch_requests: int | None = None  # the clients' and the followers'
    problems: list[str] = field(default_factory=list)

    @property
    def broker_us(self) -> float:
        return self.broker_cpu_s * 1e6 / self.records if self.records else float("nan")

    @property
    def client_us(self) -> float:
        return self.client_cpu_s * 1e6 / self.records if self.records else float("nan")


# -- the report ----------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if v == v]  # NaN (no records) left out
    return statistics.median(finite) if finite else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _client(case: Case, side: str) -> str:
    name = {
        (MSGPACK, "produce"): "`floodmark perf produce` (msgpack)",
        (KAFKA, "produce"): "confluent-kafka Producer (KAFKA)",
        (MSGPACK, "consume"): "`floodmark perf consume` (msgpack)",
        (KAFKA, "consume"): "confluent-kafka Consumer (KAFKA)",
    }[(side, case.kind)]
    return f"{case.processes} x {name}" if case.processes > 1 else name


def ratios(samples: list[Sample], case: Case) -> list[float]:
    """Kafka/msgpack broker CPU per record, per round."""
    by_round: dict[int, dict[str, Sample]] = {}
    for s in samples:
        if s.case == case.key:
            by_round.setdefault(s.round, {})[s.side] = s
    return [
        pair[KAFKA].broker_us / pair[MSGPACK].broker_us
        for _, pair in sorted(by_round.items())
        if len(pair) == 2 and pair[MSGPACK].broker_cpu_s > 0 and pair[KAFKA].records
    ]


def medians(samples: list[Sample], case: Case, side: str) -> dict[str, float | None]:
    """Medians over rounds of one case through one listener. Broker cores: broker CPU seconds
    over the clients' timed seconds (records / their records/s)."""
    mine = [s for s in samples if s.case == case.key and s.side == side and s.records]
    return {
        "records_per_sec": _median([s.records_per_sec for s in mine]),
        "broker_us_per_record": _median([s.broker_us for s in mine]),
        "client_us_per_record": _median([s.client_us for s in mine]),
        "broker_cores": _median([s.broker_cpu_s * s.records_per_sec / s.records for s in mine]),
        "records_per_produce_request": _median(
            [s.records / s.produce_requests for s in mine if s.produce_requests]
        ),
        "fetches_per_1000_records": _median(
            [s.fetch_requests * 1000 / s.records for s in mine if s.fetch_requests is not None]
        ),
    }


def table(samples: list[Sample], all_cases: list[Case]) -> list[str]:
    lines = [
        "| case | client (listener) | records/s | broker CPU us/record | client CPU us/record "
        "| broker cores | records / Produce request | Fetch requests / 1,000 records "
        "| Kafka/msgpack broker CPU per record (rounds) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for case in all_cases:
        for side in (MSGPACK, KAFKA):
            m = medians(samples, case, side)
            per_round = ratios(samples, case)
            ratio = (
                f"**{statistics.median(per_round):.2f}** ({', '.join(f'{r:.2f}' for r in per_round)})"
                if side == KAFKA and per_round
                else ""
            )
            lines.append(
                f"| {case.label if side == MSGPACK else ''} | {_client(case, side)} "
                f"| {_fmt(m['records_per_sec'], ',.0f')} | {_fmt(m['broker_us_per_record'], '.1f')} "
                f"| {_fmt(m['client_us_per_record'], '.1f')} | {_fmt(m['broker_cores'], '.2f')} "
                f"| {_fmt(m['records_per_produce_request'], '.0f')} "
                f"| {_fmt(m['fetches_per_1000_records'], '.1f')} | {ratio} |"
            )
    return lines


def report(args: argparse.Namespace, run: dict, samples: list[Sample], all_cases: list[Case]) -> str:
    m = machine()
    problems = [f"- round {s.round} {s.case} {s.side}: {p}" for s in samples for p in s.problems]
    lines = [
        f"Run of {m.date}: {args.records:,} records of {RECORD_SIZE} B per case, {PARTITIONS} partitions, "
        f"{args.repeat} round(s) (medians; even rounds in reverse order); the consume case reads "
        f"{run['consume_records']:,} records; whole run {run['elapsed_s']:.0f} s.",
        "",
        *table(samples, all_cases),
        "",
        "Broker CPU: user + system time of the three broker processes (/proc/<pid>/stat) over the case, "
        "per record. Client CPU: every client process's (RUSAGE_CHILDREN). Broker cores: broker CPU seconds "
        "over the clients' timed seconds. Records / Produce request and Fetch requests (the followers', "
        "replicating the case) / 1,000 records: the brokers' `kafka_network_requestmetrics_requests_total`. "
        f"Both producers: `linger.ms={LINGER_MS}`, `batch.size={BATCH_SIZE}` "
        "(librdkafka's 32768 in the variant), "
        "`enable.idempotence` as the case says (else true exactly for acks=all). "
        f"The brokers idle used {run['idle_broker_cores']:.3f} cores.",
        "",
        *m.lines(),
        f"- load average (1/5/15 min) before {run['load_before']}, after {run['load_after']}",
        "",
        "Commands of round 1 (`$BOOTSTRAP`: the msgpack listeners, `$KAFKA`: the KAFKA listeners):",
        "",
        "```",
        *(f"# {key}\n{command}" for key, command in run["commands"].items()),
        "```",
    ]
    if problems:
        lines += ["", "Problems:", "", *problems]
    lines += ["", "#### The two codecs alone (timed in one process, no cluster)", "", *run["codec"]]
    if run.get("profile"):
        lines += ["", "#### Where the brokers' CPU goes (RF 3 acks=all produce, py-spy)", "", *run["profile"]]
    return "\n".join(lines)


def write_json(
    path: Path, args: argparse.Namespace, run: dict, samples: list[Sample], all_cases: list[Case]
) -> None:
    doc = {
        **run,
        "args": vars(args),
        "machine": asdict(machine()),
        "samples": [{**asdict(s), "broker_us": s.broker_us, "client_us": s.client_us} for s in samples],
        "medians": {
            f"{c.key} {side}": medians(samples, c, side) for c in all_cases for side in (MSGPACK, KAFKA)
        },
        "kafka_over_msgpack_broker_cpu_per_record": {c.key: ratios(samples, c) for c in all_cases},
    }
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
