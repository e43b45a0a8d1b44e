"""``floodmark configs`` (kafka-configs.sh) for brokers and topics through CliRunner against
tests/unit/fake_cluster.py, which keeps topic overrides and dynamic broker configs with the
broker's contract (tests/unit/fake_configs.py): a broker entity and the ``--entity-default``
one, described and altered with ConfigCommand's read-merge-write and output lines, and bad
input refused in Kafka's words before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.common import BOOTSTRAP_ENV
from cli.main import build_cli
from client.protocol.api import ApiKey, ConfigResourceType
from tests.unit.fake_cluster import FakeCluster, running_in_a_thread
from tests.unit.fake_configs import UNTHROTTLED

LEADER = "leader.replication.throttled.rate"
FOLLOWER = "follower.replication.throttled.rate"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeCluster]:
    """Brokers 1-3, topic t with the override retention.ms=1000."""
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    def setup(cluster: FakeCluster) -> None:
        cluster.create("t", 1)
        cluster.topic_configs["t"] = {"retention.ms": "1000"}

    with running_in_a_thread(setup) as cluster:
        yield cluster


def configs(fake: FakeCluster, *args: str) -> Any:
    return CliRunner().invoke(build_cli(), ["configs", "--bootstrap-server", fake.bootstrap, *args])


def ok(result: Any) -> list[str]:
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.stdout.splitlines()


def brokers(fake: FakeCluster, *args: str) -> list[str]:
    return ok(configs(fake, "--entity-type", "brokers", *args))


def altered(fake: FakeCluster) -> list[tuple[int, str, dict[str, str]]]:
    """Each AlterConfigs resource sent: (resource type, name, configs)."""
    return [
        (r["resource_type"], r["resource_name"], {c["name"]: c["value"] for c in r["configs"]})
        for received in fake.of(ApiKey.ALTER_CONFIGS)
        for r in received.body["resources"]
    ]


BROKER = int(ConfigResourceType.BROKER)


def test_alter_a_broker_then_describe_it(fake):
    assert brokers(fake, "--entity-name", "1", "--describe") == ["Dynamic configs for broker 1 are:"]
    assert brokers(fake, "--entity-name", "1", "--alter", "--add-config", f"{LEADER}=100,{FOLLOWER}=200") == [
        "Completed updating config for broker 1."
    ]
    assert fake.broker_configs == {"1": {LEADER: "100", FOLLOWER: "200"}}
    assert brokers(fake, "--entity-name", "1", "--describe") == [
        "Dynamic configs for broker 1 are:",
        f"  {FOLLOWER}=200 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{FOLLOWER}=200, "
        f"DEFAULT_CONFIG:{FOLLOWER}={UNTHROTTLED}}}",
        f"  {LEADER}=100 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{LEADER}=100, "
        f"DEFAULT_CONFIG:{LEADER}={UNTHROTTLED}}}",
    ]
    # the read is the broker's own DescribeConfigs, at that broker
    assert {r.node for r in fake.of(ApiKey.DESCRIBE_CONFIGS)} == {1}


def test_alter_merges_into_the_current_overrides(fake):
    fake.broker_configs["2"] = {LEADER: "100", FOLLOWER: "200"}
    assert brokers(fake, "--entity-name", "2", "--alter", "--add-config", f"{LEADER}=300") == [
        "Completed updating config for broker 2."
    ]
    assert brokers(fake, "--entity-name", "2", "--alter", "--delete-config", FOLLOWER) == [
        "Completed updating config for broker 2."
    ]
    assert altered(fake) == [
        (BROKER, "2", {LEADER: "300", FOLLOWER: "200"}),
        (BROKER, "2", {LEADER: "300"}),
    ]
    assert fake.broker_configs == {"2": {LEADER: "300"}}


def test_the_default_entity(fake):
    assert brokers(fake, "--entity-default", "--alter", "--add-config", f"{LEADER}=50") == [
        "Completed updating default config for brokers in the cluster."
    ]
    assert fake.broker_configs == {"": {LEADER: "50"}}
    assert brokers(fake, "--entity-default", "--describe") == [
        "Default configs for brokers in the cluster are:",
        f"  {LEADER}=50 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{LEADER}=50}}",
    ]
    # a broker's own dynamic configs leave the default out; --all shows it as the effective value
    assert brokers(fake, "--entity-name", "3", "--describe") == ["Dynamic configs for broker 3 are:"]
    every = brokers(fake, "--entity-name", "3", "--describe", "--all")
    assert every[0] == "All configs for broker 3 are:"
    assert (
        f"  {LEADER}=50 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{LEADER}=50, "
        f"DEFAULT_CONFIG:{LEADER}={UNTHROTTLED}}}" in every
    )
    # the default's overrides are its own: the per-broker ones are not sent back with them
    fake.broker_configs["1"] = {FOLLOWER: "7"}
    brokers(fake, "--entity-default", "--alter", "--add-config", f"{FOLLOWER}=60")
    assert fake.broker_configs == {"": {LEADER: "50", FOLLOWER: "60"}, "1": {FOLLOWER: "7"}}
    brokers(fake, "--entity-default", "--alter", "--delete-config", f"{LEADER},{FOLLOWER}")
    assert fake.broker_configs == {"1": {FOLLOWER: "7"}}


def test_describe_of_brokers_lists_every_broker_then_the_default(fake):
    fake.broker_configs.update({"2": {LEADER: "9"}, "": {FOLLOWER: "8"}})
    assert brokers(fake, "--describe") == [
        "Dynamic configs for broker 1 are:",
        "Dynamic configs for broker 2 are:",
        f"  {LEADER}=9 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{LEADER}=9, "
        f"DEFAULT_CONFIG:{LEADER}={UNTHROTTLED}}}",
        "Dynamic configs for broker 3 are:",
        "Default configs for brokers in the cluster are:",
        f"  {FOLLOWER}=8 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{FOLLOWER}=8}}",
    ]


def test_a_key_the_broker_cannot_update_is_its_invalid_config(fake):
    result = configs(
        fake, "--entity-type", "brokers", "--entity-name", "1", "--alter", "--add-config", "num.partitions=3"
    )
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        "Error: INVALID_CONFIG: alter configs of broker '1' failed: "
        "Cannot update these configs dynamically: num.partitions\n"
    )
    result = configs(
        fake, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config", f"{LEADER}=x"
    )
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"Error: INVALID_CONFIG: alter configs of the default broker config failed: Invalid value x for configuration {LEADER}"
    )
    assert fake.broker_configs == {}


def test_deleting_what_is_not_overridden_is_refused_before_writing(fake):
    result = configs(
        fake, "--entity-type", "brokers", "--entity-name", "1", "--alter", "--delete-config", LEADER
    )
    assert result.exit_code == 1
    assert result.stderr == f"Error: Invalid config(s): {LEADER} (not overridden)\n"
    assert fake.of(ApiKey.ALTER_CONFIGS) == []


def test_topics_keep_their_other_overrides_and_the_broker_checks_the_values(fake):
    base = ["--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config"]
    assert ok(configs(fake, *base, "leader.replication.throttled.replicas=[0:1,0:2]")) == [
        "Completed updating config for topic t."
    ]
    assert fake.topic_configs == {
        "t": {"retention.ms": "1000", "leader.replication.throttled.replicas": "0:1,0:2"}
    }
    bad = configs(fake, *base, "follower.replication.throttled.replicas=[0-1]")
    assert bad.exit_code == 1
    assert bad.stderr.startswith(
        "Error: INVALID_CONFIG: alter configs of topic 't' failed: Invalid value 0-1 for configuration "
        "follower.replication.throttled.replicas: must be the literal '*' or a list of replicas"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--entity-type", "brokers", "--entity-name", "1", "--entity-default", "--describe"],
            "--entity-name and --entity-default cannot be used together",
        ),
        (
            ["--entity-type", "topics", "--entity-default", "--alter", "--add-config", "retention.ms=1"],
            "--entity-default is for --entity-type brokers, not topics",
        ),
        (
            ["--entity-type", "topics", "--entity-default", "--describe"],
            "--entity-default is for --entity-type",
        ),
        (
            ["--entity-type", "brokers", "--entity-name", "one", "--describe"],
            "The entity name for brokers must be a valid integer broker id, but it is: one",
        ),
        (
            ["--entity-type", "brokers", "--alter", "--add-config", f"{LEADER}=1"],
            "an entity-name or default entity must be specified with --alter of brokers",
        ),
        (
            ["--entity-type", "topics", "--alter", "--add-config", "retention.ms=1"],
            "an entity name must be specified with --alter of topics",
        ),
        (
            ["--entity-type", "brokers", "--entity-default", "--alter"],
            "At least one of --add-config or --delete-config must be specified with --alter",
        ),
    ],
)
def test_bad_input_is_a_usage_error_and_sends_nothing(fake, args, message):
    result = configs(fake, *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert fake.requests == []
