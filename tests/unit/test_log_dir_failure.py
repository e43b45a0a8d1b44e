"""KIP-112 log dir failure, broker and controller rules (docs/design.md "Log dir failure").

The broker side runs a real ReplicaManager over real logs on disk (the harness of
test_isr_manager.py) with a write made to fail at the ``os.write`` boundary; the controller
side runs the real ControllerContext and LogDirFailureHandler on LeaderAndIsr answers.
tests/integration/test_disk_faults.py runs both for real, with full and failing disks.
"""

from __future__ import annotations

import errno
import os

import pytest

from broker.log.log_dir_failure import KafkaStorageError
from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller.context import ControllerContext
from controller.log_dir_failure import LogDirFailureHandler
from tests.unit.test_isr_manager import TP, Harness, leader_and_isr_request, partition_state_entry
from zk.data import BrokerInfo, LeaderAndIsr, LeaderIsrAndControllerEpoch, PartitionReplica

REAL_WRITE = os.write


def fail_writes_to(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    def write(fd: int, data) -> int:  # noqa: ANN001
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            REAL_WRITE(fd, memoryview(data)[: max(1, len(data) // 2)])
            raise OSError(errno.ENOSPC, "No space left on device")
        return REAL_WRITE(fd, data)

    monkeypatch.setattr(os, "write", write)


def leader_and_isr(topic: str = "t", leader: int = 1, epoch: int = 1, is_new: bool = False) -> dict:
    return leader_and_isr_request(
        partition_state_entry(topic, epoch, leader=leader, zk_version=1, is_new=is_new)
    )


async def test_a_failed_append_fails_the_produce_and_takes_the_partition_offline(tmp_path, monkeypatch):
    h = Harness(tmp_path, min_isr=2)
    try:
        await h.lead()
        parked = h.produce()  # acks=all, waiting for the followers
        assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        log_dir = h.log.log_dir
        fail_writes_to(monkeypatch, ".log")
        failed = await h.produce(acks=1)
        assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        monkeypatch.setattr(os, "write", REAL_WRITE)
        channel = h.rm.log_manager.failure_channel
        assert channel.offline_dirs == {log_dir}
        # Even before the broker's handler runs, nothing more reaches the log.
        assert (await h.produce(acks=1)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        # The broker's handler (BrokerServer._handle_log_dir_failure) does this on the loop:
        await h.rm.handle_log_dir_failure(log_dir)
        status = await parked
        assert status.error_code == ErrorCode.KAFKA_STORAGE_ERROR, "the parked acks=all request must not wait"
        assert h.follower_fetch(2, 0) == ErrorCode.KAFKA_STORAGE_ERROR
        assert TP not in h.rm.partitions and TP in h.rm.offline_partitions
        # A LeaderAndIsr for it is answered KAFKA_STORAGE_ERROR: the controller takes it offline.
        answer = await h.rm.become_leader_or_follower(leader_and_isr(epoch=5))
        assert answer["partitions"][0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert any(e["event"] == "ReplicaOffline" for e in h.state_changes)
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


async def test_an_old_replica_is_not_recreated_empty_while_a_dir_is_offline(tmp_path):
    h = Harness(tmp_path)
    try:
        offline = tmp_path / "elsewhere"
        h.rm.log_manager.failure_channel.maybe_add_offline_log_dir(offline, "test")
        # is_new False: the replica existed; its log may be on the offline dir. Creating an
        # empty log here would silently drop its data (and then truncate the leader's followers).
        answer = await h.rm.become_leader_or_follower(leader_and_isr(topic="old", is_new=False))
        assert answer["partitions"][0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert h.rm.get_log(("old", 0)) is None
        answer = await h.rm.become_leader_or_follower(leader_and_isr(topic="brand-new", is_new=True))
        assert answer["partitions"][0]["error_code"] == ErrorCode.NONE
        assert h.rm.get_log(("brand-new", 0)) is not None
        with pytest.raises(KafkaStorageError):
            h.rm.log_manager.get_or_create_log("other", 0, is_new=False)
    finally:
        h.rm.shutdown()
        h.rm.log_manager.shutdown()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, decision: str, **fields: object) -> None:
        self.calls.append((decision, fields))


def controller_context() -> ControllerContext:
    ctx = ControllerContext()
    for b in (1, 2, 3):
        ctx.live_brokers[b] = BrokerInfo(b, "127.0.0.1", 9000 + b)
    ctx.assignments["t"] = {0: [1, 2, 3], 1: [2, 3, 1]}
    for p, leader in ((0, 1), (1, 2)):
        ctx.partition_leadership[TopicPartition("t", p)] = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(leader, 3, (1, 2, 3), 7), 1
        )
    return ctx


def response(*codes: tuple[int, int]) -> dict:
    return {
        "error_code": 0,
        "partitions": [{"topic": "t", "partition": p, "error_code": c} for p, c in codes],
    }


async def test_storage_errors_in_leader_and_isr_answers_take_exactly_those_replicas_offline():
    ctx = controller_context()
    offline_calls: list[list[PartitionReplica]] = []

    async def on_offline(replicas: list[PartitionReplica]) -> None:
        offline_calls.append(replicas)

    async def delete_quietly(paths: list[str]) -> None:
        pass

    handler = LogDirFailureHandler(None, ctx, None, on_offline, delete_quietly, Recorder())  # type: ignore[arg-type]
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    ok = response((0, ErrorCode.NONE), (1, ErrorCode.NONE))
    assert not handler.should_process(2, ok), "a healthy answer from a healthy broker is no news"
    failed = response((0, ErrorCode.NONE), (1, ErrorCode.KAFKA_STORAGE_ERROR))
    assert handler.should_process(2, failed)
    await handler.on_leader_and_isr_response(2, failed)
    assert offline_calls == [[PartitionReplica(t1, 2)]]
    assert ctx.replicas_on_offline_dirs == {2: {t1}}
    # Broker 2 is live, but its replica of t-1 is not: no election may pick it, and it counts
    # as offline in what the controller tells the brokers.
    assert ctx.is_replica_online(2) and ctx.is_replica_online(2, tp=t0)
    assert not ctx.is_replica_online(2, tp=t1)
    assert ctx.live_replicas(t1) == [3, 1] and ctx.offline_replicas(t1) == [2]
    assert ctx.offline_partition_count() == 1, "t-1's leader (2) is on an offline dir"
    # The same answer again changes nothing; an answer of NONE for t-1 brings it back.
    await handler.on_leader_and_isr_response(2, failed)
    assert len(offline_calls) == 1
    assert handler.should_process(2, ok)
    await handler.on_leader_and_isr_response(2, ok)
    assert ctx.replicas_on_offline_dirs == {}
    # A restarted broker (it registered again) starts with no offline replicas.
    await handler.on_leader_and_isr_response(3, response((0, ErrorCode.KAFKA_STORAGE_ERROR)))
    assert ctx.replicas_on_offline_dirs == {3: {t0}}
    handler.on_broker_startup([3])
    assert ctx.replicas_on_offline_dirs == {}
    # A whole-request error, or a dead broker's answer, is not about its dirs.
    await handler.on_leader_and_isr_response(
        2, {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partitions": []}
    )
    del ctx.live_brokers[1]
    await handler.on_leader_and_isr_response(1, failed)
    assert ctx.replicas_on_offline_dirs == {}
