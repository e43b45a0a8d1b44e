"""``floodmark reassign --throttle`` and the throttle's removal by ``--verify`` (Kafka 3.7's
ReassignPartitionsCommand: calculateProposedMoveMap, modifyReassignmentThrottle,
modifyInterBrokerThrottle, clearAllThrottles) through CliRunner against
tests/unit/fake_cluster.py, which keeps topic and dynamic broker configs: the exact config values
written per topic and per broker, the rerun during a move refused without --additional, the
removal only once no reassignment runs, and bad values refused before anything is sent. Running
moves beside a new plan: tests/unit/test_cli_reassign_additional.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.common import BOOTSTRAP_ENV, CliError
from cli.reassign import CANNOT_EXECUTE
from cli.reassign_throttle import (
    NOTHING_THROTTLED,
    WARNING,
    follower_throttles,
    leader_throttles,
    proposed_move_map,
)
from client.protocol.api import ApiKey, ConfigResourceType
from tests.unit.fake_cluster import FakeCluster, FakePartition, running_in_a_thread
from tests.unit.test_cli_reassign import invoke, plan, write

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

ROLLBACK_HEAD = ["Current partition replica assignment", ""]
ROLLBACK_TAIL = ["", "Save this to use as the --reassignment-json-file option during rollback"]
#: The ALTER_CONFIGS and INCREMENTAL_ALTER_CONFIGS requests of a command.
CONFIG_WRITES = (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeCluster]:
    """Brokers 1-5; t-0 [1,2,3], t-1 [2,3,4], t-2 [3,4,5], u-0 [1,2]; t overrides retention.ms."""
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    def setup(cluster: FakeCluster) -> None:
        cluster.topics["t"] = [FakePartition(r[0], r) for r in ([1, 2, 3], [2, 3, 4], [3, 4, 5])]
        cluster.topics["u"] = [FakePartition(1, [1, 2])]
        cluster.topic_configs["t"] = {"retention.ms": "1000"}

    with running_in_a_thread(setup, node_ids=(1, 2, 3, 4, 5)) as cluster:
        yield cluster


def ok(result: Any) -> list[str]:
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.stdout.splitlines()


def rates(value: str) -> dict[str, str]:
    return {LEADER_RATE: value, FOLLOWER_RATE: value}


def config_writes(fake: FakeCluster) -> list[tuple[str, str]]:
    """(TOPIC or BROKER, name) of each resource AlterConfigs or IncrementalAlterConfigs sent."""
    return [
        (ConfigResourceType(r["resource_type"]).name, r["resource_name"])
        for received in fake.requests
        if received.api_key in CONFIG_WRITES
        for r in received.body["resources"]
    ]


#: t-0 gains broker 4 (moving), t-1 is only reordered (not moving), u-0 gains 3 and loses 2.
PLAN = plan(("t", 0, [1, 2, 4]), ("t", 1, [3, 2, 4]), ("u", 0, [1, 3]))


def test_the_throttled_replicas_are_kafkas() -> None:
    """Kafka 3.7: every planned partition's replicas are leader-throttled, a reordered one's too
    (calculateLeaderThrottles takes every move's sources); the lists in TreeSet string order."""
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 4], ("u", 0): [1, 2], ("v", 2): [1], ("v", 10): [1]}
    targets = {("t", 0): [4, 5, 3], ("t", 1): [4, 3, 2], ("u", 0): [2, 1], ("v", 2): [2], ("v", 10): [2]}
    moves = proposed_move_map({}, targets, current)
    assert leader_throttles(moves) == {"t": "0:1,0:2,0:3,1:2,1:3,1:4", "u": "0:1,0:2", "v": "10:1,2:1"}
    assert follower_throttles(moves) == {"t": "0:4,0:5", "u": "", "v": "10:2,2:2"}
    with pytest.raises(CliError, match="Trying to reassign a topic partition gone-0 with 0 replicas"):
        proposed_move_map({}, {("gone", 0): [1]}, current)


def test_execute_throttles_before_the_move_starts(fake, tmp_path):
    fake.dynamic_broker_keys.add("log.cleaner.threads")  # a broker with another dynamic override
    fake.broker_configs["3"] = {"log.cleaner.threads": "2"}
    path = write(tmp_path / "plan.json", PLAN)
    lines = ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000000"))
    assert lines[:2] == ROLLBACK_HEAD and lines[3:5] == ROLLBACK_TAIL
    assert lines[5:] == [
        WARNING,
        "The inter-broker throttle limit was set to 1000000 B/s",
        "Successfully started partition reassignments for t-0,t-1,u-0",
    ]
    assert fake.topic_configs == {
        "t": {"retention.ms": "1000", LEADER_REPLICAS: "0:1,0:2,0:3,1:2,1:3,1:4", FOLLOWER_REPLICAS: "0:4"},
        "u": {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3"},
    }
    # the brokers of the planned partitions, now or after: 1-4, not 5
    assert fake.broker_configs == {
        "1": rates("1000000"),
        "2": rates("1000000"),
        "3": {"log.cleaner.threads": "2", **rates("1000000")},
        "4": rates("1000000"),
    }
    keys = [
        r.api_key
        for r in fake.requests
        if r.api_key in (*CONFIG_WRITES, ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    ]
    assert keys[-1] == ApiKey.ALTER_PARTITION_REASSIGNMENTS
    assert keys[:-1] and set(keys[:-1]) == {ApiKey.INCREMENTAL_ALTER_CONFIGS}
    assert fake.reassignments == {("t", 0): [1, 2, 4], ("t", 1): [3, 2, 4], ("u", 0): [1, 3]}


def test_a_rerun_during_the_move_is_refused_without_additional(fake, tmp_path):
    """Kafka 3.7 changes the rate of a running reassignment only when it is resubmitted with
    --additional (tests/unit/test_cli_reassign_additional.py); a plain rerun is refused."""
    path = write(tmp_path / "plan.json", PLAN)
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    written = ({t: dict(c) for t, c in fake.topic_configs.items()}, dict(fake.broker_configs))
    fake.requests.clear()
    for throttle in (["--throttle", "2000"], []):
        refused = invoke(fake, "--execute", "--reassignment-json-file", path, *throttle)
        assert refused.exit_code == 1 and refused.stdout == ""
        assert refused.stderr == CANNOT_EXECUTE + "\n"
    assert (fake.topic_configs, fake.broker_configs) == written
    assert config_writes(fake) == [] and fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS) == []


def test_a_plan_overlapping_a_running_move_is_refused_and_keeps_its_throttle(fake, tmp_path):
    ok(
        invoke(
            fake,
            "--execute",
            "--reassignment-json-file",
            write(tmp_path / "a.json", PLAN),
            "--throttle",
            "1000",
        )
    )
    written = ({t: dict(c) for t, c in fake.topic_configs.items()}, dict(fake.broker_configs))
    fake.requests.clear()
    overlap = write(tmp_path / "b.json", plan(("t", 0, [1, 2, 4]), ("t", 2, [3, 4, 1])))
    result = invoke(fake, "--execute", "--reassignment-json-file", overlap, "--throttle", "5000")
    assert result.exit_code == 1 and result.stderr == CANNOT_EXECUTE + "\n"
    assert WARNING not in result.stdout
    assert (fake.topic_configs, fake.broker_configs) == written
    assert config_writes(fake) == []


@pytest.mark.parametrize(
    ("entries", "error"),
    [
        (
            [("t", 0, [1, 2, 4]), ("t", 7, [1])],
            # Kafka 3.7's calculateProposedMoveMap, before any throttle is written
            "Error: Trying to reassign a topic partition t-7 with 0 replicas",
        ),
        # Kafka 3.7's verifyBrokerIds, before anything is printed
        ([("t", 0, [1, 2, 4]), ("u", 0, [1, 9])], "Error: Unknown broker id 9"),
    ],
    ids=["unknown partition", "unknown broker"],
)
def test_a_plan_the_broker_refuses_writes_no_throttle(fake, tmp_path, entries, error):
    result = invoke(
        fake,
        "--execute",
        "--reassignment-json-file",
        write(tmp_path / "p.json", plan(*entries)),
        "--throttle",
        "1000",
    )
    assert result.exit_code == 1 and result.stderr.splitlines() == [error]
    assert "The inter-broker throttle limit" not in result.stdout
    assert config_writes(fake) == [] and fake.reassignments == {}
    assert fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS) == []


def test_verify_removes_the_throttle_only_once_no_reassignment_runs(fake, tmp_path):
    fake.broker_configs[""] = {LEADER_RATE: "5"}  # the cluster-wide default is not the command's
    path = write(tmp_path / "plan.json", PLAN)
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    written = ({t: dict(c) for t, c in fake.topic_configs.items()}, dict(fake.broker_configs))
    fake.requests.clear()
    pending = invoke(fake, "--verify", "--reassignment-json-file", path)
    assert pending.exit_code == 1 and pending.stdout.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is still in progress.",
        "Reassignment of partition u-0 is still in progress.",
    ]
    assert (fake.topic_configs, fake.broker_configs) == written
    assert config_writes(fake) == []

    fake.complete_reassignments()
    done = [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is completed.",
        "Reassignment of partition u-0 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3,4,5",
        "Clearing topic-level throttles on topics t,u",
    ]
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path)) == done
    assert fake.topic_configs == {"t": {"retention.ms": "1000"}}
    assert fake.broker_configs == {"": {LEADER_RATE: "5"}}
    assert sorted(config_writes(fake)) == [
        ("BROKER", "1"),
        ("BROKER", "2"),
        ("BROKER", "3"),
        ("BROKER", "4"),
        ("BROKER", "5"),
        ("TOPIC", "t"),
        ("TOPIC", "u"),
    ]
    # Kafka 3.7 clears on every --verify that finds nothing running: again, and nothing changes
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path)) == done
    assert fake.topic_configs == {"t": {"retention.ms": "1000"}}
    assert fake.broker_configs == {"": {LEADER_RATE: "5"}}


def test_verify_removes_the_rates_from_every_broker_and_keeps_other_overrides(fake, tmp_path):
    """Kafka no longer knows which brokers took part: every live broker loses the rates."""
    fake.dynamic_broker_keys.add("log.cleaner.threads")
    fake.broker_configs.update({"5": {"log.cleaner.threads": "2", **rates("9")}, "2": rates("9")})
    fake.topic_configs["u"] = {FOLLOWER_REPLICAS: "*"}
    path = write(tmp_path / "done.json", plan(("t", 0, [1, 2, 3]), ("u", 0, [1, 2])))
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path))[-2:] == [
        "Clearing broker-level throttles on brokers 1,2,3,4,5",
        "Clearing topic-level throttles on topics t,u",
    ]
    assert fake.broker_configs == {"5": {"log.cleaner.threads": "2"}}
    assert fake.topic_configs == {"t": {"retention.ms": "1000"}}


def test_execute_without_a_throttle_writes_no_config(fake, tmp_path):
    path = write(tmp_path / "plan.json", PLAN)
    lines = ok(invoke(fake, "--execute", "--reassignment-json-file", path))
    assert lines[-1] == "Successfully started partition reassignments for t-0,t-1,u-0"
    assert WARNING not in lines
    assert config_writes(fake) == [] and fake.broker_configs == {}


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5", str(2**63)])
def test_a_bad_throttle_is_refused_before_anything_is_sent(fake, tmp_path, value):
    path = write(tmp_path / "plan.json", PLAN)
    result = invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", value)
    assert result.exit_code == 2 and "--throttle" in result.stderr, result.stderr
    assert fake.requests == []


@pytest.mark.parametrize("mode", ["--verify", "--generate"])
def test_throttle_is_for_execute_only(fake, tmp_path, mode):
    path = write(tmp_path / "plan.json", PLAN)
    args = ["--reassignment-json-file", path] if mode == "--verify" else ["--topics-to-move-json-file", path]
    args += ["--broker-list", "1,2"] if mode == "--generate" else []
    result = invoke(fake, mode, *args, "--throttle", "100")
    message = f'Option "[throttle]" can\'t be used with action "[{mode[2:]}]"'
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert fake.requests == []


def test_a_plan_that_copies_nothing_says_nothing_was_throttled(fake, tmp_path):
    """The README tour's "RF 3 -> 2, throttled": Kafka 3.7 prints its warning and "The
    inter-broker throttle limit was set" and throttles the leaving replicas, which copy nothing:
    no move gains a replica, so the throttle holds nothing back. floodmark says so instead,
    writes nothing, and prints no warning to run --verify for a throttle that does nothing."""
    path = write(tmp_path / "plan.json", plan(("t", 0, [3, 1])))
    lines = ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "10000000"))
    assert lines[5:] == [NOTHING_THROTTLED, "Successfully started partition reassignment for t-0"]
    assert WARNING not in lines
    assert fake.broker_configs == {} and fake.topic_configs == {"t": {"retention.ms": "1000"}}
    assert config_writes(fake) == []
