"""Helpers of the log cleaner's unit tests (broker/log/cleaner.py): a fake clock, an inline executor
that can act between two steps of a pass, compacted logs built from keyed batches, and
kafka-python (the independent oracle) reading every segment file."""

from __future__ import annotations

from collections.abc import Callable, Generator
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from kafka.record.memory_records import MemoryRecords

from broker.log import Log, LogConfig
from broker.log.cleaner import LogCleaner
from broker.log.cleaner_config import CleanerConfig
from broker.log.log_dir_failure import LogDirFailureChannel
from client.protocol.records import BatchHeader, build_batch, iter_batches

LEADER_EPOCH = 3
Records = list[tuple[bytes | None, bytes | None]]


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class InlineExecutor(Executor):
    """Runs each step at once, on the caller's thread; ``after_step(result)`` runs after each,
    as if the rest of the broker ran while the step was in a thread (the abort window)."""

    def __init__(self, after_step: Callable[[Any], None] | None = None) -> None:
        self.after_step = after_step
        self.steps = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
            future.set_exception(exc)
        else:
            future.set_result(result)
        self.steps += 1
        if self.after_step is not None:
            self.after_step(result if not future.exception() else None)
        return future


def compact_config(**overrides: Any) -> LogConfig:
    settings: dict[str, Any] = {
        "cleanup_policy": ("compact",),
        "segment_bytes": 600,
        "min_cleanable_dirty_ratio": 0.0,
        "index_interval_bytes": 100,
    }
    settings.update(overrides)
    return LogConfig(**settings)


def open_log(dir: Path, clock: Clock, config: LogConfig | None = None, **open_args: Any) -> Log:
    return Log.open(dir, config or compact_config(), clock, **open_args)


def append(
    lg: Log,
    clock: Clock,
    records: Records,
    producer: tuple[int, int, int] | None = None,
    compression: str = "none",
) -> BatchHeader:
    """One batch of ``records`` appended as leader (timestamps: the clock); the HW follows."""
    pid, epoch, seq = producer or (-1, -1, -1)
    buf = build_batch(
        [(k, v, clock.now, []) for k, v in records],
        compression=compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    info = lg.append_as_leader(buf, leader_epoch=LEADER_EPOCH)
    lg.update_high_watermark(lg.log_end_offset)
    assert not info.duplicate
    return headers(lg)[-1]


def headers(lg: Log) -> list[BatchHeader]:
    """Every batch header of the log, every CRC checked by our own reader."""
    return [h for s in lg.segments for _, h in iter_batches(s.log_path.read_bytes(), check_crc=True)]


def oracle(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in every segment file, decoded by kafka-python, each
    batch's CRC checked by it too."""
    out = []
    for segment in lg.segments:
        records = MemoryRecords(segment.log_path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), f"kafka-python: bad CRC in {segment.log_path.name}"
            out.extend((r.offset, r.key, r.value) for r in batch)
    return out


def latest_per_key(
    records: list[tuple[int, bytes | None, bytes | None]],
) -> dict[bytes | None, tuple[int, bytes | None]]:
    out: dict[bytes | None, tuple[int, bytes | None]] = {}
    for offset, key, value in records:
        out[key] = (offset, value)
    return out


def cleaner_for(
    lg: Log,
    clock: Clock,
    executor: Executor | None = None,
    failure_channel: LogDirFailureChannel | None = None,
    **config: Any,
) -> LogCleaner:
    return LogCleaner(
        CleanerConfig(**config),
        lambda: {(lg.topic, lg.partition): lg},
        clock,
        failure_channel or lg.failure_channel,
        executor or InlineExecutor(),
    )


def drive(work: Generator[int, None, Any]) -> Any:
    """Run a cleaner generator to its end on this thread; its return value."""
    while True:
        try:
            next(work)
        except StopIteration as stop:
            return stop.value


def write_keyed(lg: Log, clock: Clock, rounds: int, keys: int, per_batch: int = 4) -> Records:
    """``rounds`` updates of each of ``keys`` keys, ``per_batch`` records a batch; returns them."""
    written: Records = []
    batch: Records = []
    for r in range(rounds):
        for k in range(keys):
            batch.append((b"k%d" % k, b"v%d-%d" % (k, r)))
            if len(batch) == per_batch:
                append(lg, clock, batch)
                written += batch
                batch = []
    if batch:
        append(lg, clock, batch)
        written += batch
    return written
