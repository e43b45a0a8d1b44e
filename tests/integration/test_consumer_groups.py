"""Consumer groups on real brokers (issue 23; seed 004; docs/design.md "Consumer groups"):
ZooKeeper and three broker processes; the group coordinator on the leader of the group's
``__consumer_offsets`` partition.

* three members of one group split six partitions two each (Range), and together read every
  record exactly once;
* a member in another process killed with SIGKILL: its partitions move to the others within
  ``session.timeout.ms`` (plus the rebalance);
* committed offsets survive a SIGKILL of the coordinator broker and a restart of the whole
  cluster, and a new member resumes from them.

Every wait polls with a deadline; the member processes are bounded by their own timeouts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client import Consumer
from client.admin import AdminClient
from client.types import TopicPartition
from tests.integration.cluster_fixtures import start_cluster
from tests.integration.failover_helpers import cluster_broker_ids, create_topic, eventually, produce_values

pytestmark = pytest.mark.integration

SESSION_MS = 6000
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "300", "offsets.topic.num.partitions": "6"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("groups"), brokers=3, overrides=GROUP_SETTINGS)
    yield c
    c.down()


def member(cluster, group: str, **config) -> Consumer:
    options = {
        "group_id": group,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": 500,
        **config,
    }
    return Consumer(cluster.bootstrap_servers, **options)


async def poll_all(consumers: list[Consumer], seconds: float) -> list[list]:
    """Poll every consumer concurrently for ``seconds``; each one's records."""
    got: list[list] = [[] for _ in consumers]
    deadline = time.monotonic() + seconds

    async def run(i: int, c: Consumer) -> None:
        while time.monotonic() < deadline:
            got[i].extend(await c.poll(timeout_ms=200))

    await asyncio.gather(*(run(i, c) for i, c in enumerate(consumers)))
    return got


def test_three_members_split_six_partitions(cluster):
    """Range gives each member two partitions; with auto commit each rebalance commits what was
    read before the partitions move, so the group reads all 600 records exactly once."""

    async def scenario():
        await create_topic(cluster, "split", 6, 3)
        acked = await produce_values(cluster, "split", [b"v%04d" % i for i in range(600)])
        assert len(acked) == 600
        consumers = [member(cluster, "splitters", auto_commit_interval_ms=500) for _ in range(3)]
        for c in consumers:
            await c.start()
            c.subscribe(["split"])
        try:
            before: list[list] = [[] for _ in consumers]

            async def settled():
                for i, records in enumerate(await poll_all(consumers, 1.0)):
                    before[i].extend(records)
                owned = [c.assignment() for c in consumers]
                return owned if all(len(o) == 2 for o in owned) else None

            owned = await eventually(settled, "every member to own two partitions", 60)
            assert set().union(*owned) == {TopicPartition("split", p) for p in range(6)}
            after: list[list] = [[] for _ in consumers]

            async def everything():
                for i, records in enumerate(await poll_all(consumers, 0.5)):
                    after[i].extend(records)
                return sum(map(len, before + after)) >= 600 or None

            await eventually(everything, "all 600 records", 60)
            values = [r.value for records in before + after for r in records]
            assert sorted(values) == sorted(v for _, _, v in acked)  # each exactly once
            for records, mine in zip(after, owned, strict=True):
                assert {TopicPartition(r.topic, r.partition) for r in records} <= mine

            async def auto_committed():  # auto commit (every 500 ms here) reaches the coordinator
                await poll_all(consumers, 0.3)
                async with AdminClient(cluster.bootstrap_servers) as admin:
                    offsets = await admin.list_consumer_group_offsets("splitters")
                return sum(om.offset for om in offsets.values()) == 600 or None

            await eventually(auto_committed, "the auto commit of all 600 records", 30)
        finally:
            for c in consumers:
                await c.close()

    asyncio.run(scenario())


MEMBER_SCRIPT = """
import asyncio, sys
from client import Consumer
from client.admin import AdminClient

async def main():
    c = Consumer(sys.argv[1], group_id=sys.argv[2], auto_offset_reset="earliest",
                 session_timeout_ms=int(sys.argv[3]), heartbeat_interval_ms=500)
    await c.start()
    c.subscribe([sys.argv[4]])
    announced = False
    for _ in range(6000):
        await c.poll(timeout_ms=100)
        if c.assignment() and not announced:
            print("assigned", sorted(tp.partition for tp in c.assignment()), flush=True)
            announced = True

asyncio.run(main())
"""


def test_a_killed_member_loses_its_partitions_within_the_session_timeout(cluster, tmp_path: Path):
    async def scenario():
        await create_topic(cluster, "kill-member", 6, 3)
        await produce_values(cluster, "kill-member", [b"k%03d" % i for i in range(60)])
        script = tmp_path / "member.py"
        script.write_text(MEMBER_SCRIPT)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                cluster.bootstrap_servers,
                "killers",
                str(SESSION_MS),
                "kill-member",
            ],
            stdout=subprocess.PIPE,
            env=env,
        )
        consumers = [member(cluster, "killers") for _ in range(2)]
        try:
            for c in consumers:
                await c.start()
                c.subscribe(["kill-member"])

            async def three_way():
                await poll_all(consumers, 0.5)
                owned = [len(c.assignment()) for c in consumers]
                return owned == [2, 2] or None

            await eventually(three_way, "the two in-process members to own two partitions each", 60)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            killed_at = time.monotonic()

            async def two_way():
                await poll_all(consumers, 0.5)
                owned = [len(c.assignment()) for c in consumers]
                return owned == [3, 3] or None

            await eventually(two_way, "the killed member's partitions to move", 60)
            moved_after = time.monotonic() - killed_at
            # the session timeout, plus one rebalance (the members rejoin within a heartbeat)
            assert moved_after < SESSION_MS / 1000 + 5, moved_after
        finally:
            if proc.poll() is None:
                proc.kill()
            for c in consumers:
                await c.close()

    asyncio.run(scenario())


def test_committed_offsets_survive_a_coordinator_kill_and_a_cluster_restart(cluster):
    async def scenario():
        await create_topic(cluster, "resume", 3, 3)
        await produce_values(cluster, "resume", [b"r%03d" % i for i in range(90)])
        c = member(cluster, "resumers", enable_auto_commit=False)
        await c.start()
        c.subscribe(["resume"])
        seen = []

        async def some():
            seen.extend(await c.poll(timeout_ms=500))
            return len(seen) >= 30 or None

        await eventually(some, "30 records", 60)
        await c.commit()
        committed = {tp: (await c.committed(tp)).offset for tp in c.assignment()}
        await c.close()
        assert sum(committed.values()) == len(seen)
        return committed

    committed = asyncio.run(scenario())
    coordinator = asyncio.run(find_coordinator(cluster, "resumers"))
    cluster.kill(coordinator)

    async def after_kill():
        c = member(cluster, "resumers", enable_auto_commit=False)
        await c.start()
        try:
            return await eventually(
                lambda: offsets_of(c, committed), "the offsets from the new coordinator", 60
            )
        finally:
            await c.close()

    assert asyncio.run(after_kill()) == committed
    cluster.start(coordinator)
    brokers = cluster_broker_ids(cluster)
    for broker_id in brokers:
        cluster.kill(broker_id)
    for broker_id in brokers:  # the old registrations go with their sessions
        cluster.wait_registered(broker_id, registered=False, timeout=30)
    for broker_id in brokers:
        cluster.start(broker_id)

    async def after_restart():
        c = member(cluster, "resumers", enable_auto_commit=False)
        await c.start()
        try:
            return await eventually(lambda: offsets_of(c, committed), "the offsets after a restart", 90)
        finally:
            await c.close()

    assert asyncio.run(after_restart()) == committed


async def offsets_of(c: Consumer, wanted: dict) -> dict | None:
    got = {}
    for tp in wanted:
        om = await c.committed(tp)
        got[tp] = om.offset if om else None
    return got if got == wanted else None


async def find_coordinator(cluster, group: str) -> int:
    from client.protocol.api import ApiKey

    c = Consumer(cluster.bootstrap_servers)
    await c.start()
    try:
        conn = await c.cluster.any_connection()
        answer = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0})
        assert answer["error_code"] == 0, answer
        return answer["node_id"]
    finally:
        await c.close()


def test_bad_group_requests_get_kafkas_errors_and_lose_nothing(cluster):
    """Unknown group, a JoinGroup with no protocols, an OffsetCommit from a stale generation, an
    oversized member metadata, a body of the wrong shape: each answered with Kafka's error by
    name, and the group's committed offsets and the broker's other clients unharmed."""
    from client.protocol.api import ApiKey
    from client.protocol.errors import ErrorCode, KafkaError

    async def scenario():
        await create_topic(cluster, "bad-groups", 2, 3)
        await produce_values(cluster, "bad-groups", [b"b%02d" % i for i in range(20)])
        c = member(cluster, "bad-group-victim", enable_auto_commit=False)
        await c.start()
        c.subscribe(["bad-groups"])
        seen = []

        async def some():
            seen.extend(await c.poll(timeout_ms=300))
            return len(seen) >= 20 or None

        await eventually(some, "the group's first records", 60)
        await c.commit()
        generation = c.group_metadata().generation_id
        before = {tp: (await c.committed(tp)).offset for tp in c.assignment()}
        node = await find_coordinator(cluster, "bad-group-victim")
        conn = await c.cluster.connection(node)

        async def ask(api: ApiKey, body: dict) -> dict:
            return await conn.request(api, body, timeout=10)

        unknown = await c.cluster.connection(await find_coordinator(cluster, "no-such-group"))
        described = await unknown.request(ApiKey.DESCRIBE_GROUPS, {"groups": ["no-such-group"]})
        assert (described["groups"][0]["error_code"], described["groups"][0]["group_state"]) == (0, "Dead")
        beat = await unknown.request(
            ApiKey.HEARTBEAT, {"group_id": "no-such-group", "generation_id": 1, "member_id": "m"}
        )
        assert beat["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        join = {
            "group_id": "bad-group-victim", "session_timeout_ms": SESSION_MS, "member_id": "",
            "protocol_type": "consumer", "protocols": [],
        }  # fmt: skip
        assert (await ask(ApiKey.JOIN_GROUP, join))["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        huge = {**join, "protocols": [{"name": "range", "metadata": b"x" * 2_000_000}]}
        assert (await ask(ApiKey.JOIN_GROUP, huge))["error_code"] == ErrorCode.INVALID_REQUEST
        stale = {
            "group_id": "bad-group-victim", "generation_id": generation - 1,
            "member_id": c.group_metadata().member_id,
            "topics": [{"topic": "bad-groups", "partitions": [{"partition": 0, "committed_offset": 0}]}],
        }  # fmt: skip
        answer = await ask(ApiKey.OFFSET_COMMIT, stale)
        assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION
        with pytest.raises(KafkaError) as refused:
            await ask(ApiKey.SYNC_GROUP, {"group_id": 7})
        assert refused.value.code == ErrorCode.INVALID_REQUEST
        after = {tp: (await c.committed(tp)).offset for tp in c.assignment()}
        assert after == before  # the stale commit changed nothing
        more = await produce_values(cluster, "bad-groups", [b"after-%d" % i for i in range(5)])
        assert len(more) == 5

        async def the_rest():
            seen.extend(await c.poll(timeout_ms=300))
            return len(seen) >= 25 or None

        await eventually(the_rest, "the records produced after the bad requests", 60)
        await c.close()

    asyncio.run(scenario())


def test_the_sync_consumer_joins_a_group_commits_and_resumes(cluster):
    """SyncConsumer (kafka-python's shape): ready once constructed, subscribe with a plain
    listener, commit; a second one in the same group resumes after the commit."""
    from client import SyncConsumer

    asyncio.run(create_topic(cluster, "sync-group", 2, 3))
    asyncio.run(produce_values(cluster, "sync-group", [b"s%02d" % i for i in range(30)]))
    events: list[tuple[str, set]] = []

    class Listener:
        def on_partitions_revoked(self, revoked: set) -> None:
            events.append(("revoked", revoked))

        def on_partitions_assigned(self, assigned: set) -> None:
            events.append(("assigned", assigned))

    options = {"group_id": "sync-group", "auto_offset_reset": "earliest", "enable_auto_commit": False}
    first = SyncConsumer(cluster.bootstrap_servers, session_timeout_ms=SESSION_MS, **options)
    try:
        first.subscribe(["sync-group"], listener=Listener())
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < 30 and time.monotonic() < deadline:
            seen += first.poll(300)
        assert len(seen) == 30
        assert events and events[0] == (
            "assigned",
            {TopicPartition("sync-group", 0), TopicPartition("sync-group", 1)},
        )
        first.commit({TopicPartition("sync-group", 0): 5, TopicPartition("sync-group", 1): 5})
        assert first.committed(TopicPartition("sync-group", 0)).offset == 5
        assert first.group_metadata().generation_id >= 1
    finally:
        first.close()
    second = SyncConsumer(cluster.bootstrap_servers, session_timeout_ms=SESSION_MS, **options)
    try:
        second.subscribe(["sync-group"])
        again = []
        deadline = time.monotonic() + 60
        while len(again) < 20 and time.monotonic() < deadline:
            again += second.poll(300)
        assert sorted(r.offset for r in again if r.partition == 0)[0] == 5
        assert len(again) == 20  # 30 records, 5 per partition committed before
    finally:
        second.close()
