"""Races in the follower's replica fetcher, replayed step by step on real brokers' replica
managers and logs (SPEC 5.4; Kafka's AbstractFetcherThread, ReplicaFetcherThread and
AbstractFetcherManager). The network is ``fetcher_net.Net``: a test holds a leader's answer
until it has delivered a LeaderAndIsr, then releases it, so every interleaving is forced.

* Partitions of one leader truncate and fetch independently: one that keeps getting an
  OffsetsForLeaderEpoch error backs off (``replica.fetch.backoff.ms``) and the others go on.
* An OffsetsForLeaderEpoch answer is applied only to the fetch state it was asked for: one that
  comes back after a leadership round trip A -> B -> A is stale and ignored.
* Out-of-range handling (ListOffsets LATEST, then EARLIEST) touches the log only if the
  partition is still fetched from the same leader at the same epoch when each answer arrives.
* A leader that comes back on another port keeps every partition it leads fetched.

Each scenario ends on SPEC 5.4's invariants: replicas byte-identical below the HW, and
replication proceeding.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from client.protocol.api import LATEST_TIMESTAMP, ApiKey
from tests.scenarios.fetcher_net import (
    BACKOFF_MS,
    TOPIC,
    WAIT_S,
    Broker,
    Hold,
    Net,
    Sent,
    assert_identical_below_hw,
    eventually,
    net_fixture,  # noqa: F401 - the net fixture
    settle,
)

EPOCH_REQUEST = ApiKey.OFFSET_FOR_LEADER_EPOCH


def caught_up(follower: Broker, partition: int, offset: int) -> bool:
    log = follower.log(partition)
    return log.log_end_offset == offset and log.high_watermark == offset


# -- partitions in truncation back off on their own (Kafka: PartitionFetchState.isTruncating/isDelayed) --


async def test_partition_in_epoch_error_backs_off_and_the_others_replicate(net: Net, tmp_path: Path) -> None:
    a, f = Broker(net, 1, tmp_path), Broker(net, 2, tmp_path)
    # Epoch 0: A leads partitions 0 and 1, F follows both; m0 is on both replicas of each.
    for p in (0, 1):
        await a.leader_and_isr(p, a, 0, isr=[1, 2], replicas=[1, 2])
        await f.leader_and_isr(p, a, 0, isr=[1, 2], replicas=[1, 2])
        a.produce(p, b"m0")
    await eventually(lambda: caught_up(f, 0, 1) and caught_up(f, 1, 1), lambda: f.describe(0))

    # The controller restates both partitions at epoch 1 (leader still A). Its LeaderAndIsr for
    # partition 0 reaches F but not yet A: F asks about partition 0 with current epoch 1, which
    # A does not know yet, so A answers UNKNOWN_LEADER_EPOCH every time.
    await a.leader_and_isr(1, a, 1, isr=[1, 2], replicas=[1, 2])
    await f.leader_and_isr(0, a, 1, isr=[1, 2], replicas=[1, 2])
    await f.leader_and_isr(1, a, 1, isr=[1, 2], replicas=[1, 2])
    a.produce(1, b"m1")

    def asked_for_0() -> list[Sent]:
        return [s for s in net.requests(EPOCH_REQUEST, source=2) if s.asks_for(0)]

    # Partition 1 completes its truncation and replicates m1 while partition 0 backs off.
    await eventually(
        lambda: caught_up(f, 1, 2),
        lambda: f"{f.describe(1)}; F sent {len(asked_for_0())} OffsetsForLeaderEpoch for partition 0",
    )
    # Partition 0 is asked again only after replica.fetch.backoff.ms each time.
    await eventually(lambda: len(asked_for_0()) >= 4, lambda: f"{len(asked_for_0())} requests")
    times = [s.at for s in asked_for_0()]
    gaps = [round((later - earlier) * 1000, 1) for earlier, later in zip(times, times[1:], strict=False)]
    assert all(gap >= BACKOFF_MS for gap in gaps), f"re-asked after {gaps} ms (backoff {BACKOFF_MS} ms)"
    assert (f.log(0).log_end_offset, f.epochs(0)) == (1, [(0, 0)])  # nothing truncated meanwhile

    # A's LeaderAndIsr for partition 0 arrives at last: partition 0 truncates and replicates.
    await a.leader_and_isr(0, a, 1, isr=[1, 2], replicas=[1, 2])
    a.produce(0, b"m1")
    await eventually(lambda: caught_up(f, 0, 2), lambda: f.describe(0))
    for p in (0, 1):
        assert f.values(p) == [b"m0", b"m1"]
        assert_identical_below_hw(a, f, p)


# -- a stale OffsetsForLeaderEpoch answer (Kafka: truncateToEpochEndOffsets, the currentLeaderEpoch check) --


async def test_epoch_answer_from_before_a_leadership_round_trip_is_ignored(net: Net, tmp_path: Path) -> None:
    a, f, b = Broker(net, 1, tmp_path), Broker(net, 2, tmp_path), Broker(net, 3, tmp_path)
    replicas = [1, 2, 3]
    # Epoch 0: A leads; m0 reaches everyone. Then B is cut off from A, and m1 reaches F only.
    await a.leader_and_isr(0, a, 0, isr=replicas, replicas=replicas)
    for follower in (f, b):
        await follower.leader_and_isr(0, a, 0, isr=replicas, replicas=replicas)
    a.produce(0, b"m0")
    await eventually(lambda: caught_up(f, 0, 1) and caught_up(b, 0, 1), lambda: b.describe(0))
    cut = net.hold(lambda s: s.source == 3 and s.target == 1, count=None)  # B cannot reach A
    a.produce(0, b"m1")
    await eventually(lambda: f.log(0).log_end_offset == 2, lambda: f.describe(0))
    assert a.log(0).high_watermark == 1  # m1 is not committed: B does not have it

    # Epoch 1 (A restated): F asks A where its epoch 0 ends. A answers "2"; the answer is slow.
    slow = net.hold(lambda s: s.source == 2 and s.api_key == EPOCH_REQUEST)
    await a.leader_and_isr(0, a, 1, isr=replicas, replicas=replicas)
    await f.leader_and_isr(0, a, 1, isr=replicas, replicas=replicas)
    await eventually(slow.arrived.is_set, lambda: "F never asked A")
    assert slow.caught[0].partitions()[0][1]["current_leader_epoch"] == 1

    # Epoch 2: A fails over to B (in the ISR: a clean election). B writes b1 at offset 1; A comes
    # back as B's follower, truncates m1 and fetches b1. F cannot reach B.
    net.hold(lambda s: s.source == 2 and s.target == 3, count=None)
    await b.leader_and_isr(0, b, 2, isr=replicas, replicas=replicas)
    assert b.produce(0, b"b1") == 1
    await f.leader_and_isr(0, b, 2, isr=replicas, replicas=replicas)
    await a.leader_and_isr(0, b, 2, isr=replicas, replicas=replicas)
    await eventually(lambda: a.values(0) == [b"m0", b"b1"], lambda: a.describe(0))

    # Epoch 3: the network heals and the preferred replica A leads again; B and F follow it. Only
    # now does A's answer from epoch 1 reach F: "epoch 0 ends at 2", true then, false now (A's
    # epoch 0 ends at 1, where B's epoch 2 starts).
    cut.release()
    await a.leader_and_isr(0, a, 3, isr=replicas, replicas=replicas)
    await b.leader_and_isr(0, a, 3, isr=replicas, replicas=replicas)
    await f.leader_and_isr(0, a, 3, isr=replicas, replicas=replicas)
    assert a.epochs(0) == [(0, 0), (2, 1), (3, 2)]
    slow.release()

    await eventually(lambda: caught_up(f, 0, 2) and caught_up(a, 0, 2), lambda: f.describe(0))
    assert_identical_below_hw(a, f, 0)
    assert f.values(0) == [b"m0", b"b1"]
    assert f.epochs(0) == a.epochs(0)[: len(f.epochs(0))]  # F's epochs: a prefix of the leader's
    # F truncated again, asking with the epoch it follows now.
    asked = [
        p["current_leader_epoch"] for s in net.requests(EPOCH_REQUEST, source=2) for _, p in s.partitions()
    ]
    assert asked[-1] == 3, asked


# -- out of range (Kafka: handleOutOfRangeError / fetchOffsetAndTruncate under partitionMapLock) --


async def follower_out_of_range(net: Net, tmp_path: Path) -> tuple[Broker, Broker, Broker, Hold]:
    """Epoch 0: A leads with B in sync; m0..m3 are on both, then A deletes the records below 3
    (DeleteRecords; a follower keeps its own log start). F is a new, empty replica: its first
    FETCH (offset 0) is out of range, and it asks A where A's log ends. A's answer, 4, is held."""
    a, f, b = Broker(net, 1, tmp_path), Broker(net, 2, tmp_path), Broker(net, 3, tmp_path)
    await a.leader_and_isr(0, a, 0, isr=[1, 3], replicas=[1, 2, 3])
    await b.leader_and_isr(0, a, 0, isr=[1, 3], replicas=[1, 2, 3])
    a.produce(0, b"m0", b"m1", b"m2", b"m3")
    await eventually(lambda: caught_up(b, 0, 4), lambda: b.describe(0))
    a.log(0).maybe_increment_log_start_offset(3)
    latest = net.hold(lambda s: s.source == 2 and s.api_key == ApiKey.LIST_OFFSETS)
    await f.leader_and_isr(0, a, 0, isr=[1, 3], replicas=[1, 2, 3])
    await eventually(latest.arrived.is_set, lambda: f"F sent {[s.api_key.name for s in net.sent]}")
    assert latest.caught[0].partitions()[0][1]["timestamp"] == LATEST_TIMESTAMP
    return a, f, b, latest


def list_offsets_sent(net: Net) -> list[int]:
    return [p["timestamp"] for s in net.requests(ApiKey.LIST_OFFSETS, source=2) for _, p in s.partitions()]


async def test_out_of_range_answer_after_becoming_leader_leaves_the_log_alone(
    net: Net, tmp_path: Path
) -> None:
    a, f, b, latest = await follower_out_of_range(net, tmp_path)
    # The controller loses A and B; F is elected (unclean: the only replica left) at epoch 1 and
    # acknowledges f0. Then A's "my log ends at 4", from before the election, arrives.
    await f.leader_and_isr(0, f, 1, isr=[2], replicas=[1, 2, 3])
    assert f.produce(0, b"f0") == 0
    latest.release()
    await settle()

    # F leads: its log, with the acknowledged f0, is not its old leader's to reset.
    assert (f.log(0).log_start_offset, f.values(0), f.epochs(0)) == (0, [b"f0"], [(1, 0)]), f.describe(0)
    assert list_offsets_sent(net) == [LATEST_TIMESTAMP]  # nor did it go on to ask A for EARLIEST


async def test_out_of_range_answer_after_leader_moved_leaves_the_log_alone(net: Net, tmp_path: Path) -> None:
    a, f, b, latest = await follower_out_of_range(net, tmp_path)
    # A fails; B (in the ISR, with the whole log from offset 0) leads epoch 1 and F follows it.
    # F's first FETCH from B is held until A's stale answer has arrived.
    await b.leader_and_isr(0, b, 1, isr=[3], replicas=[1, 2, 3])
    from_b = net.hold(lambda s: s.source == 2 and s.target == 3 and s.api_key == ApiKey.FETCH)
    await f.leader_and_isr(0, b, 1, isr=[3], replicas=[1, 2, 3])
    await eventually(from_b.arrived.is_set, lambda: "F never fetched from B")
    latest.release()
    await settle()
    # A's log start (3) is nothing to F now: its log must not have been reset to start there.
    assert (f.log(0).log_start_offset, f.log(0).log_end_offset) == (0, 0), f.describe(0)
    from_b.release()

    await eventually(lambda: caught_up(f, 0, 4), lambda: f.describe(0))
    assert_identical_below_hw(b, f, 0)
    assert f.values(0) == [b"m0", b"m1", b"m2", b"m3"]
    assert list_offsets_sent(net) == [LATEST_TIMESTAMP]


# -- a leader on a new endpoint (Kafka: AbstractFetcherManager.addFetcherForPartitions) ------------------


async def test_leader_on_a_new_port_keeps_all_its_partitions_fetched(net: Net, tmp_path: Path) -> None:
    a, f = Broker(net, 1, tmp_path), Broker(net, 2, tmp_path)
    for p in (0, 1):
        await a.leader_and_isr(p, a, 0, isr=[1, 2], replicas=[1, 2])
        await f.leader_and_isr(p, a, 0, isr=[1, 2], replicas=[1, 2])
        a.produce(p, b"m0")
    await eventually(lambda: caught_up(f, 0, 1) and caught_up(f, 1, 1), lambda: f.describe(1))
    old = f.fetchers.fetchers[1]
    assert set(old.partitions) == {(TOPIC, 0), (TOPIC, 1)}

    # A comes back on another port. The controller's LeaderAndIsr names the new endpoint for
    # partition 0; partition 1 (same leader, same epoch) gets none.
    a.listen_on(9101)
    await a.leader_and_isr(0, a, 1, isr=[1, 2], replicas=[1, 2])
    await f.leader_and_isr(0, a, 1, isr=[1, 2], replicas=[1, 2])
    new = f.fetchers.fetchers[1]
    assert new is not old and (new.leader_host, new.leader_port) == ("127.0.0.1", 9101)
    assert set(new.partitions) == {(TOPIC, 0), (TOPIC, 1)}, f"the new fetcher has {set(new.partitions)}"
    assert f.fetchers.fetching() == {(TOPIC, 0): 1, (TOPIC, 1): 1}
    await settle()
    assert old._task is None and not old.partitions  # the old fetcher stopped, and holds nothing

    # Replication proceeds for both partitions, through the new endpoint.
    for p in (0, 1):
        a.produce(p, b"m1")
    await eventually(lambda: caught_up(f, 0, 2) and caught_up(f, 1, 2), lambda: f.describe(1))
    for p in (0, 1):
        assert_identical_below_hw(a, f, p)


# -- issue 18 window 2: a log dir fails under the fetcher (KIP-112; Kafka's fetcher thread backs off) --


class Spinning(BaseException):
    """Raised into the fetcher's loop by the test once it has gone round too often without the
    loop running anything else: it ends the task instead of hanging the test."""


async def test_a_log_dir_failing_under_the_fetcher_does_not_spin_its_loop(net: Net, tmp_path: Path) -> None:
    """F follows partition 0 from A; while its FETCH is in flight a LeaderAndIsr adds partition
    1, new and empty, to the same fetcher, and F's only log dir fails (an EIO elsewhere: the dir
    is marked offline at once, and the broker's handling is queued on the loop with
    call_soon_threadsafe, as broker/server.py does). The answer's append to partition 0 gets
    KAFKA_STORAGE_ERROR; the next round's truncation of partition 1 (``truncate_to(0)``, no await
    on that path) raises from the offline log. The loop must yield, back off and drop both
    partitions, so the queued handler runs.

    Failed before the fix: the loop went round 1,000 times without an await (``Spinning``): the
    ``continue`` on KAFKA_STORAGE_ERROR never suspended, and ``_drop_offline`` waited for
    ``offline_partitions``, which only the never-running handler fills."""
    a, f = Broker(net, 1, tmp_path), Broker(net, 2, tmp_path)
    await a.leader_and_isr(0, a, 0, isr=[1, 2], replicas=[1, 2])
    await f.leader_and_isr(0, a, 0, isr=[1, 2], replicas=[1, 2])
    a.produce(0, b"m0")
    await eventually(lambda: caught_up(f, 0, 1), lambda: f.describe(0))
    await a.leader_and_isr(1, a, 0, isr=[1, 2], replicas=[1, 2])

    handled: list[Path] = []
    channel = f.rm.log_manager.failure_channel
    loop = asyncio.get_running_loop()
    channel.add_listener(lambda d, _msg: loop.call_soon_threadsafe(handled.append, d))
    fetcher = f.fetchers.fetchers[1]
    rounds = 0
    drop_offline = fetcher._drop_offline

    def counted() -> None:
        nonlocal rounds
        rounds += 1
        if rounds > 1_000:
            raise Spinning(f"{rounds} rounds")
        drop_offline()

    fetcher._drop_offline = counted  # type: ignore[method-assign]
    in_flight = net.hold(lambda s: s.api_key == ApiKey.FETCH and s.source == 2)
    a.produce(0, b"m1")
    await asyncio.wait_for(in_flight.arrived.wait(), WAIT_S)
    await f.leader_and_isr(1, a, 0, isr=[1, 2], replicas=[1, 2])  # new and empty: truncates first
    (log_dir,) = f.rm.log_manager.log_dirs
    channel.maybe_add_offline_log_dir(log_dir, "a write elsewhere in the dir failed", OSError(5, "EIO"))
    in_flight.release()
    await eventually(lambda: bool(handled) or fetcher._task.done(), lambda: f"{rounds} rounds")
    assert not fetcher._task.done(), f"the fetcher's loop ended: {fetcher._task.exception()!r}"
    assert handled == [log_dir] and rounds < 100, f"{rounds} fetcher rounds before the handler ran"
    await eventually(lambda: not fetcher.partitions, lambda: f"still fetching {sorted(fetcher.partitions)}")
