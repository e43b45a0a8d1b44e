"""The log cleaner inside brokers run by the deterministic simulator (sim/world.py; docs/design.md
"Log compaction", "Simulation"): the cleaner task starts on the virtual-time loop, its executor
steps run inline, its backoff is virtual time; every replica of a compacted topic cleans its own
log, and each ends holding the last value of every key, identical per offset to the others. The
same seed replays to the same trace."""

from __future__ import annotations

from typing import Any

from sim.runner import run_simulation
from sim.world import World, WorldConfig

TOPIC = "compacted"
KEYS = 6
ROUNDS = 12


async def compaction_scenario(world: World) -> dict[str, Any]:
    admin = await world.admin()
    await admin.create_topic(
        TOPIC,
        1,
        3,
        configs={"cleanup.policy": "compact", "segment.bytes": "700", "min.cleanable.dirty.ratio": "0.01"},
    )
    producer = await world.producer(acks="all")
    last: dict[bytes, tuple[int, bytes]] = {}
    for r in range(ROUNDS):
        for k in range(KEYS):
            key, value = b"k%d" % k, b"v%d-%d" % (k, r)
            metadata = await producer.send_and_wait(TOPIC, value, key=key, partition=0)
            last[key] = (metadata.offset, value)
    await producer.send_and_wait(TOPIC, b"end", key=b"end", partition=0)  # roll past the last round

    def cleaned(broker_id: int) -> bool:
        lg = world.replica_log(broker_id, TOPIC, 0)
        if lg is None or len(lg.segments) < 2:
            return False
        below = [r for r in world.records(broker_id, TOPIC, 0) if r.offset < lg.active_segment.base_offset]
        keys = [r.key for r in below]
        return bool(below) and len(keys) == len(set(keys))

    await world.wait_for(
        lambda: all(cleaned(b) for b in world.brokers), "every replica cleaned", within_s=600
    )
    views = {}
    for broker_id in world.brokers:
        lg = world.replica_log(broker_id, TOPIC, 0)
        assert lg is not None
        server = world.broker(broker_id).server
        assert server is not None and server.log_manager.cleaner.stats.passes >= 1
        views[broker_id] = {r.offset: (r.key, r.value) for r in world.records(broker_id, TOPIC, 0)}
        latest = {key: (r_offset, value) for r_offset, (key, value) in sorted(views[broker_id].items())}
        assert {k: v for k, v in latest.items() if k in last} == last
    for a in views.values():  # identical per offset wherever two replicas both hold it
        for b in views.values():
            assert all(b[o] == a[o] for o in a.keys() & b.keys())
    return {"passes": sorted(world.broker(b).server.log_manager.cleaner.stats.passes for b in world.brokers)}


def test_every_replica_compacts_its_own_log_under_the_simulator() -> None:
    config = WorldConfig(props={"log.cleaner.backoff.ms": "500"})

    async def run() -> Any:
        async with World(config) as world:
            await world.start()
            return await compaction_scenario(world)

    first = run_simulation(run, 3, time_limit_s=3600)
    assert first.completed, first.recent
    assert not first.unhandled, first.unhandled
    again = run_simulation(run, 3, time_limit_s=3600)
    assert (again.result, again.trace_hash) == (first.result, first.trace_hash)
