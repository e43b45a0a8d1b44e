"""Every partition log on this broker, across its log dirs (JBOD; docs/design.md
"Log dir failure").

Kafka's LogManager: loads the ``<topic>-<partition>`` directories of each log dir at start-up
(recovering them unless the dir holds the clean-shutdown marker), places new logs in the dir
with the fewest partitions, and keeps three checkpoint files per log dir:
``replication-offset-checkpoint`` (high watermarks), ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint``. It also runs the retention and time-based flush policies when
the broker's scheduler calls it (and producer id expiration, ``producer.id.expiration.ms``), and
writes the clean-shutdown marker last on shutdown.

Compaction (docs/design.md "Log compaction"): the manager owns the :class:`LogCleaner` (Kafka's
LogManager.cleaner). A manager built on a running event loop starts it on that loop once the logs
are loaded (as Kafka's LogManager.startup does), with the ``log.cleaner.*`` settings of the
default config, and stops it first at shutdown; a deleted log loses its ``cleaner-offset-checkpoint``
entry and a truncation lowers it.

JBOD and KIP-112 (docs/design.md "Log dir failure"): ``log.dirs`` may list several dirs. An
I/O error in one (while loading, appending, flushing, checkpointing, ...) is reported to the
:class:`LogDirFailureChannel`, which marks the dir offline at once; :meth:`handle_log_dir_failure`
then closes and forgets its logs. An offline dir is never chosen for a new log, never
checkpointed and never gets the clean-shutdown marker, so the next start recovers it.

Open files (docs/design.md "Open files at scale (issue 25)"): the manager owns the broker-wide
:class:`SegmentFileCache` every log's segments open their ``.log`` through, bounded by
``segment_files_max`` (``log.segment.open.files.max``), so the descriptors the logs hold do not
grow with partitions or segments.
KIP-516: ``topic_ids`` reads and writes each log's ``partition.metadata`` (its topic id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path

from broker.log import log_policies
from broker.log.checkpoint import OffsetCheckpointFile, fsync_dir
from broker.log.cleaner import LogCleaner
from broker.log.cleaner_config import CleanerConfig
from broker.log.dir_loader import (
    CLEAN_SHUTDOWN_FILE,
    DELETE_SUFFIX,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    load_dir,
)
from broker.log.executor import ExecutorFactory, thread_pool
from broker.log.file_cache import DEFAULT_SEGMENT_FILES_MAX, SegmentFileCache, SegmentFileStats
from broker.log.log import Log, LogConfig, ScheduleOnce
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from broker.log.partition_metadata import TopicIds
from client.types import TopicPartition

log = logging.getLogger(__name__)


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        time_ms: Callable[[], int],
        failure_channel: LogDirFailureChannel | None = None,
        schedule_once: ScheduleOnce | None = None,
        cleaner_config: CleanerConfig | None = None,
        cleaner_executor: Executor | None = None,
        segment_files_max: int = DEFAULT_SEGMENT_FILES_MAX,
        recovery_threads: int = 1,
        executor_factory: ExecutorFactory = thread_pool,
        rng: random.Random | None = None,
    ) -> None:
        """``schedule_once`` runs each roll's "flush-log" job (Kafka's scheduler); by default a
        flusher thread of this manager's own, so the fsyncs stay off the append path. The log
        cleaner runs with ``cleaner_config`` (default: ``default_config.cleaner``) and does its
        work through ``cleaner_executor`` (None: the event loop's default executor). At most
        ``segment_files_max`` segment files are open at once (more only while pinned).
        ``recovery_threads`` (``num.recovery.threads.per.data.dir``) open each dir's logs at
        start-up. Every thread pool of the manager (recovery, :meth:`create_logs`, the flusher)
        and of the leader-epoch writers comes from ``executor_factory`` (broker/log/executor.py).
        ``rng`` draws the uuid that names a deleted log's directory (the broker's seeded one)."""
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {self.log_dirs}")
        self.default_config = default_config
        self._time_ms = time_ms
        self.recovery_threads = max(1, recovery_threads)
        self.executor_factory = executor_factory
        self._rng = rng or random.Random()
        self.file_cache = SegmentFileCache(segment_files_max)
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_counts: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)  # logs per dir, kept by _put/_pop
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()  # taken under a log's lock: never take a log's under it
        self._doomed: list[tuple[int, Path]] = []  # (when, dir) of deleted logs' renamed dirs
        self._schedule_once = schedule_once or self._run_on_flusher
        self._flusher: Executor | None = None
        self._flusher_lock = threading.Lock()
        self._closing = False
        self.failure_channel = failure_channel or LogDirFailureChannel()
        self.topic_ids = TopicIds(self.get_log, self.failure_channel, self.file_cache.close_idle)
        self.cleaner = LogCleaner(
            cleaner_config or default_config.cleaner,
            self.all_logs,
            time_ms,
            self.failure_channel,
            cleaner_executor,
        )
        try:  # built on the broker's loop: the cleaner starts there once the logs are loaded
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        for d in self.log_dirs:
            with self.failure_channel.io_errors(
                d, f"Failed to create or validate log dir {d}", reraise=False
            ):
                d.mkdir(parents=True, exist_ok=True)

    @property
    def online_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    def is_offline(self, log_dir: Path) -> bool:
        return self.failure_channel.is_offline(log_dir)

    # ------------------------------------------------------------------ loading

    def load_logs(self, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Open every partition directory in every log dir (:func:`broker.log.dir_loader.load_dir`,
        ``recovery_threads`` at a time). ``topic_configs`` overrides the default config per topic."""
        topic_configs = topic_configs or {}
        with self._lock:
            for log_dir in self.online_log_dirs:
                with self.failure_channel.io_errors(
                    log_dir, f"Error while loading log dir {log_dir}", reraise=False
                ):
                    loaded = load_dir(
                        log_dir,
                        self.default_config,
                        topic_configs,
                        self._time_ms,
                        self.failure_channel,
                        self.file_cache,
                        self.recovery_threads,
                        self._logs,
                        self.executor_factory,
                    )
                    for tp, opened in loaded:
                        self._adopt(opened)
                        self._put(tp, opened)
                if self.is_offline(log_dir):
                    for tp in list(self._logs_in(log_dir)):
                        self._pop(tp).close()
        if self._loop is not None:
            self.start_cleaner(self._loop)

    def start_cleaner(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the log cleaner's task on ``loop`` (from any thread; nothing when disabled or
        already started). :meth:`load_logs` does it on the loop the manager was built on."""
        loop.call_soon_threadsafe(self.cleaner.startup, loop)

    def _put(self, tp: TopicPartition, lg: Log) -> None:
        """Add a log, counting it in its dir (placement reads the counts: no scan per creation)."""
        self._logs[tp] = lg
        self._dir_counts[lg.log_dir] += 1

    def _pop(self, tp: TopicPartition) -> Log | None:
        self.topic_ids.forget(tp)
        lg = self._logs.pop(tp, None)
        if lg is not None:
            self._dir_counts[lg.log_dir] -= 1
        return lg

    def _adopt(self, lg: Log) -> None:
        """Give a log the manager's scheduler and truncation checkpoint (before anyone uses it)."""
        lg.schedule_once = self._schedule_once
        lg.checkpoint_after_truncation = self._checkpoint_after_truncation

    def _run_on_flusher(self, name: str, job: Callable[[], None]) -> None:
        """The default ``schedule_once``: one flusher thread, started at the first roll."""
        with self._flusher_lock:
            if self._closing:
                return  # shutdown flushes every log itself
            if self._flusher is None:
                self._flusher = self.executor_factory(1, "log-flusher")
            self._flusher.submit(job)

    # ------------------------------------------------------------------ lookup and placement

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    @property
    def segment_file_stats(self) -> SegmentFileStats:
        """The segment file cache's descriptors and counters (the broker's metrics)."""
        return self.file_cache.stats

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def _logs_in(self, log_dir: Path) -> dict[TopicPartition, Log]:
        return {tp: lg for tp, lg in self._logs.items() if lg.log_dir == log_dir}

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Forget every log in the offline ``log_dir`` (closing them); returns their partitions.
        Their files stay on disk for recovery at the next start."""
        with self._lock:
            doomed = self._logs_in(log_dir)
            for tp, lg in doomed.items():
                self._pop(tp)
                lg.close()
            log.error(
                "stopped serving %d log(s) in offline log dir %s: %s",
                len(doomed),
                log_dir,
                ", ".join(f"{t}-{p}" for t, p in sorted(doomed)) or "none",
            )
            return sorted(doomed)

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, is_new: bool = True
    ) -> Log:
        """The log of this partition, created empty in the log dir with the fewest partitions.

        ``is_new`` False (LeaderAndIsr says the replica existed before) while a log dir is
        offline: the log may be in that dir, so creating an empty one elsewhere would silently
        lose its data; KAFKA_STORAGE_ERROR instead, as in Kafka."""
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            refusal = self._creation_refusal((topic, partition), is_new)
            if refusal is not None:
                raise refusal
            log_dir = self._place((topic, partition), self._dir_counts)
            with self.failure_channel.io_errors(
                log_dir, f"Error while creating log for {topic}-{partition} in dir {log_dir}"
            ):
                created = self._open_new_log((topic, partition), log_dir, config or self.default_config)
                try:
                    fsync_dir(log_dir)
                except OSError:
                    created.close()  # EMFILE opening the dir: the next attempt reopens the log
                    raise
            self._adopt(created)
            self._put((topic, partition), created)
            return created

    def _place(self, tp: TopicPartition, counts: Mapping[Path, int]) -> Path:
        """The online dir for a new log of ``tp``: the one already holding its directory, left
        behind by a creation that failed after making it (EMFILE at its dir's fsync: the dir stays
        online, and a log of the same partition in a second dir would stop the next start-up
        with duplicate directories), else the one with the fewest partitions (Kafka's rule)."""
        online = self.online_log_dirs
        name = f"{tp[0]}-{tp[1]}"
        return next((d for d in online if (d / name).is_dir()), None) or min(online, key=counts.__getitem__)

    def _creation_refusal(self, tp: TopicPartition, is_new: bool) -> Exception | None:
        """Why no log can be created for ``tp`` now (None: it can)."""
        topic, partition = tp
        offline = self.failure_channel.offline_dirs
        if not is_new and offline:
            return KafkaStorageError(
                f"cannot create a log for {topic}-{partition}: log dir(s) "
                f"{', '.join(sorted(str(d) for d in offline))} are offline and may hold it"
            )
        if not topic or partition < 0 or "/" in topic or topic in (".", ".."):
            return ValueError(f"invalid topic partition {topic!r}-{partition}")
        if not self.online_log_dirs:
            return KafkaStorageError(f"cannot create a log for {topic}-{partition}: every log dir is offline")
        return None

    def _open_new_log(self, tp: TopicPartition, log_dir: Path, config: LogConfig) -> Log:
        created = Log.open(
            log_dir / f"{tp[0]}-{tp[1]}",
            config,
            self._time_ms,
            failure_channel=self.failure_channel,
            file_cache=self.file_cache,
        )
        log.info("created log for %s-%d in %s", tp[0], tp[1], log_dir)
        return created

    def create_logs(self, wanted: Sequence[tuple[TopicPartition, LogConfig, bool]], threads: int = 16) -> int:
        """Create, ``threads`` at a time, the logs of ``wanted`` (partition, config, is_new) that
        do not exist yet, with one fsync of each log dir for them all where
        :meth:`get_or_create_log` does one per log (docs/design.md "The controller at scale
        (issue 25)", "Thousands of new logs"): a LeaderAndIsr naming thousands of new replicas.
        Placement and refusals are get_or_create_log's. A log that cannot be created here (an
        I/O error, EMFILE) is left to get_or_create_log, which creates it or says why, partition
        by partition. Blocking: run it off the event loop. Returns how many logs it created."""
        with self._lock:
            counts = dict(self._dir_counts)
            plan: dict[TopicPartition, tuple[Path, LogConfig]] = {}
            for tp, config, is_new in wanted:
                if tp in self._logs or tp in plan or self._creation_refusal(tp, is_new) is not None:
                    continue
                log_dir = self._place(tp, counts)
                counts[log_dir] += 1
                plan[tp] = (log_dir, config)

        def open_new(tp: TopicPartition) -> Log | None:
            log_dir, config = plan[tp]
            what = f"Error while creating log for {tp[0]}-{tp[1]} in dir {log_dir}"
            # a failure is left to get_or_create_log, which reports it
            with contextlib.suppress(Exception), self.failure_channel.io_errors(log_dir, what):
                return self._open_new_log(tp, log_dir, config)
            return None

        with self.executor_factory(threads, "log-create") as pool:
            opened = dict(zip(plan, pool.map(open_new, plan), strict=True))
        synced = set()
        for log_dir in sorted({plan[tp][0] for tp, lg in opened.items() if lg is not None}):
            what = f"Error while creating logs in dir {log_dir}"
            with contextlib.suppress(Exception), self.failure_channel.io_errors(log_dir, what):
                fsync_dir(log_dir)
                synced.add(log_dir)
        created = 0
        with self._lock:
            for tp, lg in opened.items():
                if lg is None:
                    continue
                if self._closing or tp in self._logs or plan[tp][0] not in synced or lg.is_offline:
                    lg.close()  # shut down, or not durable yet: get_or_create_log opens it again
                    continue
                self._adopt(lg)
                self._put(tp, lg)
                created += 1
        return created

    def delete_log(self, topic: str, partition: int, checkpoint: bool = True) -> Path | None:
        """Remove the partition's log (Kafka's LogManager.asyncDelete): rename its dir to
        ``<topic>-<partition>.<uuid>-delete`` (so a crash midway leaves nothing that loads as a
        log), rewrite that dir's checkpoints, and remove the renamed dir ``file.delete.delay.ms``
        later (:meth:`delete_doomed_logs`; a broker that stops first removes it when it loads).
        Returns the log dir it was in (None: no such log).

        ``checkpoint`` False leaves the checkpoints to the caller's :meth:`checkpoint_log_dirs`
        once its batch is done (a StopReplica of thousands of partitions would otherwise rewrite
        every checkpoint of the dir once per partition: O(N²)). The caller must do it before it
        answers: until then the checkpoints still name the deleted partitions, and a partition
        of the same name created afterwards must not inherit their recovery points."""
        with self._lock:
            removed = self._pop((topic, partition))
            if removed is None:
                return None
            removed.close(write_indexes=False)
            self.cleaner.forget(removed)
            log_dir = removed.log_dir
            name = uuid.UUID(int=self._rng.getrandbits(128), version=4).hex
            doomed = log_dir / f"{topic}-{partition}.{name}{DELETE_SUFFIX}"
            with self.failure_channel.io_errors(
                log_dir, f"Error while deleting log for {topic}-{partition} in dir {log_dir}"
            ):
                removed.dir.rename(doomed)
                fsync_dir(log_dir)
            log.info(
                "deleted log for %s-%d from %s; its files go in %d ms",
                topic,
                partition,
                log_dir,
                removed.config.file_delete_delay_ms,
            )
            if checkpoint:
                self._write_checkpoints(log_dir)
            self._doomed.append((self._time_ms() + removed.config.file_delete_delay_ms, doomed))
        if removed.config.file_delete_delay_ms == 0:
            self.delete_doomed_logs()
        return log_dir

    def checkpoint_log_dirs(self, log_dirs: set[Path]) -> None:
        """Rewrite the three checkpoints of each of ``log_dirs`` (after deletions without them)."""
        with self._lock:
            for log_dir in sorted(log_dirs):
                self._write_checkpoints(log_dir)

    def delete_doomed_logs(self) -> None:
        """Remove the renamed directories of deleted logs whose delay has passed (Kafka's
        "kafka-delete-logs" task)."""
        now = self._time_ms()
        with self._lock:
            due = [path for when, path in self._doomed if when <= now]
            self._doomed = [(when, path) for when, path in self._doomed if when > now]
        for path in due:
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed %s", path)

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint(self, name: str, value: Callable[[Log], int], log_dirs: list[Path] | None = None) -> None:
        with self._checkpoint_lock:
            for log_dir in log_dirs or self.log_dirs:
                if self.is_offline(log_dir):
                    continue
                offsets = {tp: value(lg) for tp, lg in list(self._logs.items()) if lg.log_dir == log_dir}
                with self.failure_channel.io_errors(
                    log_dir, f"Error while writing {name} in dir {log_dir}", reraise=False
                ):
                    OffsetCheckpointFile(log_dir / name, self.file_cache.close_idle).write(offsets)

    def _checkpoint_after_truncation(self, lg: Log) -> None:
        """Kafka's LogManager.truncateTo and truncateFullyAndStartAt: the truncated log's dir gets
        its recovery points and log start offsets checkpointed at once, under the log's lock, so
        no recovery trusts a recovery point above data written after the truncation."""
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda other: other.recovery_point, [lg.log_dir])
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda other: other.log_start_offset, [lg.log_dir])
        self.cleaner.after_truncation(lg)

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(HIGH_WATERMARK_CHECKPOINT, lambda lg: lg.high_watermark)

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset)

    def _write_checkpoints(self, log_dir: Path) -> None:
        self._checkpoint(HIGH_WATERMARK_CHECKPOINT, lambda lg: lg.high_watermark, [log_dir])
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point, [log_dir])
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset, [log_dir])

    # ------------------------------------------------------------------ policies (broker/log/log_policies.py)

    def cleanup_logs(self) -> int:
        """Retention on every log; returns the number of segments deleted."""
        return log_policies.cleanup_logs(self.all_logs().values())

    def remove_expired_producers(self) -> int:
        """PeriodicProducerExpirationCheck over every online log; returns how many were dropped."""
        return log_policies.remove_expired_producers(self.all_logs().values(), self._time_ms())

    def flush_dirty_logs(self) -> None:
        """The time-based flush (``flush.ms``) and the catch-up of rolled, unflushed segments."""
        log_policies.flush_dirty_logs(self.all_logs().values(), self._time_ms())

    def shutdown(self) -> None:
        """Flush everything, write the three checkpoints, snapshot each log's producer state,
        close the logs, then mark every log dir as cleanly shut down. The log cleaner stops first."""
        self.cleaner.shutdown()
        with self._flusher_lock:
            self._closing = True
            flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.shutdown(wait=True)  # the rolls' flushes still queued (the flushes below cover them)
        with self._lock:
            logs = list(self._logs.values())
            for lg in logs:
                with contextlib.suppress(KafkaStorageError):  # its dir is now offline
                    lg.flush()
            for log_dir in self.log_dirs:
                self._write_checkpoints(log_dir)
            for lg in logs:
                with contextlib.suppress(KafkaStorageError):
                    lg.take_producer_snapshot()  # producer state: the next start replays no batch header
                lg.close()
            for log_dir in self.online_log_dirs:
                with self.failure_channel.io_errors(
                    log_dir, f"Error while shutting down {log_dir}", reraise=False
                ):
                    (log_dir / CLEAN_SHUTDOWN_FILE).touch()
                    fsync_dir(log_dir)
            self._logs.clear()
            self.topic_ids.forget_all()
            self._dir_counts = dict.fromkeys(self.log_dirs, 0)
            offline = sorted(str(d) for d in self.failure_channel.offline_dirs)
            if offline:
                log.warning(
                    "log manager shut down; offline log dir(s) %s will be recovered at the next start",
                    offline,
                )
            else:
                log.info("log manager shut down cleanly")
