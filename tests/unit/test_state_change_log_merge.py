"""``floodmark state-change-log merge`` (Kafka's StateChangeLogMerger, cli/state_change_log.py) on
hand-written state-change logs: the merge order across files with ties, each filter, the time
format against hand-written timestamps, unreadable lines, and each bad input."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from cli.state_change_log import LogReader, RecordFilter, format_time, merge_records, parse_time

#: 2023-11-14 22:13:20,000 UTC (date -u -d @1700000000).
T0 = 1_700_000_000_000
T0_TEXT = "2023-11-14 22:13:20"


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def write_log(path: Path, *records: dict | str) -> Path:
    """A state-change log: dicts as JSON lines (as broker/state_change_log.py writes them), strings
    as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r, separators=(",", ":")) for r in records]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def rec(ms: int, broker: int, event: str, **fields: Any) -> dict:
    return {"time_ms": T0 + ms, "broker": broker, "event": event, **fields}


def merge(*args: str) -> Any:
    return CliRunner().invoke(build_cli(), ["state-change-log", "merge", *args])


def out_lines(result: Any) -> list[str]:
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.stdout.splitlines()


def events(result: Any) -> list[str]:
    """The ``event=`` value of each output line."""
    return [line.split(" event=")[1].split(" ")[0] for line in out_lines(result)]


def error_line(result: Any, exit_code: int) -> str:
    assert result.exit_code == exit_code, (result.output, result.stderr)
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    if exit_code == 1:
        assert result.stderr.splitlines() == errors
    return errors[0]


# -- merge order ---------------------------------------------------------------------------------


@pytest.fixture
def three_logs(tmp_path: Path) -> list[Path]:
    """Interleaved times; ties at +0 (a, b), +2 (b, c), +5 (all three) and +3 twice within a."""
    a = write_log(tmp_path / "a.log", rec(0, 1, "a0"), rec(3, 1, "a3"), rec(3, 1, "a3bis"), rec(5, 1, "a5"))
    b = write_log(tmp_path / "b.log", rec(0, 2, "b0"), rec(2, 2, "b2"), rec(5, 2, "b5"))
    c = write_log(tmp_path / "c.log", rec(2, 3, "c2"), rec(4, 3, "c4"), rec(5, 3, "c5"), rec(9, 3, "c9"))
    return [a, b, c]


def test_records_merge_by_time_ties_in_file_then_line_order(three_logs: list[Path]) -> None:
    result = merge("--logs", ",".join(map(str, three_logs)))
    assert events(result) == ["a0", "b0", "b2", "c2", "a3", "a3bis", "c4", "a5", "b5", "c5", "c9"]
    assert result.stderr == ""


def test_file_order_on_the_command_line_breaks_ties(three_logs: list[Path]) -> None:
    a, b, c = three_logs
    result = merge("--logs", f"{c},{b},{a}")
    assert events(result) == ["b0", "a0", "c2", "b2", "a3", "a3bis", "c4", "c5", "b5", "a5", "c9"]


def test_each_line_is_the_time_then_broker_event_and_the_fields_as_written(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "s.log",
        {
            "time_ms": 1_234_567_890_123,
            "broker": 2,
            "event": "LeaderAndIsrReceived",
            "topic": "orders",
            "partition": 0,
            "leader": 1,
            "isr": [1, 3],
            "error": "NONE",
        },
        {
            "time_ms": 1_234_567_890_124,
            "broker": 1,
            "controller_id": 1,
            "controller_epoch": 4,
            "decision": "partition_state_change",
            "topic": "orders",
            "partition": 0,
            "reason": "offline partition: live ISR member",
            "unclean": False,
            "new_zk_version": None,
            "assignment": {"0": [1, 2]},
            "empty": "",
        },
    )
    assert out_lines(merge("--logs", str(log))) == [
        "[2009-02-13 23:31:30,123] broker=2 event=LeaderAndIsrReceived topic=orders partition=0 leader=1 "
        "isr=[1,3] error=NONE",
        "[2009-02-13 23:31:30,124] broker=1 decision=partition_state_change controller_id=1 controller_epoch=4 "
        'topic=orders partition=0 reason="offline partition: live ISR member" unclean=false '
        'new_zk_version=null assignment={"0":[1,2]} empty=""',
    ]


def test_the_merge_reads_each_file_lazily() -> None:
    """One record per file at a time: an endless log still yields its first records."""

    def endless() -> Iterator[str]:
        for i in itertools.count():
            yield json.dumps(rec(2 * i + 1, 2, f"odd{i}")) + "\n"

    finite = LogReader("finite", iter([json.dumps(rec(2 * i, 1, f"even{i}")) + "\n" for i in range(3)]))
    readers = [finite, LogReader("endless", endless())]
    merged = merge_records(readers, RecordFilter(start_ms=0, end_ms=T0 * 2))
    assert [r["event"] for r in itertools.islice(merged, 8)] == [
        "even0",
        "odd0",
        "even1",
        "odd1",
        "even2",
        "odd2",
        "odd3",
        "odd4",
    ]


# -- --logs-regex --------------------------------------------------------------------------------


def test_logs_regex_matches_each_path_part_and_orders_brokers_naturally(tmp_path: Path) -> None:
    for broker in (1, 2, 10):
        write_log(
            tmp_path / "cluster" / f"broker-{broker}" / "state-change.log", rec(0, broker, f"b{broker}")
        )
    write_log(tmp_path / "cluster" / "broker-3" / "state-change.log.old", rec(0, 3, "old"))
    write_log(tmp_path / "cluster" / "zookeeper" / "state-change.log", rec(0, 0, "zk"))
    (tmp_path / "cluster" / "broker-4").mkdir()  # no log in it
    result = merge("--logs-regex", f"{tmp_path}/cluster/broker-[0-9]+/state-change\\.log")
    assert events(result) == ["b1", "b2", "b10"]
    relative = merge("--logs-regex", "./cluster/broker-.*/state-change.log.*")
    assert events(relative) == ["b1", "b2", "old", "b10"]


# -- filters -------------------------------------------------------------------------------------


@pytest.fixture
def mixed_log(tmp_path: Path) -> Path:
    """Every way a record names partitions (broker/ and controller/ write all of them)."""
    return write_log(
        tmp_path / "m.log",
        rec(1, 1, "direct0", topic="orders", partition=0),
        rec(2, 1, "direct1", topic="orders", partition=1),
        rec(3, 1, "other_topic", topic="audit-log", partition=0),
        rec(4, 1, "listed", partitions=["audit-log-1", "orders-2"]),
        rec(5, 1, "keyed", topic="orders", assignment={"0": [1, 2], "3": [2, 1]}),
        rec(6, 1, "whole_topic", topic="orders"),
        rec(7, 1, "topics_list", topics=["audit-log", "orders"]),
        rec(8, 1, "no_partition", live_brokers=[1, 2], partitions=3),
        rec(9, 1, "dashed", topic="orders-2", partition=5),
    )


def test_no_filter_prints_every_record(mixed_log: Path) -> None:
    assert len(out_lines(merge("--logs", str(mixed_log)))) == 9


def test_topic_filter_keeps_records_naming_the_topic_anywhere(mixed_log: Path) -> None:
    assert events(merge("--logs", str(mixed_log), "--topic", "orders")) == [
        "direct0",
        "direct1",
        "listed",
        "keyed",
        "whole_topic",
        "topics_list",
    ]
    assert events(merge("--logs", str(mixed_log), "--topic", "audit-log")) == [
        "other_topic",
        "listed",
        "topics_list",
    ]
    assert events(merge("--logs", str(mixed_log), "--topic", "orders-2")) == ["dashed"]


def test_partitions_filter_keeps_records_naming_one_of_them_or_the_whole_topic(mixed_log: Path) -> None:
    base = ("--logs", str(mixed_log), "--topic", "orders")
    assert events(merge(*base, "--partitions", "0")) == ["direct0", "keyed", "whole_topic", "topics_list"]
    assert events(merge(*base, "--partitions", "1")) == ["direct1", "whole_topic", "topics_list"]
    assert events(merge(*base, "--partitions", "2,3")) == ["listed", "keyed", "whole_topic", "topics_list"]
    assert events(merge("--logs", str(mixed_log), "--topic", "audit-log", "--partitions", "1")) == [
        "listed",
        "topics_list",
    ]


def test_time_range_is_inclusive_at_both_ends(tmp_path: Path) -> None:
    log = write_log(tmp_path / "t.log", rec(0, 1, "at0"), rec(999, 1, "at999"), rec(1000, 1, "at1000"))
    assert events(merge("--logs", str(log), "--start-time", f"{T0_TEXT},999")) == ["at999", "at1000"]
    assert events(merge("--logs", str(log), "--end-time", f"{T0_TEXT},999")) == ["at0", "at999"]
    assert events(
        merge("--logs", str(log), "--start-time", f"{T0_TEXT},001", "--end-time", "2023-11-14 22:13:20,999")
    ) == ["at999"]
    assert events(merge("--logs", str(log), "--start-time", '"2023-11-14 22:13:21,000"')) == ["at1000"]


def test_the_default_end_is_now(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "t.log",
        {"time_ms": 0, "broker": 1, "event": "epoch"},
        {"time_ms": 253_402_300_799_999, "broker": 1, "event": "future"},
    )
    assert events(merge("--logs", str(log))) == ["epoch"]
    assert events(merge("--logs", str(log), "--end-time", "9999-12-31 23:59:59,999")) == ["epoch", "future"]


# -- the time format -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("time_ms", "text"),
    [
        (0, "1970-01-01 00:00:00,000"),
        (7, "1970-01-01 00:00:00,007"),
        (1_234_567_890_123, "2009-02-13 23:31:30,123"),
        (1_700_000_000_000, "2023-11-14 22:13:20,000"),
        (951_782_400_999, "2000-02-29 00:00:00,999"),
        (253_402_300_799_999, "9999-12-31 23:59:59,999"),
    ],
)
def test_times_print_and_parse_in_kafkas_format_in_utc(time_ms: int, text: str) -> None:
    assert format_time(time_ms) == text
    assert parse_time(text) == time_ms


# -- unreadable lines ----------------------------------------------------------------------------


def test_unreadable_lines_are_skipped_and_counted_per_file(tmp_path: Path) -> None:
    bad = write_log(
        tmp_path / "bad.log",
        rec(0, 1, "first"),
        "not json at all",
        "[1, 2, 3]",
        '{"broker": 1, "event": "no time"}',
        '{"time_ms": true, "broker": 1}',
        '{"time_ms": "1700000000000", "broker": 1}',
        '{"time_ms": -1, "broker": 1}',
        "",
        "   ",
        rec(2, 1, "last"),
        '{"time_ms": 1700000000003, "broker": 1, "event": "trunc',
    )
    good = write_log(tmp_path / "good.log", rec(1, 2, "middle"))
    result = merge("--logs", f"{bad},{good}")
    assert events(result) == ["first", "middle", "last"]
    assert result.stderr.splitlines() == [f"skipped 7 unreadable line(s) in {bad}"]


def test_invalid_utf8_is_an_unreadable_line_not_a_crash(tmp_path: Path) -> None:
    log = tmp_path / "bin.log"
    log.write_bytes(b"\xff\xfe garbage\n" + json.dumps(rec(0, 1, "ok")).encode() + b"\n")
    result = merge("--logs", str(log))
    assert events(result) == ["ok"]
    assert result.stderr == f"skipped 1 unreadable line(s) in {log}\n"


# -- bad input -----------------------------------------------------------------------------------


def test_a_missing_file_is_one_error_line(tmp_path: Path) -> None:
    good = write_log(tmp_path / "good.log", rec(0, 1, "x"))
    result = merge("--logs", f"{good},{tmp_path}/nope.log")
    assert error_line(result, 1) == f"Error: cannot read {tmp_path}/nope.log: No such file or directory"
    assert result.stdout == ""


def test_a_directory_is_not_a_log(tmp_path: Path) -> None:
    assert error_line(merge("--logs", str(tmp_path)), 1) == f"Error: cannot read {tmp_path}: Is a directory"


def test_a_regex_that_matches_nothing_is_one_error_line(tmp_path: Path) -> None:
    write_log(tmp_path / "broker-1" / "state-change.log", rec(0, 1, "x"))
    result = merge("--logs-regex", f"{tmp_path}/broker-9.*/state-change.log")
    assert (
        error_line(result, 1) == f"Error: no file matches --logs-regex {tmp_path}/broker-9.*/state-change.log"
    )


def test_a_bad_regex_is_a_usage_error(tmp_path: Path) -> None:
    assert "is not a regular expression" in error_line(merge("--logs-regex", f"{tmp_path}/broker-(/x"), 2)


@pytest.mark.parametrize(
    "bad", ["2023-11-14 22:13:20", "2023-11-14T22:13:20,000", "2023-02-30 00:00:00,000", "yesterday", ""]
)
def test_a_bad_time_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    log = write_log(tmp_path / "t.log", rec(0, 1, "x"))
    line = error_line(merge("--logs", str(log), "--start-time", bad), 2)
    assert "Invalid value for '--start-time'" in line and "yyyy-MM-dd HH:mm:ss,SSS" in line


def test_start_after_end_is_a_usage_error(tmp_path: Path) -> None:
    log = write_log(tmp_path / "t.log", rec(0, 1, "x"))
    args = ("--start-time", "2024-01-01 00:00:00,001", "--end-time", "2024-01-01 00:00:00,000")
    assert "--start-time is after --end-time" in error_line(merge("--logs", str(log), *args), 2)


def test_partitions_need_a_topic(tmp_path: Path) -> None:
    log = write_log(tmp_path / "t.log", rec(0, 1, "x"))
    assert (
        error_line(merge("--logs", str(log), "--partitions", "0"), 2) == "Error: --partitions needs --topic"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [("0,x", "partition ids"), ("1,-2", "partition ids"), ("1,2,1", "repeated entries: 1")],
)
def test_bad_partitions_are_a_usage_error(tmp_path: Path, value: str, message: str) -> None:
    log = write_log(tmp_path / "t.log", rec(0, 1, "x"))
    assert message in error_line(merge("--logs", str(log), "--topic", "t", "--partitions", value), 2)


def test_exactly_one_of_logs_and_logs_regex(tmp_path: Path) -> None:
    log = write_log(tmp_path / "t.log", rec(0, 1, "x"))
    expected = "Error: give exactly one of --logs and --logs-regex"
    assert error_line(merge(), 2) == expected
    assert error_line(merge("--logs", str(log), "--logs-regex", str(log)), 2) == expected
