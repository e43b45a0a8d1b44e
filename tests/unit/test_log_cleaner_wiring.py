"""The log cleaner's settings and wiring (broker/log/cleaner_config.py, log_config.py,
broker/config.py, log_manager.py, throttler.py; docs/design.md "Log compaction"): Kafka's
property names, defaults and list-typed cleanup.policy; the topic settings in LogConfig; the I/O
throttler's bound against a fake clock; the log manager starting the cleaner on its loop once the
logs are loaded, cleaning a compacted log, and stopping it at shutdown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import (
    BROKER_PROPERTIES,
    TOPIC_TO_BROKER,
    BrokerConfig,
    ConfigError,
    validate_topic_configs,
)
from broker.log import LogManager
from broker.log.cleaner import LogCleaner
from broker.log.cleaner_config import DOUBLE_MAX, CleanerConfig
from broker.log.cleaner_manager import CLEANER_CHECKPOINT
from broker.log.log_config import MAX_LONG, LogConfig
from broker.log.throttler import Throttler
from tests.unit.cleaner_harness import (
    Clock,
    InlineExecutor,
    append,
    compact_config,
    latest_per_key,
    open_log,
    oracle,
    write_keyed,
)

BASE = {"broker.id": "1", "zookeeper.connect": "localhost:2181"}


def test_kafkas_cleaner_properties_and_defaults() -> None:
    defaults = {
        "log.cleaner.enable": True,
        "log.cleaner.threads": 1,
        "log.cleaner.io.max.bytes.per.second": DOUBLE_MAX,
        "log.cleaner.dedupe.buffer.size": 134217728,
        "log.cleaner.io.buffer.size": 524288,
        "log.cleaner.backoff.ms": 15000,
        "log.cleaner.min.cleanable.ratio": 0.5,
        "log.cleaner.delete.retention.ms": 86400000,
        "log.cleaner.min.compaction.lag.ms": 0,
        "log.cleaner.max.compaction.lag.ms": MAX_LONG,
        "log.cleanup.policy": ["delete"],
    }
    assert {key: BROKER_PROPERTIES[key].default for key in defaults} == defaults
    assert BrokerConfig(BASE).log_config() == LogConfig()
    for topic_key, broker_key in {
        "cleanup.policy": "log.cleanup.policy",
        "delete.retention.ms": "log.cleaner.delete.retention.ms",
        "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
        "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
        "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    }.items():
        assert TOPIC_TO_BROKER[topic_key] == broker_key


@pytest.mark.parametrize(
    ("raw", "policy"),
    [
        ("delete", ("delete",)),
        ("compact", ("compact",)),
        ("compact,delete", ("compact", "delete")),
        ("delete, compact", ("delete", "compact")),
    ],
)
def test_cleanup_policy_is_kafkas_list(raw: str, policy: tuple[str, ...]) -> None:
    config = BrokerConfig({**BASE, "log.cleanup.policy": raw}).log_config()
    assert config.cleanup_policy == policy
    assert config.compact == ("compact" in policy) and config.delete == ("delete" in policy)
    assert BrokerConfig(BASE).log_config({"cleanup.policy": raw}).cleanup_policy == policy


@pytest.mark.parametrize("raw", ["", "compacted", "compact,truncate"])
def test_a_bad_cleanup_policy_is_refused_naming_the_key(raw: str) -> None:
    with pytest.raises(ConfigError, match="cleanup.policy"):
        validate_topic_configs({"cleanup.policy": raw})


def test_topic_settings_and_broker_cleaner_settings_reach_the_log_config() -> None:
    cfg = BrokerConfig(
        {
            **BASE,
            "log.cleaner.backoff.ms": "100",
            "log.cleaner.io.max.bytes.per.second": "1e6",
            "log.cleaner.min.cleanable.ratio": "0.25",
        }
    )
    config = cfg.log_config(
        {
            "cleanup.policy": "compact",
            "delete.retention.ms": "5",
            "min.compaction.lag.ms": "7",
            "max.compaction.lag.ms": "9",
        }
    )
    assert (config.delete_retention_ms, config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (
        5,
        7,
        9,
    )
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.max_segment_ms == 9  # KIP-354: a compacted log's active segment rolls by then
    assert config.cleaner == CleanerConfig(backoff_ms=100, max_io_bytes_per_second=1e6)
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
        validate_topic_configs({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(ConfigError, match="1MB per cleaner thread"):
        BrokerConfig({**BASE, "log.cleaner.dedupe.buffer.size": "1000"}).log_config()
    assert not CleanerConfig(num_threads=0).enabled and not CleanerConfig(enable_cleaner=False).enabled


@pytest.mark.parametrize("work_ms", [0, 1, 30, 100])
def test_the_throttler_bounds_bytes_per_second(work_ms: int) -> None:
    clock = Clock(0)
    rate, step = 1_000_000.0, 65536
    throttler = Throttler(rate, clock)
    total = 0
    for _ in range(2000):
        clock.now += work_ms  # the work itself (0: a clock that does not move while it runs)
        total += step
        clock.now += throttler.maybe_throttle(step)
    achieved = total / (clock.now / 1000)
    assert achieved <= rate * 1.01
    if step / rate * 1000 < work_ms:  # the work alone is slower than the rate: no nap
        assert throttler.throttled_ms == 0
    else:  # held to the rate, not below it
        assert achieved >= rate * 0.95


def test_the_throttler_lets_a_slow_reader_go_unthrottled() -> None:
    clock = Clock(0)
    throttler = Throttler(1_000_000.0, clock)
    for _ in range(100):
        clock.now += 200
        assert throttler.maybe_throttle(1000) == 0


async def test_the_cleaners_io_is_held_to_its_rate(tmp_path: Path) -> None:
    clock = Clock()
    lg = open_log(tmp_path / "t-0", clock)
    write_keyed(lg, clock, rounds=40, keys=10)
    lg.roll()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # the fake clock moves only while the cleaner naps
        slept.append(seconds)
        clock.now += round(seconds * 1000)

    rate = 20_000.0
    cleaner = LogCleaner(
        CleanerConfig(max_io_bytes_per_second=rate, io_buffer_size=4096),
        lambda: {("t", 0): lg},
        clock,
        lg.failure_channel,
        InlineExecutor(),
        sleep,
    )
    start = clock.now
    assert await cleaner.clean_filthiest_log()
    moved = cleaner.stats.bytes_read + cleaner.stats.bytes_written
    elapsed_s = (clock.now - start) / 1000
    assert len(slept) > 1 and moved > rate  # more than a second's worth, in several naps
    assert moved - rate * 0.1 <= rate * elapsed_s  # at most one check interval's worth unpaid
    assert cleaner.stats.throttled_ms == clock.now - start


async def test_the_log_manager_runs_the_cleaner_on_its_loop(tmp_path: Path) -> None:
    clock = Clock()
    default = LogConfig(cleaner=CleanerConfig(backoff_ms=10))
    manager = LogManager([tmp_path / "d"], default, clock)
    manager.load_logs()
    await asyncio.sleep(0)  # the start is scheduled on the loop
    assert manager.cleaner._task is not None and not manager.cleaner._task.done()
    lg = manager.get_or_create_log("c", 0, compact_config())
    plain = manager.get_or_create_log("p", 0, LogConfig(segment_bytes=600))
    write_keyed(lg, clock, rounds=5, keys=4)
    lg.roll()
    for _ in range(3):
        append(plain, clock, [(b"k", b"v")])
    plain.roll()
    before, plain_before = oracle(lg), oracle(plain)
    for _ in range(500):
        if manager.cleaner.stats.passes:
            break
        await asyncio.sleep(0.01)
    assert manager.cleaner.stats.passes == 1
    assert oracle(lg) == sorted((o, k, v) for k, (o, v) in latest_per_key(before).items())
    assert oracle(plain) == plain_before  # delete policy: never cleaned
    assert (tmp_path / "d" / CLEANER_CHECKPOINT).read_text() == f"0\n1\nc 0 {lg.active_segment.base_offset}\n"

    manager.delete_log("c", 0)  # its checkpoint entry goes
    assert (tmp_path / "d" / CLEANER_CHECKPOINT).read_text() == "0\n0\n"
    manager.shutdown()
    await manager.cleaner.join()
    assert manager.cleaner._task.done()


def test_a_log_manager_without_a_loop_does_not_start_the_cleaner(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "d"], LogConfig(), Clock())
    manager.load_logs()
    assert manager.cleaner._task is None
    manager.shutdown()
