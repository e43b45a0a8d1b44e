"""``floodmark reassign`` (kafka-reassign-partitions.sh) through CliRunner against
tests/unit/fake_cluster.py, running on its own loop in a thread: each mode's output as Kafka 3.7's
ReassignPartitionsCommand prints it (each expected line checked against its source), refusals,
and every malformed input refused before anything is sent.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli import reassign
from cli.common import BOOTSTRAP_ENV
from cli.main import build_cli
from client.protocol.api import ApiKey
from controller.placement import assign_replicas
from tests.unit.fake_cluster import FakeCluster, running_in_a_thread


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeCluster]:
    """Brokers 1-4; topic t with 3 partitions (t-0 [1,2,3], t-1 [2,3,4], t-2 [3,4,1]), u with 1."""
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)

    def topics(cluster: FakeCluster) -> None:
        cluster.create("t", 3)
        cluster.create("u", 1)

    with running_in_a_thread(topics, node_ids=(1, 2, 3, 4)) as cluster:
        yield cluster


def invoke(fake: FakeCluster, *args: str) -> Any:
    return CliRunner().invoke(build_cli(), ["reassign", "--bootstrap-server", fake.bootstrap, *args])


def write(path: Path, data: Any) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def plan(*entries: tuple[str, int, list[int]]) -> dict:
    return {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]}


def one_error_line(result: Any, exit_code: int = 1) -> str:
    assert result.exit_code == exit_code, (result.output, result.stderr)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def sent(fake: FakeCluster) -> list[ApiKey]:
    """What the command asked of the cluster beyond reading metadata (DescribeCluster included)."""
    reads = (ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.DESCRIBE_CLUSTER)
    return [r.api_key for r in fake.requests if r.api_key not in reads]


# -- --generate ----------------------------------------------------------------------------------


def test_generate_prints_the_current_and_a_proposed_assignment(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(reassign, "new_rng", lambda: random.Random(7))
    topics = write(tmp_path / "topics.json", {"topics": [{"topic": "t"}, {"topic": "u"}], "version": 1})
    result = invoke(fake, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "2,3,4")
    assert result.exit_code == 0, result.output + result.stderr
    rng = random.Random(7)
    proposed_t = assign_replicas([2, 3, 4], 3, 3, rng)
    proposed_u = assign_replicas([2, 3, 4], 1, 3, rng)
    assert result.stdout.splitlines() == [
        "Current partition replica assignment",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"t","partition":1,"replicas":[2,3,4],"log_dirs":["any","any","any"]},'
        '{"topic":"t","partition":2,"replicas":[3,4,1],"log_dirs":["any","any","any"]},'
        '{"topic":"u","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}',
        "",
        "Proposed partition reassignment configuration",
        reassign.reassignment_json(
            {**{("t", p): r for p, r in proposed_t.items()}, **{("u", p): r for p, r in proposed_u.items()}}
        ),
    ]
    proposed = json.loads(result.stdout.splitlines()[-1])["partitions"]
    assert all(set(p["replicas"]) == {2, 3, 4} for p in proposed)
    assert sent(fake) == []


def test_generate_of_an_unknown_topic_names_it(fake, tmp_path):
    topics = write(tmp_path / "topics.json", {"topics": [{"topic": "t"}, {"topic": "nope"}]})
    line = one_error_line(
        invoke(fake, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,3")
    )
    assert line == "Error: UNKNOWN_TOPIC_OR_PARTITION: Topic nope not found."


def test_generate_over_too_few_or_unknown_brokers_is_refused(fake, tmp_path):
    topics = write(tmp_path / "topics.json", {"topics": [{"topic": "t"}]})
    line = one_error_line(
        invoke(fake, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2")
    )
    assert line == (
        "Error: INVALID_REPLICATION_FACTOR: topic 't': Replication factor: 3 larger than available brokers: 2."
    )
    line = one_error_line(
        invoke(fake, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,9")
    )
    assert line == "Error: --broker-list names broker(s) not in the cluster: 9 (live brokers: 1,2,3,4)"


# -- --execute -----------------------------------------------------------------------------------


def test_execute_prints_the_rollback_json_and_starts_the_reassignment(fake, tmp_path):
    target = write(tmp_path / "plan.json", plan(("t", 1, [1, 2, 3]), ("t", 0, [4, 2, 3])))
    result = invoke(fake, "--execute", "--reassignment-json-file", target)
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.splitlines() == [
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"t","partition":1,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignments for t-0,t-1",
    ]
    assert fake.reassignments == {("t", 0): [4, 2, 3], ("t", 1): [1, 2, 3]}
    (alter,) = fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    assert alter.body["timeout_ms"] == 60000


def test_execute_accepts_log_dirs_and_a_missing_version(fake, tmp_path):
    entry = {"topic": "u", "partition": 0, "replicas": [4, 3, 2], "log_dirs": ["any", "any", "any"]}
    target = write(tmp_path / "plan.json", {"partitions": [entry]})
    result = invoke(fake, "--execute", "--reassignment-json-file", target, "--timeout-ms", "5000")
    assert result.exit_code == 0 and fake.reassignments == {("u", 0): [4, 3, 2]}
    assert fake.of(ApiKey.ALTER_PARTITION_REASSIGNMENTS)[0].body["timeout_ms"] == 5000


def test_execute_refused_prints_each_refused_partition_and_exits_1(fake, tmp_path):
    """Kafka 3.7's "Error reassigning partition(s):" (a TerseException: no "Error: " prefix), one
    line per partition the broker refused; this broker starts all or none, so the others are
    counted."""
    target = write(
        tmp_path / "plan.json", plan(("t", 0, [4, 2, 3]), ("t", 1, [1, 2]), ("t", 7, [1]), ("u", 0, [2]))
    )
    result = invoke(fake, "--execute", "--reassignment-json-file", target)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == "Current partition replica assignment"
    assert "Successfully" not in result.stdout
    assert result.stderr.splitlines() == [
        "Error reassigning partition(s):",
        "t-7: UNKNOWN_TOPIC_OR_PARTITION: The partition does not exist.",
        "(3 other partition(s) not written because of these)",
    ]
    assert fake.reassignments == {}


@pytest.mark.parametrize(
    ("entries", "line"),
    [
        ([("t", 1, [1, 9])], "Error: Unknown broker id 9"),  # verifyBrokerIds
        ([("t", 0, [1]), ("nosuch", 0, [1])], "Error: UNKNOWN_TOPIC_OR_PARTITION: Topic nosuch not found."),
    ],
    ids=["unknown broker", "unknown topic"],
)
def test_execute_of_an_unknown_broker_or_topic_is_refused_before_anything_is_printed(
    fake, tmp_path, entries, line
):
    result = invoke(fake, "--execute", "--reassignment-json-file", write(tmp_path / "p.json", plan(*entries)))
    assert one_error_line(result) == line and result.stdout == ""
    assert ApiKey.ALTER_PARTITION_REASSIGNMENTS not in sent(fake)


def test_execute_while_a_partition_is_being_moved_is_refused(fake, tmp_path):
    target = write(tmp_path / "plan.json", plan(("t", 0, [4, 2, 3])))
    assert invoke(fake, "--execute", "--reassignment-json-file", target).exit_code == 0
    result = invoke(fake, "--execute", "--reassignment-json-file", target)
    assert result.exit_code == 1
    assert result.stderr.startswith("Cannot execute because there is an existing partition assignment.")


# -- --verify ------------------------------------------------------------------------------------


def test_verify_reports_each_partition_and_exits_0_only_when_all_completed(fake, tmp_path):
    moving = write(tmp_path / "moving.json", plan(("t", 0, [4, 2, 3]), ("t", 1, [1, 2, 3])))
    assert invoke(fake, "--execute", "--reassignment-json-file", moving).exit_code == 0
    checked = write(
        tmp_path / "checked.json",
        plan(("t", 1, [1, 2, 3]), ("t", 0, [4, 2, 3]), ("t", 2, [1, 2, 4]), ("u", 0, [1, 2, 3])),
    )
    result = invoke(fake, "--verify", "--reassignment-json-file", checked)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is still in progress.",
        "There is no active reassignment of partition t-2, but replica set is 3,4,1 rather than 1,2,4.",
        "Reassignment of partition u-0 is completed.",
    ]
    assert result.stderr == (
        "Error: reassignment not completed: 2 still in progress, 1 not at the target replicas\n"
    )
    fake.complete_reassignments()
    result = invoke(fake, "--verify", "--reassignment-json-file", moving)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topic t",
    ]
    assert sent(fake).count(ApiKey.ALTER_PARTITION_REASSIGNMENTS) == 1  # the --execute's only


def test_verify_compares_the_replica_order_and_fails_unknown_partitions(fake, tmp_path):
    checked = write(tmp_path / "plan.json", plan(("t", 0, [2, 1, 3]), ("gone", 0, [1])))
    result = invoke(fake, "--verify", "--reassignment-json-file", checked)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:] == [
        # Kafka 3.7 shows a partition that does not exist with an empty replica set
        "There is no active reassignment of partition gone-0, but replica set is  rather than 1.",
        "There is no active reassignment of partition t-0, but replica set is 1,2,3 rather than 2,1,3.",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topic t",
    ]
    assert result.stderr == "Error: reassignment not completed: 2 not at the target replicas\n"


# -- bad input: one line, nothing sent -----------------------------------------------------------

BAD_PLANS = [
    (
        "{not json",
        "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    ("[]", "expected a JSON object"),
    ({"version": 2, "partitions": []}, "Not supported version field value 2"),
    ({"version": 1}, '"partitions" must be a list of {"topic", "partition", "replicas"} objects'),
    ({"partitions": []}, "Partition reassignment data file is empty"),
    ({"partitions": [7]}, "partitions[0] must be an object, got 7"),
    (
        {"partitions": [{"topic": "t", "replicas": [1]}]},
        'partitions[0] needs a "topic" name and a "partition" number',
    ),
    (
        {"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]},
        'needs a "topic" name and a "partition"',
    ),
    (plan(("t", 0, ["4", 5])), 'partitions[0] (t-0): "replicas" must be a list of broker ids, got ["4", 5]'),
    (plan(("t", 0, [4.5])), '"replicas" must be a list of broker ids, got [4.5]'),
    ({"partitions": [{"topic": "t", "partition": 0}]}, '"replicas" must be a list of broker ids, got null'),
    (plan(("t", 0, [])), "Partition replica list cannot be empty: t-0"),
    (plan(("t", 0, [1]), ("t", 0, [2])), "Partition reassignment contains duplicate topic partitions: t-0"),
    (
        plan(("t", 0, [4, 4, 5]), ("t", 1, [1, 2])),
        "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 4",
    ),
]


@pytest.mark.parametrize("mode", ["--execute", "--verify"])
@pytest.mark.parametrize(("content", "message"), BAD_PLANS, ids=[m for _, m in BAD_PLANS])
def test_a_bad_reassignment_file_is_one_line_naming_it(fake, tmp_path, mode, content, message):
    path = write(tmp_path / "plan.json", content)
    line = one_error_line(invoke(fake, mode, "--reassignment-json-file", path))
    assert line.startswith(f"Error: {path}: ") and message in line, line
    assert fake.requests == []


BAD_TOPICS = [
    ("nope", "not valid JSON"),
    ({"version": 1}, '"topics" must be a list of {"topic": ...} objects'),
    ({"topics": [{"name": "t"}]}, 'topics[0] must be {"topic": "<name>"}, got {"name": "t"}'),
    ({"topics": []}, "no topics to move"),
    (
        {"topics": [{"topic": "t"}, {"topic": "t"}]},
        "List of topics to reassign contains duplicate entries: t",
    ),
]


@pytest.mark.parametrize(("content", "message"), BAD_TOPICS, ids=[m for _, m in BAD_TOPICS])
def test_a_bad_topics_file_is_one_line_naming_it(fake, tmp_path, content, message):
    path = write(tmp_path / "topics.json", content)
    line = one_error_line(
        invoke(fake, "--generate", "--topics-to-move-json-file", path, "--broker-list", "1,2,3")
    )
    assert line.startswith(f"Error: {path}: ") and message in line, line
    assert fake.requests == []


def test_a_bad_broker_list_is_refused(fake, tmp_path):
    topics = write(tmp_path / "topics.json", {"topics": [{"topic": "t"}]})
    for text in ("4,x", "", "4,,5", "-1"):
        result = invoke(fake, "--generate", "--topics-to-move-json-file", topics, "--broker-list", text)
        assert result.exit_code == 2 and "is not a list of broker ids such as 4,5,6" in result.stderr, text
    line = one_error_line(
        invoke(fake, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "4,5,4")
    )
    assert line == "Error: Broker list contains duplicate entries: 4"
    assert fake.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Kafka 3.7's validateAndParseArgs and CommandLineUtils.checkRequiredArgs (no --cancel)
        ([], "Command must include exactly one action: --generate, --execute, --verify, --list"),
        (["--execute", "--verify"], "Command must include exactly one action"),
        (["--generate", "--broker-list", "1"], 'Missing required argument "[topics-to-move-json-file]"'),
        (["--execute"], 'Missing required argument "[reassignment-json-file]"'),
        (["--verify", "--broker-list", "1"], 'Missing required argument "[reassignment-json-file]"'),
        (
            ["--verify", "--reassignment-json-file", "P", "--broker-list", "1"],
            'Option "[broker-list]" can\'t be used with action "[verify]"',
        ),
        (
            ["--verify", "--reassignment-json-file", "P", "--additional"],
            'Option "[additional]" can\'t be used with action "[verify]"',
        ),
        (
            ["--execute", "--reassignment-json-file", "P", "--preserve-throttles"],
            'Option "[preserve-throttles]" can\'t be used with action "[execute]"',
        ),
        (
            ["--list", "--reassignment-json-file", "P"],
            'Option "[reassignment-json-file]" can\'t be used with action "[list]"',
        ),
        (
            [
                "--generate",
                "--topics-to-move-json-file",
                "P",
                "--broker-list",
                "1",
                "--reassignment-json-file",
                "P",
            ],
            'Option "[reassignment-json-file]" can\'t be used with action "[generate]"',
        ),
    ],
)
def test_the_actions_and_their_options_are_checked(fake, tmp_path, args, message):
    path = write(tmp_path / "p.json", plan(("t", 0, [1])))
    result = invoke(fake, *[path if a == "P" else a for a in args])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert fake.requests == []


def test_a_missing_file_is_a_usage_error(fake, tmp_path):
    result = invoke(fake, "--execute", "--reassignment-json-file", str(tmp_path / "nowhere.json"))
    assert result.exit_code == 2 and "does not exist" in result.stderr
