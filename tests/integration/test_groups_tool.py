"""The operator's group tools on a real 3-broker cluster (Kafka's kafka-consumer-groups.sh and
kafka-console-consumer --group; docs/operations.md "Consumer groups").

* ``consume --group`` commits exactly what it printed: ``groups describe --json`` shows, per
  partition, the number of records printed as CURRENT-OFFSET and LOG-END-OFFSET minus it as LAG,
  and the lag follows the log end when more records arrive; ``groups list`` names the group;
* ``reset-offsets --to-earliest --execute`` moves the group back and the next ``consume --group``
  prints the same records again; ``--dry-run`` writes nothing; ``--shift-by``, ``--to-offset``
  (clamped to the log) and ``--to-datetime`` (falling back to the log end);
* reset and delete are refused while a member is active (a Consumer polling in a task), with
  Kafka's words; an empty group is deleted, and then it does not exist.

The commands run through click's CliRunner (in a thread while the test's own loop is busy);
every wait is bounded, by ``eventually`` or by the commands' own timeouts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from client import Consumer
from client.admin import AdminClient, NewTopic
from client.protocol.errors import ErrorCode
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import create_topic, eventually, high_watermarks, produce_values

pytestmark = pytest.mark.integration

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "300", "offsets.topic.num.partitions": "6"}
CONSUME_TIMEOUT_MS = "20000"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("groups-tool"), brokers=3, overrides=GROUP_SETTINGS)
    yield c
    c.down()


def cli(cluster, *args: str) -> Any:
    """One ``floodmark`` command against the cluster; its result (exit code, stdout, stderr)."""
    result = CliRunner().invoke(build_cli(), [*args, "--bootstrap-server", cluster.bootstrap_servers])
    assert "Traceback" not in result.stderr, result.stderr
    return result


async def acli(cluster, *args: str) -> Any:
    """``cli`` from inside the test's event loop (the command runs its own loop in a thread)."""
    return await asyncio.to_thread(cli, cluster, *args)


def consume(cluster, topic: str, group: str, count: int, *extra: str) -> list[str]:
    result = cli(
        cluster, "consume", "--topic", topic, "--group", group, "--max-messages", str(count),
        "--timeout-ms", CONSUME_TIMEOUT_MS, *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == count, (lines, result.stderr)
    return lines


def described(cluster, group: str) -> dict:
    result = cli(cluster, "groups", "describe", "--group", group, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def committed(cluster, group: str) -> dict[int, int | None]:
    return {o["partition"]: o["current_offset"] for o in described(cluster, group)["offsets"]}


async def state_of(cluster, group: str) -> str:
    async with AdminClient(cluster.bootstrap_servers) as admin:
        return (await admin.describe_consumer_groups([group]))[group].state


def wait_inactive(cluster, group: str) -> None:
    """After a member leaves, until the coordinator has the group Empty."""

    async def empty() -> bool:
        return await state_of(cluster, group) == "Empty"

    asyncio.run(eventually(empty, f"group {group} to be Empty", 30))


def reset(cluster, group: str, *args: str) -> Any:
    wait_inactive(cluster, group)
    return cli(cluster, "groups", "reset-offsets", "--group", group, *args)


def new_offsets(result: Any) -> dict[int, int]:
    assert result.exit_code == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows
    return {int(r[2]): int(r[3]) for r in rows[1:]}


def test_consume_commits_what_it_printed_and_describe_shows_the_lag(cluster):
    asyncio.run(create_topic(cluster, "gt-lag", 3, 3))
    acked = asyncio.run(produce_values(cluster, "gt-lag", [b"lag%03d" % i for i in range(60)]))
    assert len(acked) == 60
    partition_of = {value.decode(): partition for partition, _, value in acked}
    printed = consume(cluster, "gt-lag", "printers", 25, "--from-beginning")
    per_partition = Counter(partition_of[line] for line in printed)
    ends = asyncio.run(high_watermarks(cluster, "gt-lag", 3))
    wait_inactive(cluster, "printers")
    doc = described(cluster, "printers")
    assert doc["group"] == "printers" and doc["state"] == "Empty" and doc["members"] == []
    assert {o["partition"]: o["current_offset"] for o in doc["offsets"]} == dict(per_partition)
    for o in doc["offsets"]:
        assert o["log_end_offset"] == ends[o["partition"]]
        assert o["lag"] == o["log_end_offset"] - o["current_offset"] and o["member_id"] is None
    assert "printers" in cli(cluster, "groups", "list").stdout.splitlines()

    more = asyncio.run(produce_values(cluster, "gt-lag", [b"more%03d" % i for i in range(30)]))
    assert len(more) == 30
    ends = asyncio.run(high_watermarks(cluster, "gt-lag", 3))
    assert sum(ends.values()) == 90
    table = cli(cluster, "groups", "describe", "--group", "printers")
    assert table.exit_code == 0 and "Consumer group 'printers' has no active members." in table.stderr
    rows = [line.split() for line in table.stdout.splitlines() if line.strip()]
    assert rows[0][:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    for row in rows[1:]:
        partition, current, end, lag = int(row[2]), int(row[3]), int(row[4]), int(row[5])
        assert (current, end, lag) == (per_partition[partition], ends[partition], end - current)
        assert row[6:] == ["-", "-", "-"]


def test_reset_to_earliest_replays_and_dry_run_writes_nothing(cluster):
    asyncio.run(create_topic(cluster, "gt-replay", 1, 3))
    assert len(asyncio.run(produce_values(cluster, "gt-replay", [b"r%02d" % i for i in range(20)]))) == 20
    first = consume(cluster, "gt-replay", "replayers", 8, "--from-beginning")
    assert first == [f"r{i:02d}" for i in range(8)]
    assert consume(cluster, "gt-replay", "replayers", 4) == [f"r{i:02d}" for i in range(8, 12)]
    assert committed(cluster, "replayers") == {0: 12}

    dry = reset(cluster, "replayers", "--topic", "gt-replay", "--to-earliest", "--dry-run")
    assert new_offsets(dry) == {0: 0} and committed(cluster, "replayers") == {0: 12}
    done = reset(cluster, "replayers", "--topic", "gt-replay", "--to-earliest", "--execute")
    assert new_offsets(done) == {0: 0} and committed(cluster, "replayers") == {0: 0}
    assert consume(cluster, "gt-replay", "replayers", 8) == first


def test_shift_by_to_offset_and_to_datetime(cluster):
    asyncio.run(create_topic(cluster, "gt-times", 1, 3))
    assert len(asyncio.run(produce_values(cluster, "gt-times", [b"a%02d" % i for i in range(10)]))) == 10
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    assert len(asyncio.run(produce_values(cluster, "gt-times", [b"b%02d" % i for i in range(10)]))) == 10
    consume(cluster, "gt-times", "shifters", 12, "--from-beginning")
    assert committed(cluster, "shifters") == {0: 12}

    def execute(*args: str) -> dict[int, int]:
        offsets = new_offsets(reset(cluster, "shifters", "--topic", "gt-times:0", *args, "--execute"))
        assert committed(cluster, "shifters") == offsets
        return offsets

    assert execute("--shift-by", "-5") == {0: 7}
    assert execute("--shift-by", "-50") == {0: 0}  # clamped to the log start
    assert execute("--to-offset", "15") == {0: 15}
    assert execute("--to-offset", "1000") == {0: 20}  # clamped to the log end
    assert execute("--to-datetime", between.isoformat(timespec="milliseconds")) == {0: 10}
    assert execute("--to-earliest") == {0: 0}
    late = reset(
        cluster, "shifters", "--topic", "gt-times", "--to-datetime", "2999-01-01T00:00:00Z", "--execute"
    )
    assert new_offsets(late) == {0: 20}  # no record that late: the log end
    assert "Partition 0 from topic gt-times is empty. Falling back to latest known offset." in late.stderr


def test_an_active_group_is_neither_reset_nor_deleted_and_an_empty_one_is_deleted(cluster):
    asyncio.run(create_topic(cluster, "gt-busy", 2, 3))
    assert len(asyncio.run(produce_values(cluster, "gt-busy", [b"x%02d" % i for i in range(10)]))) == 10

    async def with_a_member() -> None:
        c = Consumer(
            cluster.bootstrap_servers, group_id="busy", auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=500, enable_auto_commit=False,
        )  # fmt: skip
        await c.start()
        c.subscribe(["gt-busy"])
        stop = asyncio.Event()

        async def keep_polling() -> None:
            while not stop.is_set():
                await c.poll(timeout_ms=200)

        task = asyncio.get_running_loop().create_task(keep_polling())
        try:

            async def stable() -> bool:
                return len(c.assignment()) == 2 and await state_of(cluster, "busy") == "Stable"

            await eventually(stable, "the member to own both partitions", 60)
            refused = await acli(
                cluster, "groups", "reset-offsets", "--group", "busy", "--topic", "gt-busy",
                "--to-earliest", "--execute",
            )  # fmt: skip
            assert refused.exit_code == 1 and refused.stdout == ""
            assert refused.stderr == (
                "Error: Assignments can only be reset if the group 'busy' is inactive, "
                "but the current state is Stable.\n"
            )
            kept = await acli(cluster, "groups", "delete", "--group", "busy")
            assert kept.exit_code == 1
            assert (
                "* Group 'busy' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty."
                in kept.stderr
            )
            table = await acli(cluster, "groups", "describe", "--group", "busy")
            rows = [line.split() for line in table.stdout.splitlines() if line.strip()]
            # assigned, nothing committed: the rows show, with "-" for the offset and the lag
            assert [(r[2], r[3], r[5], r[7]) for r in rows[1:]] == [
                ("0", "-", "-", "/127.0.0.1"),
                ("1", "-", "-", "/127.0.0.1"),
            ], table.stdout
            members = await acli(cluster, "groups", "describe", "--group", "busy", "--members")
            rows = [line.split() for line in members.stdout.splitlines() if line.strip()]
            assert len(rows) == 2 and rows[1][0] == "busy" and rows[1][-1] == "2", members.stdout
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await c.close()

    asyncio.run(with_a_member())
    wait_inactive(cluster, "busy")
    deleted = cli(cluster, "groups", "delete", "--group", "busy")
    assert deleted.exit_code == 0, deleted.stderr
    assert deleted.stdout == "Deletion of requested consumer groups ('busy') was successful.\n"
    gone = cli(cluster, "groups", "describe", "--group", "busy")
    assert gone.exit_code == 1 and gone.stderr == "Error: Consumer group 'busy' does not exist.\n"
    assert "busy" not in cli(cluster, "groups", "list").stdout.splitlines()
    again = cli(cluster, "groups", "delete", "--group", "busy")
    assert again.exit_code == 1 and "GROUP_ID_NOT_FOUND: The group id does not exist." in again.stderr


def test_ctrl_c_and_the_timeout_commit_what_was_printed(cluster):
    """Kafka's console consumer stopped by Ctrl-C (SIGINT, exit 130) or by --timeout-ms commits
    the offsets after the records it printed before leaving."""
    asyncio.run(create_topic(cluster, "gt-interrupt", 1, 3))
    assert len(asyncio.run(produce_values(cluster, "gt-interrupt", [b"i%02d" % i for i in range(40)]))) == 40

    async def interrupted() -> list[bytes]:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cli.main", "consume", "--topic", "gt-interrupt", "--group", "stoppers",
            "--from-beginning", "--bootstrap-server", cluster.bootstrap_servers,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        lines = []
        try:
            while len(lines) < 40:
                lines.append(await asyncio.wait_for(proc.stdout.readline(), 60))
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 130 and b"Processed a total of 40 messages" in err, err
        return lines

    assert len(asyncio.run(interrupted())) == 40
    wait_inactive(cluster, "stoppers")
    assert committed(cluster, "stoppers") == {0: 40}
    assert len(asyncio.run(produce_values(cluster, "gt-interrupt", [b"j%02d" % i for i in range(5)]))) == 5
    result = cli(cluster, "consume", "--topic", "gt-interrupt", "--group", "stoppers", "--timeout-ms", "3000")
    assert result.exit_code == 0 and result.stdout.splitlines() == [f"j{i:02d}" for i in range(5)]
    wait_inactive(cluster, "stoppers")
    assert committed(cluster, "stoppers") == {0: 45}


def test_consume_group_commits_what_it_printed_while_it_runs(cluster):
    """A newcomer's `consume --group` committed only at exit, so `groups describe` showed the lag
    unchanged while it read (Kafka's console consumer auto-commits). It now commits what it
    printed every auto.commit.interval.ms: the group's offsets reach the log end while the
    command is still running (it exits only after --timeout-ms without a record)."""
    import threading

    asyncio.run(create_topic(cluster, "gt-live", 3, 3))
    asyncio.run(produce_values(cluster, "gt-live", [b"live%03d" % i for i in range(45)]))
    args = ["consume", "--topic", "gt-live", "--group", "live", "--from-beginning", "--timeout-ms", "20000"]
    args += ["--consumer-property", "auto.commit.interval.ms=300"]
    done: list[Any] = []
    runner = threading.Thread(target=lambda: done.append(cli(cluster, *args)), daemon=True)
    runner.start()

    async def all_committed_while_running() -> bool:
        async with AdminClient(cluster.bootstrap_servers) as admin:  # not the CLI: one CliRunner at a time
            offsets = await admin.list_consumer_group_offsets("live")
        return runner.is_alive() and sum(o.offset for o in offsets.values()) == 45

    try:
        asyncio.run(
            eventually(all_committed_while_running, "45 printed offsets committed while consuming", 15)
        )
    finally:
        runner.join(40)
    assert done and done[0].exit_code == 0 and len(done[0].stdout.splitlines()) == 45


def test_a_deleted_topics_offsets_leave_the_group_and_a_recreated_topic_is_read_from_its_start(cluster):
    """The README tour's finding: group gx committed offset 10 on x; x was deleted and re-created
    with 20 new records, and `consume --group gx --from-beginning` printed only the last 10, the
    deleted topic's offset applied to the new one. Kafka removes a deleted topic's offsets from
    every group (handleDeletedPartitions): the new records are all read, and `groups describe`
    no longer lists the deleted partition."""
    asyncio.run(create_topic(cluster, "gt-gone", 1, 3))
    asyncio.run(produce_values(cluster, "gt-gone", [b"old%02d" % i for i in range(20)]))
    consume(cluster, "gt-gone", "gx", 10, "--from-beginning")
    assert committed(cluster, "gx") == {0: 10}
    wait_inactive(cluster, "gx")
    assert cli(cluster, "topics", "delete", "--topic", "gt-gone").exit_code == 0

    async def forgotten() -> bool:
        async with AdminClient(cluster.bootstrap_servers) as admin:
            return "gt-gone" not in await admin.list_topics() and not await admin.list_consumer_group_offsets(
                "gx"
            )

    asyncio.run(eventually(forgotten, "gt-gone deleted and its offsets gone from gx", 60))

    async def recreated() -> bool:
        # The metadata forgets the topic before the controller's deletion removes its znodes;
        # until then a creation is refused with TOPIC_ALREADY_EXISTS, as in Kafka
        async with AdminClient(cluster.bootstrap_servers) as admin:
            errors = await admin.create_topics([NewTopic("gt-gone", 1, 3, {})], 30000)
        assert errors["gt-gone"] is None or errors["gt-gone"].code == ErrorCode.TOPIC_ALREADY_EXISTS
        return errors["gt-gone"] is None

    asyncio.run(eventually(recreated, "gt-gone created again once its deletion completed", 60))
    asyncio.run(produce_values(cluster, "gt-gone", [b"new%02d" % i for i in range(20)]))
    lines = consume(cluster, "gt-gone", "gx", 20, "--from-beginning")
    assert lines == [f"new{i:02d}" for i in range(20)]
