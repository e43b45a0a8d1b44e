"""The simulated world (sim/world.py, sim/broker_process.py, sim/network.py): three real brokers,
the in-memory ZooKeeper and the simulated network under the virtual-time loop. A controller is
elected, a topic is created through the real AdminClient, an idempotent acks=all Producer's
acknowledged records survive a leader crash and restart; pause holds every callback of a broker
until resume while its ZooKeeper session expires; the network's partitions, refusals and
connection losses; the same seed replays to the same trace hash, other seeds differ. Every test
waits on the state it checks, in virtual time; none sleeps to let something not happen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from client.connection import ConnectionClosed
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from sim.broker_process import ProcessState
from sim.runner import SimulationResult, run_simulation
from sim.world import PORT, World, WorldConfig
from zk.paths import broker_id_path

TOPIC = "t"


def simulate(main: Callable[[World], Awaitable[Any]], seed: int = 1, **config: Any) -> SimulationResult:
    async def run() -> Any:
        async with World(WorldConfig(**config)) as world:
            await world.start()
            return await main(world)

    result = run_simulation(run, seed, time_limit_s=3600)
    assert result.completed, result.recent
    assert not result.unhandled, result.unhandled
    return result


async def produce(producer: Any, first: int, count: int) -> list[tuple[int, bytes]]:
    """acks=all writes to partition 0, one at a time; (offset, value) of each acknowledged one."""
    acked = []
    for i in range(first, first + count):
        value = b"v%d" % i
        metadata = await producer.send_and_wait(TOPIC, value, partition=0)
        acked.append((metadata.offset, value))
    return acked


async def crash_restart_scenario(world: World) -> dict[str, Any]:
    assert world.controller_id() in world.brokers
    admin = await world.admin()
    await admin.create_topic(TOPIC, 1, 3)
    producer = await world.producer(acks="all", enable_idempotence=True)
    acked = await produce(producer, 0, 20)
    leader = world.leader_of(TOPIC, 0)
    assert leader is not None
    world.crash(leader)
    assert world.broker(leader).state is ProcessState.DEAD
    acked += await produce(producer, 20, 20)  # the producer retries until a new leader answers
    new_leader = world.leader_of(TOPIC, 0)
    assert new_leader not in (None, leader)
    await world.restart(leader)
    await world.wait_until_ready()
    acked += await produce(producer, 40, 20)
    final = world.leader_of(TOPIC, 0)
    assert final is not None
    on_leader = {r.offset: r.value for r in world.records(final, TOPIC, 0)}
    missing = [(offset, value) for offset, value in acked if on_leader.get(offset) != value]
    assert not missing, f"acknowledged records not below the HW of leader {final}: {missing}"
    assert [offset for offset, _ in acked] == list(range(60))  # idempotent: no duplicates, no gaps
    # the restarted broker catches up from the new leader and holds the same records below its HW
    await world.wait_for(
        lambda: len(world.records(leader, TOPIC, 0)) == 60, f"broker {leader} catching up", within_s=60
    )
    assert [r.value for r in world.records(leader, TOPIC, 0)] == [v for _, v in acked]
    return {"crashed": leader, "new_leader": new_leader, "incarnations": world.broker(leader).incarnations}


def test_acknowledged_records_survive_a_leader_crash_and_restart() -> None:
    result = simulate(crash_restart_scenario, seed=1)
    assert result.result["incarnations"] == 2


@pytest.mark.parametrize("seed", [2, 3])
def test_other_seeds_run_the_same_scenario(seed: int) -> None:
    simulate(crash_restart_scenario, seed=seed)


def test_the_same_seed_gives_the_same_trace_and_other_seeds_other_traces() -> None:
    first = simulate(crash_restart_scenario, seed=5)
    again = simulate(crash_restart_scenario, seed=5)
    other = simulate(crash_restart_scenario, seed=6)
    assert first.trace_hash == again.trace_hash
    assert first.callbacks == again.callbacks and first.virtual_seconds == again.virtual_seconds
    assert other.trace_hash != first.trace_hash


def test_a_minute_of_cluster_time_runs_in_wall_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    """~60 virtual seconds of a 3-broker cluster with a steady producer; the speed is printed
    (docs/benchmarks.md), never asserted."""

    async def main(world: World) -> int:
        admin = await world.admin()
        await admin.create_topic(TOPIC, 1, 3)
        producer = await world.producer(acks="all")
        sent = 0
        while world.loop.elapsed_ns < 60e9:
            await producer.send_and_wait(TOPIC, b"x" * 100, partition=0)
            sent += 1
            await asyncio.sleep(0.05)
        return sent

    wall = time.perf_counter()
    result = simulate(main, seed=11)
    wall = time.perf_counter() - wall
    assert result.result > 500 and result.virtual_seconds >= 60
    with capsys.disabled():
        print(
            f"\nsim world: {result.virtual_seconds:.1f} virtual s in {wall:.2f} wall s "
            f"({result.virtual_seconds / wall:.0f} virtual s per wall s, {result.callbacks} callbacks, "
            f"{result.callbacks / wall:.0f} callbacks per wall s, {result.result} records)"
        )


def test_a_paused_broker_runs_nothing_its_session_expires_and_it_comes_back() -> None:
    async def main(world: World) -> None:
        admin = await world.admin()
        await admin.create_topic(TOPIC, 1, 3)
        producer = await world.producer(acks="all")
        await produce(producer, 0, 5)
        leader = world.leader_of(TOPIC, 0)
        assert leader is not None
        paused = world.broker(leader)
        log = world.replica_log(leader, TOPIC, 0)
        assert log is not None
        leo = log.log_end_offset
        world.pause(leader)
        # its session expires at the server (no pings): the controller moves the leadership
        await world.wait_for(
            lambda: world.leader_of(TOPIC, 0) not in (None, leader), "a new leader", within_s=30
        )
        assert world.znode(broker_id_path(leader)) is None
        await produce(producer, 5, 5)
        assert paused.incarnation is not None and paused.incarnation.held  # its callbacks wait
        assert log.log_end_offset == leo  # nothing of it ran: no fetch, no append
        world.resume(leader)
        assert not paused.incarnation.held
        # it notices the expired session, registers again and catches up as a follower
        await world.wait_for(lambda: world.znode(broker_id_path(leader)) is not None, "re-registration")
        await world.wait_for(
            lambda: len(world.records(leader, TOPIC, 0)) == 10, f"broker {leader} catching up"
        )

    simulate(main, seed=3)


def test_connections_are_refused_cut_and_broken_as_tcp_would() -> None:
    async def main(world: World) -> None:
        network = world.network
        connect = network.connector("client-x")
        body = {"topics": []}
        # a broker that is down refuses: its listener is gone
        world.crash(3)
        with pytest.raises(ConnectionClosed, match="ConnectionRefusedError"):
            await connect("broker-3.sim", PORT, timeout=5.0)
        # across a cut link the SYN is lost: the attempt times out at the caller's timeout
        network.cut(["client-x"], ["broker-1"])
        started = world.loop.time()
        with pytest.raises(ConnectionClosed, match="TimeoutError"):
            await connect("broker-1.sim", PORT, timeout=3.0)
        assert world.loop.time() - started == pytest.approx(3.0)
        network.heal()
        connection = await connect("broker-1.sim", PORT, timeout=5.0)
        assert (await connection.request(ApiKey.METADATA, body, 5.0))["cluster_id"]
        # a request across a link cut after it was sent hangs until its timeout ...
        network.cut(["client-x"], ["broker-1"])
        with pytest.raises(KafkaError) as timed_out:
            await connection.request(ApiKey.METADATA, body, 2.0)
        assert timed_out.value.code == ErrorCode.REQUEST_TIMED_OUT
        # ... and the bytes wait, as TCP retransmits them: after the heal the connection works
        network.heal()
        assert (await connection.request(ApiKey.METADATA, body, 5.0))["cluster_id"]
        # losing the whole connection fails every request in flight on it
        pending = [asyncio.ensure_future(connection.request(ApiKey.METADATA, body, 30.0)) for _ in range(3)]
        await asyncio.sleep(0)
        (sim_connection,) = [c for c in network.connections if c.client.protocol is connection]
        network.break_connection(sim_connection)
        for request in pending:
            with pytest.raises(ConnectionClosed):
                await request
        assert not connection.is_open

    simulate(main, seed=4)


def test_each_connection_is_fifo() -> None:
    """Pipelined requests on one connection are answered in order, whatever the delays drawn."""

    async def main(world: World) -> list[int]:
        connection = await world.network.connector("client-x")("broker-2.sim", PORT, timeout=5.0)
        futures = [connection.send(ApiKey.API_VERSIONS, {}) for _ in range(20)]
        order: list[int] = []
        for i, future in enumerate(futures):
            future.add_done_callback(lambda _, i=i: order.append(i))
        await asyncio.gather(*futures)
        return order

    assert simulate(main, seed=8).result == list(range(20))


def test_a_paused_broker_can_be_crashed_and_restarted() -> None:
    """SIGSTOP then SIGKILL: what the pause held is dropped (its tasks end), the restart recovers."""

    async def main(world: World) -> None:
        admin = await world.admin()
        await admin.create_topic(TOPIC, 1, 3)
        producer = await world.producer(acks="all")
        await produce(producer, 0, 5)
        broker = world.broker(2)
        world.pause(2)
        if world.leader_of(TOPIC, 0) != 2:  # writes go on while a follower is stopped
            await produce(producer, 5, 5)
        old = broker.incarnation
        assert old is not None
        world.crash(2)
        assert not old.held and old.state is ProcessState.DEAD
        await world.wait_for(lambda: not world.table.tasks_of(old), "the dead incarnation's tasks ending")
        await world.restart(2)
        await world.wait_until_ready()
        await world.wait_for(lambda: len(world.records(2, TOPIC, 0)) >= 5, "broker 2 catching up")

    simulate(main, seed=9)


def test_segment_rolls_flush_on_the_loop_not_on_a_real_thread() -> None:
    """A roll schedules Kafka's "flush-log" job; in a broker it runs on the log manager's flusher
    thread, which under simulation would race the loop (the run no longer replays). The world
    passes ServerRuntime.schedule_once, so every flush is a callback of the broker's incarnation:
    no flusher thread starts, and a run with many rolls replays to the same trace hash. (Before:
    three log-flusher threads started and the storage model had to take a lock.)"""
    import threading

    async def rolls(world: World) -> int:
        admin = await world.admin()
        await admin.create_topic(TOPIC, 1, 3)
        producer = await world.producer(acks="all", enable_idempotence=True)
        await produce(producer, 0, 40)
        leader = world.leader_of(TOPIC, 0)
        segments = len(world.replica_log(leader, TOPIC, 0).segments)
        assert not [t.name for t in threading.enumerate() if t.name.startswith("log-flusher")]
        return segments

    props = {"log.segment.bytes": "1000"}
    first = simulate(rolls, seed=5, props=props)
    assert first.result >= 3, f"only {first.result} segments: the test must roll"
    assert simulate(rolls, seed=5, props=props).trace_hash == first.trace_hash


def test_a_stalled_connection_delivers_late_and_in_order_while_new_connections_flow() -> None:
    """TCP's retransmission backoff on one flow: a request on a stalled connection times out at
    the client, which closes it and carries on over a new connection at once; the stalled bytes,
    and then the FIN, still reach the broker when the stall ends (what a producer gave up on can
    land after its later requests: the simulator's ``stall`` fault)."""

    async def main(world: World) -> None:
        network = world.network
        connect = network.connector("client-x")
        old = await connect("broker-1.sim", PORT, timeout=5.0)
        (stalled,) = [c for c in network.connections if c.client.protocol is old]
        network.stall(stalled, 10.0)
        with pytest.raises(KafkaError) as timed_out:
            await old.request(ApiKey.API_VERSIONS, {}, 1.0)
        assert timed_out.value.code == ErrorCode.REQUEST_TIMED_OUT
        old.close()
        new = await connect("broker-1.sim", PORT, timeout=5.0)
        assert (await new.request(ApiKey.API_VERSIONS, {}, 2.0))["api_keys"]
        assert world.loop.time() - stalled.up.held_until < 0  # the stall still holds
        assert stalled.up.queue and not stalled.server.closed  # the request and the FIN wait
        await world.wait_for(lambda: stalled.server.closed, "the stalled FIN reaching broker 1", within_s=15)
        assert not stalled.up.queue
        assert world.loop.time() >= stalled.up.held_until

    simulate(main, seed=5)
