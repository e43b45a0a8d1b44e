"""Record rows as Arrow record batches, the data sources' per-batch work (docs/design.md
"Verification job"): decode a RecordBatch v2 with aiokafka's compiled reader, hash each value, and
expand the batch header's facts (producer id and epoch, partition leader epoch, base sequence,
CRC) per record with numpy. :mod:`verify.sources` wraps these in Spark's Python data sources.
A record's ``sequence`` is its batch's base sequence plus its index in the batch (mod 2^31),
-1 when the batch has no producer id (Kafka's ``DefaultRecordBatch`` sequence rule).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch

from client.protocol.records import NO_SEQUENCE, BatchHeader
from ledger.format import DIGEST_HEX_CHARS, key_text

ROWS_PER_ARROW_BATCH = 65536
SEQUENCE_MODULUS = 2**31


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
    """The narrow schemas' columns: per record only the offset, key text, timestamp and the
    SHA-256 digest bytes are gathered in Python; the two 64-bit halves are cut out of the joined
    digests by numpy."""

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
            self.keys.extend([None] * n)
            self.timestamps.extend([None] * n)
            return n
        self.offsets.extend([r.offset for r in records])
        self.timestamps.extend([r.timestamp for r in records])
        self.keys.extend(
            [None if (k := r.key) is None else k.decode("utf-8", "backslashreplace") for r in records]
        )
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
            "key": self.keys,
            "timestamp": self.timestamps,
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


def record_batches(
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
