"""Log compaction: the log cleaner (Kafka's ``LogCleaner`` with its ``CleanerThread`` and
``Cleaner``, 2.x semantics; docs/design.md "Log compaction").

For the logs whose ``cleanup.policy`` contains ``compact``, the cleaner keeps the last record of
each key below the first uncleanable offset: one pass picks the dirtiest log
(:mod:`broker.log.cleaner_manager`, Kafka's LogCleanerManager), maps every key of its dirty section
to its last offset (:mod:`broker.log.offset_map`, Kafka's SkimpyOffsetMap), then rewrites the
log below the end of that map one group of segments at a time (:mod:`broker.log.cleaner_pass`),
each group into a ``.cleaned`` segment that the log swaps in crash-safely
(:mod:`broker.log.log_cleaning`), and finally moves the dir's ``cleaner-offset-checkpoint``.
Offsets, batch boundaries and producer state survive (:mod:`broker.log.batch_filter`).

One asyncio task runs the passes (Kafka runs ``log.cleaner.threads`` threads; here one task
whatever the value, 0 disabling it). The work itself, reading segments, building the map and
writing the cleaned segment, runs off the event loop: in steps of ``log.cleaner.io.buffer.size``
bytes through ``loop.run_in_executor`` with the executor it was given (None: the loop's
default), which the simulator runs inline; between steps the task awaits the I/O throttle
(:mod:`broker.log.throttler`, ``log.cleaner.io.max.bytes.per.second``). Only the swap runs on
the loop, under the log's lock, after checking the log did not change under the pass (see
:meth:`LogCleaner.clean`). With nothing to clean the task sleeps ``log.cleaner.backoff.ms``. The
clock is injected; sleeps are asyncio's, so virtual under the simulator.

A pass stops (and its ``.cleaned`` files go) when the cleaner shuts down, when the log is closed,
deleted, taken offline or truncated; an I/O error while cleaning takes the log's dir offline, as
in Kafka; any other failure sets the partition aside as uncleanable (KIP-346) until it is
reopened. :class:`CleanerStats` holds the counters metrics can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from broker.log.cleaner_config import CleanerConfig
from broker.log.cleaner_manager import LogCleanerManager, LogToClean
from broker.log.cleaner_pass import (
    CleaningAborted,
    PassStats,
    SegmentReader,
    build_offset_map,
    clean_group,
    delete_horizon_ms,
    group_segments_by_size,
)
from broker.log.log import Log
from broker.log.log_cleaning import discard_cleaned
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from broker.log.offset_map import OffsetMap
from broker.log.segment import LogSegment
from broker.log.throttler import Throttler
from client.types import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")
#: the least a step of work moves before it hands back to the loop
MIN_STEP_BYTES = 64 * 1024


@dataclass
class CleanerStats:
    """Counters for metrics (Kafka's LogCleaner gauges and CleanerStats, summed over passes)."""

    passes: int = 0
    aborted_passes: int = 0
    failed_passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    last_pass_duration_ms: int = 0
    last_pass_end_ms: int = -1
    #: share of the offset map the last pass used (Kafka's max-buffer-utilization-percent / 100)
    last_map_utilization: float = 0.0
    throttled_ms: int = 0


class LogCleaner:
    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        time_ms: Callable[[], int],
        failure_channel: LogDirFailureChannel,
        executor: Executor | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """``sleep`` is how the task pauses, for the throttle and the backoff (asyncio's: virtual
        time under the simulator)."""
        self.config = config
        self._sleep = sleep
        self._time_ms = time_ms
        self._executor = executor
        self.manager = LogCleanerManager(logs, time_ms, failure_channel)
        self.stats = CleanerStats()
        self._throttler = Throttler(config.max_io_bytes_per_second, time_ms)
        self._step_bytes = max(MIN_STEP_BYTES, config.io_buffer_size)
        self._buffer_size = max(1, config.io_buffer_size // 2)  # Kafka: half read, half write
        self._offset_map = OffsetMap(config.max_map_entries)
        self._task: asyncio.Task | None = None
        self._stopping = False
        #: held while a step of work runs (in the executor): shutdown waits on it
        self._step_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def startup(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the cleaner task on ``loop`` (default: the running loop); nothing when disabled."""
        if not self.config.enabled or self._task is not None or self._stopping:
            return
        loop = loop or asyncio.get_running_loop()
        self._task = loop.create_task(self.run(), name="log-cleaner")
        log.info("log cleaner started (%d thread(s) configured, one task runs)", self.config.num_threads)

    def shutdown(self) -> None:
        """Stop: no step starts any more, the one running (in the executor) is waited for, and the
        task is cancelled (its pass's ``.cleaned`` files go when it unwinds; a crash leaves them to
        the loader)."""
        self._stopping = True
        with self._step_lock:
            pass
        if self._task is not None:
            self._task.cancel()

    async def join(self) -> None:
        """Wait for the task to finish after :meth:`shutdown`."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run(self) -> None:
        """Kafka's CleanerThread.doWork, forever: clean the filthiest log, or back off."""
        while not self._stopping:
            try:
                cleaned = await self.clean_filthiest_log()
            except Exception:  # noqa: BLE001 - the cleaner never dies of one log's failure
                log.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                await self._sleep(self.config.backoff_ms / 1000)

    # ------------------------------------------------------------------ passes

    async def clean_filthiest_log(self) -> bool:
        """Clean the dirtiest log that needs it; False when none does or the pass did not finish."""
        to_clean = self.manager.grab_filthiest_compacted_log()
        if to_clean is None:
            return False
        lg, end_offset = to_clean.log, None
        try:
            end_offset = await self.clean(to_clean)
        except (CleaningAborted, KafkaStorageError) as e:
            self.stats.aborted_passes += 1
            log.info("%s: cleaning aborted: %s", lg.dir, e)
        except OSError as e:
            self.stats.aborted_passes += 1
            if not lg.cleaning_aborted(to_clean.view.generation):
                message = f"Failed to clean up log for {lg.topic}-{lg.partition} in dir {lg.log_dir}"
                lg.failure_channel.maybe_add_offline_log_dir(lg.log_dir, message, e)
        except Exception:
            self.stats.aborted_passes += 1
            if not lg.cleaning_aborted(to_clean.view.generation):
                self.stats.failed_passes += 1
                self.manager.mark_uncleanable(to_clean)
                log.exception("%s: cleaning failed; the partition is uncleanable until reopened", lg.dir)
        finally:
            self.manager.done_cleaning(to_clean, end_offset)
        return end_offset is not None

    async def clean(self, to_clean: LogToClean) -> int:
        """One pass over ``to_clean`` (Kafka's ``Cleaner.clean``/``doClean``); returns the offset
        below which the log is now clean. Raises CleaningAborted when the log changed under it."""
        lg, view = to_clean.log, to_clean.view
        started = self._time_ms()
        stats = PassStats()
        readers: list[SegmentReader] = []
        try:
            for segment in view.segments[:-1]:  # opened on the loop, while the view is current
                readers.append(SegmentReader(segment))

            def check_aborted() -> None:
                if self._stopping or lg.cleaning_aborted(view.generation):
                    raise CleaningAborted(f"{lg.dir} was truncated, closed or deleted, or the cleaner stops")

            first_dirty, first_uncleanable = to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
            full = await self._run(
                build_offset_map(
                    readers,
                    self._offset_map,
                    first_dirty,
                    first_uncleanable,
                    self._buffer_size,
                    stats,
                    check_aborted,
                )
            )
            end_offset = self._offset_map.latest_offset + 1 if full else first_uncleanable
            horizon = delete_horizon_ms(view, first_dirty)
            below_end = [r for r in readers if r.view.base_offset < end_offset]
            groups = group_segments_by_size(
                [r.view for r in below_end], view.config.segment_bytes, view.config.segment_index_bytes
            )
            by_view = {id(r.view): r for r in below_end}
            for group in groups:
                if not any(s.size for s in group):
                    continue
                work = clean_group(
                    view,
                    [by_view[id(s)] for s in group],
                    self._offset_map,
                    horizon,
                    self._time_ms,
                    self._buffer_size,
                    stats,
                    check_aborted,
                )
                cleaned = await self._run(work)
                self._swap(lg, cleaned, [s.segment for s in group], view.generation)
            self._finish(lg, stats, started, end_offset)
            return end_offset
        finally:
            with self._step_lock:  # a step the cancelled task left in the executor ends first
                for reader in readers:
                    reader.close()
            self._offset_map.clear()

    def _swap(self, lg: Log, cleaned: LogSegment, old: list[LogSegment], generation: int) -> None:
        # The abort window: the cleaned segment was written off the loop, and meanwhile the log
        # may have been truncated below the cleaned range (the offset map may name records that
        # are gone), lost these segments to retention, or been closed or deleted. replace_segments
        # checks all of that under the log's lock and swaps nothing if so; the pass is then
        # abandoned, its .cleaned files deleted, nothing of the log lost.
        try:
            swapped = lg.replace_segments(cleaned, old, generation)
        except KafkaStorageError:
            cleaned.close()  # failed part way, the dir is offline: the loader finishes the swap
            raise
        except BaseException:
            discard_cleaned(cleaned)
            raise
        if not swapped:
            discard_cleaned(cleaned)
            raise CleaningAborted(f"{lg.dir} changed while its segments were cleaned")

    def _finish(self, lg: Log, stats: PassStats, started: int, end_offset: int) -> None:
        now = self._time_ms()
        s = self.stats
        s.passes += 1
        s.bytes_read += stats.bytes_read
        s.bytes_written += stats.bytes_written
        s.records_read += stats.records_read
        s.records_retained += stats.records_retained
        s.last_pass_duration_ms = now - started
        s.last_pass_end_ms = now
        s.last_map_utilization = self._offset_map.utilization
        s.throttled_ms = self._throttler.throttled_ms
        log.info(
            "%s: cleaned below offset %d in %d ms: read %d bytes (%d records), wrote %d bytes "
            "(%d records), %d keys mapped",
            lg.dir,
            end_offset,
            now - started,
            stats.bytes_read,
            stats.records_read,
            stats.bytes_written,
            stats.records_retained,
            stats.map_records,
        )

    # ------------------------------------------------------------------ off the loop

    async def _run(self, work: Generator[int, None, T]) -> T:
        """Run ``work`` to its end in executor steps, throttled between them; returns its value.
        If the task is cancelled, the generator is closed once no step of it is running."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                done, value, moved = await loop.run_in_executor(self._executor, self._step, work)
                pause_ms = self._throttler.maybe_throttle(moved)
                if pause_ms > 0:
                    await self._sleep(pause_ms / 1000)
                if done:
                    return value  # type: ignore[return-value]  # done: the generator's value
        finally:
            with self._step_lock:
                work.close()

    def _step(self, work: Generator[int, None, T]) -> tuple[bool, T | None, int]:
        """Advance ``work`` by about a step's bytes (in the executor): (finished, value, bytes)."""
        with self._step_lock:
            if self._stopping:
                raise CleaningAborted("the log cleaner is shutting down")
            moved = 0
            try:
                while moved < self._step_bytes:
                    moved += next(work)
            except StopIteration as stop:
                return True, stop.value, moved
            return False, None, moved

    # ------------------------------------------------------------------ checkpoints

    def after_truncation(self, lg: Log) -> None:
        """A truncation below the checkpoint lowers it to the active segment's base (Kafka's
        ``maybeTruncateCheckpoint``); called under the log's lock."""
        self.manager.checkpoints.maybe_truncate(
            lg.log_dir, (lg.topic, lg.partition), lg.active_segment.base_offset
        )

    def forget(self, lg: Log) -> None:
        """The log was deleted: its checkpoint entry goes (Kafka's updateCheckpoints removal)."""
        self.manager.checkpoints.update(lg.log_dir, (lg.topic, lg.partition), None)
        self.manager.uncleanable.pop((lg.topic, lg.partition), None)
