"""Staging a Python data source into Parquet once, so the checks read it natively
(docs/design.md "Verification job", "Staged inputs").

The job's checks read the replicas' records (and, against a live cluster, the committed log)
several times each. Spark can only cache a Python data source's rows by building its in-memory
columnar cache from them, and on ``local[2]`` that build, not the Python decoding, was the
largest single cost of the job: about 40 s for 30 million replica rows, against about 15 s to
decode the same segments in two Python workers and write them as Parquet. So the job runs each
source's reader once, as a plain Spark job with one task per :class:`InputPartition` (a
replica, or a partition's committed log), each task writing its Arrow batches to one Parquet file
under ``stage_dir``; the checks then read those files with Spark's vectorised Parquet reader,
which needs no cache: a scan of the columns a check uses costs about a second at that size.

The data sources stay the one place that turns segments and Fetch responses into rows (the
readers staged here are theirs), and ``spark.read.format(...)`` keeps working for anyone who
wants rows without a staging directory. ``stage_dir`` must be visible to the driver and to every
executor (under ``local[N]`` any local directory; on a cluster a shared path, like the log
dirs and the report dir).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

PARQUET_COMPRESSION = "none"  # the digests do not compress; the rest is small next to them


def _write_partition(reader: DataSourceReader, index: int, partition: InputPartition, stage_dir: str) -> int:
    """Run ``reader`` over one partition into ``stage_dir/part-<index>.parquet``; its row count.
    Written under a dot name and renamed, so a failed task's retry never leaves half a file that
    Spark would read (Spark skips names starting with a dot or an underscore)."""
    import os

    import pyarrow.parquet as pq

    final = Path(stage_dir) / f"part-{index:05d}.parquet"
    temporary = final.with_name(f".{final.name}.{os.getpid()}")
    writer = None
    rows = 0
    try:
        for batch in reader.read(partition):
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = pq.ParquetWriter(temporary, batch.schema, compression=PARQUET_COMPRESSION)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        os.replace(temporary, final)
    return rows


def stage(spark: Any, reader: DataSourceReader, ddl: str, stage_dir: Path) -> Any:
    """Every partition of ``reader`` written to Parquet under ``stage_dir`` (emptied first) by one
    Spark task each; the DataFrame over those files (schema ``ddl``)."""
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    partitions = list(reader.partitions())
    target = str(stage_dir)
    rows = 0
    if partitions:
        rows = sum(
            spark.sparkContext.parallelize(list(enumerate(partitions)), len(partitions))
            .map(lambda item: _write_partition(reader, item[0], item[1], target))
            .collect()
        )
    if rows == 0:
        return spark.createDataFrame([], ddl)
    return spark.read.schema(ddl).parquet(target)


def remove(stage_dir: Path) -> None:
    shutil.rmtree(stage_dir, ignore_errors=True)
