"""``floodmark groups`` and ``consume --group`` without a broker (Kafka's ConsumerGroupCommand
and ConsoleConsumer forms; docs/operations.md "Consumer groups"): the tables and the JSON from
hand-built descriptions, the reset arithmetic, argument checks, the consumer-property mapping,
and the commands' flow over fake clients installed in ``sys.modules``."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cli import groups as g
from cli.common import BOOTSTRAP_ENV
from cli.consume import CommitPrinted, Progress, consumer_settings, group_settings
from cli.main import build_cli
from client.protocol.errors import ErrorCode
from client.types import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberDescription,
    OffsetAndMetadata,
    TopicPartition,
)

TP0, TP1, TP2 = (TopicPartition("orders", p) for p in range(3))


@pytest.fixture(autouse=True)
def no_ambient_bootstrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.chdir(tmp_path)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(build_cli(), list(args))


def member(name: str, *tps: TopicPartition) -> MemberDescription:
    return MemberDescription(f"{name}-1b2c", None, name, "/127.0.0.1", tuple(tps))


def stable(*members: MemberDescription) -> ConsumerGroupDescription:
    return ConsumerGroupDescription("billing", "Stable", "consumer", "range", 2, tuple(members))


EMPTY = ConsumerGroupDescription("billing", "Empty", "consumer", "", 2)
DEAD = ConsumerGroupDescription("ghost", "Dead", "", "", 1)


# -- describe: rows, tables, JSON --------------------------------------------------------------------


def test_offset_rows_cover_assigned_and_committed_partitions_then_idle_members() -> None:
    description = stable(member("c1", TP0, TP1), member("c2"))
    rows = g.offset_rows(description, {TP0: 7, TP2: 3}, {TP0: 10, TP1: 4, TP2: 3})
    assert [(r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
        ("orders", 0, 7, 10, 3),
        ("orders", 1, None, 4, None),  # assigned, nothing committed: still shown, no lag
        ("orders", 2, 3, 3, 0),  # committed, no longer assigned
        (None, None, None, None, None),  # c2 has no partitions
    ]
    assert [r.member.client_id if r.member else None for r in rows] == ["c1", "c1", None, "c2"]


def test_offsets_table_is_kafkas_layout() -> None:
    description = stable(member("c1", TP0, TP1))
    lines = g.offsets_table("billing", g.offset_rows(description, {TP0: 7}, {TP0: 10, TP1: 4}))
    assert lines == [
        "",
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
        "CONSUMER-ID     HOST            CLIENT-ID",
        "billing         orders          0          7               10              3               "
        "c1-1b2c         /127.0.0.1      c1",
        "billing         orders          1          -               4               -               "
        "c1-1b2c         /127.0.0.1      c1",
    ]


def test_columns_widen_for_long_values() -> None:
    long_id = "floodmark-consumer-0123456789abcdef"
    description = stable(MemberDescription(long_id, None, "cid", "/10.0.0.1", (TP0,)))
    header, row = g.offsets_table("billing", g.offset_rows(description, {}, {TP0: 1}))[1:]
    assert header.index("HOST") == row.index("/10.0.0.1") == row.index(long_id) + len(long_id) + 1


def test_members_and_state_tables() -> None:
    description = stable(member("c1", TP0, TP1), member("c2", TP2))
    assert g.members_table(description) == [
        "",
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS",
        "billing         c1-1b2c         /127.0.0.1      c1              2",
        "billing         c2-1b2c         /127.0.0.1      c2              1",
    ]
    assert g.state_table(description, "127.0.0.1:9093  (2)") == [
        "",
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE           #MEMBERS",
        "billing         127.0.0.1:9093  (2)       range                Stable          2",
    ]


def test_describe_json_has_exactly_the_documented_keys() -> None:
    description = stable(member("c1", TP0))
    doc = g.describe_document(description, g.offset_rows(description, {TP2: 5}, {TP0: 9}))
    assert doc == {
        "group": "billing",
        "state": "Stable",
        "protocol": "range",
        "coordinator": 2,
        "members": [
            {
                "member_id": "c1-1b2c",
                "client_id": "c1",
                "host": "/127.0.0.1",
                "assignment": [{"topic": "orders", "partition": 0}],
            }
        ],
        "offsets": [
            {"topic": "orders", "partition": 0, "current_offset": None, "log_end_offset": 9, "lag": None, "member_id": "c1-1b2c"},
            {"topic": "orders", "partition": 2, "current_offset": 5, "log_end_offset": None, "lag": None, "member_id": None},
        ],
    }  # fmt: skip
    assert g.describe_document(EMPTY, [])["protocol"] is None
    json.dumps(doc)


def test_state_notices_are_kafkas() -> None:
    assert g.state_notice(EMPTY) == "Consumer group 'billing' has no active members."
    rebalancing = ConsumerGroupDescription("billing", "PreparingRebalance", "consumer", "", 2)
    assert g.state_notice(rebalancing) == "Warning: Consumer group 'billing' is rebalancing."
    assert g.state_notice(stable()) is None


# -- reset-offsets arithmetic ------------------------------------------------------------------------


STARTS = {TP0: 5, TP1: 0}
ENDS = {TP0: 50, TP1: 20}


@pytest.mark.parametrize(
    ("mode", "value", "expected"),
    [
        ("to_earliest", None, {TP0: 5, TP1: 0}),
        ("to_latest", None, {TP0: 50, TP1: 20}),
        ("to_offset", 10, {TP0: 10, TP1: 10}),
        ("to_offset", 100, {TP0: 50, TP1: 20}),  # clamped to the log end
        ("to_offset", 0, {TP0: 5, TP1: 0}),  # and to the log start
        ("shift_by", -5, {TP0: 5, TP1: 10}),
        ("shift_by", 30, {TP0: 40, TP1: 20}),
    ],
)
def test_new_offsets_are_clamped_to_the_log(mode: str, value: Any, expected: dict) -> None:
    assert g.new_offsets(mode, value, [TP0, TP1], STARTS, ENDS, {TP0: 10, TP1: 15}) == expected


def test_to_datetime_falls_back_to_the_log_end() -> None:
    assert g.new_offsets("to_datetime", 0, [TP0, TP1], STARTS, ENDS, {}, {TP0: 12}) == {TP0: 12, TP1: 20}


def test_shift_by_needs_a_committed_offset() -> None:
    with pytest.raises(click.ClickException, match="Cannot shift offset for partition orders-1 since there"):
        g.new_offsets("shift_by", 1, [TP0, TP1], STARTS, ENDS, {TP0: 10})


def test_reset_table() -> None:
    assert g.reset_table("billing", {TP1: 3, TP0: 0}) == [
        "",
        "GROUP                          TOPIC                          PARTITION  NEW-OFFSET",
        "billing                        orders                         0          0",
        "billing                        orders                         1          3",
    ]


def test_topic_specs_and_datetimes() -> None:
    assert g.parse_topic_spec("orders") == ("orders", None)
    assert g.parse_topic_spec("orders:2,0,2") == ("orders", [0, 2])
    for bad in ("orders:x", ":1", "orders:1,", "orders:-1"):
        with pytest.raises(click.BadParameter):
            g.parse_topic_spec(bad)
    assert g.parse_datetime_ms("1970-01-01T00:00:01.500Z") == 1500
    assert g.parse_datetime_ms("1970-01-01T01:00:00+01:00") == 0
    with pytest.raises(click.BadParameter, match="not a date-time"):
        g.parse_datetime_ms("yesterday")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "t", "--execute"], "takes exactly one of --to-earliest"),
        (["--topic", "t", "--to-earliest", "--to-latest"], "takes exactly one of"),
        (
            ["--topic", "t", "--to-earliest", "--dry-run", "--execute"],
            "only accepts one of --execute, --dry-run",
        ),
        (["--to-earliest", "--dry-run"], "takes one of these options: --all-topics, --topic"),
        (["--topic", "t", "--all-topics", "--to-earliest"], "--all-topics, --topic"),
        (["--topic", "t:a", "--to-earliest"], "expected TOPIC or TOPIC:P1,P2"),
        (["--topic", "t", "--to-datetime", "soon"], "is not a date-time"),
        (["--topic", "t", "--to-offset", "-1"], "--to-offset"),
    ],
)
def test_reset_offsets_validates_its_arguments(args: list[str], message: str) -> None:
    result = invoke("groups", "reset-offsets", "--bootstrap-server", "h:1", "--group", "billing", *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_describe_takes_one_view() -> None:
    result = invoke("groups", "describe", "--bootstrap-server", "h:1", "--group", "g", "--members", "--state")
    assert result.exit_code == 2 and "at most one of these options" in result.stderr


def test_delete_report_lines() -> None:
    assert g.delete_report({"a": None, "b": None}) == (
        ["Deletion of requested consumer groups ('a', 'b') was successful."],
        [],
    )
    out, errors = g.delete_report({"a": None, "b": int(ErrorCode.NON_EMPTY_GROUP), "c": 69})
    assert out == ["These other groups were deleted successfully: 'a'"]
    assert errors == [
        "Error: Deletion of some consumer groups failed:",
        "* Group 'b' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty.",
        "* Group 'c' could not be deleted due to: GROUP_ID_NOT_FOUND: The group id does not exist.",
    ]


# -- the commands over fake clients ------------------------------------------------------------------


@dataclass
class FakeCluster:
    descriptions: dict[str, ConsumerGroupDescription] = field(default_factory=dict)
    committed: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    altered: list[tuple[str, dict]] = field(default_factory=list)
    deleted: dict[str, int | None] = field(default_factory=dict)
    ends: dict[TopicPartition, int] = field(default_factory=dict)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    state = FakeCluster()

    class AdminClient:
        cluster = SimpleNamespace(broker=lambda node: SimpleNamespace(host="127.0.0.1", port=9090 + node))

        def __init__(self, bootstrap: str, **config: Any) -> None:
            pass

        async def start(self) -> None:
            pass

        async def close(self) -> None:
            pass

        async def list_consumer_groups(self) -> list[ConsumerGroupListing]:
            return [
                ConsumerGroupListing(name, "consumer", d.state)
                for name, d in sorted(state.descriptions.items())
            ]

        async def describe_consumer_groups(self, ids: list[str]) -> dict:
            return {i: state.descriptions.get(i, DEAD) for i in ids}

        async def list_consumer_group_offsets(self, group: str) -> dict:
            return {tp: OffsetAndMetadata(o) for tp, o in state.committed.get(group, {}).items()}

        async def alter_consumer_group_offsets(self, group: str, offsets: dict) -> None:
            state.altered.append((group, dict(offsets)))

        async def delete_consumer_groups(self, ids: tuple[str, ...]) -> dict:
            return {i: state.deleted.get(i) for i in ids}

        async def describe_topics(self, names: set[str]) -> list:
            parts = [SimpleNamespace(partition=p) for p in range(3)]
            return [SimpleNamespace(name=n, partitions=parts) for n in names if n == "orders"]

    class Consumer:
        def __init__(self, bootstrap: str, **config: Any) -> None:
            pass

        async def start(self) -> None:
            pass

        async def close(self) -> None:
            pass

        async def end_offsets(self, tps: list) -> dict:
            return {tp: state.ends.get(tp, 0) for tp in tps}

        async def beginning_offsets(self, tps: list) -> dict:
            return dict.fromkeys(tps, 0)

    monkeypatch.setitem(sys.modules, "client.admin", types.SimpleNamespace(AdminClient=AdminClient))
    monkeypatch.setitem(sys.modules, "client.consumer", types.SimpleNamespace(Consumer=Consumer))
    return state


def test_list_and_describe(fake: FakeCluster) -> None:
    fake.descriptions["billing"] = stable(member("c1", TP0))
    fake.committed["billing"] = {TP0: 4}
    fake.ends = {TP0: 10}
    assert invoke("groups", "list", "--bootstrap-server", "h:1").stdout == "billing\n"
    listed = json.loads(invoke("groups", "list", "--bootstrap-server", "h:1", "--json").stdout)
    assert listed == [{"group": "billing", "protocol_type": "consumer", "state": "Stable"}]
    result = invoke("groups", "describe", "--bootstrap-server", "h:1", "--group", "billing")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines()[2].split() == ["billing", "orders", "0", "4", "10", "6", "c1-1b2c", "/127.0.0.1", "c1"]  # fmt: skip
    state = invoke("groups", "describe", "--bootstrap-server", "h:1", "--group", "billing", "--state")
    assert "127.0.0.1:9092  (2)" in state.stdout


def test_describe_of_an_empty_and_of_an_unknown_group(fake: FakeCluster) -> None:
    fake.descriptions["billing"] = EMPTY
    result = invoke("groups", "describe", "--bootstrap-server", "h:1", "--group", "billing")
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == "Consumer group 'billing' has no active members.\n"
    ghost = invoke("groups", "describe", "--bootstrap-server", "h:1", "--group", "ghost", "--json")
    assert ghost.exit_code == 1 and ghost.stderr == "Error: Consumer group 'ghost' does not exist.\n"


def test_reset_is_refused_while_the_group_has_members(fake: FakeCluster) -> None:
    fake.descriptions["billing"] = stable(member("c1", TP0))
    result = invoke(
        "groups", "reset-offsets", "--bootstrap-server", "h:1", "--group", "billing", "--topic", "orders",
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert result.exit_code == 1 and fake.altered == []
    assert result.stderr == (
        "Error: Assignments can only be reset if the group 'billing' is inactive, "
        "but the current state is Stable.\n"
    )


def test_reset_dry_run_writes_nothing_and_execute_commits(fake: FakeCluster) -> None:
    fake.descriptions["billing"] = EMPTY
    fake.committed["billing"] = {TP0: 8, TP1: 8}
    fake.ends = {TP0: 10, TP1: 10, TP2: 10}
    args = ["groups", "reset-offsets", "--bootstrap-server", "h:1", "--group", "billing"]
    dry = invoke(*args, "--topic", "orders:0", "--shift-by", "-5", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.splitlines()[2].split() == ["billing", "orders", "0", "3"] and fake.altered == []
    warned = invoke(*args, "--all-topics", "--to-latest")
    assert "WARN: No action will be performed" in warned.stderr and fake.altered == []
    done = invoke(*args, "--all-topics", "--to-offset", "99", "--execute")
    assert done.exit_code == 0 and fake.altered == [("billing", {TP0: 10, TP1: 10})]
    missing = invoke(*args, "--topic", "orders:7", "--to-earliest", "--execute")
    assert missing.exit_code == 1 and "has no partition 7" in missing.stderr


def test_delete_exit_codes(fake: FakeCluster) -> None:
    ok = invoke("groups", "delete", "--bootstrap-server", "h:1", "--group", "a")
    assert ok.exit_code == 0 and ok.stdout == "Deletion of requested consumer groups ('a') was successful.\n"
    fake.deleted["busy"] = int(ErrorCode.NON_EMPTY_GROUP)
    refused = invoke("groups", "delete", "--bootstrap-server", "h:1", "--group", "busy")
    assert refused.exit_code == 1
    assert (
        "* Group 'busy' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty."
        in refused.stderr
    )


# -- consume --group ---------------------------------------------------------------------------------


def test_consumer_properties_map_to_config_fields() -> None:
    assert consumer_settings(
        {
            "auto.offset.reset": "earliest",
            "session.timeout.ms": "6000",
            "enable.auto.commit": "TRUE",
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RoundRobinAssignor,range",
            "client.id": "me",
        }
    ) == {
        "auto_offset_reset": "earliest",
        "session_timeout_ms": 6000,
        "enable_auto_commit": True,
        "partition_assignment_strategy": ("roundrobin", "range"),
        "client_id": "me",
    }
    assert consumer_settings({"partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"}) == {
        "partition_assignment_strategy": ("range",)
    }  # fmt: skip


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"key.deserializer": "x"}, "unknown consumer property 'key.deserializer'"),
        ({"session.timeout.ms": "soon"}, "expected an integer"),
        ({"enable.auto.commit": "yes"}, "expected true or false"),
        ({"partition.assignment.strategy": "sticky"}, "assignors are range, roundrobin"),
        ({"auto.offset.reset": "middle"}, "auto_offset_reset must be"),
    ],
)
def test_bad_consumer_properties(props: dict, message: str) -> None:
    with pytest.raises(click.BadParameter, match=message):
        consumer_settings(props)


def test_group_settings_follow_the_console_consumer() -> None:
    assert group_settings({}, "g", None, True) == {
        "group_id": "g",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
    }
    assert group_settings({"group.id": "g"}, None, None, False)["auto_offset_reset"] == "latest"
    assert group_settings({}, None, None, True) == {}  # no group: the start is sought explicitly
    with pytest.raises(click.UsageError, match="Options group and partition cannot be specified together."):
        group_settings({}, "g", 0, False)
    with pytest.raises(click.UsageError, match="do not match"):
        group_settings({"group.id": "h"}, "g", None, False)
    with pytest.raises(click.UsageError, match="--from-beginning and 'auto.offset.reset=latest'"):
        group_settings({"auto.offset.reset": "latest"}, "g", None, True)


def test_consume_group_with_partition_is_a_usage_error() -> None:
    result = invoke(
        "consume", "--bootstrap-server", "h:1", "--topic", "t", "--group", "g", "--partition", "0"
    )
    assert (
        result.exit_code == 2 and "Options group and partition cannot be specified together." in result.stderr
    )


@dataclass
class GroupConsumer:
    batches: list[list[Any]]
    calls: list[Any] = field(default_factory=list)
    listener: Any = None

    async def start(self) -> None:
        pass

    async def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        return [0, 1]

    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        self.calls.append(("subscribe", topics))
        self.listener = listener

    async def poll(self, timeout_ms: int, max_records: int) -> list[Any]:
        if self.batches:
            return self.batches.pop(0)[:max_records]
        await asyncio.sleep(0.01)
        return []

    async def commit(self, offsets: dict) -> None:
        self.calls.append(("commit", dict(offsets)))

    async def close(self) -> None:
        self.calls.append(("close",))


def rec(partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(topic="t", partition=partition, offset=offset, key=None, value=b"v%d" % offset)


def test_consume_group_commits_exactly_what_it_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = GroupConsumer([[rec(0, 4), rec(1, 0), rec(0, 5)], [rec(1, 1), rec(1, 2), rec(0, 6)]])
    created: list[dict] = []

    def make(bootstrap: str, **config: Any) -> GroupConsumer:
        created.append(config)
        return consumer

    monkeypatch.setitem(sys.modules, "client.consumer", types.SimpleNamespace(Consumer=make))
    result = invoke(
        "consume", "--bootstrap-server", "h:1", "--topic", "t", "--group", "g", "--max-messages", "5",
        "--from-beginning", "--consumer-property", "session.timeout.ms=6000",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "v4\nv0\nv5\nv1\nv2\n"  # the sixth record was never printed
    assert created == [
        {"session_timeout_ms": 6000, "group_id": "g", "auto_offset_reset": "earliest", "enable_auto_commit": False}
    ]  # fmt: skip
    assert consumer.calls == [
        ("subscribe", ["t"]),
        ("commit", {("t", 0): 6, ("t", 1): 3}),
        ("close",),
    ]


def test_revoked_partitions_commit_what_was_printed_of_them() -> None:
    consumer = GroupConsumer([])
    progress = Progress(count=3, pending={("t", 0): 6, ("t", 1): 2})
    asyncio.run(CommitPrinted(consumer, progress).on_partitions_revoked({TopicPartition("t", 1)}))
    assert consumer.calls == [("commit", {("t", 1): 2})]
    assert progress.pending == {("t", 0): 6}
