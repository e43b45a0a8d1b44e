"""Every reader that walks a log moves batch by batch (Kafka's readers: ``batch.nextOffset``;
docs/design.md "Log compaction").

One log, compacted by the real cleaner (tests/unit/cleaner_harness.py), holds both batches a reader
that moves by records gets wrong:

* a batch whose last record the cleaner removed, kept with its original last offset: moving to its
  last record + 1 points back into it, and the next read returns it again (a spin when it is the
  last batch of the read, as the last batch of a segment is);
* the empty batch the cleaner keeps at the end of a cleaned segment whose records were all
  superseded: it has no record to move by at all.

Layout (offsets): segment 0 = [p] [k1 k2]; segment 3 = [k2'] [e]; segment 5 = [e'] [q]; the active
segment 7 = [z]. Cleaned: [k1 k2] keeps k1 only (last offset still 2) and [e] is empty (4..4).

The readers: the simulator's (sim/log_reading.py, which sim/world.py's ``records`` uses), the
consumer's fetcher (client/consumer/fetcher.py), the verification job's committed-log reader
(verify/fetch.py) and the replica verification tool (cli/verify_replicas.py). The fetching ones
read from tests/unit/fake_cluster.py serving the cleaned batches, one batch per fetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.log import Log
from cli.verify_replicas import ReplicaFetch, verify_partition
from client import Consumer
from client.protocol.api import ApiKey
from client.protocol.records import BatchHeader, iter_batches
from client.types import TopicPartition
from sim.log_reading import batches_below, records_below
from tests.unit.cleaner_harness import Clock, append, cleaner_for, compact_config, headers, open_log, oracle
from tests.unit.fake_cluster import FakeCluster
from verify.fetch import fetch_batches

TOPIC = "compacted"
MAX_READS = 50
SEGMENTS = [
    [[(b"p", b"1")], [(b"k1", b"a"), (b"k2", b"a")]],
    [[(b"k2", b"b")], [(b"e", b"a")]],
    [[(b"e", b"b")], [(b"q", b"1")]],
]


async def compacted_log(tmp_path: Path) -> Log:
    clock = Clock()
    lg = open_log(tmp_path / f"{TOPIC}-0", clock, compact_config(segment_bytes=200))
    for segment in SEGMENTS:
        for records in segment:
            append(lg, clock, records)
        lg.roll()
    append(lg, clock, [(b"z", b"1")])
    assert await cleaner_for(lg, clock).clean_filthiest_log()
    shape = [(h.base_offset, h.last_offset, h.record_count) for h in headers(lg)]
    assert shape == [(0, 0, 1), (1, 2, 1), (3, 3, 1), (4, 4, 0), (5, 5, 1), (6, 6, 1), (7, 7, 1)]
    return lg


def batches_of(lg: Log) -> list[tuple[BatchHeader, bytes]]:
    out = []
    for segment in lg.segments:
        data = segment.log_path.read_bytes()
        out += [(h, data[pos : pos + h.size]) for pos, h in iter_batches(data)]
    return out


@dataclass
class Read:
    records: bytes


class BoundedLog:
    """The Log as the simulator reads it, recording each read's offset and answering b"" (the end)
    after ``MAX_READS`` reads, so a reader that spins fails instead of hanging."""

    def __init__(self, lg: Log) -> None:
        self.lg = lg
        self.reads: list[int] = []
        self.log_start_offset = lg.log_start_offset
        self.topic, self.partition = lg.topic, lg.partition

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> Read:
        self.reads.append(offset)
        if len(self.reads) > MAX_READS:
            return Read(b"")
        return Read(bytes(self.lg.read(offset, max_bytes, max_offset=max_offset).records))


async def test_the_simulators_records_reader_moves_past_compacted_and_empty_batches(tmp_path: Path) -> None:
    """Interleaving: the read of segment 0 ends with [k1 k2] cleaned to k1 (offset 1, last offset 2)."""
    lg = await compacted_log(tmp_path)
    bounded = BoundedLog(lg)
    got = [(r.offset, r.key, r.value) for r in records_below(bounded, lg.log_end_offset)]  # type: ignore[arg-type]
    assert bounded.reads == [0, 3, 5, 7], f"reads at {bounded.reads[:10]} ({len(bounded.reads)} reads)"
    assert got == oracle(lg)  # kafka-python decoding every segment file


async def test_the_simulators_batch_reader_keeps_the_empty_batch_once(tmp_path: Path) -> None:
    lg = await compacted_log(tmp_path)
    bounded = BoundedLog(lg)
    got = batches_below(bounded, lg.log_end_offset)  # type: ignore[arg-type]
    assert bounded.reads == [0, 3, 5, 7]
    assert got == [(h.base_offset, h.last_offset, data) for h, data in batches_of(lg)]


@pytest.fixture
async def fake(tmp_path: Path):
    lg = await compacted_log(tmp_path)
    cluster = await FakeCluster().start()
    cluster.create(TOPIC, 1)
    part = cluster.topics[TOPIC][0]
    part.batches = [(h.base_offset, data) for h, data in batches_of(lg)]
    part.leo = lg.log_end_offset
    yield cluster, lg
    await cluster.stop()


def fetch_offsets(cluster: FakeCluster) -> list[int]:
    return [
        p["fetch_offset"]
        for r in cluster.of(ApiKey.FETCH)
        for t in r.body["topics"]
        for p in t["partitions"]
        if t["topic"] == TOPIC
    ]


async def test_the_consumer_fetches_each_batch_once(fake) -> None:
    """Interleaving: one batch per fetch (max_partition_fetch_bytes=1), so a fetch answers the
    cleaned [k1 k2] alone, and another the empty batch alone."""
    cluster, lg = fake
    tp = TopicPartition(TOPIC, 0)
    async with Consumer(
        cluster.bootstrap, fetch_max_wait_ms=10, max_partition_fetch_bytes=1, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp])
        got = []
        while await consumer.position(tp) < lg.log_end_offset:
            got += [(r.offset, r.key, r.value) for r in await consumer.poll(timeout_ms=100)]
    assert got == oracle(lg)
    offsets = fetch_offsets(cluster)
    assert offsets[:7] == [0, 1, 3, 4, 5, 6, 7], offsets  # each batch's base: its predecessor's next offset


async def test_the_verification_jobs_reader_yields_each_batch_once(fake) -> None:
    cluster, lg = fake
    got = [
        (header.base_offset, header.last_offset, crc_ok, batch)
        async for batch, header, crc_ok in fetch_batches(
            cluster.bootstrap, TOPIC, 0, 0, lg.log_end_offset, fetch_bytes=1
        )
    ]
    assert got == [(h.base_offset, h.last_offset, True, data) for h, data in batches_of(lg)]
    assert fetch_offsets(cluster) == [0, 1, 3, 4, 5, 6, 7]


async def test_the_replica_verification_tool_moves_past_the_compacted_batches(tmp_path: Path) -> None:
    lg = await compacted_log(tmp_path)
    records = b"".join(data for _, data in batches_of(lg))
    replicas = {1: ReplicaFetch(lg.log_end_offset, records), 2: ReplicaFetch(lg.log_end_offset, records)}
    check = verify_partition((TOPIC, 0), 0, replicas)
    assert check.mismatches == () and check.fetch_offset == lg.log_end_offset
