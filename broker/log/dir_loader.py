"""Loading one log dir at start-up: Kafka's ``LogManager.loadLogs`` for a single dir (docs/design.md
"Log dir failure"; "The controller at scale (issue 25)", "Thousands of logs in one log manager").

:func:`load_dir` reads the dir's three checkpoints and its clean-shutdown marker, opens every
``<topic>-<partition>`` directory with :meth:`Log.open` on ``num.recovery.threads.per.data.dir``
threads (the recoveries' fsyncs overlap), and returns the logs in directory order, so what the
log manager does with them never depends on the threads' timing. A leftover ``-delete`` dir (a
deletion a stop interrupted) is removed. A load that fails closes every log it opened and raises;
the log manager then takes the dir offline. A dir loaded whole loses its clean-shutdown marker.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from broker.log.checkpoint import CorruptCheckpoint, OffsetCheckpointFile, fsync_dir
from broker.log.executor import ExecutorFactory, thread_pool
from broker.log.file_cache import SegmentFileCache
from broker.log.log import Log, LogConfig, parse_topic_partition
from broker.log.log_dir_failure import LogDirFailureChannel
from client.types import TopicPartition

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DELETE_SUFFIX = "-delete"


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """An offset checkpoint's entries; a corrupt one is logged and read as empty."""
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpoint as e:
        log.warning("%s; treating it as empty", e)
        return {}


def log_paths(log_dir: Path, known: Mapping[TopicPartition, Log]) -> list[tuple[TopicPartition, Path]]:
    """The ``<topic>-<partition>`` dirs of ``log_dir``, in name order; a deleted log's leftover
    ``-delete`` dir is removed. A partition already in ``known`` (another log dir's) is an error."""
    paths: list[tuple[TopicPartition, Path]] = []
    for path in sorted(log_dir.iterdir()):
        if not path.is_dir():
            continue
        if path.name.endswith(DELETE_SUFFIX):
            log.info("removing %s, a log whose deletion did not finish", path)
            shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            tp = parse_topic_partition(path.name)
        except ValueError:
            log.warning("ignoring %s: not a <topic>-<partition> directory", path)
            continue
        if tp in known:
            raise RuntimeError(f"duplicate log directories for {tp[0]}-{tp[1]}: {known[tp].dir} and {path}")
        paths.append((tp, path))
    return paths


def load_dir(
    log_dir: Path,
    default_config: LogConfig,
    topic_configs: Mapping[str, LogConfig],
    time_ms: Callable[[], int],
    failure_channel: LogDirFailureChannel,
    file_cache: SegmentFileCache,
    threads: int,
    known: Mapping[TopicPartition, Log],
    executor_factory: ExecutorFactory = thread_pool,
) -> list[tuple[TopicPartition, Log]]:
    """Open every log of ``log_dir``, ``threads`` at a time (on a pool of ``executor_factory``);
    the logs in directory order."""
    marker = log_dir / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    recovery_points = read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
    start_offsets = read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
    high_watermarks = read_checkpoint(log_dir / HIGH_WATERMARK_CHECKPOINT)
    log.info("loading logs from %s (%s shutdown)", log_dir, "clean" if clean else "unclean")
    started = time_ms()
    paths = log_paths(log_dir, known)

    def open_log(tp: TopicPartition, path: Path) -> Log:
        opened = Log.open(
            path,
            topic_configs.get(tp[0], default_config),
            time_ms,
            recovery_point=recovery_points.get(tp, 0),
            log_start_offset=start_offsets.get(tp, 0),
            clean_shutdown=clean,
            failure_channel=failure_channel,
            file_cache=file_cache,
        )
        opened.update_high_watermark(high_watermarks.get(tp, 0))
        return opened

    with executor_factory(threads, "log-recovery") as pool:
        futures = [pool.submit(open_log, tp, path) for tp, path in paths]
    if any(f.exception() is not None for f in futures):
        for future in futures:
            if future.exception() is None:
                future.result().close()
        raise next(f.exception() for f in futures if f.exception() is not None)  # type: ignore[misc]
    loaded = [(tp, future.result()) for (tp, _), future in zip(paths, futures, strict=True)]
    log.info(
        "loaded %d logs from %s in %.1f s (%d threads)",
        len(loaded),
        log_dir,
        (time_ms() - started) / 1000,
        threads,
    )
    if clean:
        marker.unlink()
        fsync_dir(log_dir)
    return loaded
