"""``floodmark verify-replicas`` on real brokers (issue 22 item 5; Kafka's ReplicaVerificationTool,
docs/operations.md "Verifying replicas (`floodmark verify-replicas`)"): ZooKeeper plus three
broker processes, one topic of 3 partitions at RF 3.

A clean cluster: the tool fetches every replica as the debugging consumer (replica id -2, which
followers serve too), finds them equal up to the HW, prints Kafka's ``max lag is ...`` line about
once a second and exits 0 at its time limit. A planted divergence: one follower holds, below the
HW, a batch with other bytes than its leader's at the same offsets; the tool names the partition,
that offset and the replicas that differ, and exits 1. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import build_cli
from client.protocol.records import build_batch, decode_batch, iter_batches, set_partition_leader_epoch
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import create_topic, eventually, produce_outcomes
from tests.integration.zk_state import partition_state

pytestmark = pytest.mark.integration

TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


def lag_line(topic: str) -> re.Pattern[str]:
    return re.compile(
        rf"{TIME}: max lag is (-?\d+) for partition \[{topic},(\d)\] at offset (-?\d+) among 3 partitions"
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(
        tmp_path_factory.mktemp("verify-replicas"),
        brokers=3,
        overrides={"auto.leader.rebalance.enable": "false"},
    )
    yield c
    c.down()


async def populate(cluster, topic: str) -> dict[int, int]:
    """A topic of 3 partitions at RF 3 with 60 records in batches; returns each partition's HW."""
    await create_topic(cluster, topic, 3, 3)
    acked, failed = await produce_outcomes(cluster, topic, [b"v-%03d" % i for i in range(60)], linger_ms=5)
    assert len(acked) == 60 and not failed
    return {p: 1 + max(o for q, o, _ in acked if q == p) for p in range(3)}


def verify(cluster, topic: str, *args: str):
    return CliRunner().invoke(
        build_cli(),
        [
            "verify-replicas",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--topic-white-list",
            topic,
            "--report-interval-ms",
            "1000",
            "--max-wait-ms",
            "200",
            *args,
        ],
    )


async def test_a_clean_cluster_reports_lag_lines_and_exits_0(cluster, zk) -> None:
    ends = await populate(cluster, "clean")
    result = await asyncio.to_thread(verify, cluster, "clean", "--time", "-2", "--time-limit-ms", "3000")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert re.fullmatch(rf"{TIME}: verification process is started\.", lines[0])
    reports = [lag_line("clean").fullmatch(line) for line in lines[1:]]
    assert reports and all(reports), lines  # nothing but Kafka's lag lines
    assert 1 <= len(reports) <= 4, lines  # about one a second for 3 s, the last at the limit
    # every replica verified up to the HW: no lag; the line names the first partition (a tie)
    # at its verified offset, its end
    assert {(m[1], m[2], m[3]) for m in reports} == {("0", "0", str(ends[0]))}


def plant_divergence(log_file: Path) -> tuple[int, int]:
    """Rewrite the first batch of a stopped follower's segment with other values of the same
    length, re-encoded as a valid batch: same offsets, timestamps, producer id, epoch and
    sequence, partition leader epoch and length, a new CRC. Returns its (base, last) offset."""
    data = bytearray(log_file.read_bytes())
    _, header = next(iter_batches(data))
    original = bytes(data[: header.size])
    records = decode_batch(original)
    forged = bytearray(
        build_batch(
            [(r.key, bytes(b ^ 0x20 for b in r.value), r.timestamp, list(r.headers)) for r in records],
            base_offset=header.base_offset,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
        )
    )
    set_partition_leader_epoch(forged, 0, header.partition_leader_epoch)
    _, forged_header = next(iter_batches(forged))  # a valid CRC: recovery keeps it
    assert len(forged) == len(original) and forged_header.crc != header.crc
    assert dataclasses.replace(forged_header, crc=0) == dataclasses.replace(header, crc=0)
    data[: header.size] = forged
    log_file.write_bytes(bytes(data))
    return header.base_offset, header.last_offset


async def test_a_divergent_follower_batch_below_the_hw_is_reported_and_exits_1(cluster, zk) -> None:
    """The divergence must survive the follower's restart and sit below the HW it serves. Bytes
    that fail their CRC would be cut by log recovery (or answered as corrupt), and a paused broker
    answers nothing; so the follower is stopped (SIGTERM: a clean shutdown), its first batch of
    the partition is replaced by a valid batch over the same offsets with other values (same
    length, so the indexes still point right), and it is started again. Its leader epoch cache
    matches the leader's, so the KIP-101 truncation keeps its log; it fetches on from its log end,
    its HW passes the forged batch, and the tool sees two valid batches there that differ."""
    topic, partition = "diverged", 1
    await populate(cluster, topic)

    async def full_isr() -> dict | None:
        current = partition_state(zk, topic, partition)[0]
        return current if len(current["isr"]) == 3 else None

    before = await eventually(full_isr, f"all three replicas in the ISR of {topic}-{partition}", timeout=60)
    follower = max(r for r in before["isr"] if r != before["leader"])
    await asyncio.to_thread(cluster.stop, follower)
    (log_file,) = (cluster.data_dir / f"broker-{follower}" / "data" / f"{topic}-{partition}").glob("*.log")
    base, last = plant_divergence(log_file)
    await asyncio.to_thread(cluster.start, follower)

    async def back_in_isr() -> bool:
        return follower in partition_state(zk, topic, partition)[0]["isr"]

    await eventually(back_in_isr, f"broker {follower} back in the ISR of {topic}-{partition}", timeout=60)

    result = await asyncio.to_thread(verify, cluster, topic, "--time", "-2", "--time-limit-ms", "10000")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    mismatches = [line for line in lines[1:] if not lag_line(topic).fullmatch(line)]
    # the reference is the lowest replica id: the follower's batch differs from it, or (when the
    # follower is the reference) every other replica's differs from the follower's
    reference = min(before["isr"])
    pairs = [(reference, r) for r in sorted(before["isr"]) if r != reference and follower in (reference, r)]
    assert len(mismatches) == len(pairs), lines
    for line, (a, b) in zip(mismatches, pairs, strict=True):
        pattern = (
            rf"{TIME}: partition \[{topic},{partition}\] has unmatched checksum at offset {last}; "
            rf"replica {a}'s checksum \d+; replica {b}'s checksum \d+"
        )
        assert re.fullmatch(pattern, line), (line, pattern)
    assert base == 0 and base <= last
    assert result.stderr.strip().startswith("Error: ")
