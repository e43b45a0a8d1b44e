"""The broker process's own wiring (broker/server.py) that no other test pins: requests wait for
the broker's registration (KIP-380), and the periodic jobs run on the schedule their configs give
(Kafka's KafkaScheduler tasks, here the producer-id expiration of KIP-98 / ProducerStateManager).
Real ZooKeeper for the registration; the subsystems the wiring calls are recorders.
"""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

from broker.config import BrokerConfig
from broker.server import BrokerServer
from zk.bridge import ZkBridge
from zk.paths import broker_id_path

BROKER = 1
WAIT_S = 10.0  # how long an awaited event may take before the test fails (never a timed assertion)


def _server(zk_connect: str, **overrides: str) -> BrokerServer:
    props = {"broker.id": str(BROKER), "zookeeper.connect": zk_connect, **overrides}
    server = BrokerServer(BrokerConfig(props), rng=random.Random(1))
    server.port = 19092
    return server


async def test_a_request_that_arrives_before_registration_is_handled_with_the_broker_epoch(
    zk_connect: str,
) -> None:
    """Kafka starts its request processing only once the broker is registered: a controller request
    handled before that would be checked against broker epoch -1 (KIP-380). A request handed to
    ``_handle`` first waits; registration then sets the epoch and lets it through. (Without the
    wait, the recorder saw broker epoch -1.)"""
    bridge = ZkBridge(zk_connect, session_timeout_ms=6000)
    await bridge.start()
    server = _server(zk_connect)
    server.zk = bridge
    server.replica_manager = SimpleNamespace(broker_epoch=-1)
    seen: list[int] = []

    async def handle(request: object) -> None:
        seen.append(server.replica_manager.broker_epoch)

    server.apis = SimpleNamespace(handle=handle)
    try:
        handling = asyncio.create_task(server._handle(object()))  # type: ignore[arg-type]
        for _ in range(20):  # every runnable step of the task, deterministically: it can only wait
            await asyncio.sleep(0)
        assert seen == [] and not handling.done()
        await server._register()
        await asyncio.wait_for(handling, WAIT_S)
        registration = await bridge.exists(broker_id_path(BROKER))
        assert seen == [registration.czxid] and seen[0] > 0
        await server._handle(object())  # type: ignore[arg-type]  # once registered: straight through
        assert seen == [registration.czxid] * 2
    finally:
        await bridge.close()


async def test_producer_id_expiration_runs_at_its_configured_interval(zk_connect: str) -> None:
    """``producer.id.expiration.check.interval.ms`` schedules the log manager's expiry of idle
    producer ids (Kafka's "PeriodicProducerExpirationCheck"). Every other periodic job is set an
    hour apart, so only this one can run; the test waits for its third run."""
    hour = str(3_600_000)
    server = _server(
        zk_connect,
        **{
            "producer.id.expiration.check.interval.ms": "20",
            "replica.high.watermark.checkpoint.interval.ms": hour,
            "log.flush.offset.checkpoint.interval.ms": hour,
            "log.flush.start.offset.checkpoint.interval.ms": hour,
            "log.retention.check.interval.ms": hour,
            "log.flush.scheduler.interval.ms": hour,
            "replica.lag.time.max.ms": hour,
        },
    )
    runs: list[str] = []
    third = asyncio.Event()

    def expire() -> int:
        runs.append("remove_expired_producers")
        if runs.count("remove_expired_producers") >= 3:
            third.set()
        return 0

    def other(name: str):  # noqa: ANN202
        return lambda: runs.append(name)

    server.log_manager = SimpleNamespace(
        checkpoint_high_watermarks=other("hw"),
        checkpoint_recovery_points=other("recovery"),
        checkpoint_log_start_offsets=other("start"),
        cleanup_logs=other("retention"),
        remove_expired_producers=expire,
        flush_dirty_logs=other("flush"),
        delete_doomed_logs=other("delete-logs"),  # every second, whatever the config
    )
    server.replica_manager = SimpleNamespace(
        maybe_shrink_isr=other("shrink"),
        maybe_propagate_isr_changes=other("isr"),
        disk_space=SimpleNamespace(refresh=other("disk-space")),  # every second, as delete-logs
    )
    try:
        server._start_periodic_tasks()
        await asyncio.wait_for(third.wait(), WAIT_S)
        assert set(runs) <= {"remove_expired_producers", "isr", "delete-logs", "disk-space"}, runs
        assert "producer-id-expiration" in {t.get_name() for t in server._tasks}
    finally:
        for task in server._tasks:
            task.cancel()
        await asyncio.gather(*server._tasks, return_exceptions=True)
