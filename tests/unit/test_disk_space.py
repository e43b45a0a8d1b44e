"""Issue 25's free-space floor (broker/log/disk_space.py; docs/design.md "Disk space as a budget
(issue 25)"): the sans-IO rule figure by figure, then through a real ReplicaManager (a leader
refuses appends, retriably, and takes them again) and a real replica fetcher (a follower pauses
and resumes), with statvfs and the clock faked.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.coordinator.group_metadata_manager import GROUP_METADATA_TOPIC
from broker.log import LogManager
from broker.log.disk_space import (
    DiskSpaceMonitor,
    DiskUsage,
    GiB,
    LogDirSpace,
    MiB,
    free_space_floor,
    resume_threshold,
)
from broker.metadata_cache import MetadataCache
from broker.metrics import BrokerMetrics, BrokerState
from broker.replica.delayed import ProducePartitionStatus
from broker.replica.replica_manager import ReplicaManager
from client.producer.sender import NOT_APPENDED
from client.protocol.api import ApiKey
from client.protocol.errors import RETRIABLE, ErrorCode
from client.protocol.records import build_batch
from tests.scenarios.fetcher_net import BACKOFF_MS, FETCH_WAIT_MS, Broker, Net, Sent, eventually, net_fixture  # noqa: F401 - the net fixture

DIR = Path("/data/logs")


@dataclass
class FakeStatvfs:
    """A filesystem whose figures the test sets; counts the calls."""

    total: int
    usable: int
    calls: int = 0
    error: OSError | None = None

    def __call__(self, path: str) -> FakeStatvfs.Result:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return FakeStatvfs.Result(1, self.total, self.usable)

    @dataclass(frozen=True)
    class Result:
        f_frsize: int
        f_blocks: int
        f_bavail: int


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


# -- the floor ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "total", "floor"),
    [
        (0, 100 * GiB, 0),  # off: Kafka's behaviour
        (24 * MiB, 48 * MiB, 24 * MiB),  # configured: as it is, whatever the filesystem
        (-1, 64 * MiB, 0),  # the project's tmpfs test disks: no floor unless asked for
        (-1, GiB, 0),  # 1% is 10 MiB: under 16 MiB, none
        (-1, 2 * GiB, 2 * GiB // 100),
        (-1, 84 * GiB, 84 * GiB // 100),  # a CI runner's disk: 860 MiB
        (-1, 1024 * GiB, GiB),  # capped at 1 GiB
    ],
)
def test_the_floor_is_configured_or_one_percent_of_the_filesystem_capped(configured, total, floor):
    assert free_space_floor(configured, total) == floor


def test_the_default_never_refuses_with_a_few_gib_free_on_any_filesystem():
    for total in (10 * GiB, 100 * GiB, 1024 * GiB, 64 * 1024 * GiB):
        assert free_space_floor(-1, total) <= GiB < 2 * GiB


def test_the_resume_threshold_is_a_tenth_above_the_floor_and_at_least_a_mib():
    assert resume_threshold(0) == 0
    assert resume_threshold(GiB) == GiB + GiB // 10
    assert resume_threshold(4 * MiB) == 5 * MiB


# -- the rule: hysteresis and the estimate --------------------------------------------------------


def test_below_the_floor_and_back_only_past_the_resume_threshold():
    space = LogDirSpace(DIR, configured_floor=10 * MiB)
    assert space.measured(DiskUsage(100 * MiB, 11 * MiB), 0) is None and not space.below
    went = space.measured(DiskUsage(100 * MiB, 10 * MiB - 1), 1)
    assert went is not None and went.below and space.below
    # Retention freed a segment, but not enough: still below (no flapping at the floor).
    assert space.measured(DiskUsage(100 * MiB, 10 * MiB + 512 * 1024), 2) is None and space.below
    back = space.measured(DiskUsage(100 * MiB, 11 * MiB), 3)
    assert back is not None and not back.below and not space.below
    assert space.measured(DiskUsage(100 * MiB, 10 * MiB + 1), 4) is None and not space.below


def test_appends_are_counted_without_a_syscall_until_they_cross_the_floor():
    fs, clock = FakeStatvfs(100 * MiB, 30 * MiB), Clock()
    monitor = DiskSpaceMonitor([DIR], 20 * MiB, clock, fs)
    assert monitor.admit(DIR, MiB)  # the first append measures
    assert fs.calls == 1
    for _ in range(8):
        assert monitor.admit(DIR, MiB)
    assert fs.calls == 1  # 9 MiB appended: the estimate (21 MiB) is still above the floor
    fs.usable = 21 * MiB  # what the writes really left
    assert monitor.admit(DIR, MiB)  # 20 MiB after it: not under the floor; no syscall
    fs.usable = 20 * MiB - 1  # another writer took a byte more
    assert not monitor.admit(DIR, MiB)  # would cross: measured first, and refused
    assert fs.calls == 2 and monitor.below_floor(DIR)
    for _ in range(100):
        assert not monitor.admit(DIR, 100)  # refused without a syscall each
    assert fs.calls == 2
    assert monitor.snapshot()[0].refused_appends == 101


def test_a_crossing_that_measures_space_freed_meanwhile_admits():
    fs = FakeStatvfs(100 * MiB, 25 * MiB)
    monitor = DiskSpaceMonitor([DIR], 20 * MiB, Clock(), fs)
    for _ in range(5):
        assert monitor.admit(DIR, MiB)
    fs.usable = 40 * MiB  # a topic was deleted meanwhile
    assert monitor.admit(DIR, MiB) and not monitor.below_floor(DIR)
    assert fs.calls == 2


def test_the_periodic_refresh_measures_at_most_every_interval_and_resumes_by_itself(caplog):
    fs, clock = FakeStatvfs(100 * MiB, 5 * MiB), Clock()
    monitor = DiskSpaceMonitor([DIR, Path("/data/other")], 20 * MiB, clock, fs, refresh_ms=1_000)
    with caplog.at_level(logging.INFO, logger="broker.log.disk_space"):
        went = monitor.refresh()
        assert [(t.log_dir, t.below) for t in went] == [(DIR, True), (Path("/data/other"), True)]
        assert "below its free-space floor" in caplog.text and "5242880 of 104857600" in caplog.text
        calls = fs.calls
        clock.now += 999
        assert monitor.refresh() == [] and fs.calls == calls  # not due yet
        fs.usable = 30 * MiB  # an operator freed space
        clock.now += 1
        back = monitor.refresh()
        assert [t.below for t in back] == [False, False]
        assert "has recovered free space" in caplog.text
    assert monitor.admit(DIR, MiB)


def test_follower_bytes_are_counted_and_take_the_dir_below():
    fs = FakeStatvfs(100 * MiB, 22 * MiB)
    monitor = DiskSpaceMonitor([DIR], 20 * MiB, Clock(), fs)
    assert not monitor.below_floor(DIR)
    monitor.appended(DIR, MiB)
    fs.usable = 19 * MiB
    monitor.appended(DIR, 2 * MiB)  # the estimate would cross: measured, and now below
    assert monitor.below_floor(DIR)


def test_an_unmeasurable_dir_has_no_floor_and_a_dir_not_known_is_never_below(caplog):
    fs = FakeStatvfs(100 * MiB, 0, error=OSError(5, "Input/output error"))
    monitor = DiskSpaceMonitor([DIR], 20 * MiB, Clock(), fs)
    with caplog.at_level(logging.WARNING, logger="broker.log.disk_space"):
        assert monitor.admit(DIR, MiB) and not monitor.below_floor(DIR)
    assert "cannot measure the free space" in caplog.text
    assert monitor.admit(Path("/elsewhere"), MiB) and not monitor.below_floor(Path("/elsewhere"))


def test_a_new_floor_at_run_time_measures_every_dir_at_once(caplog):
    """``log.dir.min.free.bytes`` as a dynamic broker config: a raised floor refuses the next
    append without waiting for the periodic job; a lowered one admits it; the same value again
    measures nothing."""
    fs, clock = FakeStatvfs(100 * MiB, 30 * MiB), Clock()
    monitor = DiskSpaceMonitor([DIR, Path("/data/other")], 0, clock, fs, refresh_ms=60_000)
    assert monitor.admit(DIR, MiB) and monitor.configured_floor == 0
    with caplog.at_level(logging.INFO, logger="broker.log.disk_space"):
        went = monitor.reconfigure(40 * MiB)
        assert [(t.log_dir, t.below, t.floor) for t in went] == [
            (DIR, True, 40 * MiB),
            (Path("/data/other"), True, 40 * MiB),
        ]
        assert "log.dir.min.free.bytes is now 41943040 (was 0)" in caplog.text
    assert not monitor.admit(DIR, MiB) and monitor.below_floor(Path("/data/other"))
    assert [v.floor for v in monitor.snapshot()] == [40 * MiB, 40 * MiB]
    calls = fs.calls
    assert monitor.reconfigure(40 * MiB) == [] and fs.calls == calls
    back = monitor.reconfigure(-1)  # the default: 1% of 100 MiB is under 16 MiB, so none
    assert [t.below for t in back] == [False, False] and monitor.admit(DIR, MiB)
    assert [v.floor for v in monitor.snapshot()] == [0, 0]


def test_the_metrics_show_each_dir_against_its_floor():
    fs = FakeStatvfs(100 * MiB, 5 * MiB)
    monitor = DiskSpaceMonitor([DIR], 20 * MiB, Clock(), fs)
    monitor.refresh()
    assert not monitor.admit(DIR, 1)
    state = BrokerState(False, 0, [], 0, 0, log_dir_space=monitor.snapshot())
    metrics = BrokerMetrics(1, lambda: state)
    text = {
        (s.name, tuple(s.labels.values())): s.value for m in metrics.registry.collect() for s in m.samples
    }
    label = (str(DIR),)
    assert text[("kafka_log_logmanager_logdirectoryusablebytes", label)] == 5 * MiB
    assert text[("kafka_log_logmanager_logdirectorytotalbytes", label)] == 100 * MiB
    assert text[("kafka_log_logmanager_logdirectoryminfreebytes", label)] == 20 * MiB
    assert text[("kafka_log_logmanager_logdirectorybelowminfree", label)] == 1
    assert text[("kafka_log_logmanager_logdirectoryrefusedappends_total", label)] == 1
    assert text[("kafka_log_logmanager_belowminfreelogdirectorycount", ())] == 1


# -- the leader's append path (broker/replica/replica_manager.py) ----------------------------------------


class Leader:
    """A real ReplicaManager over real logs on disk, leading ``t-0`` and the offsets partition."""

    def __init__(self, tmp_path: Path, fs: FakeStatvfs) -> None:
        self.clock = Clock()
        cfg = BrokerConfig(
            {
                "broker.id": "1",
                "zookeeper.connect": "127.0.0.1:1",
                "log.dirs": str(tmp_path / "logs"),
                "log.dir.min.free.bytes": str(20 * MiB),
            }
        )

        async def no_overrides(topic: str) -> dict[str, str]:
            return {}

        self.rm = ReplicaManager(
            cfg,
            LogManager(cfg.log_dirs, cfg.log_config(), self.clock),
            MetadataCache(1),
            self.clock,
            lambda _change: None,
            no_overrides,
            statvfs=fs,
        )

    async def lead(self, topic: str) -> None:
        entry = {
            "topic": topic,
            "partition": 0,
            "controller_epoch": 1,
            "leader": 1,
            "leader_epoch": 0,
            "isr": [1],
            "zk_version": 0,
            "replicas": [1],
        }
        body = {"controller_id": 9, "controller_epoch": 1, "partition_states": [entry], "live_leaders": []}
        response = await self.rm.become_leader_or_follower(body)
        assert response["partitions"][0]["error_code"] == ErrorCode.NONE

    def produce(self, topic: str = "t", acks: int = 1) -> ProducePartitionStatus:
        statuses: dict = {}
        batch = build_batch([(None, b"v" * 100, 0, [])])
        self.rm.append_records(acks, 1000, {(topic, 0): batch}, statuses.update)
        return statuses[(topic, 0)]

    def close(self) -> None:
        self.rm.shutdown()
        self.rm.log_manager.shutdown()


async def test_a_leader_below_the_floor_refuses_retriably_then_takes_appends_again(tmp_path):
    fs = FakeStatvfs(100 * MiB, 50 * MiB)
    leader = Leader(tmp_path, fs)
    try:
        await leader.lead("t")
        await leader.lead(GROUP_METADATA_TOPIC)
        assert leader.produce().error_code == ErrorCode.NONE
        fs.usable = 19 * MiB
        leader.clock.now += 1_000
        leader.rm.disk_space.refresh()
        refused = leader.produce()
        # NOT_ENOUGH_REPLICAS: retriable in every client, and floodmark's knows nothing was written
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert refused.error_code in RETRIABLE and refused.error_code in NOT_APPENDED
        assert "below its floor of 20971520" in refused.error_message
        assert leader.produce(acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert leader.rm.get_log(("t", 0)).log_end_offset == 1  # nothing appended
        # The group coordinator's own writes still go through (only counted).
        assert leader.produce(GROUP_METADATA_TOPIC).error_code == ErrorCode.NONE
        # Space returns (retention, a deleted topic): the next refresh lets appends in again.
        fs.usable = 30 * MiB
        leader.clock.now += 1_000
        leader.rm.disk_space.refresh()
        ok = leader.produce()
        assert ok.error_code == ErrorCode.NONE and ok.base_offset == 1
    finally:
        leader.close()


# -- the follower's fetches (broker/replica/fetcher.py) -------------------------------------------------------


def fetches_for_0(net: Net) -> list[Sent]:
    return [s for s in net.requests(ApiKey.FETCH, source=2) if s.asks_for(0)]


async def test_a_follower_below_the_floor_pauses_its_fetches_and_catches_up_after(net: Net, tmp_path: Path):
    a, f = Broker(net, 1, tmp_path), Broker(net, 2, tmp_path)
    fs = FakeStatvfs(100 * MiB, 50 * MiB)
    f.rm.disk_space = DiskSpaceMonitor(f.rm.log_manager.log_dirs, 20 * MiB, f.clock, fs)
    await a.leader_and_isr(0, a, 0, isr=[1, 2], replicas=[1, 2])
    await f.leader_and_isr(0, a, 0, isr=[1, 2], replicas=[1, 2])
    a.produce(0, b"m0")
    await eventually(lambda: f.log(0).log_end_offset == 1, lambda: f.describe(0))

    fs.usable = 10 * MiB
    f.clock.now_ms += 1_000
    f.rm.disk_space.refresh()
    await asyncio.sleep(5 * FETCH_WAIT_MS / 1000)  # a long poll sent before the pause has returned
    asked = len(fetches_for_0(net))
    a.produce(0, b"m1", b"m2")
    await asyncio.sleep(3 * BACKOFF_MS / 1000)  # three rounds of the fetcher's idle loop
    assert len(fetches_for_0(net)) == asked and f.log(0).log_end_offset == 1, f.describe(0)

    fs.usable = 30 * MiB
    f.clock.now_ms += 1_000
    f.rm.disk_space.refresh()
    await eventually(lambda: f.log(0).log_end_offset == 3, lambda: f.describe(0))
    assert f.values(0) == [b"m0", b"m1", b"m2"]
