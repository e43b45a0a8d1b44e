"""Partition reassignment on real brokers (issue 22 item 1; Kafka 2.x's onPartitionReassignment,
seed 000's "Partition重新分配"): ZooKeeper plus six broker processes, with
``log.segment.delete.delay.ms`` at 1 s so the removed replicas' directories go quickly.

* Seed 000's table: partition 0 on {1,2,3} moved to {4,5,6}. Every write of the partition's
  state znode is in some broker's state-change log with its zkVersion (the controller's steps,
  the leader's ISR expansions); their versions run without a gap from the creation to the
  version ZooKeeper holds at the end, so the log accounts for every state ZooKeeper held. That
  sequence of (AR, leader, ISR), with the leader's one-replica-at-a-time expansions taken as one
  step and epoch-only bumps dropped, is the table, row for row.
* The move keeps every acknowledged record, the new replicas hold identical batches, and the
  old brokers keep no directory of the partition.
* Changing the replication factor down (a shrink needs no catching up) and up.
* A move whose new replica's broker dies waits; the controller is SIGKILLed meanwhile; the new
  controller picks the move up from ZooKeeper (failover step 12) and completes it when the broker
  returns.

Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import (
    assert_replicas_identical,
    eventually,
    high_watermarks,
    produce_outcomes,
    read_all,
)
from tests.integration.zk_state import REASSIGN, assigned, create_with_assignment, request_move
from tests.integration.zk_state import partition_state as state

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("reassignment"),
        brokers=6,
        overrides={"log.segment.delete.delay.ms": "1000", "auto.leader.rebalance.enable": "false"},
    )
    yield c
    c.down()


async def wait_led(zk, topic: str, partition: int, isr: list[int]) -> None:
    async def probe() -> bool | None:
        try:
            current, _ = state(zk, topic, partition)
        except Exception:
            return None
        return True if sorted(current["isr"]) == sorted(isr) and current["leader"] != -1 else None

    await eventually(probe, f"{topic}-{partition} led with ISR {isr}", timeout=45)


async def wait_moved(zk, topic: str, partition: int, target: list[int], timeout: float = 90) -> None:
    async def probe() -> bool | None:
        done = zk.exists(REASSIGN) is None and assigned(zk, topic, partition) == target
        return True if done else None

    await eventually(probe, f"{topic}-{partition} moved to {target}", timeout=timeout)


def partition_dirs(cluster, broker: int, topic: str, partition: int) -> list[str]:
    data = cluster.data_dir / f"broker-{broker}" / "data"
    return sorted(p.name for p in data.iterdir() if p.name.startswith(f"{topic}-{partition}"))


def state_changes(cluster, brokers: range) -> list[dict]:
    records = []
    for b in brokers:
        path: Path = cluster.data_dir / f"broker-{b}" / "state-change.log"
        if path.exists():
            records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def state_writes(records: list[dict], topic: str, partition: int) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Every write of the partition's state znode that a state-change log shows: zkVersion ->
    (leader, ISR). The controller logs its decisions with the version written; a leader logs its
    ISR changes with the new version."""
    writes: dict[int, tuple[int, tuple[int, ...]]] = {}
    for r in records:
        if r.get("topic") != topic or r.get("partition") != partition:
            continue
        if (
            r.get("decision") in ("partition_state_change", "reassignment_step", "isr_shrink")
            and "zk_version" in r
        ):
            if r.get("leader") is not None and r.get("isr") is not None:
                writes[r["zk_version"]] = (r["leader"], tuple(r["isr"]))
        elif r.get("event") in ("IsrExpand", "IsrShrink") and r.get("new_zk_version") is not None:
            writes[r["new_zk_version"]] = (r["broker"], tuple(r["new_isr"]))
    return writes


def table_rows(records: list[dict], topic: str, partition: int, final_version: int) -> list[str]:
    """Seed 000's rows, "AR leader/ISR", rebuilt from the state-change logs (see the module doc)."""
    writes = state_writes(records, topic, partition)
    assert sorted(writes) == list(range(final_version + 1)), (
        f"state writes missing from the logs: {sorted(writes)}"
    )
    controller = [
        r
        for r in records
        if r.get("decision") and r.get("topic") == topic and r.get("partition") == partition
    ]
    ar_updates = [r["replicas"] for r in controller if r["decision"] == "assigned_replicas_updated"]
    step2 = next(
        r["zk_version"] for r in controller if r["decision"] == "reassignment_step" and r["step"] == 2
    )
    oar, widened, final = ar_updates[0][:3], ar_updates[0], ar_updates[-1]
    rows: list[tuple[tuple[int, ...], int, tuple[int, ...], bool]] = []
    for version in range(final_version + 1):
        leader, isr = writes[version]
        ar = tuple(oar if version < step2 else widened)
        expansion = bool(rows) and rows[-1][0] == ar and rows[-1][1] == leader and set(rows[-1][2]) < set(isr)
        if rows and rows[-1][:3] == (ar, leader, isr):
            continue  # a leader epoch bump: same AR, leader and ISR
        if expansion and rows[-1][3]:
            rows[-1] = (ar, leader, isr, True)  # the leader adds one replica at a time: one step
        else:
            rows.append((ar, leader, isr, expansion))
    rows.append((tuple(final), *rows[-1][1:]))
    return [
        f"{{{','.join(map(str, ar))}}} {leader}/{{{','.join(map(str, isr))}}}" for ar, leader, isr, _ in rows
    ]


async def test_seed_000_reassignment_table_from_zookeeper_and_the_state_change_log(cluster, zk) -> None:
    topic = "moving"
    create_with_assignment(zk, topic, {0: [1, 2, 3]})
    await wait_led(zk, topic, 0, [1, 2, 3])
    values = [b"r%d" % i for i in range(300)]
    acked, failed = await produce_outcomes(cluster, topic, values, enable_idempotence=True)
    assert not failed and len(acked) == len(values)

    request_move(zk, {(topic, 0): [4, 5, 6]})
    await wait_moved(zk, topic, 0, [4, 5, 6])

    final, version = state(zk, topic, 0)
    assert (final["leader"], final["isr"]) == (4, [4, 5, 6])
    rows = table_rows(state_changes(cluster, range(1, 7)), topic, 0, version)
    assert rows == [
        "{1,2,3} 1/{1,2,3}",  # initial state
        "{1,2,3,4,5,6} 1/{1,2,3}",  # step 2
        "{1,2,3,4,5,6} 1/{1,2,3,4,5,6}",  # step 4
        "{1,2,3,4,5,6} 4/{1,2,3,4,5,6}",  # step 7
        "{1,2,3,4,5,6} 4/{4,5,6}",  # step 8
        "{4,5,6} 4/{4,5,6}",  # step 10
    ]

    got = await read_all(cluster, topic, 1)
    assert [v for _, v in got[0]] == values
    assert [o for o, _ in got[0]] == sorted(o for _, o, _ in acked)

    async def old_dirs_gone() -> bool | None:
        return True if not any(partition_dirs(cluster, b, topic, 0) for b in (1, 2, 3)) else None

    await eventually(old_dirs_gone, "the old replicas' directories removed", timeout=30)
    assert all(partition_dirs(cluster, b, topic, 0) == [f"{topic}-0"] for b in (4, 5, 6))
    assert_replicas_identical(cluster, topic, await high_watermarks(cluster, topic, 1))


async def test_replication_factor_down_then_up(cluster, zk) -> None:
    topic = "refactored"
    create_with_assignment(zk, topic, {0: [1, 2, 3]})
    await wait_led(zk, topic, 0, [1, 2, 3])
    acked, _ = await produce_outcomes(cluster, topic, [b"a%d" % i for i in range(50)])

    request_move(zk, {(topic, 0): [2, 1]})
    await wait_moved(zk, topic, 0, [2, 1])
    current, _ = state(zk, topic, 0)
    assert sorted(current["isr"]) == [1, 2] and current["leader"] == 1  # the leader stayed

    request_move(zk, {(topic, 0): [2, 1, 5, 6]})
    await wait_moved(zk, topic, 0, [2, 1, 5, 6])
    current, _ = state(zk, topic, 0)
    assert sorted(current["isr"]) == [1, 2, 5, 6]
    got = await read_all(cluster, topic, 1)
    assert len(got[0]) == len(acked)
    assert_replicas_identical(cluster, topic, await high_watermarks(cluster, topic, 1))


async def test_a_move_waits_for_a_dead_broker_and_survives_a_controller_kill(
    cluster, zk, tmp_path: Path
) -> None:
    topic = "patient"
    create_with_assignment(zk, topic, {0: [1, 2, 3]})
    await wait_led(zk, topic, 0, [1, 2, 3])
    acked, _ = await produce_outcomes(cluster, topic, [b"p%d" % i for i in range(50)])
    await asyncio.to_thread(cluster.stop, 6)
    killed = None
    try:
        request_move(zk, {(topic, 0): [4, 5, 6]})

        async def widened() -> bool | None:
            current, _ = state(zk, topic, 0)
            ok = assigned(zk, topic, 0) == [1, 2, 3, 4, 5, 6] and {4, 5} <= set(current["isr"])
            return True if ok else None

        await eventually(widened, "AR widened and 4, 5 caught up", timeout=45)
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        assert controller != 6
        await asyncio.to_thread(cluster.kill, controller)
        killed = controller

        async def new_controller() -> int | None:
            stat = zk.exists("/controller")
            brokerid = json.loads(zk.get("/controller")[0])["brokerid"] if stat else None
            return brokerid if brokerid not in (None, controller) else None

        await eventually(new_controller, "a new controller", timeout=45)
        await asyncio.sleep(2)
        pending = zk.get(REASSIGN)
        assert assigned(zk, topic, 0) == [1, 2, 3, 4, 5, 6]  # still waiting for broker 6
        second = tmp_path / "second.json"
        second.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {
                            "topic": topic,
                            "partition": 0,
                            "replicas": [b for b in (1, 2, 3, 4) if b != killed][:3],
                        }
                    ],
                }
            )
        )
        refused = await asyncio.to_thread(
            reassign, cluster, "--execute", "--reassignment-json-file", str(second)
        )
        assert refused.exit_code == 1, refused.output
        assert refused.stderr.startswith("Cannot execute because there is an existing partition assignment.")
        assert zk.get(REASSIGN) == pending  # the tool refused a second move of a moving partition
    finally:
        await asyncio.to_thread(cluster.start, 6)
        if killed is not None:
            await asyncio.to_thread(cluster.start, killed)
    await wait_moved(zk, topic, 0, [4, 5, 6])
    current, _ = state(zk, topic, 0)
    assert current["leader"] in (4, 5, 6) and sorted(current["isr"]) == [4, 5, 6]
    got = await read_all(cluster, topic, 1)
    assert len(got[0]) == len(acked)


def reassign(cluster, *args: str):
    return CliRunner().invoke(
        build_cli(), ["reassign", "--bootstrap-server", cluster.bootstrap_servers, *args]
    )


async def test_the_tool_generates_executes_and_verifies_and_refuses_bad_input(
    cluster, zk, tmp_path: Path
) -> None:
    """kafka-reassign-partitions.sh's three modes against real brokers, seed 000's example: the
    topic's partitions moved onto brokers 4..6 (here 3..6); bad plans change nothing in ZooKeeper."""
    topic = "tooled"
    create_with_assignment(zk, topic, {0: [1, 2], 1: [2, 1]})
    await wait_led(zk, topic, 0, [1, 2])
    await wait_led(zk, topic, 1, [1, 2])
    moving = tmp_path / "topics-to-move.json"
    moving.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    generated = await asyncio.to_thread(
        reassign, cluster, "--generate", "--topics-to-move-json-file", str(moving), "--broker-list", "3,4,5,6"
    )
    assert generated.exit_code == 0, generated.output
    lines = generated.stdout.splitlines()
    assert (
        lines[0] == "Current partition replica assignment"
        and lines[3] == "Proposed partition reassignment configuration"
    )
    current = json.loads(lines[1])
    assert [(p["partition"], p["replicas"]) for p in current["partitions"]] == [(0, [1, 2]), (1, [2, 1])]
    proposed = json.loads(lines[4])
    assert all(len(p["replicas"]) == 2 and set(p["replicas"]) <= {3, 4, 5, 6} for p in proposed["partitions"])
    assert zk.exists(REASSIGN) is None  # --generate changes nothing

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    bad = tmp_path / "bad.json"
    versions = {p: state(zk, topic, p)[1] for p in (0, 1)}
    for content, words in (
        ("{not json", "bad.json"),
        (
            json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 3]}]}),
            "duplicate",
        ),
        (
            json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 9]}]}),
            "9",
        ),
        (
            json.dumps({"version": 1, "partitions": [{"topic": "nosuch", "partition": 0, "replicas": [3]}]}),
            "nosuch",
        ),
    ):
        bad.write_text(content)
        refused = await asyncio.to_thread(
            reassign, cluster, "--execute", "--reassignment-json-file", str(bad)
        )
        assert refused.exit_code == 1, refused.output
        assert words in refused.stderr, refused.stderr
        assert zk.exists(REASSIGN) is None
        assert assigned(zk, topic, 0) == [1, 2] and {p: state(zk, topic, p)[1] for p in (0, 1)} == versions

    executed = await asyncio.to_thread(reassign, cluster, "--execute", "--reassignment-json-file", str(plan))
    assert executed.exit_code == 0, executed.output
    lines = executed.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and json.loads(lines[2]) == current
    assert lines[-2:] == [
        "Save this to use as the --reassignment-json-file option during rollback",
        f"Successfully started partition reassignments for {topic}-0,{topic}-1",
    ]

    async def verified() -> str | None:
        result = await asyncio.to_thread(reassign, cluster, "--verify", "--reassignment-json-file", str(plan))
        return result.stdout if result.exit_code == 0 else None

    out = await eventually(verified, "--verify to report every partition done", timeout=60)
    lines = out.splitlines()
    assert lines[:3] == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
    ]
    assert lines[3].startswith("Clearing broker-level throttles on brokers ")
    assert lines[4:] == [f"Clearing topic-level throttles on topic {topic}"]
    for p in proposed["partitions"]:
        assert assigned(zk, topic, p["partition"]) == p["replicas"]
