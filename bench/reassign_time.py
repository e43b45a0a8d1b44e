"""How long a partition reassignment takes to copy a partition of ``--size-mb`` (default 1024 MB) to
a new broker, without and with a replication throttle (issue 22; docs/benchmarks.md "Partition
reassignment: 1 GB with and without a throttle").

Starts ZooKeeper and four brokers on free loopback ports in a fresh temp dir
(:class:`devcluster.cluster.LocalCluster`, as ``tests/integration/cluster_fixtures.start_cluster``
does), with ``auto.leader.rebalance.enable=false`` and fetches that may carry more than the
throttle (``replica.fetch.max.bytes`` 4 MiB, ``replica.fetch.wait.max.ms`` 100: a throttle cannot
be finer than one fetch per long poll, docs/design.md "Replication throttling"; ``--fetch-max-bytes``
and ``--fetch-wait-ms`` change them). Then, twice:

1. creates a topic with one partition on brokers [1, 2] (the znodes kafka-topics.sh
   ``--replica-assignment`` writes, through kazoo) and waits for leader 1 and ISR [1, 2];
2. fills it with ``--size-mb`` of 100 KiB records (one producer, acks=1, 1 MiB batches), reports
   the fill throughput, and waits until broker 2's log is as long as broker 1's (acks=1 leaves
   the follower behind, and its catch-up would count against a throttle set now);
3. moves it to three replicas with ``AdminClient.alter_partition_reassignments`` and measures the
   wall time from the request until ``list_partition_reassignments()`` is empty for it and its
   replicas are the target, sampling the size of the new replica's log on disk meanwhile; then
   reads the ISR in ZooKeeper and waits (30 s at most) until metadata shows the full ISR.

The first topic moves to [1, 2, 3] unthrottled, the baseline; the second to [1, 2, 4] with a
throttle of ``--throttle-mb-s`` written exactly as ``floodmark reassign --execute --throttle``
writes it (:func:`cli.reassign_throttle.set_throttle`: the topic's
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` and the
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` dynamic configs of
brokers 1, 2 and 4), then removed as ``--verify`` removes it. MB is 2**20 bytes, as in
``floodmark perf``. The token bucket lets the first ``replication.quota.window.num`` x 1 s of
throttle through at once (its burst; ``--window-num``, default the broker's 11), so the table
gives both ``size / throttle`` and ``(size - burst) / throttle``, and the copy rate measured on
disk past the burst (the least-squares slope of the samples from a second after the copy first
advanced less than twice the throttle in a second, up to 95 % of the size; unthrottled: between
45 % and 95 %).

Refuses to start without room for 6 x ``--size-mb`` plus a margin on the temp dir's filesystem.
Every wait has a deadline; the cluster is always stopped and its dir removed (kept after a
failure, or with ``--keep-data``). ``--samples FILE`` writes each copy's (seconds since the
request, bytes on disk) samples as JSON. Markdown on stdout, progress on stderr::

    .venv/bin/python bench/reassign_time.py [--size-mb 1024] [--throttle-mb-s 50] [--max-load 1.5]
        [--window-num 11] [--fetch-max-bytes 4194304] [--fetch-wait-ms 100] [--samples FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_cluster, load_average, machine, say  # noqa: E402
from bench.reassign_report import MB, RECORD_BYTES, Fill, Move, report  # noqa: E402
from cli.reassign_throttle import remove_throttle, set_throttle  # noqa: E402
from client.admin import AdminClient  # noqa: E402
from client.producer.producer import Producer  # noqa: E402
from client.types import TopicPartition  # noqa: E402
from devcluster.cluster import LocalCluster  # noqa: E402
from zk.data import decode_partition_state, encode_topic_assignment, encode_topic_config  # noqa: E402
from zk.paths import config_topic_path, partition_state_path, topic_path  # noqa: E402

T = TypeVar("T")
BROKERS = 4
BATCH_BYTES = 1 * MB
#: Replica fetches that may carry 4 MiB and long-poll for 100 ms (Kafka's defaults: 1 MiB, 500 ms).
FETCH_MAX_BYTES = 4 * MB
FETCH_WAIT_MS = 100
#: The broker default of ``replication.quota.window.num`` (Kafka's): the burst is this many seconds.
WINDOW_NUM = 11
#: Room asked for beyond 6 x the size: indexes, ZooKeeper, the broker logs, other users of the disk.
DISK_MARGIN_BYTES = 2 * 1024 * MB
UNTHROTTLED = ("reassign-unthrottled", [1, 2], [1, 2, 3])
THROTTLED = ("reassign-throttled", [1, 2], [1, 2, 4])
POLL_S = 0.05
LOAD_POLL_S = 30.0
READY_TIMEOUT_S = 60.0
ISR_TIMEOUT_S = 30.0  # after a move: until metadata shows the new replica in the ISR
ZK_TIMEOUT_S = 15.0
SETTLE_S = 1.0  # before each move: the throttle's config change notifications reach the brokers


def settings(args: argparse.Namespace) -> dict[str, str]:
    """The brokers' overrides (stated in the report)."""
    return {
        "zookeeper.session.timeout.ms": "6000",
        "auto.leader.rebalance.enable": "false",
        "message.max.bytes": str(2 * BATCH_BYTES),
        "replica.fetch.max.bytes": str(args.fetch_max_bytes),
        "replica.fetch.wait.max.ms": str(args.fetch_wait_ms),
        "replication.quota.window.num": str(args.window_num),
    }


# -- the machine -------------------------------------------------------------------------------


def wait_for_quiet(max_load: float | None, limit_s: float) -> str:
    """Wait until the 1-minute load average is below ``max_load`` (polling every 30 s, at most
    ``limit_s``); what happened, for the report."""
    if max_load is None:
        return "not waited for"
    started = time.monotonic()
    while True:
        one = os.getloadavg()[0]
        waited = time.monotonic() - started
        if one < max_load:
            return f"1-minute load {one:.2f} < {max_load} after waiting {waited:.0f} s"
        if waited + LOAD_POLL_S > limit_s:
            return f"1-minute load still {one:.2f} (>= {max_load}) after {waited:.0f} s: ran anyway"
        say(f"1-minute load {one:.2f} >= {max_load}: waiting {LOAD_POLL_S:.0f} s")
        time.sleep(LOAD_POLL_S)


def check_disk(root: Path, size_bytes: int) -> None:
    """Refuse to start without room for both runs: 2 replicas filled + 1 copied, twice."""
    needed = 6 * size_bytes + DISK_MARGIN_BYTES
    free = shutil.disk_usage(root).free
    if free < needed:
        raise SystemExit(
            f"not enough disk space on the filesystem of {root}: {free / MB:,.0f} MB free, this run "
            f"needs about {needed / MB:,.0f} MB (6 x --size-mb for 2 topics x 3 replicas, plus "
            f"{DISK_MARGIN_BYTES / MB:,.0f} MB); use a smaller --size-mb or set TMPDIR elsewhere"
        )
    say(f"disk: {free / MB:,.0f} MB free on {root}, about {needed / MB:,.0f} MB needed")


def log_bytes(cluster: LocalCluster, broker: int, topic: str) -> int:
    """The size of the ``.log`` files of partition 0 of ``topic`` on ``broker``."""
    path = cluster.data_dir / f"broker-{broker}" / "data" / f"{topic}-0"
    try:
        return sum(f.stat().st_size for f in path.glob("*.log"))
    except FileNotFoundError:  # a segment deleted or renamed while listed
        return 0


# -- one topic -----------------------------------------------------------------------------------


async def with_zookeeper(zookeeper: str, work: Callable[[Any], T]) -> T:
    """``work(kazoo_client)`` in a thread on a fresh session, the whole bounded in time."""

    def run() -> T:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=zookeeper, timeout=ZK_TIMEOUT_S)
        zk.start(ZK_TIMEOUT_S)
        try:
            return work(zk)
        finally:
            zk.stop()
            zk.close()

    return await asyncio.wait_for(asyncio.to_thread(run), 2 * ZK_TIMEOUT_S)


async def create_topic(zookeeper: str, topic: str, replicas: list[int]) -> None:
    """What kafka-topics.sh --replica-assignment writes (Kafka's AdminZkClient): the config znode,
    then the assignment, which the controller's watch turns into a partition."""

    def write(zk: Any) -> None:
        zk.create(config_topic_path(topic), encode_topic_config({}), makepath=True)
        zk.create(topic_path(topic), encode_topic_assignment({0: replicas}), makepath=True)

    await with_zookeeper(zookeeper, write)


async def zookeeper_isr(zookeeper: str, topic: str) -> list[int]:
    """Partition 0's ISR in its state znode (the controller's truth; metadata may lag it)."""

    def read(zk: Any) -> list[int]:
        data, stat = zk.get(partition_state_path(topic, 0))
        return list(decode_partition_state(data, stat.version).leader_and_isr.isr)

    return await with_zookeeper(zookeeper, read)


async def wait_caught_up(cluster: LocalCluster, topic: str, replicas: list[int], timeout_s: float) -> None:
    """Until every replica's log is as long as the leader's: an acks=1 fill leaves the follower
    behind, and its catch-up traffic would count against a throttle set now (the leader's
    LeaderReplication quota counts every follower's fetches of a throttled partition, as Kafka's)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sizes = [log_bytes(cluster, b, topic) for b in replicas]
        if len(set(sizes)) == 1:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}-0's replicas {replicas} did not catch up: {sizes} bytes")
        await asyncio.sleep(POLL_S)


async def wait_ready(admin: AdminClient, topic: str, replicas: list[int], timeout_s: float) -> None:
    """Until metadata shows partition 0 with leader ``replicas[0]`` and the full ISR."""
    deadline = time.monotonic() + timeout_s
    seen = "nothing"
    while time.monotonic() < deadline:
        (description,) = await admin.describe_topics([topic])
        if description.partitions:
            p = description.partitions[0]
            seen = f"leader {p.leader}, replicas {p.replicas}, isr {p.isr}"
            if p.leader == replicas[0] and sorted(p.isr) == sorted(replicas):
                return
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"{topic}-0 not ready on {replicas} within {timeout_s:.0f} s: {seen}")


async def fill(cluster: LocalCluster, topic: str, size_bytes: int, timeout_s: float) -> Fill:
    """``size_bytes`` of 100 KiB records into partition 0 (acks=1, 1 MiB batches), all acked."""
    records = -(-size_bytes // RECORD_BYTES)
    value = b"x" * RECORD_BYTES

    async def send_all() -> None:
        async with Producer(
            cluster.bootstrap_servers,
            acks="1",
            linger_ms=20,
            batch_size=BATCH_BYTES,
            max_request_size=2 * BATCH_BYTES,
            buffer_memory=64 * MB,
        ) as producer:
            futures = [await producer.send(topic, value, partition=0) for _ in range(records)]
            await producer.flush()
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} of {records} records failed, first: {failed[0]}")

    started = time.monotonic()
    await asyncio.wait_for(send_all(), timeout_s)
    seconds = time.monotonic() - started
    return Fill(records, seconds, log_bytes(cluster, 1, topic))


async def move(cluster: LocalCluster, admin: AdminClient, plan: Move, timeout_s: float) -> None:
    """Start the move (throttled first, as ``reassign --execute --throttle``), time it until no
    reassignment of the partition is listed and its replicas are the target; throttle removed."""
    tp = TopicPartition(plan.topic, 0)
    current, target = {tp: plan.current}, {tp: plan.target}
    if plan.throttle is not None and not await set_throttle(admin, current, target, plan.throttle):
        raise RuntimeError(f"the throttle for {tp} -> {plan.target} was not written")
    await asyncio.sleep(SETTLE_S)
    try:
        started = time.monotonic()
        errors = await admin.alter_partition_reassignments({tp: plan.target})
        if errors[tp] is not None:
            raise RuntimeError(f"moving {tp} to {plan.target} refused: {errors[tp]}")
        deadline = started + timeout_s
        while True:
            now = time.monotonic()
            plan.samples.append((now - started, log_bytes(cluster, plan.new_broker, plan.topic)))
            moving = await admin.list_partition_reassignments([tp])
            (description,) = await admin.describe_topics([plan.topic])
            p = description.partitions[0]
            if not moving and list(p.replicas) == plan.target:
                plan.done_at = time.monotonic()
                plan.seconds = plan.done_at - started
                plan.isr = list(p.isr)
                break
            if now > deadline:
                raise TimeoutError(
                    f"{tp} -> {plan.target} not done in {timeout_s:.0f} s: replicas {p.replicas}, "
                    f"{plan.samples[-1][1] / MB:.0f} MB on broker {plan.new_broker}"
                )
            await asyncio.sleep(POLL_S)
    finally:
        if plan.throttle is not None:
            await remove_throttle(admin, [plan.topic])
    plan.copied = log_bytes(cluster, plan.new_broker, plan.topic)
    plan.samples.append((plan.seconds, plan.copied))


async def one_topic(cluster: LocalCluster, args: argparse.Namespace, plan: Move) -> Fill:
    """Create, fill and move one topic; fills in ``plan``."""
    say(f"{plan.topic}: creating it on {plan.current}")
    await create_topic(cluster.zookeeper_connect, plan.topic, plan.current)
    async with AdminClient(cluster.bootstrap_servers) as admin:
        await wait_ready(admin, plan.topic, plan.current, READY_TIMEOUT_S)
        say(f"{plan.topic}: filling it with {args.size_mb} MB")
        filled = await fill(cluster, plan.topic, args.size_mb * MB, args.fill_timeout_s)
        say(f"{plan.topic}: {filled.records} records in {filled.seconds:.1f} s ({filled.mb_s:.1f} MB/s)")
        await wait_ready(admin, plan.topic, plan.current, READY_TIMEOUT_S)
        await wait_caught_up(cluster, plan.topic, plan.current, READY_TIMEOUT_S)
        timeout = args.move_timeout_s
        if plan.throttle is not None:
            timeout = max(timeout, 3 * filled.log_bytes / plan.throttle + 60)
        what = "unthrottled" if plan.throttle is None else f"throttled to {plan.throttle} B/s"
        say(f"{plan.topic}: moving {plan.current} -> {plan.target}, {what}")
        await move(cluster, admin, plan, timeout)
        plan.zk_isr = await zookeeper_isr(cluster.zookeeper_connect, plan.topic)
        await wait_ready(admin, plan.topic, plan.target, ISR_TIMEOUT_S)
        plan.metadata_isr_s = time.monotonic() - plan.done_at
        say(
            f"{plan.topic}: moved {plan.copied / MB:.0f} MB in {plan.seconds:.1f} s; ISR in metadata "
            f"{plan.isr}, in ZooKeeper {plan.zk_isr}; full in metadata after {plan.metadata_isr_s:.1f} s"
        )
    return filled


async def measure(cluster: LocalCluster, args: argparse.Namespace) -> tuple[list[Move], list[Fill]]:
    throttle = int(args.throttle_mb_s * MB)
    moves = [Move(*UNTHROTTLED, throttle=None), Move(*THROTTLED, throttle=throttle)]
    fills = [await one_topic(cluster, args, plan) for plan in moves]
    return moves, fills


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The time of a partition reassignment of --size-mb, without and with a "
        "replication throttle (docs/benchmarks.md, issue 22)."
    )
    parser.add_argument("--size-mb", type=int, default=1024, help="MB (2^20 bytes) per topic")
    parser.add_argument("--throttle-mb-s", type=float, default=50.0, help="the throttle, MB/s")
    parser.add_argument(
        "--window-num", type=int, default=WINDOW_NUM, help="replication.quota.window.num (burst seconds)"
    )
    parser.add_argument(
        "--fetch-max-bytes", type=int, default=FETCH_MAX_BYTES, help="replica.fetch.max.bytes"
    )
    parser.add_argument("--fetch-wait-ms", type=int, default=FETCH_WAIT_MS, help="replica.fetch.wait.max.ms")
    parser.add_argument(
        "--max-load", type=float, default=None, help="first wait until the 1-minute load is below this"
    )
    parser.add_argument("--load-wait-s", type=float, default=900.0, help="at most this long")
    parser.add_argument("--fill-timeout-s", type=float, default=900.0)
    parser.add_argument("--move-timeout-s", type=float, default=900.0)
    parser.add_argument("--keep-data", action="store_true")
    parser.add_argument("--samples", type=Path, default=None, help="write the copies' samples here (JSON)")
    args = parser.parse_args()
    if (
        min(args.size_mb, args.throttle_mb_s, args.window_num, args.fetch_max_bytes) <= 0
        or args.fetch_wait_ms < 0
    ):
        parser.error("--size-mb, --throttle-mb-s, --window-num and --fetch-max-bytes must be positive")
    return args


def main() -> None:
    args = parse_args()
    check_disk(Path(tempfile.gettempdir()), args.size_mb * MB)
    facts = {"quiet": wait_for_quiet(args.max_load, args.load_wait_s), "before": load_average()}
    facts["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
    started = time.monotonic()
    with bench_cluster(
        settings(args), args.keep_data, prefix="floodmark-reassign-", brokers=BROKERS
    ) as cluster:
        moves, fills = asyncio.run(measure(cluster, args))
    if args.samples is not None:
        args.samples.write_text(json.dumps({m.topic: m.samples for m in moves}) + "\n")
        say(f"samples of the copies (seconds since the request, bytes) in {args.samples}")
    facts["after"] = load_average()
    facts["wall"] = f"{time.monotonic() - started:.0f}"
    print(report(args, moves, fills, facts, machine().lines(), settings(args), BROKERS))


if __name__ == "__main__":
    main()
