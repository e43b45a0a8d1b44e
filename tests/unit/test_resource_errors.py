"""Running out of file descriptors or memory is not a failed disk (issue 19 item 6; docs/design.md
"The file budget").

EMFILE, ENFILE, ENOMEM and ENOBUFS never take a log dir offline (Kafka's LogDirFailureChannel
does, and a broker with one log dir then halts): the operation that met one fails with
REQUEST_TIMED_OUT, the LeaderAndIsr partition answers it and the controller resends it later, a
produce is retried by the client, a periodic checkpoint is written at its next turn, and the
channel counts them. The faults are injected at the ``os.open`` / ``open`` boundary of real logs
on disk (the ReplicaManager harness of test_isr_manager.py), one call at a time.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path

import pytest

from broker.file_budget import current_budget, raise_open_files_limit
from broker.log import log as log_module
from broker.log.log import Log, LogConfig
from broker.log.log_dir_failure import KafkaStorageError, LogDirFailureChannel, is_resource_exhaustion
from broker.log.log_manager import LogManager
from client.protocol.errors import ErrorCode, KafkaError
from client.types import TopicPartition
from controller.leader_and_isr_retry import LeaderAndIsrRetries
from controller.topic_admin import file_budget_violations
from tests.unit.test_isr_manager import Harness, leader_and_isr_request, partition_state_entry
from tests.unit.test_log import batch
from zk.data import EndPoint, FileBudget, decode_broker_registration, encode_broker_registration

REAL_OS_OPEN = os.open
REAL_OPEN = builtins.open


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fail_os_open(monkeypatch: pytest.MonkeyPatch, suffix: str, code: int = errno.EMFILE) -> list[str]:
    """``os.open`` of a path ending in ``suffix`` fails with ``code``; returns the paths refused."""
    refused: list[str] = []

    def failing(path, flags, *args, **kwargs):  # noqa: ANN001, ANN202
        if str(path).endswith(suffix):
            refused.append(str(path))
            raise OSError(code, os.strerror(code), str(path))
        return REAL_OS_OPEN(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing)
    return refused


@pytest.mark.parametrize(
    ("code", "resource"),
    [
        (errno.EMFILE, True),
        (errno.ENFILE, True),
        (errno.ENOMEM, True),
        (errno.ENOBUFS, True),
        (errno.ENOSPC, False),
        (errno.EIO, False),
        (errno.EROFS, False),
    ],
)
def test_resource_errnos_are_not_disk_failures(tmp_path: Path, code: int, resource: bool) -> None:
    channel = LogDirFailureChannel()
    assert is_resource_exhaustion(OSError(code, os.strerror(code))) is resource
    with pytest.raises(KafkaError) as raised, channel.io_errors(tmp_path, "writing a checkpoint"):
        raise OSError(code, os.strerror(code))
    if resource:
        assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT and raised.value.retriable
        assert channel.offline_dirs == set()
        assert channel.resource_errors == {errno.errorcode[code]: 1}
    else:
        assert isinstance(raised.value, KafkaStorageError)
        assert channel.offline_dirs == {tmp_path}
        assert channel.resource_errors == {}


async def test_emfile_creating_a_replica_answers_a_retriable_leader_and_isr_and_the_resend_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's sequence: opening a new replica's ``.timeindex`` meets EMFILE. The dir stays
    online, the half-opened segment's descriptors are closed, the partition answers
    REQUEST_TIMED_OUT, the controller's retry policy resends it, and the resend applies."""
    h = Harness(tmp_path)
    try:
        await h.lead(topic="old")  # a replica the broker already serves
        channel = h.rm.log_manager.failure_channel
        request = leader_and_isr_request(partition_state_entry("big", 0, leader=1, is_new=True))
        before = open_fds()
        refused = fail_os_open(monkeypatch, ".timeindex")
        answer = await h.rm.become_leader_or_follower(request)
        monkeypatch.setattr(os, "open", REAL_OS_OPEN)
        assert refused, "the fault was never met"
        assert channel.offline_dirs == set(), "EMFILE took the log dir offline"
        code = answer["partitions"][0]["error_code"]
        assert code == ErrorCode.REQUEST_TIMED_OUT, ErrorCode(code).name
        assert open_fds() == before, "the half-opened segment leaked its descriptors"
        assert channel.resource_errors == {"EMFILE": 1}
        assert h.rm.get_log(("big", 0)) is None and ("big", 0) not in h.rm.offline_partitions
        resend = LeaderAndIsrRetries().on_response(1, answer, request)
        assert resend is not None and resend.partitions == [TopicPartition("big", 0)]
        again = await h.rm.become_leader_or_follower(request)
        assert again["partitions"][0]["error_code"] == ErrorCode.NONE
        assert (await h.produce(acks=1, topic="big")).error_code == ErrorCode.NONE
        assert (await h.produce(acks=1, topic="old")).error_code == ErrorCode.NONE
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


async def test_emfile_rolling_a_segment_fails_only_that_produce(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, overrides={"t": {"segment.bytes": "100"}})
    try:
        await h.lead()
        assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        fail_os_open(monkeypatch, ".log")  # the roll's new segment
        failed = await h.produce(acks=1)
        monkeypatch.setattr(os, "open", REAL_OS_OPEN)
        assert failed.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert h.rm.log_manager.failure_channel.offline_dirs == set()
        assert h.log.log_end_offset == 1, "the failed append left a record behind"
        assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        assert h.log.log_end_offset == 2 and len(h.log.segments) == 2
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


def test_emfile_writing_a_checkpoint_keeps_the_dir_and_the_next_checkpoint_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager([tmp_path / "logs"], LogConfig(), lambda: 0)
    try:
        manager.get_or_create_log("t", 0).update_high_watermark(0)

        def failing(file, *args, **kwargs):  # noqa: ANN001, ANN202
            if str(file).endswith(".tmp"):
                raise OSError(errno.EMFILE, "Too many open files", str(file))
            return REAL_OPEN(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", failing)
        manager.checkpoint_high_watermarks()
        monkeypatch.setattr(builtins, "open", REAL_OPEN)
        assert manager.online_log_dirs == [tmp_path / "logs"]
        assert manager.failure_channel.resource_errors == {"EMFILE": 1}
        manager.checkpoint_high_watermarks()
        assert (tmp_path / "logs" / "replication-offset-checkpoint").exists()
    finally:
        manager.shutdown()


def test_a_flush_whose_dir_fsync_met_emfile_fsyncs_the_dir_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dir's new entries (a rolled segment) are still to be fsynced after the failed flush."""
    lg = Log.open(tmp_path / "t-0", LogConfig(), lambda: 0)
    try:
        lg.append_as_leader(batch([b"v"]), 0)
        synced: list[Path] = []

        def fsync_dir(path: Path) -> None:
            if not synced:
                synced.append(Path("refused"))
                raise OSError(errno.EMFILE, "Too many open files")
            synced.append(path)

        monkeypatch.setattr(log_module, "fsync_dir", fsync_dir)
        lg.roll()  # the roll's own flush (its "flush-log" job, run at once) meets the refusal
        assert synced == [Path("refused")] and not lg.is_offline and lg.recovery_point == 0
        lg.flush()
        assert synced[1:] == [lg.dir], "the directory entries of the rolled segment were never fsynced"
    finally:
        lg.close()


def test_emfile_inside_a_truncation_still_fails_the_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncation changes the segments before it rewrites the epoch cache and reloads the
    producer state: one cut short cannot go on serving, so EMFILE there fails the dir as before."""
    lg = Log.open(tmp_path / "t-0", LogConfig(), lambda: 0)
    try:
        lg.append_as_leader(batch([b"a"]), 3)
        lg.append_as_leader(batch([b"b"]), 4)

        def failing(file, *args, **kwargs):  # noqa: ANN001, ANN202
            raise OSError(errno.EMFILE, "Too many open files", str(file))

        monkeypatch.setattr(builtins, "open", failing)
        with pytest.raises(KafkaStorageError):
            lg.truncate_to(1)
        assert lg.is_offline
    finally:
        lg.close()


# -- the file budget (broker/file_budget.py, zk/data.py, controller/topic_admin.py) -------------


class FakeResource:
    RLIMIT_NOFILE = 7
    RLIM_INFINITY = -1

    def __init__(self, soft: int, hard: int, refuse: bool = False) -> None:
        self.limits = (soft, hard)
        self.refuse = refuse

    def getrlimit(self, resource: int) -> tuple[int, int]:
        assert resource == self.RLIMIT_NOFILE
        return self.limits

    def setrlimit(self, resource: int, limits: tuple[int, int]) -> None:
        if self.refuse:
            raise ValueError("not allowed to raise maximum limit")
        self.limits = limits


@pytest.mark.parametrize(
    ("soft", "hard", "refuse", "raised"),
    [
        (1024, 20_000, False, 20_000),
        (1024, -1, False, 1_048_576),
        (1024, 20_000, True, 1024),
        (4096, 4096, False, 4096),
    ],
)
def test_the_soft_open_file_limit_is_raised_to_the_hard_one(
    soft: int, hard: int, refuse: bool, raised: int
) -> None:
    fake = FakeResource(soft, hard, refuse)
    assert raise_open_files_limit(fake) == raised
    assert fake.getrlimit(fake.RLIMIT_NOFILE)[0] == (soft if refuse else raised)
    budget = current_budget(fake)
    limit = soft if refuse else raised
    assert budget.open_files_limit == limit
    # issue 25: a quarter reserved, the rest for the segment file cache; replicas hold no file
    assert (budget.reserve, budget.segment_files, budget.files_per_replica) == (
        limit // 4,
        limit - limit // 4,
        0,
    )
    assert budget.max_replicas == budget.max_partitions == 2**31 - 1


def test_the_budget_is_published_in_the_registration_and_kafka_fields_are_unchanged() -> None:
    endpoints = [EndPoint("PLAINTEXT", "h", 9092)]
    budget = FileBudget(512, 128, 3)
    plain = json.loads(encode_broker_registration(endpoints, 5))
    published = json.loads(encode_broker_registration(endpoints, 5, file_budget=budget))
    assert published == {
        **plain,
        "file_budget": {
            "open_files_limit": 512,
            "reserve": 128,
            "files_per_replica": 3,
            "segment_files": 0,
            "max_partitions": 2**31 - 1,
        },
    }
    assert decode_broker_registration(json.dumps(published).encode(), 2).file_budget == budget
    assert decode_broker_registration(json.dumps(plain).encode(), 2).file_budget is None  # Kafka's own


def test_a_creation_past_any_brokers_budget_names_the_broker_the_budget_and_the_count() -> None:
    budgets = {1: FileBudget(512, 128, 3), 2: FileBudget(1024, 256, 3)}  # 128 and 256 replicas
    assert file_budget_violations(budgets, {1: 100, 2: 100}, {1: 28, 2: 28, 3: 10_000}) == []
    (problem,) = file_budget_violations(budgets, {1: 100, 2: 100}, {1: 29, 2: 29})
    assert problem == (
        "broker 1 would hold 129 replicas (100 assigned + 29 new), past its file budget of 128 "
        "replicas (open-file limit 512, reserve 128, segment files 0, 3 files per replica)"
    )


def test_a_creation_past_max_broker_partitions_names_the_setting() -> None:
    """Issue 25: replicas hold no descriptor, so the files bound no replica count; the explicit
    capacity is ``max.broker.partitions`` (KIP-578), published with the budget."""
    budgets = {1: FileBudget(512, 128, 0, 384, 600), 2: FileBudget(512, 128, 0, 384)}
    assert budgets[1].max_replicas == 600 and budgets[2].max_replicas == 2**31 - 1
    assert file_budget_violations(budgets, {1: 500, 2: 500}, {1: 100, 2: 10_000}) == []
    (problem,) = file_budget_violations(budgets, {1: 500, 2: 500}, {1: 101, 2: 10_000})
    assert (
        problem
        == "broker 1 would hold 601 replicas (500 assigned + 101 new), past its max.broker.partitions=600"
    )
    older = {3: FileBudget(512, 128, 3, 0, 100)}  # files per replica and a smaller maximum: the maximum
    (problem,) = file_budget_violations(older, {}, {3: 101})
    assert problem.endswith("past its max.broker.partitions=100")


RELIEF_SCRIPT = """
import os, resource, sys
from pathlib import Path
from broker.log.log import LogConfig
from broker.log.log_manager import LogManager
from client.protocol.records import build_batch

manager = LogManager([Path(sys.argv[1])], LogConfig(), lambda: 0, segment_files_max=100)
logs = [manager.get_or_create_log("t", p) for p in range(20)]
for lg in logs:
    lg.append_as_leader(build_batch([(None, b"v", 0, [])]), 0)
idle = manager.file_cache.stats.open
free = os.open("/dev/null", os.O_RDONLY)
os.close(free)  # the lowest free descriptor: every one below it is in use
resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    os.open("/dev/null", os.O_RDONLY)
    print("a descriptor was still free")
    sys.exit(2)
except OSError:
    pass
# A new leader epoch: its first append writes the epoch checkpoint (a temp file, a directory fsync).
info = logs[0].append_as_leader(build_batch([(None, b"w", 0, [])]), 1)
manager.checkpoint_high_watermarks()
print(idle, info.first_offset, logs[0].leader_epoch_cache.latest_epoch, manager.file_cache.stats.open)
"""


def test_a_checkpoint_under_a_full_descriptor_table_gives_back_idle_segment_files(tmp_path: Path) -> None:
    """The open-file limit lowered to what the process holds (the chaos fd-pressure fault): the
    first append of a new leader epoch writes the epoch checkpoint, whose open meets EMFILE; the
    idle segment descriptors are closed and the write tried again, so the append succeeds (it
    failed retriably until the limit came back), and so do the log manager's checkpoints."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", RELIEF_SCRIPT, str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    idle, offset, epoch, open_after = map(int, done.stdout.split())
    assert idle == 20 and offset == 1 and epoch == 1
    assert open_after <= 2, "the idle segment files were given back"
    assert (tmp_path / "logs" / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n1 1\n"
