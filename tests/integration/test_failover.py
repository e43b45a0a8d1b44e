"""Issue 3 on a real cluster: broker failure, leader election by SPEC 4's rules, controlled
shutdown, fencing by controller epoch, and unclean leader election (seed 000 "Broker Failover",
seed 003 "所有replica都不工作"). After each scenario every replica holds byte-identical batches
below the high watermark."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal

import pytest
from kazoo.client import KazooClient

from client.connection import BrokerConnection
from client.protocol.api import CONSUMER_REPLICA_ID, LATEST_TIMESTAMP, ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import (
    assert_replicas_identical,
    create_topic,
    describe,
    eventually,
    high_watermarks,
    partition_state,
    produce_outcomes,
    produce_values,
    read_all,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path):
    c = start_cluster(tmp_path / "cluster", brokers=3, overrides={"replica.lag.time.max.ms": "4000"})
    yield c
    c.down()


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def assert_all_acknowledged_present(acked: list[tuple[int, int, bytes]], logs: dict[int, list]) -> None:
    stored = {(p, offset): value for p, records in logs.items() for offset, value in records}
    missing = [(p, o, v) for p, o, v in acked if stored.get((p, o)) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    for records in logs.values():
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), "offsets must be strictly increasing"


async def test_leader_sigkill_elects_an_isr_member_and_keeps_every_acknowledged_record(cluster):
    await create_topic(cluster, "fo", 3, 3, {"min.insync.replicas": "2"})
    acked = await produce_values(cluster, "fo", values("before", 3000))
    assert len(acked) == 3000
    before = await partition_state(cluster, "fo", 0)
    victim = before.leader

    cluster.kill(victim, "KILL")

    async def new_leader():
        p = await partition_state(cluster, "fo", 0)
        return p if p.leader not in (victim, -1) else None

    after = await eventually(new_leader, f"a new leader for fo-0 after killing broker {victim}")
    assert after.leader in before.isr
    assert after.leader_epoch > before.leader_epoch
    assert victim not in after.isr
    # acks=all keeps working with two of three replicas (min.insync.replicas=2)
    acked += await produce_values(cluster, "fo", values("during", 1000))
    assert len(acked) == 4000
    assert_all_acknowledged_present(acked, await read_all(cluster, "fo", 3))

    # The killed broker restarts, truncates as needed, catches up and rejoins every ISR.
    cluster.start(victim)

    async def full_isr():
        d = await describe(cluster, "fo")
        return all(sorted(p.isr) == [1, 2, 3] for p in d.partitions)

    await eventually(full_isr, f"broker {victim} back in every ISR of fo", timeout=60)
    acked += await produce_values(cluster, "fo", values("after", 1000))
    assert_all_acknowledged_present(acked, await read_all(cluster, "fo", 3))
    assert_replicas_identical(cluster, "fo", await high_watermarks(cluster, "fo", 3))


async def test_controlled_shutdown_moves_leadership_before_the_broker_exits(cluster):
    await create_topic(cluster, "cs", 6, 3, {"min.insync.replicas": "2"})
    acked = await produce_values(cluster, "cs", values("cs", 2000))
    assert len(acked) == 2000, "every record acknowledged before the shutdown"
    before = {p.partition: p for p in (await describe(cluster, "cs")).partitions}
    led_by_2 = [p for p, d in before.items() if d.leader == 2]
    assert led_by_2, "placement gives every broker some leaderships"
    pid = cluster.state.brokers[2].pid

    cluster.kill(2, "TERM")
    await eventually(lambda: _true(cluster._procs.exit_code(pid) is not None), "broker 2 to exit")
    assert cluster._procs.exit_code(pid) == 0

    # Before it exited: broker 2 logged the controller's answer (nothing led here any more) while
    # alive, and the controller's controlled-shutdown election of each partition it led is in the
    # state-change log before that line. (Not the state znode's mtime: the new leader may add the
    # still-fetching broker 2 back to the ISR, as Kafka 2.x's leaders may, and the next controller
    # then removes it, a later write of the same znode.)
    broker_out = (cluster.data_dir / "broker-2" / "broker.out").read_text()
    (succeeded,) = [line for line in broker_out.splitlines() if "controlled shutdown succeeded" in line]
    succeeded_ms = _log_line_ms(succeeded)
    moved = _controlled_shutdown_elections(cluster, "cs")
    for partition, state_ms in (await _partition_states(cluster, "cs", led_by_2)).items():
        state, _ = state_ms
        assert state["leader"] not in (2, -1) and state["leader"] in before[partition].isr, state
        assert state["leader_epoch"] > before[partition].leader_epoch, state
        assert partition in moved, f"cs-{partition}: no controlled-shutdown election in the state-change logs"
        assert moved[partition] <= succeeded_ms, (
            f"cs-{partition}: leadership moved at {moved[partition]}, after broker 2 logged success at {succeeded_ms}"
        )

    d = await describe(cluster, "cs")
    assert all(p.leader not in (2, -1) and 2 not in p.isr for p in d.partitions), d
    after = await produce_values(cluster, "cs", values("cs-after", 500))
    assert len(after) == 500, "every record acknowledged with broker 2 gone"
    assert_all_acknowledged_present(acked + after, await read_all(cluster, "cs", 6))


def _controlled_shutdown_elections(cluster, topic: str) -> dict[int, int]:
    """Partition -> time of the controller's controlled-shutdown election (state-change logs)."""
    times: dict[int, int] = {}
    for path in cluster.data_dir.glob("broker-*/state-change.log"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if (
                record.get("decision") == "partition_state_change"
                and record.get("topic") == topic
                and record.get("election") == "controlled_shutdown"
            ):
                times[record["partition"]] = record["time_ms"]
    return times


async def _true(value: bool) -> bool:
    return value


def _log_line_ms(line: str) -> int:
    """A broker.out line's time (logging's asctime: local time, milliseconds) in epoch ms."""
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return int(stamp.timestamp() * 1000)


async def _partition_states(cluster, topic: str, partitions: list[int]) -> dict[int, tuple[dict, int]]:
    """Each partition's state znode (leader, leader_epoch, isr...) and its mtime in epoch ms."""
    zk = KazooClient(cluster.zookeeper_connect)
    zk.start(10)
    try:
        states = {}
        for partition in partitions:
            data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
            states[partition] = (json.loads(data), stat.mtime)
        return states
    finally:
        zk.stop()
        zk.close()


async def test_a_leader_and_isr_with_a_stale_controller_epoch_is_rejected(cluster):
    await create_topic(cluster, "fenced", 1, 3)
    p = await partition_state(cluster, "fenced", 0)
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    connection = await BrokerConnection.open(host, int(port))
    try:
        stale = {
            "controller_id": 99,
            "controller_epoch": 0,  # the elected controller won with epoch >= 1
            "partition_states": [
                {
                    "topic": "fenced",
                    "partition": 0,
                    "controller_epoch": 0,
                    "leader": 1,
                    "leader_epoch": p.leader_epoch + 10,
                    "isr": [1],
                    "zk_version": 99,
                    "replicas": [1, 2, 3],
                }
            ],
            "live_leaders": [],
        }
        response = await connection.request(ApiKey.LEADER_AND_ISR, stale)
    finally:
        connection.close()
    assert response["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    # nothing changed: the real leader and epoch stand
    now = await partition_state(cluster, "fenced", 0)
    assert (now.leader, now.leader_epoch) == (p.leader, p.leader_epoch)


async def _lose_the_whole_isr(cluster, topic: str, unclean: bool):
    """RF 2: stop the follower (the ISR shrinks to the leader), write more, stop the leader, then
    restart only the out-of-sync follower."""
    await create_topic(cluster, topic, 1, 2, {"unclean.leader.election.enable": str(unclean).lower()})
    p = await partition_state(cluster, topic, 0)
    leader, follower = p.replicas
    assert p.leader == leader
    await produce_values(cluster, topic, values("both", 100))
    cluster.kill(follower, "KILL")
    await produce_values(cluster, topic, values("leader-only", 50), acks="1")

    async def shrunk():
        return (await partition_state(cluster, topic, 0)).isr == [leader]

    await eventually(shrunk, f"ISR of {topic}-0 shrinks to [{leader}]")
    cluster.kill(leader, "KILL")

    async def offline():
        return (await partition_state(cluster, topic, 0)).leader == -1

    await eventually(offline, f"{topic}-0 offline once its last ISR member died")
    cluster.start(follower)
    return leader, follower


async def test_with_unclean_election_off_a_partition_whose_isr_is_dead_stays_offline(cluster):
    leader, follower = await _lose_the_whole_isr(cluster, "clean", unclean=False)
    # The out-of-sync follower is back, yet the partition must stay offline, ISR unchanged. No
    # waiting and hoping: the controller handles events one at a time, in order, and ZooKeeper
    # delivers its watches in the order of the writes. The follower's /brokers/ids znode (the
    # BrokerChange whose handling would elect it) precedes a new topic's znode (a TopicChange);
    # once that topic has a leader, the BrokerChange was handled in full.
    await eventually(lambda: _registered(cluster, follower), f"broker {follower} registered")
    await create_topic(cluster, "barrier", 1, 1)

    async def barrier_led():
        return (await partition_state(cluster, "barrier", 0)).leader >= 0

    await eventually(barrier_led, "the controller handled the topic created after the follower's return")
    p = await partition_state(cluster, "clean", 0)
    assert p.leader == -1 and p.isr == [leader], p
    # When the last ISR member returns, it leads again with everything it had.
    cluster.start(leader)

    async def online():
        p = await partition_state(cluster, "clean", 0)
        return p if p.leader == leader else None

    await eventually(online, "the last ISR member leads again")
    logs = await read_all(cluster, "clean", 1)
    assert [v for _, v in logs[0]] == values("both", 100) + values("leader-only", 50)


async def test_with_unclean_election_on_an_out_of_sync_replica_takes_over(cluster):
    leader, follower = await _lose_the_whole_isr(cluster, "unclean", unclean=True)

    async def online():
        p = await partition_state(cluster, "unclean", 0)
        return p if p.leader == follower else None

    p = await eventually(online, "the out-of-sync follower elected uncleanly")
    assert p.isr == [follower]
    logs = await read_all(cluster, "unclean", 1)
    # The writes only the old leader had are gone: that is what unclean election costs.
    assert [v for _, v in logs[0]] == values("both", 100)
    acked = await produce_values(cluster, "unclean", values("new-leader", 20), acks="1")
    assert len(acked) == 20

    # The old leader returns as a follower: it truncates the writes nobody else has (by leader
    # epoch), copies the new leader's and rejoins the ISR; both replicas then agree byte for byte.
    cluster.start(leader)

    async def rejoined():
        return sorted((await partition_state(cluster, "unclean", 0)).isr) == sorted([leader, follower])

    await eventually(rejoined, f"broker {leader} back in the ISR of unclean-0", timeout=60)
    logs = await read_all(cluster, "unclean", 1)
    assert [v for _, v in logs[0]] == values("both", 100) + values("new-leader", 20)
    assert_replicas_identical(cluster, "unclean", await high_watermarks(cluster, "unclean", 1))


async def _registered(cluster, broker_id: int) -> bool:
    zk = KazooClient(cluster.zookeeper_connect)
    zk.start(10)
    try:
        return str(broker_id) in zk.get_children("/brokers/ids")
    finally:
        zk.stop()
        zk.close()


def _error_name(exc: BaseException) -> str:
    return exc.name if isinstance(exc, KafkaError) else type(exc).__name__


async def _leader_high_watermark(cluster, broker_id: int, topic: str, partition: int) -> int:
    """ListOffsets (latest: the HW, as a consumer sees it) sent straight to one broker."""
    connection = await BrokerConnection.open("127.0.0.1", cluster.state.brokers[broker_id].port)
    try:
        response = await connection.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": CONSUMER_REPLICA_ID,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": partition,
                                "timestamp": LATEST_TIMESTAMP,
                                "current_leader_epoch": -1,
                            }
                        ],
                    }
                ],
            },
            timeout=5,
        )
    finally:
        connection.close()
    (answer,) = response["topics"][0]["partitions"]
    assert answer["error_code"] == ErrorCode.NONE, answer
    return answer["offset"]


def _state_change_events(cluster, broker_id: int) -> list[dict]:
    path = cluster.data_dir / f"broker-{broker_id}" / "state-change.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_a_controller_whose_session_expires_resigns_and_its_broker_re_registers(cluster):
    zk = KazooClient(cluster.zookeeper_connect)
    zk.start(10)
    try:
        old = json.loads(zk.get("/controller")[0])["brokerid"]
        old_epoch = int(zk.get("/controller_epoch")[0])
        cluster.kill(old, "STOP")  # a GC pause longer than zookeeper.session.timeout.ms (6 s)

        async def new_controller():
            node = zk.exists("/controller")
            return node is not None and json.loads(zk.get("/controller")[0])["brokerid"] != old

        await eventually(new_controller, f"a controller other than the paused broker {old}")
        assert int(zk.get("/controller_epoch")[0]) > old_epoch
        assert str(old) not in zk.get_children("/brokers/ids")
        cluster.kill(old, "CONT")

        async def re_registered():
            return str(old) in zk.get_children("/brokers/ids")

        await eventually(re_registered, f"broker {old} re-registered after its session expired")
        new = json.loads(zk.get("/controller")[0])["brokerid"]
        assert new != old

        async def resigned():
            return any(e.get("decision") == "controller_resigned" for e in _state_change_events(cluster, old))

        await eventually(resigned, f"broker {old} records that it resigned as controller")
    finally:
        zk.stop()
        zk.close()
    # the cluster still works, controlled by the new controller
    await create_topic(cluster, "after-expiry", 3, 3, {"min.insync.replicas": "2"})
    assert len(await produce_values(cluster, "after-expiry", values("x", 300))) == 300


async def test_a_leader_cut_off_from_zookeeper_cannot_commit_acks_all_alone(cluster):
    """SPEC 5.4: once its followers stop fetching, a leader that cannot write the state znode
    cannot shrink the ISR to itself, so its HW stays put and acks=all writes are never acknowledged."""
    await create_topic(cluster, "cutoff", 1, 3, {"min.insync.replicas": "2"})
    committed = await produce_values(cluster, "cutoff", values("before", 100), partition=0)
    assert len(committed) == 100
    p = await partition_state(cluster, "cutoff", 0)
    followers = [b for b in p.replicas if b != p.leader]
    zookeeper_pid = cluster.state.zookeeper.pid
    for b in followers:
        cluster.kill(b, "STOP")
    os.kill(zookeeper_pid, signal.SIGSTOP)
    try:
        # well past replica.lag.time.max.ms (4 s): the leader tries to shrink the ISR and cannot
        acked, failed = await produce_outcomes(
            cluster,
            "cutoff",
            values("alone", 10),
            partition=0,
            request_timeout_ms=8000,
            delivery_timeout_ms=9000,
            retries=0,
        )
        assert acked == [], "no acks=all write may be acknowledged by a leader alone"
        # ...and they failed for the reason under test: the leader held them until the timeout
        # (not, say, an unreachable leader or a refused produce).
        assert len(failed) == 10 and {_error_name(exc) for _, exc in failed} == {"REQUEST_TIMED_OUT"}, failed
        # The HW, asked of the leader itself (the followers are stopped): where it was.
        assert await _leader_high_watermark(cluster, p.leader, "cutoff", 0) == 100

        # The leader did try to shrink the ISR to itself: that write cannot reach ZooKeeper, so
        # its ISR (and with it the HW) stays where it was, and nothing was acknowledged.
        broker_out = (cluster.data_dir / f"broker-{p.leader}" / "broker.out").read_text()
        assert re.search(
            rf"\[Partition cutoff-0 broker={p.leader}\] Shrinking ISR from [0-9,]+ to {p.leader}\.",
            broker_out,
        ), "the leader attempts the shrink"
    finally:
        os.kill(zookeeper_pid, signal.SIGCONT)
        for b in followers:
            cluster.kill(b, "CONT")

    async def healthy():
        d = await describe(cluster, "cutoff")
        return sorted(d.partitions[0].isr) == sorted(p.replicas) and d.partitions[0].leader >= 0

    await eventually(healthy, "cutoff-0 back to a full ISR", timeout=90)
    logs = await read_all(cluster, "cutoff", 1)
    assert_all_acknowledged_present(committed, logs)
