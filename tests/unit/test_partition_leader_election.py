"""The partition leader election rules of SPEC 4 (Kafka's PartitionLeaderElectionAlgorithms and
the controller's removeReplicasFromIsr), one test per row of the table plus its edges.

Expectations come from the rules as Kafka states them, not from running the code:

* offline: ``assignment.find(r => live(r) && isr(r))``, else with unclean election
  ``assignment.find(live)``; the new ISR is the live ISR members, or ``[leader]`` when unclean;
* reassignment: ``targets.find(r => live(r) && isr(r))``, ISR unchanged;
* preferred: ``assignment.headOption.filter(r => live(r) && isr(r))`` (no fallback), ISR unchanged;
* controlled shutdown: ``assignment.find(r => live(r) && isr(r) && !shuttingDown(r))``, new ISR the
  ISR minus the shutting-down brokers;
* every new leader gets leader_epoch + 1 and the result keeps the zkVersion it was computed from
  (the write is conditional on it).
"""

from __future__ import annotations

import pytest

from controller.partition_leader_election import (
    controlled_shutdown_partition_leader,
    elect_for_controlled_shutdown,
    elect_for_reassignment,
    elect_offline,
    elect_preferred,
    offline_partition_leader,
    preferred_replica_partition_leader,
    reassign_partition_leader,
    remove_replica_from_isr,
)
from zk.data import NO_LEADER, LeaderAndIsr

EPOCH = 7
ZK_VERSION = 11


def state(leader: int, isr: list[int]) -> LeaderAndIsr:
    return LeaderAndIsr(leader, EPOCH, tuple(isr), ZK_VERSION)


def assert_new_leadership(got: LeaderAndIsr | None, leader: int, isr: list[int]) -> None:
    assert got is not None
    assert got.leader == leader
    assert list(got.isr) == isr
    assert got.leader_epoch == EPOCH + 1
    assert got.zk_version == ZK_VERSION


# -- the algorithms --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "unclean", "expected"),
    [
        # first live ISR member in *assignment* order (not ISR order, not the first live replica)
        ([1, 2, 3], [3, 2], {1, 2, 3}, False, 2),
        ([3, 2, 1], [1, 2, 3], {1, 2, 3}, False, 3),
        ([1, 2, 3], [1, 2, 3], {2, 3}, False, 2),
        ([1, 2, 3], [1, 2, 3], {3}, False, 3),
        # a clean choice wins even when unclean election is allowed
        ([1, 2, 3], [3], {1, 2, 3}, True, 3),
        # no live ISR member: unclean off -> none; on -> first live replica in assignment order
        ([1, 2, 3], [1], {2, 3}, False, None),
        ([1, 2, 3], [1], {2, 3}, True, 2),
        ([3, 2, 1], [1], {2, 3}, True, 3),
        # empty ISR
        ([1, 2, 3], [], {1, 2, 3}, False, None),
        ([1, 2, 3], [], {2, 3}, True, 2),
        # no live replica at all
        ([1, 2, 3], [1, 2, 3], set(), False, None),
        ([1, 2, 3], [1, 2, 3], set(), True, None),
        # a live ISR member that is not assigned never leads; neither does a live unassigned broker
        ([1, 2, 3], [4, 2], {2, 4}, False, 2),
        ([1, 2, 3], [4], {4}, False, None),
        ([1, 2, 3], [4], {4}, True, None),
        # empty assignment
        ([], [1], {1}, True, None),
    ],
)
def test_offline_partition_leader(
    assignment: list[int], isr: list[int], live: set[int], unclean: bool, expected: int | None
) -> None:
    assert offline_partition_leader(assignment, isr, live, unclean) == expected


@pytest.mark.parametrize(
    ("targets", "isr", "live", "expected"),
    [
        ([4, 5, 6], [1, 2, 3, 4, 5, 6], {1, 2, 3, 4, 5, 6}, 4),
        ([6, 5, 4], [4, 5, 6], {4, 5, 6}, 6),  # target order, not ISR order
        ([4, 5, 6], [1, 2, 3, 4, 5, 6], {5, 6}, 5),  # first target dead
        ([4, 5, 6], [1, 2, 3, 5, 6], {4, 5, 6}, 5),  # first target not yet in the ISR
        ([4, 5, 6], [1, 2, 3], {1, 2, 3, 4, 5, 6}, None),  # no target caught up
        ([4, 5, 6], [4, 5, 6], {1, 2, 3}, None),  # no target live
        ([4, 5, 6], [1, 2, 3, 4], {1, 2, 3}, None),  # live old replicas do not count
    ],
)
def test_reassign_partition_leader(
    targets: list[int], isr: list[int], live: set[int], expected: int | None
) -> None:
    assert reassign_partition_leader(targets, isr, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "expected"),
    [
        ([2, 1, 3], [1, 2, 3], {1, 2, 3}, 2),
        ([2, 1, 3], [1, 3], {1, 2, 3}, None),  # head not in ISR: no fallback to the next replica
        ([2, 1, 3], [1, 2, 3], {1, 3}, None),  # head dead: no fallback
        ([], [1], {1}, None),
    ],
)
def test_preferred_replica_partition_leader(
    assignment: list[int], isr: list[int], live: set[int], expected: int | None
) -> None:
    assert preferred_replica_partition_leader(assignment, isr, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "live_or_shutting_down", "shutting_down", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}, 2),
        ([1, 2, 3], [3, 2, 1], {1, 2, 3}, {1}, 2),  # assignment order
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}, 3),  # every shutting-down broker excluded
        ([1, 2, 3], [1, 2, 3], {1, 3}, {1}, 3),  # a dead ISR member is skipped
        ([1, 2, 3], [1, 3], {1, 2, 3}, {1}, 3),  # a live non-ISR replica is skipped
        ([1, 2, 3], [1], {1, 2, 3}, {1}, None),  # the only ISR member is shutting down
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2, 3}, None),
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {2}, 1),  # a follower shutting down: the leader stays eligible
    ],
)
def test_controlled_shutdown_partition_leader(
    assignment: list[int],
    isr: list[int],
    live_or_shutting_down: set[int],
    shutting_down: set[int],
    expected: int | None,
) -> None:
    assert (
        controlled_shutdown_partition_leader(assignment, isr, live_or_shutting_down, shutting_down)
        == expected
    )


# -- row 1: offline partition ------------------------------------------------------------------------


def test_offline_election_picks_first_live_isr_member_and_keeps_live_isr() -> None:
    outcome = elect_offline(state(1, [1, 3, 2]), [1, 2, 3], live_replicas={2, 3}, unclean_enabled=False)
    assert outcome.elected and not outcome.unclean
    assert_new_leadership(outcome.leader_and_isr, 2, [3, 2])


def test_offline_election_new_isr_drops_every_dead_isr_member() -> None:
    outcome = elect_offline(state(1, [1, 2, 3, 4]), [1, 2, 3, 4], live_replicas={3}, unclean_enabled=False)
    assert_new_leadership(outcome.leader_and_isr, 3, [3])


def test_offline_election_ignores_live_non_isr_replica_ahead_in_assignment() -> None:
    outcome = elect_offline(state(3, [3, 2]), [1, 2, 3], live_replicas={1, 2}, unclean_enabled=False)
    assert_new_leadership(outcome.leader_and_isr, 2, [2])
    assert not outcome.unclean


def test_offline_election_with_unclean_allowed_prefers_a_clean_leader() -> None:
    outcome = elect_offline(state(1, [1, 3]), [1, 2, 3], live_replicas={2, 3}, unclean_enabled=True)
    assert not outcome.unclean
    assert_new_leadership(outcome.leader_and_isr, 3, [3])


# -- row 2: offline, unclean allowed --------------------------------------------------------------------


def test_unclean_election_picks_first_live_replica_and_isr_is_just_the_leader() -> None:
    outcome = elect_offline(state(1, [1]), [1, 2, 3], live_replicas={2, 3}, unclean_enabled=True)
    assert outcome.elected
    assert outcome.unclean
    assert_new_leadership(outcome.leader_and_isr, 2, [2])


def test_unclean_election_with_empty_isr() -> None:
    outcome = elect_offline(state(NO_LEADER, []), [3, 1, 2], live_replicas={1, 2}, unclean_enabled=True)
    assert outcome.unclean
    assert_new_leadership(outcome.leader_and_isr, 1, [1])


def test_unclean_election_with_nobody_live_elects_nobody() -> None:
    outcome = elect_offline(state(NO_LEADER, [1]), [1, 2, 3], live_replicas=set(), unclean_enabled=True)
    assert not outcome.elected
    assert outcome.leader_and_isr is None
    assert not outcome.unclean


# -- row 3: no live ISR member, unclean off -------------------------------------------------------------


def test_no_live_isr_member_without_unclean_takes_the_partition_offline_isr_unchanged() -> None:
    outcome = elect_offline(state(1, [1, 2]), [1, 2, 3], live_replicas={3}, unclean_enabled=False)
    assert not outcome.elected
    assert not outcome.unclean
    # leader -1, ISR unchanged (so only a former ISR member may lead again), a leader change
    assert_new_leadership(outcome.leader_and_isr, NO_LEADER, [1, 2])


def test_no_live_isr_member_with_empty_isr_and_unclean_off() -> None:
    outcome = elect_offline(state(1, []), [1, 2], live_replicas={2}, unclean_enabled=False)
    assert not outcome.elected
    assert_new_leadership(outcome.leader_and_isr, NO_LEADER, [])


def test_already_leaderless_partition_with_no_live_isr_member_is_left_alone() -> None:
    outcome = elect_offline(state(NO_LEADER, [1]), [1, 2], live_replicas={2}, unclean_enabled=False)
    assert not outcome.elected
    assert outcome.leader_and_isr is None  # nothing to write: no epoch bump for nothing


def test_leaderless_partition_comes_back_when_an_isr_member_returns() -> None:
    outcome = elect_offline(state(NO_LEADER, [1, 2]), [3, 2, 1], live_replicas={1, 3}, unclean_enabled=False)
    assert_new_leadership(outcome.leader_and_isr, 1, [1])


# -- row 4: reassignment --------------------------------------------------------------------------------


def test_reassignment_elects_first_live_target_in_isr_and_keeps_isr() -> None:
    outcome = elect_for_reassignment(
        state(1, [1, 2, 3, 4, 5, 6]), [4, 5, 6], live_replicas={1, 2, 3, 4, 5, 6}
    )
    assert outcome.elected
    assert_new_leadership(outcome.leader_and_isr, 4, [1, 2, 3, 4, 5, 6])


def test_reassignment_skips_targets_not_caught_up() -> None:
    outcome = elect_for_reassignment(state(1, [1, 2, 3, 6]), [4, 5, 6], live_replicas={1, 2, 3, 4, 5, 6})
    assert_new_leadership(outcome.leader_and_isr, 6, [1, 2, 3, 6])


def test_reassignment_without_an_eligible_target_writes_nothing() -> None:
    outcome = elect_for_reassignment(state(1, [1, 2, 3, 4]), [4, 5, 6], live_replicas={1, 2, 3, 5, 6})
    assert not outcome.elected
    assert outcome.leader_and_isr is None


# -- row 5: preferred replica ---------------------------------------------------------------------------


def test_preferred_election_moves_leadership_to_the_head_of_the_assignment() -> None:
    outcome = elect_preferred(state(1, [1, 2, 3]), [2, 1, 3], live_replicas={1, 2, 3})
    assert outcome.elected
    assert_new_leadership(outcome.leader_and_isr, 2, [1, 2, 3])


def test_preferred_election_does_not_fall_back_when_head_is_out_of_isr() -> None:
    outcome = elect_preferred(state(1, [1, 3]), [2, 3, 1], live_replicas={1, 2, 3})
    assert outcome.leader_and_isr is None


def test_preferred_election_does_not_fall_back_when_head_is_dead() -> None:
    outcome = elect_preferred(state(1, [1, 2, 3]), [2, 3, 1], live_replicas={1, 3})
    assert outcome.leader_and_isr is None


def test_preferred_election_when_preferred_already_leads_writes_nothing() -> None:
    outcome = elect_preferred(state(2, [1, 2, 3]), [2, 1, 3], live_replicas={1, 2, 3})
    assert outcome.leader_and_isr is None


def test_preferred_election_of_a_leaderless_partition() -> None:
    outcome = elect_preferred(state(NO_LEADER, [2]), [2, 1], live_replicas={1, 2})
    assert_new_leadership(outcome.leader_and_isr, 2, [2])


# -- row 6: controlled shutdown ---------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_drops_shutting_down_broker_from_isr() -> None:
    outcome = elect_for_controlled_shutdown(
        state(1, [1, 2, 3]), [1, 2, 3], live_or_shutting_down_replicas={1, 2, 3}, shutting_down={1}
    )
    assert outcome.elected
    assert_new_leadership(outcome.leader_and_isr, 2, [2, 3])


def test_controlled_shutdown_excludes_every_shutting_down_broker() -> None:
    outcome = elect_for_controlled_shutdown(
        state(1, [3, 2, 1]), [1, 2, 3], live_or_shutting_down_replicas={1, 2, 3}, shutting_down={1, 2}
    )
    assert_new_leadership(outcome.leader_and_isr, 3, [3])


def test_controlled_shutdown_new_isr_is_isr_minus_shutting_down_only() -> None:
    # broker 2 is dead but only the shutting-down broker is taken out of the ISR by this rule
    outcome = elect_for_controlled_shutdown(
        state(1, [1, 2, 3]), [1, 2, 3], live_or_shutting_down_replicas={1, 3}, shutting_down={1}
    )
    assert_new_leadership(outcome.leader_and_isr, 3, [2, 3])


def test_controlled_shutdown_of_the_last_isr_member_elects_nobody() -> None:
    outcome = elect_for_controlled_shutdown(
        state(1, [1]), [1, 2, 3], live_or_shutting_down_replicas={1, 2, 3}, shutting_down={1}
    )
    assert not outcome.elected
    assert outcome.leader_and_isr is None


def test_controlled_shutdown_ignores_live_isr_member_outside_the_assignment() -> None:
    outcome = elect_for_controlled_shutdown(
        state(1, [1, 4]), [1, 2, 3], live_or_shutting_down_replicas={1, 2, 3, 4}, shutting_down={1}
    )
    assert outcome.leader_and_isr is None


# -- the ISR-removal rule ----------------------------------------------------------------------------------


def test_remove_follower_from_isr_keeps_leader_and_bumps_epoch() -> None:
    got = remove_replica_from_isr(state(1, [3, 1, 2]), 3)
    assert_new_leadership(got, 1, [1, 2])


def test_remove_replica_not_in_isr_changes_nothing() -> None:
    assert remove_replica_from_isr(state(1, [1, 2]), 3) is None


def test_remove_last_isr_member_changes_nothing() -> None:
    assert remove_replica_from_isr(state(2, [2]), 2) is None


def test_isr_of_a_leaderless_partition_is_never_shrunk() -> None:
    assert remove_replica_from_isr(state(NO_LEADER, [1, 2]), 2) is None


def test_removing_the_leader_is_left_to_the_elections() -> None:
    assert remove_replica_from_isr(state(1, [1, 2]), 1) is None


def test_elections_do_not_mutate_their_input() -> None:
    current = state(1, [1, 2, 3])
    elect_offline(current, [1, 2, 3], {2, 3}, False)
    elect_for_controlled_shutdown(current, [1, 2, 3], {1, 2, 3}, {1})
    remove_replica_from_isr(current, 2)
    assert current == state(1, [1, 2, 3])
