"""``floodmark_committed`` against a real cluster (SPEC 8): ZooKeeper and three broker processes.

Records produced with acks=all must come back through the data source exactly: one row per
acknowledged record at its offset with its value's digest, one Spark partition per topic
partition, nothing at or above the high watermark. Then the whole job runs in cluster mode
(committed log from the cluster, replicas from the brokers' log dirs) and passes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from client.admin import AdminClient
from client.producer import Producer
from ledger.format import LedgerWriter, value_digest
from tests.integration.cluster_fixtures import start_cluster
from verify.fetch import partition_offsets
from verify.job import run_verification
from verify.sources import COMMITTED_SOURCE

pytestmark = pytest.mark.integration

TOPIC = "verified"
PARTITIONS = 2
RECORDS = 300


async def test_committed_source_reads_back_what_was_acknowledged(tmp_path: Path, spark: Any) -> None:
    cluster = start_cluster(tmp_path / "cluster", brokers=3)
    try:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient(bootstrap)
        await admin.start()
        try:
            await admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        finally:
            await admin.close()

        report = tmp_path / "report"
        acked: dict[tuple[int, int], str] = {}
        async with Producer(bootstrap, acks="all", linger_ms=2, batch_size=2048) as producer:
            futures = []
            for i in range(RECORDS):
                value, key = b"value-%05d" % i, b"k%d" % (i % 17)
                sent_ms = time.time_ns() // 1_000_000
                futures.append((value, key, sent_ms, await producer.send(TOPIC, value, key=key)))
            await producer.flush()
            acked_ms = time.time_ns() // 1_000_000
            with LedgerWriter(report) as ledger:  # what the producer was told, as the workload records it
                for value, key, sent_ms, future in futures:
                    md = future.result()
                    acked[(md.partition, md.offset)] = value_digest(value)
                    ledger.ack(
                        TOPIC,
                        md.partition,
                        md.offset,
                        value,
                        key=key,
                        producer_id=md.producer_id,
                        sequence=md.sequence,
                        time_ms=acked_ms,
                        latency_ms=acked_ms - sent_ms,
                    )
            producer_id = getattr(producer, "producer_id", -1)

        offsets = await partition_offsets(bootstrap, [TOPIC])
        assert offsets == {(TOPIC, p): (0, sum(1 for (q, _) in acked if q == p)) for p in range(PARTITIONS)}

        df = spark.read.format(COMMITTED_SOURCE).option("bootstrap", bootstrap).option("topics", TOPIC).load()
        assert df.rdd.getNumPartitions() == PARTITIONS
        rows = df.collect()
        assert {(r.partition, r.offset): r.value_digest for r in rows} == acked and len(rows) == RECORDS
        assert all(r.crc_valid and r.topic == TOPIC and r.leader_epoch == 0 for r in rows)
        assert {r.producer_id for r in rows} == {producer_id}
        for p in range(PARTITIONS):
            sequences = [r.sequence for r in sorted(rows, key=lambda r: r.offset) if r.partition == p]
            assert sequences in ([-1] * len(sequences), list(range(len(sequences))))

        log_dirs = ",".join(str(tmp_path / "cluster" / f"broker-{b}" / "data") for b in (1, 2, 3))
        # Each broker checkpoints its HWs every replica.high.watermark.checkpoint.interval.ms
        # (5 s): a log dir without the file is an input the job cannot read in full (INCOMPLETE).
        checkpoints = [Path(d) / "replication-offset-checkpoint" for d in log_dirs.split(",")]
        deadline = time.monotonic() + 30
        while not all(c.exists() and TOPIC in c.read_text() for c in checkpoints):
            assert time.monotonic() < deadline, "no HW checkpoint of the topic within 30 s"
            await asyncio.sleep(0.2)
        result = run_verification(report, bootstrap, log_dirs, spark=spark)
        assert result.ok, result.violations
        assert result.mode == "cluster" and not result.skipped
        assert result.counts["acknowledged"] == result.counts["committed"] == RECORDS
        assert len(result.replicas) == 3 * PARTITIONS
    finally:
        cluster.down()
