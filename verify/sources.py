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
(:data:`NARROW_COMMITTED_DDL`, :data:`NARROW_SEGMENTS_DDL`): no key or timestamp, and the digest
as two 64-bit integers cut by numpy out of the joined SHA-256 digests, so per record Python only
decodes, hashes and appends 32 bytes (about 1 us a record here, against 2.4 us with hex text), and
Spark caches, shuffles and compares 16 fixed-width bytes instead of a 32-character string. Option
``progress_dir``: each reader keeps its row count in a file there (:mod:`verify.progress`).

Sources and readers are pickled to Spark's Python workers: files and sockets are opened only
inside ``read``. The per-replica checkpoint files are small and read by the driver
(:mod:`verify.replicas`), not through a data source.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from client.protocol.records import NO_SEQUENCE, BatchHeader
from ledger.format import DIGEST_HEX_CHARS, key_text

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
#: The job's narrow schemas (option ``digests=binary``): no key and no timestamp (no check reads
#: them), and the value digest as the two big-endian 64-bit halves of the 128 bits the ledger's
#: 32 hex characters spell (``digest_hi``, ``digest_lo``; null for a null or undecodable value).
#: Fixed-width keys join and aggregate far faster than strings, and need no hex formatting per
#: record; :func:`verify.checks.digest_hex` turns them back into the ledger's text for a report.
NARROW_COMMITTED_DDL = (
    "topic string, partition int, offset bigint, digest_hi bigint, digest_lo bigint, producer_id bigint, "
    "producer_epoch int, sequence int, leader_epoch int, batch_base_offset bigint, crc_valid boolean"
)
NARROW_SEGMENTS_DDL = (
    "broker int, topic string, partition int, offset bigint, batch_base_offset bigint, "
    "batch_last_offset bigint, batch_crc bigint, crc_valid boolean, leader_epoch int, digest_hi bigint, "
    "digest_lo bigint, producer_id bigint, producer_epoch int, sequence int"
)
ROWS_PER_ARROW_BATCH = 65536
SEQUENCE_MODULUS = 2**31


def split_option(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def record_fields(batch: bytes | memoryview) -> list[tuple[int, str | None, str | None, int]]:
    """``(offset, value digest, key text, timestamp)`` of every record of one batch.

    The records are read with aiokafka's compiled RecordBatch v2 reader, the codec
    :func:`client.protocol.records.decode_batch` wraps: that wrapper builds a frozen dataclass per
    record, which costs about 1.7 us a record here, six times the decode itself, and this runs
    for every record of every replica. Digest and key text are :func:`ledger.format.value_digest`
    and :func:`ledger.format.key_text`, inlined for the same reason."""
    sha = hashlib.sha256
    return [
        (
            r.offset,
            None if (value := r.value) is None else sha(value).hexdigest()[:DIGEST_HEX_CHARS],
            None if (key := r.key) is None else key_text(key),
            r.timestamp,
        )
        for r in DefaultRecordBatch(bytes(batch))
    ]


class _Columns:
    """Column data for one Arrow record batch of record rows. Per record, Python only decodes and
    hashes; the columns that are constant per batch (producer facts, epoch, CRC) and the sequence
    arithmetic are expanded with numpy when the Arrow batch is built."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.digests: list[str | None] = []
        self.keys: list[str | None] = []
        self.timestamps: list[int | None] = []
        self.batches: list[tuple[int, ...]] = []  # per batch: (records, the BATCH_FIELDS...)
        self.rows = 0

    BATCH_FIELDS = (
        "producer_id",
        "producer_epoch",
        "leader_epoch",
        "batch_base_offset",
        "batch_last_offset",
        "batch_crc",
        "crc_valid",
        "base_sequence",
    )

    def add_batch(self, batch: bytes | memoryview, header: BatchHeader, crc_ok: bool) -> None:
        n = self._add_records(batch, header)
        h = header
        self.batches.append(
            (
                n,
                h.producer_id,
                h.producer_epoch,
                h.partition_leader_epoch,
                h.base_offset,
                h.last_offset,
                h.crc,
                crc_ok,
                h.base_sequence,
            )
        )
        self.rows += n

    def _add_records(self, batch: bytes | memoryview, header: BatchHeader) -> int:
        try:
            fields = record_fields(batch)
        except Exception:  # noqa: BLE001 - a corrupt batch's records may not decode at all
            n = header.last_offset_delta + 1
            self.offsets.extend(range(header.base_offset, header.base_offset + n))
            self.digests.extend([None] * n)
            self.keys.extend([None] * n)
            self.timestamps.extend([None] * n)
        else:
            n = len(fields)
            if n:
                offsets, digests, keys, timestamps = zip(*fields, strict=True)
                self.offsets.extend(offsets)
                self.digests.extend(digests)
                self.keys.extend(keys)
                self.timestamps.extend(timestamps)
        return n

    def record_columns(self) -> dict[str, Any]:
        return {"value_digest": self.digests, "key": self.keys, "timestamp": self.timestamps}

    def to_arrow(self, schema: Any, constants: dict[str, Any]) -> Any:
        import numpy as np
        import pyarrow as pa

        per_batch = np.array(self.batches, dtype=np.int64).reshape(-1, len(self.BATCH_FIELDS) + 1)
        counts = per_batch[:, 0]
        expanded = {name: np.repeat(per_batch[:, i + 1], counts) for i, name in enumerate(self.BATCH_FIELDS)}
        offsets = np.array(self.offsets, dtype=np.int64)
        pid, base_seq = expanded["producer_id"], expanded["base_sequence"]
        sequence = np.where(
            (base_seq == NO_SEQUENCE) | (pid < 0),
            NO_SEQUENCE,
            (base_seq + offsets - expanded["batch_base_offset"]) % SEQUENCE_MODULUS,
        )
        columns: dict[str, Any] = {
            **expanded,
            "crc_valid": expanded["crc_valid"].astype(bool),
            "offset": offsets,
            "sequence": sequence,
            **self.record_columns(),
        }
        arrays = [
            (
                column
                if isinstance(column := columns[field.name], pa.Array)
                else pa.array(column, type=field.type)
            )
            if field.name in columns
            else pa.repeat(pa.scalar(constants[field.name], type=field.type), self.rows)
            for field in schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


_NO_DIGEST = bytes(32)


class _DigestColumns(_Columns):
    """The narrow schemas' columns: per record only the offset and the SHA-256 digest bytes are
    gathered in Python; the two 64-bit halves are cut out of the joined digests by numpy."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []
        self.null_at: list[int] = []  # row numbers whose value is null or undecodable

    def _add_records(self, batch: bytes | memoryview, header: BatchHeader) -> int:
        sha = hashlib.sha256
        first = len(self.offsets)
        try:
            records = list(DefaultRecordBatch(bytes(batch)))
        except Exception:  # noqa: BLE001 - a corrupt batch's records may not decode at all
            n = header.last_offset_delta + 1
            self.offsets.extend(range(header.base_offset, header.base_offset + n))
            self.raw.extend([_NO_DIGEST] * n)
            self.null_at.extend(range(first, first + n))
            return n
        self.offsets.extend([r.offset for r in records])
        try:
            self.raw.extend([sha(r.value).digest() for r in records])
        except TypeError:  # a null value somewhere in the batch
            for i, r in enumerate(records):
                value = r.value
                if value is None:
                    self.raw.append(_NO_DIGEST)
                    self.null_at.append(first + i)
                else:
                    self.raw.append(sha(value).digest())
        return len(records)

    def record_columns(self) -> dict[str, Any]:
        import numpy as np
        import pyarrow as pa

        halves = np.frombuffer(b"".join(self.raw), dtype=">i8").reshape(-1, 4)
        mask = None
        if self.null_at:
            mask = np.zeros(self.rows, dtype=bool)
            mask[self.null_at] = True
        return {
            "digest_hi": pa.array(halves[:, 0].astype(np.int64), mask=mask),
            "digest_lo": pa.array(halves[:, 1].astype(np.int64), mask=mask),
        }


def _arrow_schema(ddl: str) -> Any:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "boolean": pa.bool_(),
        "double": pa.float64(),
    }
    fields = []
    for item in ddl.split(","):
        name, kind = item.split()
        fields.append(pa.field(name, types[kind]))
    return pa.schema(fields)


def _record_batches(
    batches: Iterator[tuple[bytes | memoryview, BatchHeader, bool]],
    ddl: str,
    constants: dict[str, Any],
    progress: Any = None,
) -> Iterator[Any]:
    schema = _arrow_schema(ddl)
    kind = _DigestColumns if "digest_hi" in ddl else _Columns
    columns = kind()
    for batch, header, crc_ok in batches:
        columns.add_batch(batch, header, crc_ok)
        if columns.rows >= ROWS_PER_ARROW_BATCH:
            if progress is not None:
                progress(columns.rows)
            yield columns.to_arrow(schema, constants)
            columns = kind()
    if columns.rows:
        if progress is not None:
            progress(columns.rows)
        yield columns.to_arrow(schema, constants)


# -- floodmark_segments ---------------------------------------------------------------------------


def replica_rows(
    broker: int,
    topic: str,
    partition: int,
    path: str,
    ddl: str = SEGMENTS_DDL,
    progress_dir: str | None = None,
) -> Iterator[Any]:
    """Arrow record batches (``ddl``: SEGMENTS_DDL or NARROW_SEGMENTS_DDL) of one replica directory."""
    from verify.progress import RowCounter
    from verify.segments import scan_replica

    scanned = ((b.data, b.header, b.crc_ok) for b in scan_replica(Path(path)))
    counter = RowCounter(progress_dir, f"segments-{broker}-{topic}-{partition}")
    yield from _record_batches(
        scanned, ddl, {"broker": broker, "topic": topic, "partition": partition}, counter.add
    )


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
    ) -> None:
        self.log_dirs = log_dirs
        self.topics = topics
        self.ddl = ddl
        self.progress_dir = progress_dir

    def partitions(self) -> list[InputPartition]:
        from verify.replicas import list_replicas

        inventory = list_replicas(self.log_dirs, set(self.topics) or None)
        return [InputPartition((r.broker, r.topic, r.partition, r.path)) for r in inventory.replicas]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        broker, topic, p, path = partition.value
        yield from replica_rows(broker, topic, p, path, self.ddl, self.progress_dir)


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
) -> Iterator[Any]:
    """Arrow record batches (``ddl``: COMMITTED_DDL or NARROW_COMMITTED_DDL) of ``[start, end)`` of one
    partition of a live cluster."""
    from verify.fetch import fetch_batches, iterate_async
    from verify.progress import RowCounter

    batches = iterate_async(fetch_batches(bootstrap, topic, partition, start, end, timeout_s=timeout_s))
    counter = RowCounter(progress_dir, f"committed-{topic}-{partition}")
    constants = {"topic": topic, "partition": partition}
    for arrow in _record_batches(batches, ddl, constants, counter.add):
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
    ):
        self.bootstrap = bootstrap
        self.topics = topics
        self.offsets = offsets
        self.timeout_s = timeout_s
        self.ddl = ddl
        self.progress_dir = progress_dir

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
            self.bootstrap, topic, p, start, end, self.timeout_s, self.ddl, self.progress_dir
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
        )


def register(spark: Any) -> None:
    """Register both sources with a session (idempotent)."""
    spark.dataSource.register(CommittedSource)
    spark.dataSource.register(SegmentsSource)
