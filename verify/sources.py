"""The verification job's two Spark 4 Python data sources (docs/design.md "Verification job").

``floodmark_committed`` reads the committed log of a live cluster: one Spark partition per topic
partition, each reading ``[log start offset, high watermark)`` from the partition's leader as
raw batches (:mod:`verify.fetch`), so every row carries its batch header's facts.
Options: ``bootstrap`` (``host:port[,host:port]``), ``topics`` (comma-separated), optionally
``offsets`` (JSON ``{"topic-partition": [start, high_watermark]}``: the job fixes the high
watermarks once and passes them, so every check sees the same cut), ``timeout_s``.

``floodmark_segments`` reads every replica's segment files straight from the log dirs: one Spark
partition per (broker, topic partition), every framed batch including those that fail their CRC
(:func:`verify.segments.scan_replica`). Options: ``log_dirs`` (comma-separated, each like
``<cluster>/broker-<id>/data``), optionally ``topics``.

Rows are built per batch and handed to Spark as Arrow record batches (``read`` may yield
``pyarrow.RecordBatch``), which keeps the per-record Python work to decoding and hashing. A record's
``sequence`` is its batch's base sequence plus its index in the batch (mod 2^31), -1 when the
batch has no producer id; ``value_digest`` is :func:`ledger.format.value_digest`. A batch whose
records cannot be decoded (a corrupt one) still yields one row per offset, with a null digest.

With the option ``digests=binary`` (what the job uses) the rows are narrower
(:data:`NARROW_COMMITTED_DDL`, :data:`NARROW_SEGMENTS_DDL`): the digest as two 64-bit integers cut by numpy out of the joined SHA-256 digests, so per record Python only
decodes, hashes and appends 32 bytes (about 1 us a record here, against 2.4 us with hex text), and
Spark caches, shuffles and compares 16 fixed-width bytes instead of a 32-character string. The key
(as text) and the timestamp stay: the job compares them with the ledger, since the broker must
not re-encode a record. Option ``progress_dir``: each reader keeps its row count in a file there
(:mod:`verify.progress`). Option ``facts_dir``: each reader writes there what it saw beside the
rows, batches out of offset order and segment bytes that frame no batch (:mod:`verify.scan_facts`).

Sources and readers are pickled to Spark's Python workers: files and sockets are opened only
inside ``read``. The per-replica checkpoint files are small and read by the driver
(:mod:`verify.replicas`), not through a data source.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from client.protocol.records import BatchHeader
from verify.arrow_rows import record_batches

COMMITTED_SOURCE = "floodmark_committed"
SEGMENTS_SOURCE = "floodmark_segments"

COMMITTED_DDL = (
    "topic string, partition int, offset bigint, value_digest string, key string, producer_id bigint, "
    "producer_epoch int, sequence int, leader_epoch int, timestamp bigint, batch_base_offset bigint, "
    "crc_valid boolean"
)
SEGMENTS_DDL = (
    "broker int, topic string, partition int, offset bigint, batch_base_offset bigint, "
    "batch_last_offset bigint, batch_crc bigint, crc_valid boolean, leader_epoch int, value_digest string, "
    "key string, producer_id bigint, producer_epoch int, sequence int, timestamp bigint"
)
#: The job's narrow schemas (option ``digests=binary``): the value digest as the two big-endian
#: 64-bit halves of the 128 bits the ledger's 32 hex characters spell (``digest_hi``,
#: ``digest_lo``; null for a null or undecodable value), the key as text, the timestamp.
#: Fixed-width keys join and aggregate far faster than strings, and need no hex formatting per
#: record; :func:`verify.checks.digest_hex` turns them back into the ledger's text for a report.
NARROW_COMMITTED_DDL = (
    "topic string, partition int, offset bigint, digest_hi bigint, digest_lo bigint, producer_id bigint, "
    "producer_epoch int, sequence int, leader_epoch int, batch_base_offset bigint, batch_last_offset bigint, "
    "crc_valid boolean, key string, timestamp bigint"
)
NARROW_SEGMENTS_DDL = (
    "broker int, topic string, partition int, offset bigint, batch_base_offset bigint, "
    "batch_last_offset bigint, batch_crc bigint, crc_valid boolean, leader_epoch int, digest_hi bigint, "
    "digest_lo bigint, producer_id bigint, producer_epoch int, sequence int, key string, timestamp bigint"
)


def split_option(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


# -- floodmark_segments ---------------------------------------------------------------------------


def replica_rows(
    broker: int,
    topic: str,
    partition: int,
    path: str,
    ddl: str = SEGMENTS_DDL,
    progress_dir: str | None = None,
    facts_dir: str | None = None,
) -> Iterator[Any]:
    """Arrow record batches (``ddl``: SEGMENTS_DDL or NARROW_SEGMENTS_DDL) of one replica directory;
    what it saw beside them goes to ``facts_dir`` (:mod:`verify.scan_facts`)."""
    from verify.progress import RowCounter
    from verify.scan_facts import OffsetOrder, write_facts
    from verify.segments import SegmentScan, scan_replica

    scans: list[SegmentScan] = []
    order = OffsetOrder()

    def scanned() -> Iterator[tuple[memoryview, BatchHeader, bool]]:
        for b in scan_replica(Path(path), scans):
            order.see(b.header.base_offset, b.header.last_offset)
            yield b.data, b.header, b.crc_ok

    counter = RowCounter(progress_dir, f"segments-{broker}-{topic}-{partition}")
    identity = {"broker": broker, "topic": topic, "partition": partition}
    yield from record_batches(scanned(), ddl, identity, counter.add)
    unframed = [
        {"segment_base": scan.base_offset, "end": scan.end, "size": scan.size, "last": i == len(scans) - 1}
        for i, scan in enumerate(scans)
        if scan.end < scan.size
    ]
    write_facts(facts_dir, f"segments-{broker}-{topic}-{partition}", identity, order, unframed)


def _narrow(options: Any) -> bool:
    digests = options.get("digests", "hex")
    if digests not in ("hex", "binary"):
        raise ValueError(f"option digests must be hex or binary, not {digests!r}")
    return digests == "binary"


class SegmentsReader(DataSourceReader):
    def __init__(
        self,
        log_dirs: list[str],
        topics: list[str],
        ddl: str = SEGMENTS_DDL,
        progress_dir: str | None = None,
        facts_dir: str | None = None,
    ) -> None:
        self.log_dirs = log_dirs
        self.topics = topics
        self.ddl = ddl
        self.progress_dir = progress_dir
        self.facts_dir = facts_dir

    def partitions(self) -> list[InputPartition]:
        from verify.replicas import list_replicas

        inventory = list_replicas(self.log_dirs, set(self.topics) or None)
        return [InputPartition((r.broker, r.topic, r.partition, r.path)) for r in inventory.replicas]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        broker, topic, p, path = partition.value
        yield from replica_rows(broker, topic, p, path, self.ddl, self.progress_dir, self.facts_dir)


class SegmentsSource(DataSource):
    """``spark.read.format("floodmark_segments").option("log_dirs", "D1,D2").load()``"""

    @classmethod
    def name(cls) -> str:
        return SEGMENTS_SOURCE

    def schema(self) -> str:
        return NARROW_SEGMENTS_DDL if _narrow(self.options) else SEGMENTS_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        log_dirs = split_option(self.options.get("log_dirs"))
        if not log_dirs:
            raise ValueError(f"{SEGMENTS_SOURCE} needs the option log_dirs (comma-separated log dirs)")
        return SegmentsReader(
            log_dirs,
            split_option(self.options.get("topics")),
            self.schema(),
            self.options.get("progress_dir"),
            self.options.get("facts_dir"),
        )


# -- floodmark_committed --------------------------------------------------------------------------


def committed_rows(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    timeout_s: float = 60.0,
    ddl: str = COMMITTED_DDL,
    progress_dir: str | None = None,
    facts_dir: str | None = None,
) -> Iterator[Any]:
    """Arrow record batches (``ddl``: COMMITTED_DDL or NARROW_COMMITTED_DDL) of ``[start, end)`` of one
    partition of a live cluster; batches out of offset order go to ``facts_dir``."""
    from verify.fetch import fetch_batches, iterate_async
    from verify.progress import RowCounter
    from verify.scan_facts import OffsetOrder, write_facts

    order = OffsetOrder()

    def batches() -> Iterator[tuple[bytes, BatchHeader, bool]]:
        for batch, header, crc_ok in iterate_async(
            fetch_batches(bootstrap, topic, partition, start, end, timeout_s=timeout_s)
        ):
            order.see(header.base_offset, header.last_offset)
            yield batch, header, crc_ok

    counter = RowCounter(progress_dir, f"committed-{topic}-{partition}")
    constants = {"topic": topic, "partition": partition}
    yield from _committed_slices(record_batches(batches(), ddl, constants, counter.add), start, end)
    identity = {"broker": None, "topic": topic, "partition": partition}
    write_facts(facts_dir, f"committed-{topic}-{partition}", identity, order, [])


def _committed_slices(arrows: Iterator[Any], start: int, end: int) -> Iterator[Any]:
    for arrow in arrows:
        # A batch straddling the bounds brings records outside them: keep [start, end) only.
        import pyarrow.compute as pc

        offsets = arrow.column("offset")
        mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
        yield arrow.filter(mask)


def offsets_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class CommittedReader(DataSourceReader):
    def __init__(
        self,
        bootstrap: str,
        topics: list[str],
        offsets: dict[str, list[int]] | None,
        timeout_s: float,
        ddl: str = COMMITTED_DDL,
        progress_dir: str | None = None,
        facts_dir: str | None = None,
    ):
        self.bootstrap = bootstrap
        self.topics = topics
        self.offsets = offsets
        self.timeout_s = timeout_s
        self.ddl = ddl
        self.progress_dir = progress_dir
        self.facts_dir = facts_dir

    def partitions(self) -> list[InputPartition]:
        offsets = self.offsets
        if offsets is None:
            from verify.fetch import partition_offsets, run_sync

            found = run_sync(partition_offsets(self.bootstrap, self.topics, int(self.timeout_s * 1000)))
            offsets = {offsets_key(t, p): [start, end] for (t, p), (start, end) in found.items()}
        parts = []
        for key, (start, end) in sorted(offsets.items()):
            topic, _, partition = key.rpartition("-")
            if topic in self.topics:
                parts.append(InputPartition((topic, int(partition), int(start), int(end))))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        topic, p, start, end = partition.value
        if start >= end:
            return
        yield from committed_rows(
            self.bootstrap, topic, p, start, end, self.timeout_s, self.ddl, self.progress_dir, self.facts_dir
        )


class CommittedSource(DataSource):
    """``spark.read.format("floodmark_committed").option("bootstrap", B).option("topics", T).load()``"""

    @classmethod
    def name(cls) -> str:
        return COMMITTED_SOURCE

    def schema(self) -> str:
        return NARROW_COMMITTED_DDL if _narrow(self.options) else COMMITTED_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        bootstrap = self.options.get("bootstrap")
        topics = split_option(self.options.get("topics"))
        if not bootstrap or not topics:
            raise ValueError(f"{COMMITTED_SOURCE} needs the options bootstrap and topics")
        raw = self.options.get("offsets")
        offsets = json.loads(raw) if raw else None
        return CommittedReader(
            bootstrap,
            topics,
            offsets,
            float(self.options.get("timeout_s", "60")),
            self.schema(),
            self.options.get("progress_dir"),
            self.options.get("facts_dir"),
        )


def register(spark: Any) -> None:
    """Register both sources with a session (idempotent)."""
    spark.dataSource.register(CommittedSource)
    spark.dataSource.register(SegmentsSource)
