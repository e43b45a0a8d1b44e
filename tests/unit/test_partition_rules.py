"""The leader-side rules of seed 001 / SPEC 5.4, stepped by hand with explicit times and offsets."""

from broker.replica.partition import IsrChangeKind, Partition, PartitionState, follower_high_watermark

LAG = 30_000


def leader_of(replicas=(1, 2, 3), isr=(1, 2, 3), epoch=0, leo=0, now=0) -> Partition:
    p = Partition("t", 0, local_broker_id=1)
    p.make_leader(PartitionState(1, 1, epoch, tuple(isr), 0, tuple(replicas)), leo, now)
    return p


def test_becoming_leader_records_epoch_start_and_resets_followers():
    p = leader_of(leo=7, now=100)
    assert p.is_leader and p.leader_epoch == 0 and p.leader_epoch_start_offset == 7
    assert {r.broker_id for r in p.remote_replicas.values()} == {2, 3}
    assert all(r.log_end_offset == -1 and r.last_caught_up_time_ms == 100 for r in p.remote_replicas.values())


def test_hw_waits_for_every_isr_follower_seed_001():
    # Seed 001: the leader appends one message (LEO 1); HW stays 0 until followers fetch offset 1.
    p = leader_of()
    assert p.high_watermark_candidate(1, 0, now_ms=10, replica_lag_time_max_ms=LAG) == 0
    p.update_follower_fetch(2, fetch_offset=1, leader_log_end_offset=1, now_ms=20)
    assert p.high_watermark_candidate(1, 0, 20, LAG) == 0  # broker 3 has not fetched yet
    p.update_follower_fetch(3, fetch_offset=1, leader_log_end_offset=1, now_ms=30)
    assert p.high_watermark_candidate(1, 0, 30, LAG) == 1


def test_hw_never_moves_backward():
    p = leader_of()
    p.update_follower_fetch(2, 3, 5, 10)
    p.update_follower_fetch(3, 3, 5, 10)
    assert (
        p.high_watermark_candidate(5, current_high_watermark=4, now_ms=10, replica_lag_time_max_ms=LAG) == 4
    )


def test_caught_up_non_isr_replica_counts_and_lagging_one_does_not():
    p = leader_of(isr=(1,))
    p.update_follower_fetch(2, 5, 5, now_ms=1_000)  # caught up now
    p.update_follower_fetch(3, 1, 5, now_ms=1_000)  # never caught up (last_caught_up 0)
    assert p.high_watermark_candidate(5, 0, now_ms=1_000 + LAG + 1, replica_lag_time_max_ms=LAG) == 5
    assert p.high_watermark_candidate(5, 0, now_ms=LAG + 10, replica_lag_time_max_ms=LAG) == 5


def test_time_based_out_of_sync_detection():
    p = leader_of(now=0)
    p.update_follower_fetch(2, 10, 10, now_ms=1_000)
    p.update_follower_fetch(3, 4, 10, now_ms=1_000)  # behind since the reset at 0
    assert p.out_of_sync_replicas(
        now_ms=LAG + 500, replica_lag_time_max_ms=LAG, leader_log_end_offset=10
    ) == {3}
    assert (
        p.out_of_sync_replicas(now_ms=LAG - 1, replica_lag_time_max_ms=LAG, leader_log_end_offset=10) == set()
    )


def test_fetch_reaching_previous_leader_leo_counts_as_caught_up_then():
    p = leader_of(now=0)
    p.update_follower_fetch(2, 0, 10, now_ms=100)  # leader LEO was 10 at t=100
    p.update_follower_fetch(2, 10, 20, now_ms=200)  # reached 10: caught up as of t=100
    assert p.remote_replicas[2].last_caught_up_time_ms == 100


def test_can_join_isr_needs_hw_and_epoch_start():
    p = leader_of(isr=(1, 2), leo=50)
    p.update_follower_fetch(3, 40, 60, 10)
    assert not p.can_join_isr(3, high_watermark=30)  # below the epoch start offset 50
    p.update_follower_fetch(3, 55, 60, 20)
    assert p.can_join_isr(3, high_watermark=55)
    assert not p.can_join_isr(3, high_watermark=56)


def test_leader_and_isr_applies_only_newer_epochs():
    p = leader_of(epoch=3)
    assert not p.is_newer(PartitionState(1, 2, 3, (2,), 1, (1, 2, 3)))
    assert p.is_newer(PartitionState(1, 2, 4, (2,), 1, (1, 2, 3)))


def test_make_follower_reports_leader_change():
    p = leader_of()
    assert p.make_follower(PartitionState(1, 2, 1, (1, 2), 1, (1, 2, 3)))
    assert not p.is_leader and p.remote_replicas == {}
    assert not p.make_follower(PartitionState(1, 2, 2, (1, 2), 2, (1, 2, 3)))


def test_follower_hw_is_min_of_leo_and_leader_hw():
    assert follower_high_watermark(5, 3) == 3
    assert follower_high_watermark(2, 3) == 2


# -- ISR shrink and expand decisions (SPEC 5.4), stepped with a fake clock -------------------------


def test_shrink_drops_only_followers_behind_for_longer_than_the_lag_time():
    p = leader_of(replicas=(3, 1, 2), isr=(3, 1, 2), now=0)  # broker 1 leads; assignment order 3,1,2
    p.update_follower_fetch(2, 10, 10, now_ms=1_000)  # caught up at t=1000
    p.update_follower_fetch(3, 4, 10, now_ms=1_000)  # behind since the reset at t=0
    assert p.shrink_isr_decision(now_ms=LAG, replica_lag_time_max_ms=LAG, leader_log_end_offset=10) is None
    change = p.shrink_isr_decision(now_ms=LAG + 1, replica_lag_time_max_ms=LAG, leader_log_end_offset=10)
    assert change.kind is IsrChangeKind.SHRINK
    assert change.old_isr == (3, 1, 2) and change.new_isr == (1, 2) and change.replicas == (3,)
    assert (change.leader, change.leader_epoch, change.zk_version) == (1, 0, 0)
    assert p.isr == {1, 2, 3}  # a decision is not a change: only a successful write applies it


def test_a_follower_at_the_leader_leo_is_never_out_of_sync():
    # Kafka's isFollowerOutOfSync: an idle partition keeps a silent follower (nothing to lag behind)
    p = leader_of(now=0)
    p.update_follower_fetch(2, 10, 10, now_ms=0)
    p.update_follower_fetch(3, 10, 10, now_ms=0)
    assert (
        p.shrink_isr_decision(now_ms=10 * LAG, replica_lag_time_max_ms=LAG, leader_log_end_offset=10) is None
    )
    change = p.shrink_isr_decision(now_ms=10 * LAG, replica_lag_time_max_ms=LAG, leader_log_end_offset=11)
    assert change.new_isr == (1,) and change.replicas == (2, 3)  # the leader itself is never dropped


def test_only_a_leader_without_a_write_in_flight_decides():
    p = leader_of(now=0)
    p.update_follower_fetch(2, 1, 10, now_ms=0)
    change = p.shrink_isr_decision(LAG + 1, LAG, 10)
    p.begin_isr_update(change)
    assert p.isr_update_in_flight
    assert p.shrink_isr_decision(LAG + 1, LAG, 10) is None
    assert p.complete_isr_update(change, written_zk_version=None) is False
    # Refused: no longer in flight, but pending until a LeaderAndIsr (Kafka 2.7+), so no new change.
    assert not p.isr_update_in_flight and p.pending_isr_rejected and not p.isr_update_unsettled
    assert p.shrink_isr_decision(LAG + 1, LAG, 10) is None
    p.make_leader(PartitionState(1, 1, 1, (1, 2, 3), 1, (1, 2, 3)), 10, now_ms=0)
    assert p.pending_isr_change is None and p.shrink_isr_decision(LAG + 1, LAG, 10) is not None
    p.make_follower(PartitionState(1, 2, 2, (2, 3), 2, (1, 2, 3)))
    assert p.shrink_isr_decision(LAG + 1, LAG, 10) is None
    assert p.expand_isr_decision(2, 0) is None


def test_successful_write_applies_isr_and_zk_version():
    p = leader_of(now=0)
    p.update_follower_fetch(2, 10, 10, now_ms=LAG)
    change = p.shrink_isr_decision(LAG + 1, LAG, 10)
    p.begin_isr_update(change)
    assert p.complete_isr_update(change, written_zk_version=1)
    assert p.isr == {1, 2} and p.zk_version == 1 and not p.isr_update_in_flight


def test_failed_conditional_write_keeps_the_isr_so_a_deposed_leader_cannot_shrink_to_itself():
    # Broker 1 was leader; the controller moved leadership away (state znode at a new zkVersion)
    # but broker 1 never heard. Its followers stopped fetching from it, so it wants ISR = {1}.
    p = leader_of(now=0, leo=0)
    p.update_follower_fetch(2, 5, 5, now_ms=0)
    p.update_follower_fetch(3, 5, 5, now_ms=0)
    change = p.shrink_isr_decision(now_ms=LAG + 1, replica_lag_time_max_ms=LAG, leader_log_end_offset=8)
    assert change.new_isr == (1,)
    p.begin_isr_update(change)
    assert not p.complete_isr_update(change, written_zk_version=None)  # BADVERSION
    assert p.isr == {1, 2, 3} and p.zk_version == 0
    # ... so its HW stays where the followers left it: nothing new is committed on its own say-so
    assert p.high_watermark_candidate(8, 5, now_ms=LAG + 1, replica_lag_time_max_ms=LAG) == 5


def test_a_write_result_is_dropped_when_a_newer_leader_and_isr_arrived_meanwhile():
    p = leader_of(now=0)
    p.update_follower_fetch(2, 1, 10, now_ms=0)
    change = p.shrink_isr_decision(LAG + 1, LAG, 10)
    p.begin_isr_update(change)
    p.make_leader(PartitionState(2, 1, 1, (1, 2, 3), 5, (1, 2, 3)), 10, LAG + 2)  # controller: epoch 1
    assert not p.complete_isr_update(change, written_zk_version=1)
    assert p.isr == {1, 2, 3} and p.zk_version == 5 and p.leader_epoch == 1


def test_expand_needs_the_follower_at_hw_and_epoch_start():
    p = leader_of(replicas=(1, 2, 3), isr=(1, 2), leo=50)
    p.update_follower_fetch(3, 52, 60, now_ms=10)
    assert p.expand_isr_decision(3, high_watermark=55) is None  # below the HW
    p.update_follower_fetch(3, 55, 60, now_ms=20)
    change = p.expand_isr_decision(3, high_watermark=55)
    assert change.kind is IsrChangeKind.EXPAND and change.new_isr == (1, 2, 3) and change.replicas == (3,)
    assert p.expand_isr_decision(2, high_watermark=0) is None  # already in the ISR
    assert p.expand_isr_decision(7, high_watermark=0) is None  # not a replica
    p.begin_isr_update(change)
    assert p.expand_isr_decision(3, high_watermark=55) is None  # one write at a time
    assert p.complete_isr_update(change, written_zk_version=3)
    assert p.isr == {1, 2, 3} and p.zk_version == 3


def test_shrunk_isr_lets_the_hw_advance_past_the_dropped_follower():
    # Seed 001: the HW is re-evaluated on ISR shrink; the dropped follower no longer holds it back.
    p = leader_of(now=0)
    p.update_follower_fetch(2, 10, 10, now_ms=LAG)
    p.update_follower_fetch(3, 4, 10, now_ms=LAG)
    assert p.high_watermark_candidate(10, 4, LAG + 1, LAG) == 4
    change = p.shrink_isr_decision(LAG + 1, LAG, 10)
    p.begin_isr_update(change)
    p.complete_isr_update(change, 1)
    assert p.high_watermark_candidate(10, 4, LAG + 1, LAG) == 10


def test_a_leader_and_isr_with_kip_455_fields_marks_the_partition_reassigning() -> None:
    p = Partition("t", 0, local_broker_id=1)
    moving = {
        "controller_epoch": 1,
        "leader": 1,
        "leader_epoch": 3,
        "isr": [1, 2],
        "zk_version": 2,
        "replicas": [1, 2, 3],
        "adding_replicas": [3],
        "removing_replicas": [],
    }
    p.make_leader(PartitionState.from_request(moving), 0, 0)
    assert p.reassigning
    done = {**moving, "leader_epoch": 4, "adding_replicas": [], "removing_replicas": []}
    p.make_leader(PartitionState.from_request(done), 0, 0)
    assert not p.reassigning
    older = {k: v for k, v in moving.items() if not k.endswith("ing_replicas")}  # an older controller
    p.make_leader(PartitionState.from_request({**older, "leader_epoch": 5}), 0, 0)
    assert not p.reassigning
