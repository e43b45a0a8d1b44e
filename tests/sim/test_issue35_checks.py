"""The rules of issue 35's new checks, each on the cases that must not fire as well as those that
must (the planted bugs that make each fire in a sweep are in tests/sim/test_invariants.py and
tests/sim/test_group_invariants.py), and the aimed faults that feed them, each seen to act in a
schedule.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

from broker.coordinator.group_metadata import GroupMetadata, GroupState, MemberMetadata
from client.types import TopicPartition
from sim.commit_fencing import fencing_problem, parse_tag
from sim.fault_kinds import parse_kinds
from sim.power_loss import PowerLossExemption
from sim.state_writes import CONTROLLER_EPOCH_FENCE, LEADER_EPOCH_BUMP, StateWrites
from sim.sweep import ScheduleConfig, run_schedule
from sim.zk_tree import Znode

STATE = "/brokers/topics/t/partitions/0/state"


def _state(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int) -> bytes:
    return json.dumps(
        {"controller_epoch": controller_epoch, "leader": leader, "leader_epoch": leader_epoch, "isr": isr}
    ).encode()


def _state_writes(controller_epoch: int) -> tuple[StateWrites, list[tuple[str, str]]]:
    failures: list[tuple[str, str]] = []
    nodes = {"/controller_epoch": Znode(data=str(controller_epoch).encode(), czxid=1, ctime=0)}
    zookeeper = SimpleNamespace(tree=SimpleNamespace(nodes=nodes), write_observers=[])
    checker = StateWrites(
        zookeeper,  # type: ignore[arg-type]
        lambda name, detail: failures.append((name, detail)),
        frozenset({LEADER_EPOCH_BUMP, CONTROLLER_EPOCH_FENCE}),
    )
    checker.install()
    return checker, failures


def test_a_leader_change_must_raise_the_leader_epoch() -> None:
    checker, failures = _state_writes(3)
    checker._observe(1, STATE, _state(1, 4, [1, 2], 3), _state(2, 5, [2], 3))
    assert not failures
    checker._observe(1, STATE, _state(2, 5, [2], 3), _state(-1, 5, [2], 3))
    assert [name for name, _ in failures] == [LEADER_EPOCH_BUMP]
    assert "t-0's leader changed from 2 to -1 under leader epoch 5" in failures[0][1]


def test_an_election_must_carry_the_current_controller_epoch_a_leaders_isr_change_need_not() -> None:
    checker, failures = _state_writes(3)
    # a leader's own ISR shrink under the controller epoch of the LeaderAndIsr it follows: Kafka's
    checker._observe(1, STATE, _state(1, 4, [1, 2], 2), _state(1, 4, [1], 2))
    # a partition created by the current controller
    checker._observe(1, "/brokers/topics/u/partitions/0/state", None, _state(1, 0, [1, 2], 3))
    assert not failures
    checker._observe(1, STATE, _state(1, 4, [1], 2), _state(2, 5, [2], 2))  # a deposed controller's
    assert [name for name, _ in failures] == [CONTROLLER_EPOCH_FENCE]
    assert "with controller epoch 2 while /controller_epoch is 3" in failures[0][1]
    assert checker.elections == 2


def test_other_znodes_are_not_state_writes() -> None:
    checker, failures = _state_writes(3)
    checker._observe(1, "/brokers/topics/t", b"{}", b"{}")
    checker._observe(1, "/controller", None, b'{"brokerid": 1}')
    assert not failures and checker.elections == 0


def test_a_commit_is_stored_only_from_a_member_of_the_current_generation() -> None:
    group = GroupMetadata("g")
    assert fencing_problem(group, "", -1) is None  # a standalone consumer on an Empty group
    group.members["m1"] = MemberMetadata("m1", None, "c", "h", 3000, 1000, "consumer", [("range", b"")])
    group.generation_id = 4
    group.state = GroupState.STABLE
    assert fencing_problem(group, "m1", 4) is None
    assert "generation 3 is not the group's 4" in (fencing_problem(group, "m1", 3) or "")
    assert "'m0' is not in the group" in (fencing_problem(group, "m0", 4) or "")
    assert "standalone commit" in (fencing_problem(group, "", -1) or "")
    group.state = GroupState.PREPARING_REBALANCE
    assert fencing_problem(group, "m1", 4) is None  # Kafka takes commits while members rejoin
    group.state = GroupState.COMPLETING_REBALANCE
    assert "completing the rebalance" in (fencing_problem(group, "m1", 4) or "")
    assert parse_tag("client-5-m0-1-ab@7") == ("client-5-m0-1-ab", 7)
    assert parse_tag("") is None and parse_tag("no tag") is None and parse_tag("x@y") is None


def test_only_a_power_loss_exempts_a_replica_below_the_hw_and_only_until_it_caught_up() -> None:
    process = SimpleNamespace(incarnations=2, after_power_loss=set())
    exemption = PowerLossExemption(SimpleNamespace(brokers={1: process}))  # type: ignore[arg-type]
    tp = TopicPartition("t", 0)
    behind, level = SimpleNamespace(log_end_offset=3), SimpleNamespace(log_end_offset=10)
    assert not exemption.exempt(1, tp, behind, 10)  # a crash loses nothing written: no exemption
    process.after_power_loss.add(2)
    assert exemption.exempt(1, tp, behind, 10)
    assert not exemption.exempt(1, tp, level, 10)  # caught up once
    assert not exemption.exempt(1, tp, behind, 12)  # and from then on held to the HW again
    process.incarnations = 3
    assert not exemption.exempt(1, tp, behind, 12)  # a later incarnation after a plain crash


def test_the_zombie_controller_fault_moves_the_controller_right_after_one_of_its_state_writes() -> None:
    config = replace(ScheduleConfig(brokers=3), faults=parse_kinds("crash,zombie-controller"), fault_rate=0.3)
    history = ""
    for seed in range(8):
        result = run_schedule(seed, config)
        assert result.ok, result.report()
        history = "\n".join(result.history)
        if "/controller deleted" in history:
            break
    fired = re.search(
        r"zombie controller: broker (\d)'s state write \S+ landed; /controller deleted", history
    )
    assert fired is not None, history


def test_the_aimed_group_faults_move_the_coordinator_and_stall_members() -> None:
    result = run_schedule(0, ScheduleConfig())
    assert result.ok, result.report()
    assert result.coordinator_faults >= 1 and result.member_stalls >= 1, result.report()
    assert result.commits_stored > 0 and result.records_given > 0, result.report()
