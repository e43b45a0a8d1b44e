"""The ZooKeeper bridge sends a request again after a connection drop, in the same session only
(Kafka's ZooKeeperClient.retryRequestsUntilConnected; docs/design.md "The ZooKeeper client
layer"). ZooKeeper is real; the drops are injected beneath the bridge at exact requests by
:class:`~tests.unit.kazoo_faults.KazooFaults`, as kazoo reports them for requests in flight.
"""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.protocol.states import EventType, WatchedEvent

from tests.unit.kazoo_faults import KazooFaults, expire_session
from zk.bridge import ZkBridge
from zk.client import allocate_producer_id_block, register_broker
from zk.data import EndPoint, decode_producer_id_block
from zk.paths import BROKER_IDS_PATH, PRODUCER_ID_BLOCK_PATH, broker_id_path


async def test_a_read_whose_answer_was_lost_is_sent_again_and_sets_its_watch(zk: ZkBridge) -> None:
    """Old bridge: ConnectionLoss reached the caller, and a watcher re-registering after a reset
    had no watch from then on."""
    faults = KazooFaults(zk.client)
    faults.fail("get_children_async", path=BROKER_IDS_PATH, after_answer=True)
    fired: list[WatchedEvent] = []

    children = await zk.get_children(BROKER_IDS_PATH, watch=fired.append)

    assert children == [] and faults.injected == [("get_children_async", BROKER_IDS_PATH)]
    assert zk.resent_requests == 1
    await zk.create(broker_id_path(7), b"{}", ephemeral=True)
    for _ in range(250):
        if fired:
            break
        await asyncio.sleep(0.02)
    assert [e.type for e in fired] == [EventType.CHILD]


async def test_a_request_never_sent_is_sent_again(zk: ZkBridge) -> None:
    faults = KazooFaults(zk.client)
    faults.fail("set_async", path=BROKER_IDS_PATH)
    stat = await zk.set(BROKER_IDS_PATH, b"x")
    assert stat.version == 1 and zk.resent_requests == 1
    assert (await zk.get(BROKER_IDS_PATH))[0] == b"x"


async def test_a_registration_whose_answer_was_lost_is_ours(zk: ZkBridge) -> None:
    """The resent create answers NodeExists; the znode is this session's, so it is the broker's
    registration (Kafka's checkedEphemeralCreate), with its own czxid as the broker epoch."""
    faults = KazooFaults(zk.client)
    faults.fail("create_async", path=broker_id_path(3), after_answer=True)

    epoch = await register_broker(zk, 3, [EndPoint("PLAINTEXT", "127.0.0.1", 9093)], 0, timeout=1.0)

    stat = await zk.exists(broker_id_path(3))
    assert faults.injected and stat is not None
    assert (epoch, stat.ephemeralOwner) == (stat.czxid, zk.session_id)


async def test_a_request_is_not_sent_again_into_a_new_session(zk: ZkBridge) -> None:
    """The session ended while the request was unanswered: SessionExpiredError, and nothing is
    resent into the new session (its ephemeral znodes and watches are not the old one's)."""
    faults = KazooFaults(zk.client)
    faults.hold("exists_async", path=BROKER_IDS_PATH)
    request = asyncio.create_task(zk.exists(BROKER_IDS_PATH))
    await faults.wait_held()
    await expire_session(zk.client)
    faults.release(ConnectionLoss())

    with pytest.raises(SessionExpiredError):
        await request
    assert zk.resent_requests == 0


async def test_no_connection_within_the_retry_timeout_raises_connection_loss(zk: ZkBridge) -> None:
    zk.retry_timeout_s = 0.3
    faults = KazooFaults(zk.client)
    faults.fail("get_async", path=BROKER_IDS_PATH)
    zk.client._live.clear()  # kazoo's "connected" flag, as after a drop it has not recovered from
    try:
        with pytest.raises(ConnectionLoss, match="no ZooKeeper connection for 0.3 s"):
            await zk.get(BROKER_IDS_PATH)
    finally:
        zk.client._live.set()
    assert await zk.get(BROKER_IDS_PATH) is not None


async def test_closing_the_bridge_ends_a_wait_for_the_connection(zk_connect: str) -> None:
    bridge = ZkBridge(zk_connect, session_timeout_ms=6000)
    await bridge.start()
    faults = KazooFaults(bridge.client)
    faults.fail("get_async", path="/")
    bridge.client._live.clear()
    request = asyncio.create_task(bridge.get("/"))
    await asyncio.sleep(0.1)
    assert not request.done()
    await bridge.close()
    with pytest.raises(ConnectionLoss, match="closed"):
        await asyncio.wait_for(request, 2.0)


async def test_a_producer_id_block_whose_answer_was_lost_is_skipped_not_shared(zk: ZkBridge) -> None:
    """The resent conditional write answers BadVersion although the first one landed: the claim
    goes on to the next block, so the landed one (1000..1999) is never handed out, to anyone.
    Adopting it by its data could hand it out twice when one broker claims concurrently
    (tests/integration/test_idempotence.py::test_concurrent_block_claims_never_overlap). Old
    code: ConnectionLoss reached the caller."""
    first = await allocate_producer_id_block(zk, 1)
    faults = KazooFaults(zk.client)
    faults.fail("set_async", path=PRODUCER_ID_BLOCK_PATH, after_answer=True)

    second = await allocate_producer_id_block(zk, 1)

    assert faults.injected == [("set_async", PRODUCER_ID_BLOCK_PATH)]
    assert (first.block_start, second.block_start, second.block_end) == (0, 2000, 2999)
    assert decode_producer_id_block((await zk.get(PRODUCER_ID_BLOCK_PATH))[0]) == second


async def test_a_request_started_while_disconnected_is_sent_again_into_the_same_session(
    zk: ZkBridge,
) -> None:
    """A request started while kazoo is reconnecting (as the reads that re-register the watches
    kazoo resets during a drop are) fails with ConnectionLoss; kazoo then reconnects to the same
    session. kazoo's ``client_id`` is None while disconnected, so the old bridge recorded session
    None for the request, judged the reconnection a new session and raised SessionExpiredError."""
    session = zk.session_id
    faults = KazooFaults(zk.client)
    faults.fail("get_children_async", path=BROKER_IDS_PATH)
    zk.client._live.clear()  # kazoo's "connected" flag: a drop it has not recovered from yet
    try:
        assert zk.session_id is None
        request = asyncio.create_task(zk.get_children(BROKER_IDS_PATH))
        while not faults.injected:  # the request went out and failed; the bridge waits to reconnect
            await asyncio.sleep(0)
        assert not request.done()
    finally:
        zk.client._live.set()  # connected again, to the same session

    assert await request == []
    assert zk.session_id == session and zk.resent_requests == 1
