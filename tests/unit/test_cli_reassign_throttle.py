"""``floodmark reassign --throttle`` and the throttle's removal by ``--verify`` (Kafka 2.x's
ReassignPartitionsCommand: assignThrottledReplicas, maybeLimit, removeThrottle) through CliRunner
against tests/unit/fake_cluster.py, which keeps topic and dynamic broker configs: the exact
config values written per topic and per broker, the rerun during a move, the removal only once
every partition completed, and bad values refused before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.common import BOOTSTRAP_ENV
from cli.reassign_throttle import WARNING, throttled_replicas
from client.protocol.api import ApiKey, ConfigResourceType
from tests.unit.fake_cluster import FakeCluster, FakePartition, running_in_a_thread
from tests.unit.test_cli_reassign import invoke, plan, write

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

ROLLBACK_HEAD = ["Current partition replica assignment", ""]
ROLLBACK_TAIL = ["", "Save this to use as the --reassignment-json-file option during rollback"]


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
    """(TOPIC or BROKER, name) of each resource AlterConfigs sent."""
    return [
        (ConfigResourceType(r["resource_type"]).name, r["resource_name"])
        for received in fake.of(ApiKey.ALTER_CONFIGS)
        for r in received.body["resources"]
    ]


#: t-0 gains broker 4 (moving), t-1 is only reordered (not moving), u-0 gains 3 and loses 2.
PLAN = plan(("t", 0, [1, 2, 4]), ("t", 1, [3, 2, 4]), ("u", 0, [1, 3]))


def test_the_throttled_replicas_are_kafkas() -> None:
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 4], ("u", 0): [1, 2]}
    targets = {("t", 0): [4, 5, 3], ("t", 1): [4, 3, 2], ("u", 0): [2, 1], ("gone", 0): [1]}
    assert throttled_replicas(current, targets) == {
        "t": {LEADER_REPLICAS: "0:1,0:2,0:3", FOLLOWER_REPLICAS: "0:4,0:5"},
        "u": {LEADER_REPLICAS: "", FOLLOWER_REPLICAS: ""},
    }


def test_execute_throttles_before_the_move_starts(fake, tmp_path):
    fake.dynamic_broker_keys.add("log.cleaner.threads")  # a broker with another dynamic override
    fake.broker_configs["3"] = {"log.cleaner.threads": "2"}
    path = write(tmp_path / "plan.json", PLAN)
    lines = ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000000"))
    assert lines[:2] == ROLLBACK_HEAD and lines[3:5] == ROLLBACK_TAIL
    assert lines[5:] == [
        WARNING,
        "The inter-broker throttle limit was set to 1000000 B/s",
        "Successfully started reassignment of partitions.",
    ]
    assert fake.topic_configs == {
        "t": {"retention.ms": "1000", LEADER_REPLICAS: "0:1,0:2,0:3", FOLLOWER_REPLICAS: "0:4"},
        "u": {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3"},
    }
    # the brokers of the moving partitions t-0 and u-0, now or after: 1-4, not 5
    assert fake.broker_configs == {
        "1": rates("1000000"),
        "2": rates("1000000"),
        "3": {"log.cleaner.threads": "2", **rates("1000000")},
        "4": rates("1000000"),
    }
    keys = [
        r.api_key
        for r in fake.requests
        if r.api_key in (ApiKey.ALTER_CONFIGS, ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    ]
    assert keys[-1] == ApiKey.ALTER_PARTITION_REASSIGNMENTS and ApiKey.ALTER_CONFIGS in keys[:-1]
    assert fake.reassignments == {("t", 0): [1, 2, 4], ("t", 1): [3, 2, 4], ("u", 0): [1, 3]}


def test_a_rerun_during_the_move_changes_the_rate_only(fake, tmp_path):
    path = write(tmp_path / "plan.json", PLAN)
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    topics_before = {t: dict(c) for t, c in fake.topic_configs.items()}
    fake.requests.clear()
    assert ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "2000")) == [
        "There is an existing assignment running.",
        "The inter-broker throttle limit was set to 2000 B/s",
    ]
    assert fake.topic_configs == topics_before
    assert fake.broker_configs == {str(b): rates("2000") for b in (1, 2, 3, 4)}
    assert config_writes(fake) == [("BROKER", str(b)) for b in (1, 2, 3, 4)]
    assert fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS) == []
    # without --throttle the rerun is still the broker's refusal
    refused = invoke(fake, "--execute", "--reassignment-json-file", path)
    assert refused.exit_code == 1 and "REASSIGNMENT_IN_PROGRESS" in refused.stderr


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
    assert result.exit_code == 1 and "t-0: REASSIGNMENT_IN_PROGRESS" in result.stderr
    assert WARNING not in result.stdout
    assert (fake.topic_configs, fake.broker_configs) == written
    assert fake.of(ApiKey.ALTER_CONFIGS) == []


@pytest.mark.parametrize(
    "entries",
    [[("t", 0, [1, 2, 4]), ("t", 7, [1])], [("t", 0, [1, 2, 4]), ("u", 0, [1, 9])]],
    ids=["unknown partition", "unknown broker"],
)
def test_a_plan_the_broker_refuses_writes_no_throttle(fake, tmp_path, entries):
    result = invoke(
        fake,
        "--execute",
        "--reassignment-json-file",
        write(tmp_path / "p.json", plan(*entries)),
        "--throttle",
        "1000",
    )
    assert result.exit_code == 1 and result.stderr.startswith(
        "Error: reassignment refused, nothing was started:"
    )
    assert "The inter-broker throttle limit" not in result.stdout
    assert fake.of(ApiKey.ALTER_CONFIGS) == [] and fake.reassignments == {}


def test_verify_removes_the_throttle_only_once_every_partition_completed(fake, tmp_path):
    fake.broker_configs[""] = {LEADER_RATE: "5"}  # the cluster-wide default is not the command's
    path = write(tmp_path / "plan.json", PLAN)
    ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "1000"))
    written = ({t: dict(c) for t, c in fake.topic_configs.items()}, dict(fake.broker_configs))
    fake.requests.clear()
    pending = invoke(fake, "--verify", "--reassignment-json-file", path)
    assert pending.exit_code == 1 and "Throttle was removed." not in pending.stdout
    assert (fake.topic_configs, fake.broker_configs) == written
    assert fake.of(ApiKey.ALTER_CONFIGS) == []

    fake.complete_reassignments()
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path)) == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 completed successfully",
        "Reassignment of partition t-1 completed successfully",
        "Reassignment of partition u-0 completed successfully",
        "Throttle was removed.",
    ]
    assert fake.topic_configs == {"t": {"retention.ms": "1000"}}
    assert fake.broker_configs == {"": {LEADER_RATE: "5"}}
    assert sorted(config_writes(fake)) == [
        ("BROKER", "1"),
        ("BROKER", "2"),
        ("BROKER", "3"),
        ("BROKER", "4"),
        ("TOPIC", "t"),
        ("TOPIC", "u"),
    ]
    # nothing left to remove: no write, no line
    fake.requests.clear()
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path))[-1].endswith(
        "completed successfully"
    )
    assert fake.of(ApiKey.ALTER_CONFIGS) == []


def test_verify_removes_the_rates_from_every_broker_and_keeps_other_overrides(fake, tmp_path):
    """Kafka no longer knows which brokers took part: every live broker loses the rates."""
    fake.dynamic_broker_keys.add("log.cleaner.threads")
    fake.broker_configs.update({"5": {"log.cleaner.threads": "2", **rates("9")}, "2": rates("9")})
    fake.topic_configs["u"] = {FOLLOWER_REPLICAS: "*"}
    path = write(tmp_path / "done.json", plan(("t", 0, [1, 2, 3]), ("u", 0, [1, 2])))
    assert ok(invoke(fake, "--verify", "--reassignment-json-file", path))[-1] == "Throttle was removed."
    assert fake.broker_configs == {"5": {"log.cleaner.threads": "2"}}
    assert fake.topic_configs == {"t": {"retention.ms": "1000"}}


def test_execute_without_a_throttle_writes_no_config(fake, tmp_path):
    path = write(tmp_path / "plan.json", PLAN)
    lines = ok(invoke(fake, "--execute", "--reassignment-json-file", path))
    assert lines[-1] == "Successfully started reassignment of partitions." and WARNING not in lines
    assert fake.of(ApiKey.ALTER_CONFIGS) == [] and fake.broker_configs == {}


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
    assert result.exit_code == 2 and f"--throttle cannot be used with {mode}" in result.stderr, result.stderr
    assert fake.requests == []


def test_a_plan_that_copies_nothing_says_nothing_was_throttled(fake, tmp_path):
    """The README tour's "RF 3 -> 2, throttled" printed "The inter-broker throttle limit was set"
    (as Kafka's tool does) while no broker got a rate: a shrink copies no data. It now says so, and
    prints no warning to run --verify for a throttle that does not exist."""
    path = write(tmp_path / "plan.json", plan(("t", 0, [3, 1])))
    lines = ok(invoke(fake, "--execute", "--reassignment-json-file", path, "--throttle", "10000000"))
    assert lines[5:] == [
        "No partition of the plan gains a replica, so nothing was throttled "
        "(the limit applies only to data copied to new replicas).",
        "Successfully started reassignment of partitions.",
    ]
    assert WARNING not in lines
    assert fake.broker_configs == {}
