"""Replication races in the replica manager (issue 9 findings 2, 4, 6 and 11; docs/guarantees.md).

Each test drives the real ReplicaManager over real logs on disk (the harness of
tests/unit/test_isr_manager.py: a fake clock, the state znode as an in-memory compare-and-set
store) and forces one interleaving with events the test holds and releases. Each failed on the
code before its fix; the failure is named in the test's docstring.
"""

from __future__ import annotations

import asyncio

from client.protocol.errors import ErrorCode
from client.types import TopicPartition
from controller.leader_and_isr_retry import INITIAL_BACKOFF_S, MAX_ATTEMPTS, LeaderAndIsrRetries
from tests.unit.test_isr_manager import TP, Harness, leader_and_isr_request, partition_state_entry


def state(topic: str, epoch: int, leader: int = 1, isr=(1, 2, 3)) -> dict:
    return partition_state_entry(topic, epoch, leader=leader, isr=isr, zk_version=epoch, is_new=True)


request = leader_and_isr_request


def stop_request(topic: str, delete: bool = False) -> dict:
    return {
        "controller_id": 9,
        "controller_epoch": 1,
        "delete_partitions": delete,
        "partitions": [{"topic": topic, "partition": 0}],
    }


class SlowConfigs:
    """The topic-config read of a broker's first sight of a topic (a ZooKeeper read), held per
    call until the test releases it, or failing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, asyncio.Event]] = []
        self.fail: set[str] = set()
        self.hold = False

    async def __call__(self, topic: str) -> dict[str, str]:
        if topic in self.fail:
            raise ConnectionError(f"ZooKeeper connection lost reading /config/topics/{topic}")
        if self.hold:
            released = asyncio.Event()
            self.calls.append((topic, released))
            await released.wait()
        return {}


def harness(tmp_path, configs: SlowConfigs | None = None) -> Harness:
    h = Harness(tmp_path, min_isr=1)
    if configs is not None:
        h.rm.topic_config_source = configs
    return h


async def close(h: Harness) -> None:
    h.rm.shutdown()
    h.rm.log_manager.shutdown()


# -- finding 2: a LeaderAndIsr is never half applied ------------------------------------------------


async def test_a_partition_that_fails_to_apply_is_reported_and_the_others_are_applied(tmp_path):
    """Before: the ZooKeeper error reading topic b's config escaped become_leader_or_follower, the
    whole request was answered UNKNOWN_SERVER_ERROR, and c (after b) was never applied."""
    configs = SlowConfigs()
    configs.fail.add("b")
    h = harness(tmp_path, configs)
    try:
        answer = await h.rm.become_leader_or_follower(request(state("a", 3), state("b", 3), state("c", 3)))
        codes = {p["topic"]: p["error_code"] for p in answer["partitions"]}
        assert answer["error_code"] == ErrorCode.NONE
        assert codes == {"a": ErrorCode.NONE, "b": ErrorCode.UNKNOWN_SERVER_ERROR, "c": ErrorCode.NONE}
        # Invariant: every partition of the request is applied or reported failed.
        for topic in ("a", "c"):
            partition = h.rm.get_partition((topic, 0))
            assert partition.is_leader and partition.leader_epoch == 3
        assert h.rm.get_log(("b", 0)) is None
        assert not (h.rm.get_partition(("b", 0)) and h.rm.get_partition(("b", 0)).is_leader)
        # The controller resends b; ZooKeeper is back: b is applied at the same epoch.
        retries = LeaderAndIsrRetries()
        resend = retries.on_response(1, answer, request(state("a", 3), state("b", 3), state("c", 3)))
        assert resend is not None and resend.partitions == [TopicPartition("b", 0)]
        assert resend.delay_s == INITIAL_BACKOFF_S
        configs.fail.clear()
        again = await h.rm.become_leader_or_follower(request(state("b", 3)))
        assert again["partitions"][0]["error_code"] == ErrorCode.NONE
        assert h.rm.get_partition(("b", 0)).is_leader and h.rm.get_partition(("b", 0)).leader_epoch == 3
        assert retries.on_response(1, again, request(state("b", 3))) is None
    finally:
        await close(h)


def test_the_controller_resends_failed_partitions_with_backoff_and_a_bound():
    retries = LeaderAndIsrRetries()
    req = request(state("a", 3), state("b", 3))
    failed_b = {"error_code": 0, "partitions": [
        {"topic": "a", "partition": 0, "error_code": ErrorCode.NONE},
        {"topic": "b", "partition": 0, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR},
    ]}  # fmt: skip
    delays = []
    for _ in range(MAX_ATTEMPTS):
        resend = retries.on_response(2, failed_b, req)
        assert resend is not None and resend.partitions == [TopicPartition("b", 0)]
        delays.append(resend.delay_s)
    assert delays == sorted(delays) and delays[0] == INITIAL_BACKOFF_S and delays[-1] <= 10.0
    assert retries.on_response(2, failed_b, req) is None, "bounded: it gives up after MAX_ATTEMPTS"
    # Final answers are not resent; a whole-request error resends every partition.
    for code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE):
        final = {"error_code": 0, "partitions": [{"topic": "a", "partition": 0, "error_code": code}]}
        assert retries.on_response(3, final, request(state("a", 3))) is None
    whole = retries.on_response(3, {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "partitions": []}, req)
    assert whole is not None and whole.partitions == [TopicPartition("a", 0), TopicPartition("b", 0)]
    stale = {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partitions": []}
    assert retries.on_response(3, stale, req) is None


# -- finding 6: LeaderAndIsr and StopReplica are applied one at a time --------------------------


async def test_two_leader_and_isr_requests_never_apply_an_older_epoch_after_a_newer_one(tmp_path):
    """Before: both requests passed the epoch check before the topic-config await; released in
    the other order, epoch 5 was applied after epoch 6 and the partition went back an epoch."""
    configs = SlowConfigs()
    configs.hold = True
    h = harness(tmp_path, configs)
    try:
        older = asyncio.create_task(h.rm.become_leader_or_follower(request(state("t", 5))))
        await asyncio.sleep(0.01)
        newer = asyncio.create_task(h.rm.become_leader_or_follower(request(state("t", 6))))
        await asyncio.sleep(0.01)
        epochs_seen = []
        # Release the newer request's read first (if it got that far), then the older one's.
        while not (older.done() and newer.done()):
            if configs.calls:
                topic, released = configs.calls.pop()
                released.set()
            await asyncio.sleep(0.01)
            if h.rm.get_partition(TP) is not None:
                epochs_seen.append(h.rm.get_partition(TP).leader_epoch)
        assert (await older)["partitions"][0]["error_code"] == ErrorCode.NONE
        assert (await newer)["partitions"][0]["error_code"] == ErrorCode.NONE
        # Invariant: leader epochs never go back, in the partition and in the epoch cache.
        assert h.rm.get_partition(TP).leader_epoch == 6
        assert epochs_seen == sorted(epochs_seen)
        cache = [e.epoch for e in h.rm.get_log(TP).leader_epoch_cache.entries]
        assert cache == sorted(cache) and cache[-1] == 6
    finally:
        await close(h)


async def test_stop_replica_without_delete_keeps_the_epoch_so_an_older_leader_and_isr_is_refused(tmp_path):
    """Before: StopReplica dropped the Partition, forgetting epoch 6, and a late LeaderAndIsr of
    epoch 5 (an old controller's, or a resend) made this broker lead at epoch 5 again."""
    h = harness(tmp_path)
    try:
        await h.rm.become_leader_or_follower(request(state("t", 6)))
        stopped = await h.rm.stop_replicas(stop_request("t"))
        assert stopped["partitions"][0]["error_code"] == ErrorCode.NONE
        assert (await h.produce(acks=1)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        late = await h.rm.become_leader_or_follower(request(state("t", 5)))
        assert late["partitions"][0]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
        assert not h.rm.get_partition(TP).is_leader and h.rm.get_partition(TP).leader_epoch == 6
        newer = await h.rm.become_leader_or_follower(request(state("t", 7)))
        assert newer["partitions"][0]["error_code"] == ErrorCode.NONE
        assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        deleted = await h.rm.stop_replicas(stop_request("t", delete=True))
        assert deleted["partitions"][0]["error_code"] == ErrorCode.NONE
        assert h.rm.get_partition(TP) is None and h.rm.get_log(TP) is None
    finally:
        await close(h)


# -- finding 4: a fetch that fails does not count as the follower's position ----------------------


async def test_a_follower_fetching_above_the_leaders_log_end_is_not_taken_into_the_isr(tmp_path):
    """Before: the leader recorded fetch offset 9 as follower 3's LEO, moved the HW and expanded
    the ISR with it, and only then did the read fail with OFFSET_OUT_OF_RANGE."""
    h = harness(tmp_path)
    try:
        await h.lead(isr=(1, 2))
        for _ in range(5):
            assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        assert h.follower_fetch(2, 5) == ErrorCode.NONE  # HW 5
        assert h.log.high_watermark == 5
        writes = h.store.writes
        assert h.follower_fetch(3, 9) == ErrorCode.OFFSET_OUT_OF_RANGE  # diverged: above our LEO 5
        await asyncio.sleep(0)
        assert h.store.writes == writes, "an ISR expansion was started for a follower whose fetch failed"
        assert 3 not in h.partition.isr
        assert h.partition.remote_replicas[3].log_end_offset != 9
    finally:
        await close(h)


# -- finding 11: a parked follower fetch learns a moved HW at once -------------------------------


async def test_a_parked_follower_fetch_completes_when_the_high_watermark_moves(tmp_path):
    """Before: follower 2's long poll stayed parked until max wait (it had all the data), so it
    learned the new HW up to replica.fetch.wait.max.ms late."""
    h = harness(tmp_path)
    try:
        await h.lead(isr=(1, 2, 3))
        for _ in range(5):
            assert (await h.produce(acks=1)).error_code == ErrorCode.NONE
        assert h.follower_fetch(2, 5) == ErrorCode.NONE
        assert h.follower_fetch(3, 3) == ErrorCode.NONE
        assert h.log.high_watermark == 3
        answered: asyncio.Future = asyncio.get_running_loop().create_future()
        body = {
            "replica_id": 2,
            "max_wait_ms": 60_000,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 0, "fetch_offset": 5, "current_leader_epoch": 0, "log_start_offset": 0,
                 "partition_max_bytes": 1 << 20},
            ]}],
        }  # fmt: skip
        h.rm.fetch_messages(body, lambda results, *_: answered.set_result(results))
        assert not answered.done(), "nothing new for follower 2: its fetch is parked"
        assert h.follower_fetch(3, 5) == ErrorCode.NONE  # follower 3 catches up: HW 3 -> 5
        assert h.log.high_watermark == 5
        result = await asyncio.wait_for(answered, 1.0)
        assert result[TP].high_watermark == 5 and result[TP].records == b""
    finally:
        await close(h)
