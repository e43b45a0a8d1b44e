"""The simulator's in-memory ZooKeeper (sim/zookeeper.py) beneath the real ZkBridge: ZooKeeper's
semantics (versions, cversion, sequential names, errors, multi-ops, sessions, ephemerals, one-shot
watches and kazoo's reset event), the bridge's resend and session rules on top of injected faults,
and real zk/ and controller/ functions end to end. Every test runs under the simulator's
virtual-time loop (sim/runner.py) and is driven by the events it waits for, never by sleeping;
one test runs the same operations against the real ZooKeeper as the oracle of the semantics.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from client.types import TopicPartition
from controller.controller_election import try_to_become_controller
from sim.runner import run_simulation
from sim.zk_client import client_factory
from sim.zookeeper import ZkFaultRates, ZooKeeperServer
from zk.bridge import CheckOp, CreateOp, DeleteOp, SetDataOp, ZkBridge
from zk.client import register_broker, update_leader_and_isr
from zk.data import EndPoint, LeaderAndIsr, LeaderIsrAndControllerEpoch, encode_partition_state
from zk.paths import CONTROLLER_PATH, broker_id_path, partition_state_path

TIMEOUT_MS = 6000


def simulate(main: Callable[[ZooKeeperServer], Awaitable[Any]], seed: int = 1, **server: Any) -> Any:
    """Run ``main(server)`` on a fresh virtual-time loop; the server draws from the seed."""

    async def run() -> Any:
        loop = asyncio.get_running_loop()
        return await main(ZooKeeperServer(loop.seeds.stream("zookeeper"), **server))

    result = run_simulation(run, seed, time_limit_s=3600)
    assert result.completed and not result.unhandled, result.unhandled
    return result.result


async def connect(server: ZooKeeperServer, timeout_ms: int = TIMEOUT_MS) -> ZkBridge:
    bridge = ZkBridge("sim", session_timeout_ms=timeout_ms, client_factory=client_factory(server))
    await bridge.start()
    return bridge


async def first(events: list, predicate: Callable[[Any], bool], what: str, within_s: float = 60.0) -> Any:
    """Wait (virtual time) until an item of ``events`` meets ``predicate``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        for item in events:
            if predicate(item):
                return item
        assert loop.time() < deadline, f"no {what} within {within_s} s: {events}"
        await asyncio.sleep(0.01)


# -- the data tree -------------------------------------------------------------------------------
def test_create_get_set_delete_and_multi() -> None:
    async def main(server: ZooKeeperServer) -> None:
        zk = await connect(server)
        assert await zk.create("/a", b"x") == "/a"
        data, stat = await zk.get("/a")
        assert (data, stat.version, stat.dataLength, stat.czxid, stat.mzxid) == (b"x", 0, 1, 2, 2)
        with pytest.raises(NodeExistsError):
            await zk.create("/a")
        with pytest.raises(BadVersionError):
            await zk.set("/a", b"y", version=3)
        stat = await zk.set("/a", b"y", version=0)
        assert (stat.version, stat.mzxid) == (1, 5)  # the two failed writes took zxids 3 and 4
        with pytest.raises(BadVersionError) as failed:
            await zk.multi([CreateOp("/a/b"), SetDataOp("/a", b"z", 0), DeleteOp("/a")])
        assert failed.value.op_index == 1 and await zk.get_children("/a") == []
        results = await zk.multi([CheckOp("/a", 1), CreateOp("/a/b"), SetDataOp("/a", b"z", 1)])
        assert results[:2] == [True, "/a/b"] and results[2].version == 2
        await zk.delete("/a", recursive=True)
        assert await zk.exists("/a") is None and await zk.get("/a") is None
        await zk.close()

    simulate(main)


def test_sequential_names_take_the_parents_create_count_and_deletes_do_not_move_it() -> None:
    async def main(server: ZooKeeperServer) -> tuple:
        zk = await connect(server)
        await zk.create("/q")
        names = [await zk.create("/q/n-", sequence=True) for _ in range(2)]
        await zk.delete(names[0])
        third = await zk.create("/q/n-", sequence=True)
        return names, third, (await zk.exists("/q")).cversion

    names, third, cversion = simulate(main)
    assert names == ["/q/n-0000000000", "/q/n-0000000001"]
    assert (third, cversion) == ("/q/n-0000000002", 4)  # 3 creates and 1 delete: 2*3 - 2 children


# -- the oracle: the same operations against the real ZooKeeper ----------------------------------
async def _oracle_sequence(zk: ZkBridge, other: Callable[[], Awaitable[ZkBridge]]) -> list:
    """Operations whose answers are compared between the real server and the fake; zxids are
    taken relative to the first znode's czxid, ephemeral owners as mine/other."""
    out: list = []
    base = 0
    owners = {0: 0}

    def norm(value: Any) -> Any:
        if isinstance(value, ZnodeStat):
            return (
                value.czxid - base,
                value.mzxid - base,
                value.pzxid - base,
                value.version,
                value.cversion,
                owners.get(value.ephemeralOwner, "?"),
                value.dataLength,
                value.numChildren,
            )
        if isinstance(value, tuple):
            return tuple(norm(v) for v in value)
        if isinstance(value, list):
            return [norm(v) for v in value]
        if isinstance(value, Exception):
            return type(value).__name__
        return value

    async def step(label: str, call: Awaitable[Any]) -> None:
        try:
            out.append((label, norm(await call)))
        except ZookeeperError as exc:
            out.append((label, type(exc).__name__))

    async def raw_multi(label: str, build: Callable[[Any], None]) -> None:
        transaction = zk.client.transaction()
        build(transaction)
        out.append((label, norm(await zk._await(transaction.commit_async()))))

    owners[zk.session_id] = "mine"
    await zk.create("/o", b"x")
    base = (await zk.exists("/o")).czxid
    await step("stat", zk.exists("/o"))
    await step("create again", zk.create("/o"))
    await step("set bad version", zk.set("/o", b"y", version=5))
    await step("set", zk.set("/o", b"y", version=0))
    await step("seq", zk.create("/o/s-", sequence=True))
    await step("seq ephemeral", zk.create("/o/s-", sequence=True, ephemeral=True))
    await step("delete", zk.delete("/o/s-0000000000"))
    await step("after delete", zk.exists("/o"))
    await step("seq after delete", zk.create("/o/s-", sequence=True))

    def failing(t: Any) -> None:
        t.check("/o", 1), t.create("/o/x"), t.set_data("/o", b"z", 7), t.delete("/o/s-0000000002")

    def passing(t: Any) -> None:
        t.check("/o", 1), t.create("/o/x"), t.set_data("/o", b"z", 1), t.delete("/o/s-0000000002")

    await raw_multi("multi failing", failing)
    await step("after failed multi", zk.exists("/o"))
    await raw_multi("multi", passing)
    await step("after multi", zk.get("/o"))
    await step("ephemeral", zk.create("/o/e", ephemeral=True))
    await step("child of ephemeral", zk.create("/o/e/c"))
    await step("delete non-empty", zk.delete("/o"))
    await step("delete missing", zk.delete("/nope"))
    await step("set missing", zk.set("/nope", b""))
    await step("create without parent", zk.create("/nope/x"))
    await step("delete bad version", zk.delete("/o/x", version=9))
    await step("get missing", zk.get("/nope"))
    theirs = await other()
    owners[theirs.session_id] = "other"
    await step("their ephemeral", theirs.create("/o/t", ephemeral=True))
    await step("stat theirs", zk.exists("/o/t"))
    await theirs.close()
    await step("after their session closed", zk.exists("/o"))
    await step("their ephemeral gone", zk.exists("/o/t"))
    out.append(("children", sorted(await zk.get_children("/o"))))
    await step("ensure_path", zk.ensure_path("/p/q/r"))
    await step("ensure_path parent", zk.exists("/p/q"))
    await step("makepath", zk.create("/m/n", b"v", makepath=True))
    await step("makepath parent", zk.exists("/m"))
    return out


async def test_the_fake_answers_as_the_real_zookeeper_does(zk_connect: str) -> None:
    """The oracle: versions, cversion, pzxid, zxids taken by failed writes and sessions,
    sequential names, multi results and error types are the real server's."""
    real = ZkBridge(zk_connect, session_timeout_ms=TIMEOUT_MS)
    await real.start()

    async def real_other() -> ZkBridge:
        other = ZkBridge(zk_connect, session_timeout_ms=TIMEOUT_MS)
        await other.start()
        return other

    try:
        expected = await _oracle_sequence(real, real_other)
    finally:
        await real.close()
    # the fake on this (uvloop) loop: it runs on any asyncio loop
    server = ZooKeeperServer(random.Random(7))
    fake = await connect(server)
    try:
        got = await _oracle_sequence(fake, lambda: connect(server))
    finally:
        await fake.close()
    assert got == expected


# -- sessions, ephemerals and watches ------------------------------------------------------------
def test_ephemerals_vanish_on_expiry_and_their_watches_fire_elsewhere() -> None:
    async def main(server: ZooKeeperServer) -> None:
        watcher, broker = await connect(server), await connect(server)
        states: list[str] = []
        broker.add_state_listener(states.append)
        first_session = broker.session_id
        epoch = await register_broker(broker, 1, [EndPoint("PLAINTEXT", "h", 9092)], 0)
        events: list[WatchedEvent] = []
        assert await watcher.get_children("/brokers/ids", watch=events.append) == ["1"]
        assert (await watcher.exists(broker_id_path(1), watch=events.append)).czxid == epoch

        server.disconnect(first_session)  # no reconnection in time: kept out until expiry
        server.isolate(broker.client)
        # the session expires at the server; the broker learns it only when it reconnects
        await first(events, lambda e: e.type == EventType.CHILD, "the watcher's events")
        assert states == ["SUSPENDED"]
        assert [(e.type, e.path) for e in events] == [
            (EventType.DELETED, broker_id_path(1)),
            (EventType.CHILD, "/brokers/ids"),
        ]
        assert await watcher.exists(broker_id_path(1)) is None
        server.heal(broker.client)
        await first(states, lambda s: s == "CONNECTED", "a new session")
        assert states == ["SUSPENDED", "LOST", "CONNECTED"]
        assert broker.session_id not in (None, first_session)
        assert await register_broker(broker, 1, [EndPoint("PLAINTEXT", "h", 9092)], 0) > epoch

    simulate(main)


def test_a_drop_fires_kazoos_reset_event_and_the_watch_is_gone_at_the_server() -> None:
    async def main(server: ZooKeeperServer) -> None:
        zk, writer = await connect(server), await connect(server)
        await zk.create("/w")
        events: list[WatchedEvent] = []
        await zk.get("/w", watch=events.append)
        server.disconnect(zk.session_id)
        reset = await first(events, lambda e: True, "the reset event")
        assert reset == WatchedEvent(EventType.NONE, KeeperState.CONNECTING, None)
        assert "/w" not in server.tree.data_watches  # kazoo hides a stale server watch: look
        await first([zk], lambda b: b.connected, "reconnection")
        await writer.set("/w", b"1")  # the server dropped the watch with the connection ...
        barrier: list[WatchedEvent] = []
        await zk.get("/w", watch=barrier.append)
        await writer.set("/w", b"2")  # ... so this change reaches only the new watch
        await first(barrier, lambda e: e.type == EventType.CHANGED, "the new watch")
        assert events == [reset]

    simulate(main)


def test_one_shot_watches_fire_in_zxid_order() -> None:
    async def main(server: ZooKeeperServer) -> list:
        zk, writer = await connect(server), await connect(server)
        for path in ("/a", "/b"):
            await zk.create(path)
        events: list[WatchedEvent] = []
        await zk.get("/a", watch=events.append)
        await zk.exists("/b", watch=events.append)
        await zk.get_children("/a", watch=events.append)
        await zk.exists("/c", watch=events.append)
        await writer.set("/b", b"1")
        await writer.create("/a/child")
        await writer.set("/a", b"1")
        await writer.set("/a", b"2")  # the data watch of /a fired once already
        await writer.create("/c")
        await first(events, lambda e: e.path == "/c", "the last event")
        assert not server.tree.data_watches and not server.tree.child_watches  # each fired once
        return [(e.type, e.path) for e in events]

    assert simulate(main, latency=(0.001, 0.02)) == [
        (EventType.CHANGED, "/b"),
        (EventType.CHILD, "/a"),
        (EventType.CHANGED, "/a"),
        (EventType.CREATED, "/c"),
    ]


# -- faults beneath the bridge -------------------------------------------------------------------
def test_a_create_whose_answer_is_lost_is_resent_and_meets_node_exists() -> None:
    """Applied, the answer lost: the bridge resends in the same session, the resend answers
    NodeExists, and register_broker sees the znode is its own (Kafka's checkedEphemeralCreate)."""

    async def main(server: ZooKeeperServer) -> None:
        zk = await connect(server)
        server.inject("drop", "after", kind="create", path=broker_id_path(3))
        epoch = await register_broker(zk, 3, [EndPoint("PLAINTEXT", "h", 9093)], 0)
        stat = await zk.exists(broker_id_path(3))
        assert server.injected == [("drop", "after", "create", broker_id_path(3))]
        assert zk.resent_requests == 1 and (epoch, stat.ephemeralOwner) == (stat.czxid, zk.session_id)

    simulate(main)


def test_an_isr_write_whose_answer_is_lost_meets_bad_version_and_is_resolved_as_ours() -> None:
    async def main(server: ZooKeeperServer) -> None:
        zk = await connect(server)
        tp = TopicPartition("t", 0)
        path = partition_state_path(tp.topic, tp.partition)
        await zk.create(
            path,
            encode_partition_state(LeaderIsrAndControllerEpoch(LeaderAndIsr(1, 0, (1, 2), 0), 1)),
            makepath=True,
        )
        server.inject("drop", "after", kind="set", path=path)
        written = await update_leader_and_isr(zk, tp, LeaderAndIsr(1, 0, (1,), 0), 1)
        assert zk.resent_requests == 1 and written == LeaderAndIsr(1, 0, (1,), 1)
        assert (await zk.get(path))[1].version == 1  # applied once

    simulate(main)


def test_a_request_lost_before_the_server_is_resent_and_applied_once() -> None:
    async def main(server: ZooKeeperServer) -> None:
        zk = await connect(server)
        await zk.create("/x")
        server.inject("drop", "before", kind="set", path="/x")
        assert (await zk.set("/x", b"1", version=0)).version == 1
        assert zk.resent_requests == 1 and server.injected == [("drop", "before", "set", "/x")]

    simulate(main)


def test_a_request_started_while_disconnected_is_resent_into_the_same_session() -> None:
    """Cut off (kazoo does not know yet): the request vanishes, kazoo's read timeout fails it
    with ConnectionLoss, and once ZooKeeper is reachable again within the session timeout the
    bridge sends it again into the same session."""

    async def main(server: ZooKeeperServer) -> None:
        zk = await connect(server)
        await zk.create("/x")
        session = zk.session_id
        states: list[str] = []
        zk.add_state_listener(states.append)
        server.isolate(zk.client)
        write = asyncio.ensure_future(zk.set("/x", b"1", version=0))
        await first(states, lambda s: s == "SUSPENDED", "the drop")
        server.heal(zk.client)
        assert (await write).version == 1
        assert zk.session_id == session and zk.resent_requests == 1 and states == ["SUSPENDED", "CONNECTED"]

    simulate(main)


def test_a_request_queued_while_disconnected_fails_with_session_expired_when_the_session_is_gone() -> None:
    """kazoo's client beneath the bridge: a request made while CONNECTING waits in the queue;
    the reconnection that finds the session expired fails it with SessionExpiredError (not
    ConnectionLoss), reports LOST, then opens a new session."""

    async def main(server: ZooKeeperServer) -> None:
        client = client_factory(server)(timeout=TIMEOUT_MS / 1000)
        states: list = []
        client.add_listener(states.append)
        await client.start()
        session = client.client_id[0]
        server.disconnect(session)
        server.isolate(client)  # kept out until the session has expired
        queued = client.get_async("/")
        assert not queued.ready() and client.client_id is None
        expired = asyncio.get_running_loop().create_future()
        await first([server], lambda srv: session not in srv.sessions, "the expiry at the server")
        server.heal(client)
        queued.rawlink(lambda r: expired.set_result(r.exception))
        assert isinstance(await expired, SessionExpiredError)
        await first([states], lambda seen: seen[-1] == "CONNECTED" and "LOST" in seen, "the new session")
        assert [str(s) for s in states] == ["CONNECTED", "SUSPENDED", "LOST", "CONNECTED"]
        assert client.client_id[0] != session
        await client.stop()

    simulate(main)


@pytest.mark.parametrize("when", ["before", "after"])
def test_expiry_while_a_request_is_in_flight_raises_session_expired(when: str) -> None:
    async def main(server: ZooKeeperServer) -> None:
        zk, other = await connect(server), await connect(server)
        await zk.create("/e", ephemeral=True)
        await zk.create("/x")
        session = zk.session_id
        server.inject("expire", when, kind="set", path="/x")
        with pytest.raises(SessionExpiredError):
            await zk.set("/x", b"1")
        assert (await other.exists("/x")).version == (1 if when == "after" else 0)
        assert await other.exists("/e") is None
        assert zk.session_id not in (None, session)  # the bridge went on in a new session

    simulate(main)


# -- a controller election end to end ------------------------------------------------------------
def test_the_controller_election_runs_on_the_fake_through_a_lost_answer_and_an_expiry() -> None:
    async def main(server: ZooKeeperServer) -> tuple:
        one, two = await connect(server), await connect(server)
        server.inject("drop", "after", kind="multi", session=one.session_id)
        wins = await asyncio.gather(try_to_become_controller(one, 1, 0), try_to_become_controller(two, 2, 0))
        assert [w is not None for w in wins].count(True) == 1
        winner, loser = (one, two) if wins[0] is not None else (two, one)
        gone: list[WatchedEvent] = []
        assert await loser.exists(CONTROLLER_PATH, watch=gone.append) is not None
        server.expire(winner.session_id)
        await first(gone, lambda e: e.type == EventType.DELETED, "the controller's deletion")
        second = await try_to_become_controller(loser, 2 if loser is two else 1, 0)
        return wins[0] or wins[1], second

    first_win, second_win = simulate(main)
    assert (first_win.epoch, second_win.epoch) == (1, 2)


# -- determinism under random faults -------------------------------------------------------------
async def _random_workload(server: ZooKeeperServer) -> tuple:
    """Three sessions incrementing one counter by conditional sets under random drops, expiries
    and latencies; a BadVersion after a resend is settled by reading the value back."""
    bridges = [await connect(server) for _ in range(3)]
    await bridges[0].create("/counter", b"0")
    done: list[int] = []

    async def worker(zk: ZkBridge, n: int) -> None:
        for i in range(20):
            mine = f"{n}.{i}".encode()
            while True:
                try:
                    data, stat = await zk.get("/counter")
                    if data != mine:  # else an earlier attempt landed, its answer lost
                        await zk.set("/counter", mine, stat.version)
                    break
                except (BadVersionError, SessionExpiredError):
                    continue
            done.append(n)

    await asyncio.gather(*(worker(zk, n) for n, zk in enumerate(bridges)))
    stat = (await bridges[0].get("/counter"))[1]
    return len(done), server.zxid, len(server.injected), stat.version


def test_the_same_seed_replays_the_same_run_under_random_faults() -> None:
    faults = ZkFaultRates(drop_before=0.05, drop_after=0.05, expire=0.01)

    def run(seed: int) -> tuple:
        async def main() -> tuple:
            loop = asyncio.get_running_loop()
            server = ZooKeeperServer(loop.seeds.stream("zookeeper"), latency=(0.0005, 0.02), faults=faults)
            return await _random_workload(server)

        result = run_simulation(main, seed, time_limit_s=3600)
        assert result.completed
        return result.result, result.trace_hash

    once, again = run(11), run(11)
    assert once == again
    (workers_done, _, injected, version), _ = once
    assert workers_done == 60 and injected > 0 and version >= 60
