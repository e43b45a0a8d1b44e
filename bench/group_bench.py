"""Consumer groups (issue 23; docs/benchmarks.md "Consumer groups: rebalance time and group
throughput"): how long a group of 1, 3 and 6 members takes to be assigned, and how fast a group of
3 consumes a topic against one consumer alone, measured side by side on one cluster.

Starts ZooKeeper and three brokers (bench/common.py's ``bench_cluster``) with
``group.initial.rebalance.delay.ms`` at ``--initial-delay-ms`` (default 0: the table then shows
the protocol's own cost; Kafka's default 3000 ms delay adds itself to the first rebalance), fills
a topic of ``--partitions`` (6) partitions at RF 3 with ``--records`` (200,000) records of 100
bytes (acks=1), then, ``--rounds`` times (3) in alternation:

* **rebalance time**: N members (1, 3, 6) of a fresh group start together and subscribe; the time
  from the subscribe to the moment every member holds its assignment of the same generation
  (first join: FindCoordinator, the two JoinGroups of KIP-394, SyncGroup, committed offsets), and
  then, with the group Stable, the time for the group to absorb one more member (a rebalance of
  a running group: every member rejoins);
* **consume throughput**: one consumer (assigned every partition, no group) and a group of 3
  each read the whole topic from the beginning; records per second from the first poll to the
  last record.

Every member runs in this one process on one event loop, as the clients of one application would;
the figures are ratios of one run, never timed assertions. A first group, not measured, creates
``__consumer_offsets``. Markdown on stdout, progress on stderr::

    .venv/bin/python bench/group_bench.py [--records 200000] [--partitions 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CLUSTER_SETTINGS, bench_cluster, machine, say
from client import Consumer, Producer
from client.admin import AdminClient
from client.types import TopicPartition

GROUP_SIZES = (1, 3, 6)


async def fill(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    async with AdminClient(bootstrap) as admin:
        await admin.create_topic(topic, partitions, 3)
    value = b"x" * 100
    async with Producer(bootstrap, acks=1, linger_ms=5, batch_size=262144) as producer:
        for i in range(records):
            await producer.send(topic, value, partition=i % partitions)
        await producer.flush()


def member(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        bootstrap, group_id=group, auto_offset_reset="earliest", session_timeout_ms=10000,
        heartbeat_interval_ms=500, enable_auto_commit=False, max_poll_records=2000,
    )  # fmt: skip


async def settled(members: list[Consumer], partitions: int, deadline: float) -> None:
    """Poll every member until each holds an assignment of one generation covering the topic."""
    while time.monotonic() < deadline:
        await asyncio.gather(*(m.poll(timeout_ms=20, max_records=1) for m in members))
        generations = {m.group_metadata().generation_id for m in members}
        if (
            len(generations) == 1
            and min(generations) > 0
            and sum(len(m.assignment()) for m in members) == partitions
        ):
            return
    raise TimeoutError("the group did not settle")


async def rebalance_times(
    bootstrap: str, topic: str, partitions: int, size: int, tag: str
) -> tuple[float, float]:
    members = [member(bootstrap, f"bench-{tag}-{size}") for _ in range(size)]
    for m in members:
        await m.start()
    try:
        started = time.monotonic()
        for m in members:
            m.subscribe([topic])
        await settled(members, partitions, started + 120)
        first = time.monotonic() - started
        extra = member(bootstrap, f"bench-{tag}-{size}")
        await extra.start()
        members.append(extra)
        started = time.monotonic()
        extra.subscribe([topic])
        await settled(members, partitions, started + 120)
        return first, time.monotonic() - started
    finally:
        await asyncio.gather(*(m.close() for m in members), return_exceptions=True)


async def consume_rate(bootstrap: str, topic: str, partitions: int, records: int, group: str | None) -> float:
    consumers = (
        [member(bootstrap, group) for _ in range(3)]
        if group
        else [Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=2000)]
    )
    for c in consumers:
        await c.start()
        if group:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = 0
    first: float | None = None
    deadline = time.monotonic() + 300
    try:
        while got < records and time.monotonic() < deadline:
            batches = await asyncio.gather(*(c.poll(timeout_ms=100) for c in consumers))
            n = sum(map(len, batches))
            if n and first is None:
                first = time.monotonic()
            got += n
        if got < records or first is None:
            raise TimeoutError(f"read {got} of {records} records")
        return records / (time.monotonic() - first)
    finally:
        await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)


async def measure(args: argparse.Namespace, bootstrap: str) -> dict:
    topic = "bench-groups"
    say(f"filling {topic}: {args.records} records in {args.partitions} partitions")
    await fill(bootstrap, topic, args.partitions, args.records)
    say("warm-up: a first group creates __consumer_offsets (not measured)")
    await rebalance_times(bootstrap, topic, args.partitions, 1, "warm-up")
    first: dict[int, list[float]] = {n: [] for n in GROUP_SIZES}
    grow: dict[int, list[float]] = {n: [] for n in GROUP_SIZES}
    rates: dict[str, list[float]] = {"single": [], "group": []}
    for r in range(args.rounds):
        for n in GROUP_SIZES:
            a, b = await rebalance_times(bootstrap, topic, args.partitions, n, f"r{r}")
            first[n].append(a)
            grow[n].append(b)
            say(f"round {r}: {n} members assigned in {a:.3f} s; one more absorbed in {b:.3f} s")
        order = ("single", "group") if r % 2 == 0 else ("group", "single")
        for kind in order:
            rate = await consume_rate(
                bootstrap,
                topic,
                args.partitions,
                args.records,
                f"bench-read-{r}" if kind == "group" else None,
            )
            rates[kind].append(rate)
            say(f"round {r}: {kind} consumed {rate:,.0f} records/s")
    return {"first": first, "grow": grow, "rates": rates}


def report(args: argparse.Namespace, results: dict) -> str:
    med = statistics.median
    lines = [
        "| group | first assignment (median s) | one more member (median s) |",
        "|---|---|---|",
    ]
    for n in GROUP_SIZES:
        lines.append(
            f"| {n} member{'s' if n > 1 else ''} | {med(results['first'][n]):.3f} | {med(results['grow'][n]):.3f} |"
        )
    single, group = med(results["rates"]["single"]), med(results["rates"]["group"])
    lines += [
        "",
        "| reader | records/s (median of rounds) | every round |",
        "|---|---|---|",
        f"| one consumer, all {args.partitions} partitions | {single:,.0f} | "
        + ", ".join(f"{x:,.0f}" for x in results["rates"]["single"])
        + " |",
        f"| group of 3 (range) | {group:,.0f} | "
        + ", ".join(f"{x:,.0f}" for x in results["rates"]["group"])
        + " |",
        "",
        f"Group / single: {group / single:.2f}. {args.rounds} rounds, {args.records:,} records of 100 B, "
        f"`group.initial.rebalance.delay.ms={args.initial_delay_ms}`.",
        "",
        *machine().lines(),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--initial-delay-ms", type=int, default=0)
    args = parser.parse_args()
    settings = {**CLUSTER_SETTINGS, "group.initial.rebalance.delay.ms": str(args.initial_delay_ms)}
    with bench_cluster(settings, prefix="floodmark-bench-groups-") as cluster:
        results = asyncio.run(measure(args, cluster.bootstrap_servers))
    print(report(args, results))


if __name__ == "__main__":
    main()
