"""The event-loop stall monitor, cooperative yields and their metrics (broker/loop_stall.py;
docs/design.md "The controller at scale (issue 25)"), with injected clocks: nothing here waits
for real time to pass."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

import broker.loop_stall as loop_stall_module
from broker.loop_stall import STALL_BUCKETS_S, CooperativeYield, LoopStallMonitor, StallStats
from broker.metrics import BrokerMetrics, BrokerState
from client.protocol.errors import ErrorCode
from tests.unit.test_isr_manager import Harness, leader_and_isr_request, partition_state_entry


class SteppingClock:
    """A monotonic clock that moves only when told, in seconds."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_stats_keep_the_longest_stall_and_a_cumulative_histogram() -> None:
    stats = StallStats()
    for stall in (0.0, 0.003, 0.3, 2.0):
        stats.record(stall)
    assert stats.max_s == 2.0 and stats.count == 4 and stats.sum_s == pytest.approx(2.303)
    by_bound = dict(zip(STALL_BUCKETS_S, stats.buckets, strict=True))
    assert by_bound[0.005] == 2 and by_bound[0.25] == 2 and by_bound[0.5] == 3 and by_bound[2.5] == 4
    assert stats.buckets[-1] == 4


async def test_the_monitor_records_how_late_its_sleep_woke(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SteppingClock()
    monitor = LoopStallMonitor(0.001, clock, "broker 1")
    real_sleep = asyncio.sleep
    lateness = iter([0.0, 0.02, 1.5])

    async def sleep(delay: float) -> None:  # the loop was held this long past the sleep
        clock.now += delay + next(lateness)
        await real_sleep(0)

    monkeypatch.setattr(loop_stall_module.asyncio, "sleep", sleep)
    task = asyncio.get_running_loop().create_task(monitor.run())
    with caplog.at_level(logging.WARNING, logger="broker.loop_stall"):
        try:
            while monitor.stats.count < 3:
                await real_sleep(0)
        finally:
            monkeypatch.undo()
            task.cancel()
    snapshot = monitor.snapshot()
    assert snapshot.count == 3 and snapshot.max_s == pytest.approx(1.5)
    assert snapshot.sum_s == pytest.approx(1.52)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "event loop stalled for 1.50s" in warnings[0]


def test_the_monitor_is_off_at_interval_zero() -> None:
    tasks: list[asyncio.Task] = []
    assert LoopStallMonitor.start({"event.loop.stall.monitor.interval.ms": 0}, SteppingClock(), tasks) is None
    assert tasks == []


async def test_a_cooperative_yield_waits_for_its_budget() -> None:
    now = [0]
    pause = CooperativeYield(lambda: now[0], budget_ms=50)
    for _ in range(100):
        await pause()
    assert pause.yields == 0
    now[0] = 49
    await pause()
    assert pause.yields == 0
    now[0] = 50
    await pause()
    now[0] = 60
    await pause()
    assert pause.yields == 1


def test_the_metrics_expose_the_longest_stall_and_the_histogram() -> None:
    stats = StallStats()
    stats.record(0.002)
    stats.record(0.7)
    metrics = BrokerMetrics(1, lambda: BrokerState(False, 0, [], 0, 0), loop_stall=lambda: stats)
    text = generate_latest(metrics.registry).decode()
    assert "floodmark_event_loop_stall_max_seconds 0.7" in text
    assert 'floodmark_event_loop_stall_seconds_bucket{le="0.5"} 1.0' in text
    assert 'floodmark_event_loop_stall_seconds_bucket{le="1"} 2.0' in text
    assert 'floodmark_event_loop_stall_seconds_bucket{le="+Inf"} 2.0' in text
    assert "floodmark_event_loop_stall_seconds_count 2.0" in text


async def test_a_leader_and_isr_of_many_partitions_gives_the_loop_back(tmp_path: Path) -> None:
    """Each partition costs 20 ms of the broker's clock here: a LeaderAndIsr of 30 lets other
    tasks run about every 50 ms of it, and still applies every partition."""
    h = Harness(tmp_path)
    try:
        real_log_for = h.rm.state_changes._log_for

        async def slow_log_for(topic: str, partition: int, is_new: bool = True):  # noqa: ANN202
            h.clock.now += 20
            return await real_log_for(topic, partition, is_new)

        h.rm.state_changes._log_for = slow_log_for  # type: ignore[method-assign]
        entries = [partition_state_entry("many", 0, leader=1, partition=p, is_new=True) for p in range(30)]
        ran = 0

        async def other() -> None:
            nonlocal ran
            while True:
                await asyncio.sleep(0)
                ran += 1

        task = asyncio.get_running_loop().create_task(other())
        await asyncio.sleep(0)
        before = ran
        answer = await h.rm.become_leader_or_follower(leader_and_isr_request(*entries))
        task.cancel()
        assert [p["error_code"] for p in answer["partitions"]] == [ErrorCode.NONE] * 30
        assert ran - before >= 9  # every third partition: 60 ms >= the 50 ms budget
        assert all(h.rm.partitions[("many", p)].is_leader for p in range(30))
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


async def test_a_batch_of_many_new_leaders_writes_their_epochs_on_threads_and_reports_each(
    tmp_path: Path,
) -> None:
    """More than EPOCH_WRITE_WINDOW leaders: all lead first, then every epoch checkpoint is written
    (off the loop, on the handler's writer threads) before the answer; a failed write fails its
    partition alone."""
    from broker.log.log_dir_failure import KafkaStorageError
    from broker.replica import leader_and_isr

    h = Harness(tmp_path)
    count = leader_and_isr.EPOCH_WRITE_WINDOW * 2 + 5
    try:
        threads: set[str] = set()
        led_first: list[bool] = []  # at each write: every partition of the request leads already
        real_log_for = h.rm.state_changes._log_for

        async def log_for(topic: str, partition: int, is_new: bool = True):  # noqa: ANN202
            log_ = await real_log_for(topic, partition, is_new)
            real_assign = log_.assign_leader_epoch

            def assign(epoch: int, start_offset: int) -> None:
                import threading

                threads.add(threading.current_thread().name)
                led_first.append(all(h.rm.partitions[("many", p)].is_leader for p in range(count)))
                if partition == 7:
                    raise KafkaStorageError("the epoch checkpoint of many-7 could not be written")
                real_assign(epoch, start_offset)

            log_.assign_leader_epoch = assign  # type: ignore[method-assign]
            return log_

        h.rm.state_changes._log_for = log_for  # type: ignore[method-assign]
        entries = [partition_state_entry("many", 0, leader=1, partition=p, is_new=True) for p in range(count)]
        answer = await h.rm.become_leader_or_follower(leader_and_isr_request(*entries))
        codes = {p["partition"]: p["error_code"] for p in answer["partitions"]}
        assert codes.pop(7) == ErrorCode.KAFKA_STORAGE_ERROR
        assert set(codes.values()) == {ErrorCode.NONE} and len(codes) == count - 1
        assert threads and all(name.startswith("leader-epoch") for name in threads), threads
        assert led_first and all(led_first), "all lead before the first epoch write"
        for p in codes:
            log_ = h.rm.log_manager.get_log("many", p)
            assert log_.leader_epoch_cache.latest_epoch == 0, p
            assert (log_.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n", p
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()
