"""``floodmark reassign`` beside reassignments already running, as Kafka 3.7's
ReassignPartitionsCommand handles them: ``--execute`` refuses without ``--additional``
(executeAssignment), ``--execute --additional --throttle`` throttles the running moves with the
plan's (calculateProposedMoveMap over calculateCurrentMoveMap, calculateLeaderThrottles,
calculateFollowerThrottles, calculateReassigningBrokers), ``--verify`` clears the throttles only
when no reassignment runs anywhere in the cluster (verifyAssignment, clearAllThrottles), and
``--list`` (curReassignmentsToString). Through CliRunner against tests/unit/fake_cluster.py.
"""

from __future__ import annotations

from client.protocol.api import ApiKey
from client.types import PartitionReassignment
from tests.unit.fake_cluster import FakeCluster
from tests.unit.test_cli_reassign import invoke, plan, write
from tests.unit.test_cli_reassign_throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ROLLBACK_HEAD,
    ROLLBACK_TAIL,
    fake,
    ok,
    rates,
)

__all__ = ["fake"]  # the fixture, imported for pytest

CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment."
)
WARNING_37 = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed."
)


def writes(fake: FakeCluster) -> list[ApiKey]:
    """The requests that change something (configs or reassignments)."""
    changing = (
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    )
    return [r.api_key for r in fake.requests if r.api_key in changing]


def complete(fake: FakeCluster, topic: str, partition: int) -> None:
    """One reassignment done (the others still running): its partition has its target."""
    fake.topics[topic][partition].replicas = fake.reassignments.pop((topic, partition))


def snapshot(fake: FakeCluster) -> tuple[dict, dict]:
    return (
        {t: dict(c) for t, c in fake.topic_configs.items()},
        {b: dict(c) for b, c in fake.broker_configs.items()},
    )


def test_the_move_map_and_its_throttles_are_kafkas() -> None:
    """Kafka 3.7's ReassignPartitionsUnitTest.testMoveMap, value for value: running moves keep
    their sources; a plan for a moving partition starts from the running move's sources."""
    from cli.reassign_throttle import (
        PartitionMove,
        follower_throttles,
        leader_throttles,
        proposed_move_map,
        reassigning_brokers,
    )

    running = {
        ("foo", 0): PartitionReassignment([1, 2, 3, 4], [4], [3]),
        ("foo", 1): PartitionReassignment([4, 5, 6, 7, 8], [7, 8], [4, 5]),
        ("foo", 2): PartitionReassignment([1, 2, 3, 4], [3, 4], [1, 2]),
        ("foo", 3): PartitionReassignment([1, 2, 3, 4], [3, 4], [1, 2]),
        ("foo", 4): PartitionReassignment([1, 2, 3, 4], [3, 4], [1, 2]),
        ("foo", 5): PartitionReassignment([1, 2, 3, 4], [3, 4], [1, 2]),
    }
    proposed = {
        ("foo", 0): [1, 2, 5],
        ("foo", 2): [3, 4],
        ("foo", 3): [5, 6],
        ("foo", 4): [3],
        ("foo", 5): [3, 4, 5, 6],
        ("bar", 0): [1, 2, 3],
    }
    current = {
        **{("foo", p): [1, 2, 3, 4] for p in (0, 2, 3, 4, 5)},
        ("foo", 1): [4, 5, 6, 7, 8],
        ("bar", 0): [2, 3, 4],
        ("baz", 0): [1, 2, 3],
    }
    moves = proposed_move_map(running, proposed, current)

    def move(sources: set[int], destinations: set[int]) -> PartitionMove:
        return PartitionMove(frozenset(sources), frozenset(destinations))

    assert moves == {
        "foo": {
            0: move({1, 2, 3}, {5}),
            1: move({4, 5, 6}, {7, 8}),
            2: move({1, 2}, {3, 4}),
            3: move({1, 2}, {5, 6}),
            4: move({1, 2}, {3}),
            5: move({1, 2}, {3, 4, 5, 6}),
        },
        "bar": {0: move({2, 3, 4}, {1})},
    }
    assert leader_throttles(moves) == {
        "foo": "0:1,0:2,0:3,1:4,1:5,1:6,2:1,2:2,3:1,3:2,4:1,4:2,5:1,5:2",
        "bar": "0:2,0:3,0:4",
    }
    assert follower_throttles(moves) == {
        "foo": "0:5,1:7,1:8,2:3,2:4,3:5,3:6,4:3,5:3,5:4,5:5,5:6",
        "bar": "0:1",
    }
    assert reassigning_brokers(moves) == {1, 2, 3, 4, 5, 6, 7, 8}


def test_execute_is_refused_while_any_reassignment_runs_unless_additional(fake, tmp_path):
    """Interleaving: u-0's move is started and still runs when a plan for another topic, t-1,
    is executed without --additional. Kafka 3.7's executeAssignment lists every reassignment
    in the cluster first and refuses: nothing is written, the running move keeps its throttle."""
    ok(
        invoke(
            fake, "--execute", "--reassignment-json-file", write(tmp_path / "u.json", plan(("u", 0, [1, 3])))
        )
    )
    fake.requests.clear()
    result = invoke(
        fake,
        "--execute",
        "--reassignment-json-file",
        write(tmp_path / "t.json", plan(("t", 1, [2, 3, 5]))),
        "--throttle",
        "1000",
    )
    assert writes(fake) == [], "a plan was executed beside a running reassignment without --additional"
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == CANNOT_EXECUTE + "\n"
    assert fake.reassignments == {("u", 0): [1, 3]}


def test_additional_throttles_the_running_moves_with_the_plans(fake, tmp_path):
    """Interleaving: t-0 copies under --throttle 1000 when a plan for t-2 runs with --additional
    --throttle 2000. Topic t's throttled replicas are the running move's and the plan's; the
    rate of every broker of both moves is the new one."""
    first = write(tmp_path / "a.json", plan(("t", 0, [1, 2, 4])))
    ok(invoke(fake, "--execute", "--reassignment-json-file", first, "--throttle", "1000"))
    second = write(tmp_path / "b.json", plan(("t", 2, [3, 4, 1])))
    lines = ok(
        invoke(fake, "--execute", "--additional", "--reassignment-json-file", second, "--throttle", "2000")
    )
    assert fake.topic_configs["t"] == {
        "retention.ms": "1000",
        LEADER_REPLICAS: "0:1,0:2,0:3,2:3,2:4,2:5",
        FOLLOWER_REPLICAS: "0:4,2:1",
    }
    assert fake.broker_configs == {str(b): rates("2000") for b in (1, 2, 3, 4, 5)}
    assert lines[:2] == ROLLBACK_HEAD and lines[3:5] == ROLLBACK_TAIL
    assert lines[5:] == [
        WARNING_37,
        "The inter-broker throttle limit was set to 2000 B/s",
        "Successfully started partition reassignment for t-2",
    ]
    assert fake.reassignments == {("t", 0): [1, 2, 4], ("t", 2): [3, 4, 1]}


def test_additional_resubmitting_the_running_plan_changes_the_throttle(fake, tmp_path):
    """Kafka 3.7's way to change the rate of a running reassignment: resubmit it with
    --additional. The moves already running to the same brokers are not sent again (this broker
    refuses a partition that is moving: REASSIGNMENT_IN_PROGRESS); the throttles are rewritten."""
    path = write(tmp_path / "plan.json", plan(("t", 0, [1, 2, 4]), ("t", 1, [3, 2, 4]), ("u", 0, [1, 3])))
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    before = snapshot(fake)
    fake.requests.clear()
    lines = ok(
        invoke(fake, "--execute", "--additional", "--reassignment-json-file", path, "--throttle", "2000")
    )
    assert fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS) == []
    assert lines[5:] == [
        WARNING_37,
        "The inter-broker throttle limit was set to 2000 B/s",
        "Successfully started partition reassignments for t-0,t-1,u-0",
    ]
    assert (
        fake.topic_configs
        == before[0]
        == {
            "t": {
                "retention.ms": "1000",
                LEADER_REPLICAS: "0:1,0:2,0:3,1:2,1:3,1:4",
                FOLLOWER_REPLICAS: "0:4",
            },
            "u": {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3"},
        }
    )
    assert fake.broker_configs == {str(b): rates("2000") for b in (1, 2, 3, 4)}


def test_additional_with_a_plan_that_copies_nothing_still_throttles_the_running_moves(fake, tmp_path):
    """The plan (u-0 [1,2] -> [1]) copies nothing, but t-0 still copies: the throttle is the
    whole move map's, so the running move keeps its throttle at the new rate."""
    ok(
        invoke(
            fake,
            "--execute",
            "--reassignment-json-file",
            write(tmp_path / "a.json", plan(("t", 0, [1, 2, 4]))),
            "--throttle",
            "1000",
        )
    )
    shrink = write(tmp_path / "b.json", plan(("u", 0, [1])))
    lines = ok(
        invoke(fake, "--execute", "--additional", "--reassignment-json-file", shrink, "--throttle", "5000")
    )
    assert lines[5:7] == [WARNING_37, "The inter-broker throttle limit was set to 5000 B/s"]
    assert fake.topic_configs["t"][LEADER_REPLICAS] == "0:1,0:2,0:3"
    assert fake.topic_configs["t"][FOLLOWER_REPLICAS] == "0:4"
    assert fake.topic_configs["u"] == {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: ""}
    assert fake.broker_configs == {str(b): rates("5000") for b in (1, 2, 3, 4)}


def test_additional_cannot_change_a_running_moves_target(fake, tmp_path):
    """Kafka 3.7's controller takes a new target for a moving partition; this broker refuses it
    (REASSIGNMENT_IN_PROGRESS, and it cannot cancel). The tool refuses such a plan before it
    writes a throttle or sends a move, so no move of the plan starts unthrottled or half-done."""
    ok(
        invoke(
            fake,
            "--execute",
            "--reassignment-json-file",
            write(tmp_path / "a.json", plan(("t", 0, [1, 2, 4]))),
            "--throttle",
            "1000",
        )
    )
    before = snapshot(fake)
    fake.requests.clear()
    other = write(tmp_path / "b.json", plan(("t", 0, [1, 2, 5]), ("t", 2, [3, 4, 1])))
    result = invoke(fake, "--execute", "--additional", "--reassignment-json-file", other, "--throttle", "9")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error reassigning partition(s):",
        "t-0: REASSIGNMENT_IN_PROGRESS: t-0 is being reassigned to 1,2,4; this broker cannot change "
        "the target of a running reassignment",
    ]
    assert writes(fake) == [] and snapshot(fake) == before
    assert fake.reassignments == {("t", 0): [1, 2, 4]}


def test_verify_keeps_every_throttle_while_any_reassignment_runs(fake, tmp_path):
    """Interleaving: plan A (t-0) runs under --throttle; another operator's move of u-0 starts
    with its own throttle (written into the fake as a second tool would); t-0 completes while
    u-0 still copies, and plan A is verified. Kafka 3.7's verifyAssignment clears throttles only
    when no reassignment runs in the cluster (the rates are per broker and shared: removing them
    now lets u-0 copy unthrottled). Once u-0 completes too, the next --verify clears them."""
    path = write(tmp_path / "a.json", plan(("t", 0, [1, 2, 4])))
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    fake.reassignments["u", 0] = [1, 3]
    fake.topic_configs["u"] = {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3"}
    complete(fake, "t", 0)
    before = snapshot(fake)
    fake.requests.clear()
    result = invoke(fake, "--verify", "--reassignment-json-file", path)
    assert snapshot(fake) == before and writes(fake) == [], (
        "--verify removed throttles while u-0 still moves: "
        f"brokers {fake.broker_configs}, topics {fake.topic_configs} ({result.stdout!r})"
    )
    assert ok(result) == ["Status of partition reassignment:", "Reassignment of partition t-0 is completed."]

    complete(fake, "u", 0)
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path)) == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3,4,5",
        "Clearing topic-level throttles on topic t",
    ]
    assert fake.broker_configs == {}
    # only the file's topics: u's throttled replicas are another plan's to clear
    assert fake.topic_configs == {"t": {"retention.ms": "1000"}, "u": before[0]["u"]}


def test_verify_preserve_throttles_clears_nothing(fake, tmp_path):
    path = write(tmp_path / "a.json", plan(("t", 0, [1, 2, 4])))
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    fake.complete_reassignments()
    before = snapshot(fake)
    fake.requests.clear()
    lines = ok(invoke(fake, "--verify", "--preserve-throttles", "--reassignment-json-file", path))
    assert lines == ["Status of partition reassignment:", "Reassignment of partition t-0 is completed."]
    assert snapshot(fake) == before and writes(fake) == []
    assert fake.broker_configs["4"] == {LEADER_RATE: "1000", FOLLOWER_RATE: "1000"}


def test_list_prints_the_running_reassignments(fake, tmp_path):
    assert ok(invoke(fake, "--list")) == ["No partition reassignments found."]
    path = write(tmp_path / "plan.json", plan(("u", 0, [1, 3]), ("t", 1, [3, 2, 4]), ("t", 0, [1, 2, 4])))
    ok(invoke(fake, "--execute", "--reassignment-json-file", path))
    assert ok(invoke(fake, "--list")) == [
        "Current partition reassignments:",
        "t-0: replicas: 1,2,4,3. adding: 4. removing: 3.",
        "t-1: replicas: 3,2,4.",
        "u-0: replicas: 1,3,2. adding: 3. removing: 2.",
    ]
