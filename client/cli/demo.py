"""``floodmark demo``: the main job as far as it exists (README; issue "Foundation").

Starts ZooKeeper and a 3-broker cluster on free loopback ports in a fresh directory,
creates a topic with 6 partitions and replication factor 3, produces 100,000 keyed
records with acks=all, consumes them back, checks that every acknowledged record came back
exactly once and in per-partition order, prints what happened, and stops the cluster.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections import defaultdict
from pathlib import Path

import click

from client.cli.common import run

TOPIC = "demo"


@click.command("demo")
@click.option(
    "--data-dir", type=click.Path(path_type=Path), default=Path(".floodmark-demo"), show_default=True
)
@click.option("--records", type=int, default=100_000, show_default=True)
@click.option("--keep", is_flag=True, help="leave the cluster running afterwards")
def demo(data_dir: Path, records: int, keep: bool) -> None:
    """Start a 3-broker cluster, produce and consume RECORDS records, verify, stop."""
    from chaos.local_cluster import LocalCluster  # the operator's composition root (docs/design.md)
    from chaos.ports import free_port_block

    if data_dir.exists():
        previous = LocalCluster(data_dir)
        with contextlib.suppress(Exception):  # a stale or partial directory from an interrupted run
            previous.down()
        shutil.rmtree(data_dir)
    base = free_port_block(3)
    say = lambda message: click.echo(f"[{time.strftime('%H:%M:%S')}] {message}")  # noqa: E731
    cluster = LocalCluster(data_dir, progress=say)
    started = time.monotonic()
    say(f"starting ZooKeeper on {base - 1} and brokers 1-3 on {base}-{base + 2}")
    cluster.up(brokers=3, zookeeper_port=base - 1, base_port=base, overrides={}, timeout=90)
    try:
        ok = run(_exercise(cluster.bootstrap_servers, records, say))
        say(
            f"state-change logs: {data_dir}/broker-*/state-change.log; broker logs: {data_dir}/broker-*/broker.out"
        )
    finally:
        if keep:
            say(f"cluster left running; stop it with: floodmark cluster down --data-dir {data_dir}")
        else:
            say("stopping the cluster")
            cluster.down()
    say(f"done in {time.monotonic() - started:.1f}s: {'OK' if ok else 'FAILED'}")
    if not ok:
        raise SystemExit(1)


async def _exercise(bootstrap: str, n: int, say) -> bool:
    from client.admin import AdminClient
    from client.consumer import Consumer
    from client.producer import Producer
    from client.types import TopicPartition

    admin = AdminClient(bootstrap)
    await admin.start()
    await admin.create_topic(TOPIC, 6, 3, {"min.insync.replicas": "2"})
    (description,) = await admin.describe_topics([TOPIC])
    await admin.close()
    say(f"created topic {TOPIC}: 6 partitions, replication factor 3, min.insync.replicas=2")
    for p in description.partitions:
        say(
            f"  Partition: {p.partition}  Leader: {p.leader}  Replicas: {','.join(map(str, p.replicas))}  "
            f"Isr: {','.join(map(str, p.isr))}"
        )

    producer = Producer(bootstrap, acks="all", linger_ms=10, batch_size=65536)
    await producer.start()
    sent_at = time.monotonic()
    futures = []
    for i in range(n):
        futures.append(await producer.send(TOPIC, b"value-%d" % i, key=b"key-%d" % (i % 1000)))
        if (i + 1) % 25_000 == 0:
            say(f"  queued {i + 1:,} records")
    await producer.flush()
    acked = [f.result() for f in futures if not f.exception()]
    failed = n - len(acked)
    produce_s = time.monotonic() - sent_at
    await producer.close()
    say(
        f"produced {len(acked):,} acknowledged records (acks=all) in {produce_s:.1f}s "
        f"= {len(acked) / produce_s:,.0f} records/s; {failed} failed"
    )

    expected: dict[int, list[bytes]] = defaultdict(list)
    for i, md in enumerate(acked):
        expected[md.partition].append(b"value-%d" % i)
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition(TOPIC, p) for p in range(6)])
    await consumer.seek_to_beginning(*consumer.assignment())
    got: dict[int, list[bytes]] = defaultdict(list)
    total, read_at = 0, time.monotonic()
    deadline = read_at + 120
    while total < len(acked) and time.monotonic() < deadline:
        for record in await consumer.poll(timeout_ms=1000, max_records=10_000):
            got[record.partition].append(record.value)
            total += 1
    await consumer.close()
    consume_s = time.monotonic() - read_at
    say(f"consumed {total:,} records in {consume_s:.1f}s = {total / max(consume_s, 1e-9):,.0f} records/s")
    in_order = all(got[p] == expected[p] for p in range(6))
    say(
        f"every acknowledged record read back exactly once, in per-partition order: {'yes' if in_order else 'NO'}"
    )
    return in_order and failed == 0
