"""The ``floodmark`` CLI without a broker (SPEC 7): help, bootstrap resolution, argument checks,
one-line errors, and the output formats (kafka-topics, console producer/consumer, Kafka's perf
tools). The client library is replaced by small fakes installed in ``sys.modules``, so these tests
exercise only the CLI's own logic.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cli import common, perf, topics
from cli.common import BOOTSTRAP_ENV, CliError, client_kwargs, resolve_bootstrap, run
from cli.main import build_cli
from cli.produce import split_key
from client.protocol.api import ConfigSource
from client.protocol.errors import ErrorCode, KafkaError
from client.types import Config, ConfigEntry, ConfigResource
from devcluster.ports import free_port


@pytest.fixture(autouse=True)
def no_ambient_bootstrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's $FLOODMARK_BOOTSTRAP or ./.floodmark."""
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)


def invoke(*args: str, input: bytes | str | None = None, cli: click.Group | None = None) -> Any:
    return CliRunner().invoke(cli or build_cli(), list(args), input=input)


def assert_one_error_line(result: Any, exit_code: int = 1) -> str:
    assert result.exit_code == exit_code, (result.output, result.stderr)
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


# -- help ----------------------------------------------------------------------------------------


def _all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield prefix
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _all_commands(command, (*prefix, name))
        else:
            yield (*prefix, name)


COMMANDS = list(_all_commands(build_cli()))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "floodmark")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: floodmark")


def test_the_command_tree_has_the_documented_forms() -> None:
    expected = {
        ("cluster", "up"),
        ("cluster", "status"),
        ("cluster", "down"),
        ("cluster", "kill"),
        ("cluster", "start"),
        ("topics", "create"),
        ("topics", "list"),
        ("topics", "describe"),
        ("topics", "delete"),
        ("produce",),
        ("consume",),
        ("perf", "produce"),
        ("perf", "consume"),
    }
    assert expected <= set(COMMANDS)
    cli = build_cli()
    for path in expected - {("cluster", "up"), ("cluster", "status"), ("cluster", "down")}:
        command = cli
        for name in path:
            command = command.commands[name]
        if path[0] != "cluster":
            assert "--bootstrap-server" in {opt for p in command.params for opt in p.opts}, path


def test_console_script_is_declared() -> None:
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert 'floodmark = "cli.main:main"' in pyproject


# -- bootstrap resolution ------------------------------------------------------------------------


def _state_file(directory: Path, bootstrap: str) -> None:
    (directory / ".floodmark").mkdir()
    (directory / ".floodmark" / "cluster.json").write_text(
        json.dumps({"status": "running", "bootstrap": bootstrap})
    )


def test_bootstrap_flag_wins_over_env_and_state_file(tmp_path: Path) -> None:
    _state_file(tmp_path, "127.0.0.1:3")
    env = {BOOTSTRAP_ENV: "127.0.0.1:2"}
    assert resolve_bootstrap("127.0.0.1:1", env, tmp_path) == "127.0.0.1:1"
    assert resolve_bootstrap(None, env, tmp_path) == "127.0.0.1:2"
    assert resolve_bootstrap(None, {}, tmp_path) == "127.0.0.1:3"
    assert resolve_bootstrap(None, {BOOTSTRAP_ENV: ""}, tmp_path) == "127.0.0.1:3"


def test_no_bootstrap_anywhere_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="no bootstrap servers: pass --bootstrap-server"):
        resolve_bootstrap(None, {}, tmp_path)


def test_a_broken_state_file_is_named(tmp_path: Path) -> None:
    (tmp_path / ".floodmark").mkdir()
    (tmp_path / ".floodmark" / "cluster.json").write_text("{not json")
    with pytest.raises(CliError, match=r"cannot read the bootstrap servers from .*cluster\.json"):
        resolve_bootstrap(None, {}, tmp_path)


# -- fakes of the client library -----------------------------------------------------------------


@dataclass
class FakeClient:
    """Records what the commands asked of the library; scripted answers."""

    created: list[tuple[str, Any]] = field(default_factory=list)
    sent: list[tuple[str, bytes | None, bytes]] = field(default_factory=list)
    fail_values: set[bytes] = field(default_factory=set)
    batches: list[list[Any]] = field(default_factory=list)
    partitions: dict[str, set[int]] = field(default_factory=lambda: {"t": {0, 1}})
    seeks: list[tuple[str, Any]] = field(default_factory=list)
    descriptions: list[Any] = field(default_factory=list)
    live: list[int] = field(default_factory=lambda: [1, 2, 3])
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)  # topic -> its overrides


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    state = FakeClient()

    class Producer:
        def __init__(self, bootstrap: str, **config: Any) -> None:
            state.created.append(("producer", (bootstrap, config)))

        async def start(self) -> None:
            pass

        async def send(
            self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None
        ):
            future = asyncio.get_running_loop().create_future()
            state.sent.append((topic, key, value))
            if value in state.fail_values:
                future.set_exception(
                    KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "isr 1 < min.insync.replicas 2")
                )
            else:
                future.set_result(
                    SimpleNamespace(topic=topic, partition=0, offset=len(state.sent) - 1, timestamp=0)
                )
            return future

        async def flush(self) -> None:
            pass

        async def close(self) -> None:
            pass

    class Consumer:
        def __init__(self, bootstrap: str, **config: Any) -> None:
            state.created.append(("consumer", (bootstrap, config)))

        async def start(self) -> None:
            pass

        async def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> set[int] | None:
            return state.partitions.get(topic)

        def assign(self, tps: list[Any]) -> None:
            state.seeks.append(("assign", [tuple(tp) for tp in tps]))

        def seek(self, tp: Any, offset: int) -> None:
            state.seeks.append(("seek", (tuple(tp), offset)))

        async def seek_to_beginning(self, *tps: Any) -> None:
            state.seeks.append(("beginning", [tuple(tp) for tp in tps]))

        async def seek_to_end(self, *tps: Any) -> None:
            state.seeks.append(("end", [tuple(tp) for tp in tps]))

        async def poll(self, timeout_ms: int, max_records: int) -> list[Any]:
            if state.batches:
                return state.batches.pop(0)
            await asyncio.sleep(min(timeout_ms, 10) / 1000)
            return []

        async def close(self) -> None:
            pass

    class AdminClient:
        def __init__(self, bootstrap: str, **config: Any) -> None:
            state.created.append(("admin", (bootstrap, config)))

        async def start(self) -> None:
            pass

        async def close(self) -> None:
            pass

        async def create_topic(self, name, num_partitions, replication_factor, configs, timeout_ms) -> None:
            if name == "exists":
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            state.created.append(("topic", (name, num_partitions, replication_factor, configs)))

        async def list_topics(self) -> list[str]:
            return ["a", "b"]

        async def describe_topics(self, names=None) -> list[Any]:
            return [d for d in state.descriptions if names is None or d.name in names]

        async def describe_cluster(self) -> Any:
            return SimpleNamespace(brokers=[SimpleNamespace(node_id=i) for i in state.live])

        async def delete_topics(self, names):
            return {name: None for name in names}

        async def describe_configs(self, resources, include_synonyms=False) -> dict[Any, Any]:
            dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG
            return {
                r: Config(
                    tuple(ConfigEntry(k, v, dynamic) for k, v in state.overrides.get(r.name, {}).items())
                )
                for r in resources
            }

    TopicPartition = __import__("collections").namedtuple("TopicPartition", "topic partition")
    for name, attrs in {
        "client.producer": {"Producer": Producer},
        "client.consumer": {"Consumer": Consumer},
        "client.admin": {"AdminClient": AdminClient},
        "client.types": {"TopicPartition": TopicPartition, "ConfigResource": ConfigResource},
    }.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    return state


def record(value: bytes | None, key: bytes | None = None) -> SimpleNamespace:
    return SimpleNamespace(topic="t", partition=0, offset=0, timestamp=0, key=key, value=value, headers=[])


def test_the_env_bootstrap_reaches_the_client(fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV, "10.0.0.1:9092")
    assert invoke("topics", "list").stdout == "a\nb\n"
    _state_file(Path.cwd(), "127.0.0.1:1")
    assert invoke("topics", "list", "--bootstrap-server", "h:1").exit_code == 0
    monkeypatch.delenv(BOOTSTRAP_ENV)
    assert invoke("topics", "list").exit_code == 0
    assert [c[1][0] for c in fake.created if c[0] == "admin"] == ["10.0.0.1:9092", "h:1", "127.0.0.1:1"]


def test_a_command_without_bootstrap_prints_one_line(fake: FakeClient) -> None:
    line = assert_one_error_line(invoke("topics", "list"))
    assert line.startswith("Error: no bootstrap servers: pass --bootstrap-server HOST:PORT")


# -- errors are one line -------------------------------------------------------------------------


def _cli_raising(exc: BaseException) -> click.Group:
    cli = build_cli()

    @cli.command()
    def boom() -> None:
        async def fail() -> None:
            raise exc

        run(fail())

    return cli


def test_a_kafka_error_is_one_line_and_exit_1() -> None:
    cli = _cli_raising(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "partition t-0 is led by broker 2\nnow"))
    result = invoke("boom", cli=cli)
    assert (
        assert_one_error_line(result) == "Error: NOT_LEADER_OR_FOLLOWER: partition t-0 is led by broker 2 now"
    )
    assert result.stdout == ""


def test_expected_and_unexpected_errors_are_one_line() -> None:
    refused = invoke("boom", cli=_cli_raising(ConnectionRefusedError(111, "Connection refused")))
    assert assert_one_error_line(refused) == "Error: [Errno 111] Connection refused"
    bug = invoke("boom", cli=_cli_raising(ZeroDivisionError("division by zero")))
    assert assert_one_error_line(bug).startswith("Error: internal error: ZeroDivisionError: division by zero")


def test_debug_shows_the_traceback_of_unexpected_errors() -> None:
    result = CliRunner().invoke(_cli_raising(ZeroDivisionError("x")), ["--debug", "boom"])
    assert isinstance(result.exception, ZeroDivisionError)


def test_ctrl_c_exits_130() -> None:
    result = invoke("boom", cli=_cli_raising(KeyboardInterrupt()))
    assert result.exit_code == 130 and "Traceback" not in result.output


def test_a_closed_port_is_one_readable_line() -> None:
    """Connecting to a port nobody listens on: the real BrokerConnection's error, one line."""
    port = free_port()
    cli = build_cli()

    @cli.command()
    def connect() -> None:
        from client.connection import BrokerConnection

        run(BrokerConnection.open("127.0.0.1", port, timeout=5))

    line = assert_one_error_line(invoke("connect", cli=cli))
    assert line.startswith(f"Error: NETWORK_EXCEPTION: cannot connect to 127.0.0.1:{port}")


@pytest.mark.timeout(120)
def test_topics_list_against_a_closed_port_is_one_line() -> None:
    """The same through a real command and the real client library (whatever state it is in)."""
    assert_one_error_line(invoke("topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"))


# -- topics --------------------------------------------------------------------------------------


def _partition(p: int, leader: int, replicas: list[int], isr: list[int], epoch: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        partition=p, leader=leader, leader_epoch=epoch, replicas=replicas, isr=isr, offline_replicas=[]
    )


DESCRIPTIONS = [
    SimpleNamespace(
        name="orders",
        error_code=0,
        is_internal=False,
        partitions=[_partition(1, 2, [2, 3, 1], [2, 3], 4), _partition(0, 1, [1, 2, 3], [1, 2, 3], 3)],
    ),
    SimpleNamespace(
        name="audit", error_code=0, is_internal=False, partitions=[_partition(0, -1, [3], [3], 7)]
    ),
]


def test_describe_prints_kafkas_format(fake: FakeClient) -> None:
    fake.descriptions = DESCRIPTIONS
    fake.overrides = {"orders": {"retention.ms": "1000", "min.insync.replicas": "2"}}
    result = invoke("topics", "describe", "--bootstrap-server", "h:1")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Topic: audit\tTopicId: -\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ",
        "\tTopic: audit\tPartition: 0\tLeader: none\tReplicas: 3\tIsr: 3",
        "Topic: orders\tTopicId: -\tPartitionCount: 2\tReplicationFactor: 3\t"
        "Configs: min.insync.replicas=2,retention.ms=1000",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3",
    ]


def test_describe_filters_print_only_matching_partitions(fake: FakeClient) -> None:
    fake.descriptions = DESCRIPTIONS
    under = invoke("topics", "describe", "--bootstrap-server", "h:1", "--under-replicated-partitions")
    assert under.stdout.splitlines() == [
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3"
    ]
    fake.live = [1, 3]  # broker 2 is down: its leadership is unavailable too
    unavailable = invoke("topics", "describe", "--bootstrap-server", "h:1", "--unavailable-partitions")
    assert unavailable.stdout.splitlines() == [
        "\tTopic: audit\tPartition: 0\tLeader: none\tReplicas: 3\tIsr: 3",
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3",
    ]


def test_describe_json(fake: FakeClient) -> None:
    fake.descriptions = DESCRIPTIONS
    result = invoke("topics", "describe", "--bootstrap-server", "h:1", "--topic", "orders", "--json")
    assert json.loads(result.stdout) == [
        {
            "topic": "orders",
            "partitions": [
                {
                    "partition": 0,
                    "leader": 1,
                    "leader_epoch": 3,
                    "replicas": [1, 2, 3],
                    "isr": [1, 2, 3],
                    "offline_replicas": [],
                },
                {
                    "partition": 1,
                    "leader": 2,
                    "leader_epoch": 4,
                    "replicas": [2, 3, 1],
                    "isr": [2, 3],
                    "offline_replicas": [],
                },
            ],
            "configs": {},
        }
    ]
    configs = SimpleNamespace(
        **vars(DESCRIPTIONS[1]), configs={"retention.ms": "1000", "cleanup.policy": "delete"}
    )
    assert topics.describe_text([configs])[0].endswith("Configs: cleanup.policy=delete,retention.ms=1000")


def test_describe_of_a_missing_topic_is_its_kafka_error(fake: FakeClient) -> None:
    fake.descriptions = [SimpleNamespace(name="nope", error_code=3, partitions=[], is_internal=False)]
    line = assert_one_error_line(invoke("topics", "describe", "--bootstrap-server", "h:1", "--topic", "nope"))
    assert line == "Error: UNKNOWN_TOPIC_OR_PARTITION: topic nope"


def test_create_list_delete(fake: FakeClient) -> None:
    created = invoke(
        "topics", "create", "--bootstrap-server", "h:1", "--topic", "t1",
        "--partitions", "3", "--replication-factor", "2", "--config", "min.insync.replicas=2",
    )  # fmt: skip
    assert created.exit_code == 0 and created.stdout == "Created topic t1.\n"
    assert ("topic", ("t1", 3, 2, {"min.insync.replicas": "2"})) in fake.created
    exists = invoke(
        "topics",
        "create",
        "--bootstrap-server",
        "h:1",
        "--topic",
        "exists",
        "--partitions",
        "1",
        "--replication-factor",
        "1",
    )
    assert assert_one_error_line(exists) == "Error: TOPIC_ALREADY_EXISTS: Topic 'exists' already exists."
    quiet = invoke(
        "topics", "create", "--bootstrap-server", "h:1", "--topic", "exists",
        "--partitions", "1", "--replication-factor", "1", "--if-not-exists",
    )  # fmt: skip
    assert quiet.exit_code == 0 and quiet.stdout == ""
    assert invoke("topics", "list", "--bootstrap-server", "h:1").stdout == "a\nb\n"
    deleted = invoke("topics", "delete", "--bootstrap-server", "h:1", "--topic", "t1")
    assert deleted.exit_code == 0 and deleted.stdout == "Topic t1 is marked for deletion.\n"


def test_create_validates_its_arguments() -> None:
    assert (
        invoke("topics", "create", "--topic", "t", "--partitions", "0", "--replication-factor", "1").exit_code
        == 2
    )
    assert invoke("topics", "create", "--topic", "t", "--partitions", "1").exit_code == 2
    bad = invoke(
        "topics",
        "create",
        "--topic",
        "t",
        "--partitions",
        "1",
        "--replication-factor",
        "1",
        "--config",
        "nokey",
    )
    assert bad.exit_code == 2 and "expected key=value" in bad.stderr


# -- produce -------------------------------------------------------------------------------------


def test_produce_validates_its_arguments() -> None:
    assert invoke("produce").exit_code == 2  # --topic is required
    acks = invoke("produce", "--topic", "t", "--acks", "2", "--bootstrap-server", "h:1")
    assert acks.exit_code == 2 and "--acks" in acks.stderr
    empty = invoke("produce", "--topic", "t", "--key-separator", "", "--bootstrap-server", "h:1")
    assert empty.exit_code == 2 and "--key-separator" in empty.stderr
    props = invoke("produce", "--topic", "t", "--producer-property", "linger.ms", "--bootstrap-server", "h:1")
    assert props.exit_code == 2 and "--producer-property" in props.stderr


def test_split_key() -> None:
    assert split_key(b"k:v:w", b":", 1) == (b"k", b"v:w")
    assert split_key(b"just a value", None, 1) == (None, b"just a value")
    with pytest.raises(CliError, match="No key separator found on line number 7: 'novalue'"):
        split_key(b"novalue", b":", 7)


def test_produce_sends_one_record_per_line(fake: FakeClient) -> None:
    result = invoke(
        "produce", "--topic", "t", "--bootstrap-server", "h:1", "--acks", "1", input=b"one\r\ntwo\n\nthree"
    )
    assert result.exit_code == 0, result.stderr
    assert fake.sent == [("t", None, b"one"), ("t", None, b"two"), ("t", None, b""), ("t", None, b"three")]
    assert ("producer", ("h:1", {"acks": 1})) in fake.created


def test_produce_parses_keys(fake: FakeClient) -> None:
    result = invoke(
        "produce",
        "--topic",
        "t",
        "--bootstrap-server",
        "h:1",
        "--key-separator",
        ":",
        input="k1:v1\nk2:v:2\n",
    )
    assert result.exit_code == 0, result.stderr
    assert fake.sent == [("t", b"k1", b"v1"), ("t", b"k2", b"v:2")]
    tabbed = invoke("produce", "--topic", "t", "--bootstrap-server", "h:1", "--parse-key", input="k3\tv3\n")
    assert tabbed.exit_code == 0 and fake.sent[-1] == ("t", b"k3", b"v3")
    missing = invoke(
        "produce", "--topic", "t", "--bootstrap-server", "h:1", "--parse-key", input="k\tv\nnokey\n"
    )
    assert "No key separator found on line number 2: 'nokey'" in missing.stderr and missing.exit_code == 1


def test_produce_counts_unacknowledged_records(fake: FakeClient) -> None:
    fake.fail_values = {b"bad1", b"bad2"}
    result = invoke("produce", "--topic", "t", "--bootstrap-server", "h:1", input="ok\nbad1\nok\nbad2\n")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == "Error: 2 of 4 records were not acknowledged"
    assert "error: record on line 2 was not acknowledged: NOT_ENOUGH_REPLICAS" in result.stderr
    assert ("producer", ("h:1", {"acks": "all"})) in fake.created


# -- consume -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--offset", "5"], "--partition is required when --offset is given"),
        (["--offset", "5", "--partition", "0", "--from-beginning"], "cannot be given together"),
        (["--offset", "abc", "--partition", "0"], "is not a non-negative number, 'earliest' or 'latest'"),
        (["--offset", "-3", "--partition", "0"], "is not a non-negative number"),
        (["--max-messages", "0"], "--max-messages"),
        (["--partition", "-1"], "--partition"),
        (["--timeout-ms", "x"], "--timeout-ms"),
    ],
)
def test_consume_validates_its_arguments(args: list[str], message: str) -> None:
    result = invoke("consume", "--topic", "t", "--bootstrap-server", "h:1", *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_consume_prints_values_and_stops_at_max_messages(fake: FakeClient) -> None:
    fake.batches = [[record(b"a"), record(b"b")], [record(b"c"), record(None)]]
    result = invoke(
        "consume", "--topic", "t", "--bootstrap-server", "h:1", "--from-beginning", "--max-messages", "3"
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "a\nb\nc\n"
    assert result.stderr == "Processed a total of 3 messages\n"
    assert ("assign", [("t", 0), ("t", 1)]) in fake.seeks and (
        "beginning",
        [("t", 0), ("t", 1)],
    ) in fake.seeks


def test_consume_prints_keys_and_stops_after_the_timeout(fake: FakeClient) -> None:
    fake.batches = [[record(b"v1", b"k1"), record(b"v2", None)]]
    result = invoke(
        "consume", "--topic", "t", "--bootstrap-server", "h:1", "--print-key", "--key-separator", "=",
        "--timeout-ms", "50",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "k1=v1\nnull=v2\n"
    assert result.stderr == "Processed a total of 2 messages\n"
    assert ("end", [("t", 0), ("t", 1)]) in fake.seeks


def test_consume_one_partition_from_an_offset(fake: FakeClient) -> None:
    result = invoke(
        "consume",
        "--topic",
        "t",
        "--bootstrap-server",
        "h:1",
        "--partition",
        "1",
        "--offset",
        "42",
        "--timeout-ms",
        "0",
    )
    assert result.exit_code == 0, result.stderr
    assert ("assign", [("t", 1)]) in fake.seeks and ("seek", (("t", 1), 42)) in fake.seeks
    missing = invoke(
        "consume", "--topic", "t", "--bootstrap-server", "h:1", "--partition", "5", "--timeout-ms", "0"
    )
    assert assert_one_error_line(
        SimpleNamespace(
            exit_code=missing.exit_code,
            output=missing.output,
            stderr=missing.stderr.replace("Processed a total of 0 messages\n", ""),
        )
    ).startswith("Error: UNKNOWN_TOPIC_OR_PARTITION: topic t has no partition 5")
    nope = invoke("consume", "--topic", "nope", "--bootstrap-server", "h:1", "--timeout-ms", "0")
    assert (
        "Error: UNKNOWN_TOPIC_OR_PARTITION: topic nope does not exist" in nope.stderr and nope.exit_code == 1
    )


# -- perf: Kafka's numbers and lines -------------------------------------------------------------


def test_percentiles_use_kafkas_index() -> None:
    samples = list(range(1, 1001))
    random.Random(7).shuffle(samples)
    assert perf.percentiles(samples, (0.5, 0.95, 0.99, 0.999)) == [501, 951, 991, 1000]
    assert perf.percentiles([5, 1, 3], (0.5, 0.999)) == [3, 5]  # int(1.5) = 1, int(2.997) = 2
    assert perf.percentiles([], (0.5,)) == [0.0]


def test_producer_summary_line_from_known_latencies() -> None:
    stats = perf.ProducerStats(num_records=1000, start=0.0)
    latencies = list(range(1, 1001))
    random.Random(3).shuffle(latencies)
    for latency in latencies:
        assert stats.record(float(latency), 100, now=1.0) is None
    summary = stats.summary(now=2.0)
    assert summary.line() == (
        "1000 records sent, 500.000000 records/sec (0.05 MB/sec), 500.50 ms avg latency, "
        "1000.00 ms max latency, 501 ms 50th, 951 ms 95th, 991 ms 99th, 1000 ms 99.9th."
    )
    doc = summary.to_json()
    assert doc["records"] == 1000 and doc["p999_ms"] == 1000 and doc["avg_latency_ms"] == 500.5
    assert json.loads(json.dumps(doc)) == doc


def test_producer_window_line_every_five_seconds() -> None:
    stats = perf.ProducerStats(num_records=100, start=0.0)
    for latency in range(1, 11):
        assert stats.record(float(latency), 1024, now=1.0) is None
    line = stats.record(20.0, 1024, now=5.0)
    assert line == "11 records sent, 2.2 records/sec (0.00 MB/sec), 6.8 ms avg latency, 20.0 ms max latency."
    assert stats.window_count == 0 and stats.count == 11
    assert stats.record(1.0, 1024, now=6.0) is None


def test_latency_sampling_keeps_at_most_500000() -> None:
    stats = perf.ProducerStats(num_records=1_500_000, start=0.0)
    assert stats.sampling == 3
    for i in range(9):
        stats.record(float(i), 1, now=0.5)
    assert stats.samples == [0.0, 3.0, 6.0]
    assert perf.ProducerStats(num_records=10, start=0.0).sampling == 1


def test_throttle() -> None:
    throttle = perf.Throttler(throughput=100, start=10.0)
    assert throttle.delay(0, 10.0) == 0
    assert throttle.delay(50, 10.1) == pytest.approx(0.4)
    assert throttle.delay(50, 10.6) == 0
    assert throttle.delay(1, 10.0) == pytest.approx(0.01)
    assert perf.Throttler(throughput=-1, start=0).delay(10**9, 0) == 0


def test_payload_is_kafkas_upper_case_letters() -> None:
    payload = perf.make_payload(64, random.Random(1))
    assert len(payload) == 64 and re.fullmatch(rb"[A-Z]+", payload)


def test_consumer_perf_csv_line() -> None:
    result = perf.ConsumerResult(
        start_ms=1_700_000_000_123,
        end_ms=1_700_000_002_123,
        bytes=2 * 1024 * 1024,
        messages=1000,
        rebalance_ms=500,
    )
    assert perf.CONSUMER_HEADER == (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    start, end, *numbers = result.csv_line().split(", ")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:123", start) and end.endswith(":123")
    assert numbers == ["2.0000", "1.0000", "1000", "500.0000", "500", "1500", "1.3333", "666.6667"]


def test_perf_produce_end_to_end_with_kafka_style_props(fake: FakeClient) -> None:
    result = invoke(
        "perf", "produce", "--bootstrap-server", "h:1", "--topic", "t", "--num-records", "50",
        "--record-size", "10", "--throughput", "-1", "--producer-props", "linger.ms=5", "batch.size=1000", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["records"] == 50 and doc["failed"] == 0 and doc["bytes"] == 500 and doc["acks"] == "all"
    assert ("producer", ("h:1", {"acks": "all", "linger_ms": 5, "batch_size": 1000})) in fake.created
    assert all(len(value) == 10 for _, _, value in fake.sent) and len(fake.sent) == 50

    text = invoke(
        "perf",
        "produce",
        "--bootstrap-server",
        "h:1",
        "--topic",
        "t",
        "--num-records",
        "5",
        "--record-size",
        "1",
        "--producer-props",
        "acks=1",
    )
    assert text.exit_code == 0, text.stderr
    assert re.fullmatch(
        r"5 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
        r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.\n",
        text.stdout,
    )
    assert fake.created[-1] == ("producer", ("h:1", {"acks": 1}))


def test_perf_produce_validates_its_arguments() -> None:
    base = [
        "perf",
        "produce",
        "--bootstrap-server",
        "h:1",
        "--topic",
        "t",
        "--num-records",
        "5",
        "--record-size",
        "1",
    ]
    assert invoke(*base, "--throughput", "0").exit_code == 2
    assert invoke(*base, "stray").exit_code == 2
    assert invoke(*base, "--producer-props", "acks=7").exit_code == 2
    assert invoke("perf", "produce", "--topic", "t", "--record-size", "1").exit_code == 2


def test_perf_consume_end_to_end(fake: FakeClient) -> None:
    fake.batches = [[record(b"abc", b"k"), record(b"de")], [record(b"f")]]
    result = invoke(
        "perf", "consume", "--bootstrap-server", "h:1", "--topic", "t", "--messages", "3", "--json"
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["messages"] == 3 and doc["bytes"] == 7 and doc["timed_out"] is False
    short = invoke(
        "perf",
        "consume",
        "--bootstrap-server",
        "h:1",
        "--topic",
        "t",
        "--messages",
        "3",
        "--timeout-ms",
        "30",
    )
    assert short.exit_code == 0
    assert short.stdout.splitlines()[0] == perf.CONSUMER_HEADER
    assert "WARNING: Exiting before consuming the expected number of messages" in short.stderr


def test_client_kwargs_types() -> None:
    assert client_kwargs(
        {"linger.ms": "5", "enable.idempotence": "false", "compression-type": "gzip", "x": "1.5"}
    ) == {
        "linger_ms": 5,
        "enable_idempotence": False,
        "compression_type": "gzip",
        "x": 1.5,
    }


def test_a_perf_run_collects_less_often_and_restores_the_collector_after() -> None:
    """docs/benchmarks.md "The perf client's garbage collector": the run's threshold, and the
    process's own back afterwards, an error included."""
    import gc

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), common.load_generator_gc():
        assert gc.get_threshold() == common.LOAD_GENERATOR_GC_THRESHOLD
        assert gc.get_freeze_count() > 0
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
