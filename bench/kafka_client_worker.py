"""One confluent-kafka (librdkafka) client process for bench/kafka_clients.py (docs/benchmarks.md
"Kafka's clients against the msgpack client (issue 24)"): a Producer or a Consumer over the
brokers' KAFKA listener, run as its own process so its CPU is measured as a child's
(``RUSAGE_CHILDREN``), as ``floodmark perf`` is, and so several can run in parallel.

``produce`` sends ``--records`` records of ``--record-size`` bytes (random upper-case letters, no
key, the default partitioner: librdkafka's sticky partitioning of key-less records, KIP-480) with
the stated ``acks``, ``linger.ms``, ``batch.size`` and ``enable.idempotence`` (by default true
exactly for acks=all, as Kafka 3.x decides it); delivery reports carry errors only
(``delivery.report.only.error``), so the Python side does almost nothing per record.
``consume`` assigns every partition from the beginning (no group membership) and reads
``--records`` records. Each prints one JSON line: records, seconds, wall-clock start and end,
records/s and errors::

    .venv/bin/python bench/kafka_client_worker.py produce --bootstrap B --topic T --records N --acks all
    .venv/bin/python bench/kafka_client_worker.py consume --bootstrap B --topic T --records N
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

POLL_EVERY = 1000
METADATA_TIMEOUT_S = 30.0


def wait_for_leaders(client: Producer | Consumer, topic: str, deadline: float) -> int:
    """Poll the cluster metadata until every partition of ``topic`` has a leader; the partition count."""
    while True:
        meta = client.list_topics(topic, timeout=5)
        found = meta.topics.get(topic)
        if (
            found is not None
            and found.error is None
            and found.partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return len(found.partitions)
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} has no leader for every partition")
        time.sleep(0.1)


def produce(args: argparse.Namespace) -> dict[str, Any]:
    errors: list[str] = []

    def on_delivery(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    idempotent = args.acks == "all" if args.idempotence == "auto" else args.idempotence == "true"
    config = {
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "enable.idempotence": idempotent,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        **dict(pair.split("=", 1) for pair in args.set),
    }
    producer = Producer(config)
    wait_for_leaders(producer, args.topic, time.monotonic() + METADATA_TIMEOUT_S)
    payload = "".join(random.Random().choices(string.ascii_uppercase, k=args.record_size)).encode()
    if args.start_at:  # parallel workers start together (a wall-clock instant from the parent)
        time.sleep(max(0.0, args.start_at - time.time()))
    start_wall, started = time.time(), time.monotonic()
    send, poll = producer.produce, producer.poll
    for i in range(args.records):
        while True:
            try:
                send(args.topic, payload)
                break
            except BufferError:  # queue.buffering.max.messages reached: let deliveries drain
                poll(0.005)
        if i % POLL_EVERY == 0:
            poll(0)
    left = producer.flush(120)
    elapsed = time.monotonic() - started
    return {
        "records": args.records - left - len(errors),
        "errors": len(errors) + left,
        "first_errors": errors[:3],
        "elapsed_s": elapsed,
        "start_wall": start_wall,
        "end_wall": start_wall + elapsed,
        "records_per_sec": (args.records - left) / elapsed if elapsed > 0 else 0.0,
    }


def consume(args: argparse.Namespace) -> dict[str, Any]:
    start_wall, started = time.time(), time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "bench-kafka-clients",  # required by the client; assign() joins no group
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    count = errors = 0
    try:
        partitions = wait_for_leaders(consumer, args.topic, time.monotonic() + METADATA_TIMEOUT_S)
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        last_record = time.monotonic()
        while count < args.records and time.monotonic() - last_record < args.timeout_s:
            messages = consumer.consume(min(10_000, args.records - count), 1.0)
            if messages:
                last_record = time.monotonic()
            for message in messages:
                if message.error() is None:
                    count += 1
                else:
                    errors += 1
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    return {
        "records": count,
        "errors": errors,
        "elapsed_s": elapsed,
        "start_wall": start_wall,
        "end_wall": start_wall + elapsed,
        "records_per_sec": count / elapsed if elapsed > 0 else 0.0,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("produce", "consume"))
    parser.add_argument("--bootstrap", required=True, help="the KAFKA listeners' bootstrap servers")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--acks", choices=("all", "1"), default="all")
    parser.add_argument("--idempotence", choices=("auto", "true", "false"), default="auto",
                        help="enable.idempotence (auto: true exactly for acks=all)")  # fmt: skip
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a librdkafka setting"
    )
    parser.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to start sending")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="consume: give up after this long idle")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = produce(args) if args.mode == "produce" else consume(args)
    print(json.dumps(result), flush=True)
    return 0 if result["errors"] == 0 and result["records"] >= args.records else 1


if __name__ == "__main__":
    sys.exit(main())
