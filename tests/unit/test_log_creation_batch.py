"""Thousands of new logs at once (docs/design.md "Thousands of new logs"): LogManager.create_logs
opens them on threads with one directory fsync per log dir where get_or_create_log does one per
log, places them as get_or_create_log does, and leaves whatever it cannot create (an I/O error,
EMFILE, a dir gone offline meanwhile) to get_or_create_log, which creates it or says why. A
LeaderAndIsr naming more than EPOCH_WRITE_WINDOW partitions without a log goes that way, each
topic's config read once."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from broker.log import LogConfig, LogManager
from broker.log import log_manager as log_manager_module
from broker.replica import leader_and_isr
from client.protocol.errors import ErrorCode
from tests.unit.test_isr_manager import Harness, leader_and_isr_request, partition_state_entry
from tests.unit.test_log_write_failures import Clock


@pytest.fixture
def fsyncs(monkeypatch) -> list[Path]:
    """Every directory fsync the log manager makes, in order (and made)."""
    made: list[Path] = []
    real = log_manager_module.fsync_dir

    def counting(path: Path) -> None:
        made.append(Path(path))
        real(path)

    monkeypatch.setattr(log_manager_module, "fsync_dir", counting)
    return made


def test_one_fsync_per_dir_placement_by_counts_and_existing_logs_skipped(tmp_path: Path, fsyncs):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    for p in range(4):
        manager.get_or_create_log("old", p)  # two in each dir
    manager.get_or_create_log("t", 0)  # exists already: skipped
    fsyncs.clear()
    config = LogConfig(segment_bytes=1 << 20)
    wanted = [(("t", p), config, True) for p in range(101)] + [(("t", 5), config, True)]
    assert manager.create_logs(wanted, threads=8) == 100
    assert sorted(fsyncs) == dirs, "one fsync of each dir for the hundred logs"
    logs = manager.all_logs()
    assert {("t", p) for p in range(101)} <= set(logs)
    counts = {d: sum(lg.log_dir == d for lg in logs.values()) for d in dirs}
    assert sorted(counts.values()) == [52, 53]  # the fewest partitions, as get_or_create_log
    assert all(logs[("t", p)].config.segment_bytes == 1 << 20 for p in range(1, 101))
    assert logs[("t", 0)].config.segment_bytes != 1 << 20, "an existing log is not re-created"
    manager.shutdown()
    reloaded = LogManager(dirs, LogConfig(), Clock())
    reloaded.load_logs()
    assert set(reloaded.all_logs()) == set(logs)
    reloaded.shutdown()


def test_an_old_replica_is_not_created_while_a_dir_is_offline(tmp_path: Path):
    """is_new False with a dir offline: the log may be there (get_or_create_log refuses too)."""
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    manager.failure_channel.maybe_add_offline_log_dir(dirs[0], "test")
    wanted = [(("t", p), LogConfig(), p % 2 == 0) for p in range(10)]
    assert manager.create_logs(wanted) == 5
    assert {tp[1] for tp in manager.all_logs()} == {0, 2, 4, 6, 8}
    assert {lg.log_dir for lg in manager.all_logs().values()} == {dirs[1]}
    manager.shutdown()


def test_a_dir_whose_fsync_meets_emfile_adopts_nothing_and_get_or_create_log_recovers(
    tmp_path: Path, monkeypatch
):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    real = log_manager_module.fsync_dir
    failing = {dirs[0]}

    def fsync_dir(path: Path) -> None:
        if Path(path) in failing:
            raise OSError(errno.EMFILE, "Too many open files")
        real(path)

    monkeypatch.setattr(log_manager_module, "fsync_dir", fsync_dir)
    wanted = [(("t", p), LogConfig(), True) for p in range(20)]
    assert manager.create_logs(wanted) == 10
    assert {lg.log_dir for lg in manager.all_logs().values()} == {dirs[1]}
    assert not manager.is_offline(dirs[0]), "EMFILE is not a disk failure"
    assert manager.file_cache.stats.open <= 10, "the logs not adopted were closed"
    left_behind = {p for p in range(20) if manager.get_log("t", p) is None}
    assert all((dirs[0] / f"t-{p}").is_dir() for p in left_behind)
    failing.clear()
    for p in range(11):  # other logs meanwhile: d1 holds 11, d2 10
        manager.get_or_create_log("u", p)
    # the partitions' own steps open the logs left behind again, in the dir that holds them (the
    # fewest-partitions rule would pick d2 for some: duplicate directories at the next start-up)
    for p in range(20):
        manager.get_or_create_log("t", p)
    assert {tp for tp in manager.all_logs() if tp[0] == "t"} == {("t", p) for p in range(20)}
    assert {manager.get_log("t", p).log_dir for p in left_behind} == {dirs[0]}
    manager.shutdown()
    reloaded = LogManager(dirs, LogConfig(), Clock())
    reloaded.load_logs()
    assert not reloaded.is_offline(dirs[0]) and len(reloaded.all_logs()) == 31
    reloaded.shutdown()


def test_a_log_that_fails_with_an_io_error_takes_its_dir_offline_and_its_dir_adopts_nothing(
    tmp_path: Path, monkeypatch
):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, LogConfig(), Clock())
    real_open = log_manager_module.Log.open

    def failing_open(path, *args, **kwargs):
        if Path(path).name == "t-4":
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(log_manager_module.Log, "open", staticmethod(failing_open))
    wanted = [(("t", p), LogConfig(), True) for p in range(20)]
    created = manager.create_logs(wanted)
    bad_dir = next(d for d in dirs if manager.is_offline(d))
    good_dir = next(d for d in dirs if d != bad_dir)
    assert created == 10 and {lg.log_dir for lg in manager.all_logs().values()} == {good_dir}
    manager.shutdown()


def _new_partitions(count: int, topic: str = "many") -> dict:
    """A LeaderAndIsr of ``count`` new partitions, broker 1 leading every other one."""
    entries = [
        partition_state_entry(topic, 0, leader=1 if p % 2 == 0 else 2, partition=p, is_new=True)
        for p in range(count)
    ]
    return leader_and_isr_request(*entries)


async def test_a_leader_and_isr_of_many_new_partitions_creates_their_logs_together(tmp_path: Path, fsyncs):
    h = Harness(tmp_path, overrides={"many": {"segment.bytes": "1048576"}})
    reads: list[str] = []
    source = h.rm.topic_config_source

    async def counting_source(topic: str) -> dict[str, str]:
        reads.append(topic)
        return await source(topic)

    h.rm.topic_config_source = counting_source
    count = leader_and_isr.EPOCH_WRITE_WINDOW * 3
    try:
        answer = await h.rm.become_leader_or_follower(_new_partitions(count))
        assert [p["error_code"] for p in answer["partitions"]] == [ErrorCode.NONE] * count
        assert reads == ["many"], "the topic's config is read once"
        log_dir = h.rm.config.log_dirs[0]
        assert fsyncs.count(log_dir) == 1, "one fsync of the log dir for every new log"
        for p in range(count):
            log_ = h.rm.log_manager.get_log("many", p)
            assert log_.config.segment_bytes == 1 << 20
            assert h.rm.partitions[("many", p)].is_leader == (p % 2 == 0)
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


async def test_a_few_new_partitions_are_created_one_by_one_on_the_loop(tmp_path: Path, fsyncs):
    """At or under EPOCH_WRITE_WINDOW (an election, the simulator's batches): as before."""
    h = Harness(tmp_path)
    count = leader_and_isr.EPOCH_WRITE_WINDOW
    try:
        created_on: set[str] = set()
        real = h.rm.log_manager.get_or_create_log

        def get_or_create_log(*args, **kwargs):  # noqa: ANN202
            created_on.add(threading.current_thread().name)
            return real(*args, **kwargs)

        h.rm.log_manager.get_or_create_log = get_or_create_log  # type: ignore[method-assign]
        answer = await h.rm.become_leader_or_follower(_new_partitions(count))
        assert [p["error_code"] for p in answer["partitions"]] == [ErrorCode.NONE] * count
        assert created_on == {threading.current_thread().name}
        assert fsyncs.count(h.rm.config.log_dirs[0]) == count
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


async def test_a_config_that_cannot_be_read_at_first_is_read_again_by_each_partition(tmp_path: Path):
    h = Harness(tmp_path)
    source = h.rm.topic_config_source
    calls = 0

    async def flaky_source(topic: str) -> dict[str, str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("ZooKeeper is away")
        return await source(topic)

    h.rm.topic_config_source = flaky_source
    count = leader_and_isr.EPOCH_WRITE_WINDOW + 10
    try:
        answer = await h.rm.become_leader_or_follower(_new_partitions(count))
        assert [p["error_code"] for p in answer["partitions"]] == [ErrorCode.NONE] * count
        assert len(h.rm.log_manager.all_logs()) == count
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()
