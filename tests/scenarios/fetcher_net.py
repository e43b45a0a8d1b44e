"""An in-process cluster for replaying replica-fetcher races step by step (SPEC 5.4; Kafka's
AbstractFetcherThread, ReplicaFetcherThread and AbstractFetcherManager; ARCHITECTURE "Testing").

Each :class:`Broker` holds what a broker process holds for replication: a real ``ReplicaManager``
over a real ``LogManager`` in its own log dir on disk, and a real ``ReplicaFetcherManager`` whose
connections come from :class:`Net`. The controller is the test: it sends LeaderAndIsr to one
broker at a time, so it can deliver them late or out of order, as a slow controller channel does.

:class:`Net` answers FETCH, LIST_OFFSETS and OFFSET_FOR_LEADER_EPOCH as ``broker/apis.py`` does,
from the target broker's ReplicaManager at the moment the request arrives (a FETCH may park in
that broker's fetch purgatory, as a real long poll does). Bodies go through the wire codec and
the request and response schemas, as with a real ``BrokerConnection``. A test can :meth:`Net.hold`
the answers that match a predicate until it releases them: that is how a slow response is made
to land after a LeaderAndIsr, deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.api_responses import fetch_response, per_partition
from broker.config import BrokerConfig
from broker.log import Log, LogManager
from broker.metadata_cache import MetadataCache
from broker.replica import offset_lookup
from broker.replica.delayed import ProducePartitionStatus
from broker.replica.fetcher import ConnectionFactory, LeaderConnection
from broker.replica.fetcher_manager import ReplicaFetcherManager
from broker.replica.replica_manager import ReplicaManager
from client.connection import ConnectionClosed
from client.protocol.api import ApiKey, validate_request, validate_response
from client.protocol.errors import ErrorCode, KafkaError
from client.protocol.framing import pack, unpack
from client.protocol.records import build_batch, decode_records, iter_batches
from client.types import TopicPartition

TOPIC = "t"
CONTROLLER_ID = 9
START_MS = 1_000_000
BACKOFF_MS = 100  # replica.fetch.backoff.ms in these scenarios
FETCH_WAIT_MS = 20  # replica.fetch.wait.max.ms: the follower's long poll
WAIT_S = 5.0  # how long eventually() waits before failing (never a timed assertion)


class FakeClock:
    """The brokers' wall clock (ISR lag, timestamps): it stands still unless a test moves it."""

    def __init__(self) -> None:
        self.now_ms = START_MS

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Sent:
    """One request on the fake network, in the order sent."""

    source: int
    target: int
    api_key: ApiKey
    body: dict
    at: float  # loop time when sent
    answered: bool = False

    def partitions(self) -> list[tuple[TopicPartition, dict]]:
        return [((t["topic"], p["partition"]), p) for t in self.body["topics"] for p in t["partitions"]]

    def asks_for(self, partition: int) -> bool:
        return any(tp == (TOPIC, partition) for tp, _ in self.partitions())


class Hold:
    """Answers to requests that match are computed when the request arrives (the target's state
    then) and handed back only after :meth:`release`. ``count`` requests are caught (None: every
    matching request until the release)."""

    def __init__(self, match: Callable[[Sent], bool], count: int | None) -> None:
        self.match = match
        self.remaining = count
        self.caught: list[Sent] = []
        self.arrived = asyncio.Event()
        self.released = asyncio.Event()

    def takes(self, sent: Sent) -> bool:
        if self.released.is_set() or self.remaining == 0 or not self.match(sent):
            return False
        if self.remaining is not None:
            self.remaining -= 1
        self.caught.append(sent)
        self.arrived.set()
        return True

    def release(self) -> None:
        self.released.set()


class FakeConnection:
    """A :class:`LeaderConnection` over :class:`Net` (never answers synchronously)."""

    def __init__(self, net: Net, source: int, target: int) -> None:
        self.net, self.source, self.target = net, source, target
        self._open = True

    @property
    def is_open(self) -> bool:
        return self._open

    async def request(self, api_key: ApiKey, body: dict, timeout: float = 30.0) -> dict:
        if not self._open:
            raise ConnectionClosed(f"connection {self.source}->{self.target} is closed")
        sent = Sent(self.source, self.target, api_key, body, asyncio.get_running_loop().time())
        self.net.sent.append(sent)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (a fetcher
            # being stopped) when the answer is ready in the same loop iteration.
            async with asyncio.timeout(timeout):
                response = await self.net.serve(sent)
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{api_key.name} got no answer") from None
        if not self._open:
            raise ConnectionClosed(f"connection {self.source}->{self.target} closed")
        sent.answered = True
        return response

    def close(self) -> None:
        self._open = False


class Net:
    """The brokers, their endpoints, every request sent, and the holds a test has placed."""

    def __init__(self) -> None:
        self.brokers: dict[int, Broker] = {}
        self.endpoints: dict[tuple[str, int], int] = {}
        self.sent: list[Sent] = []
        self.holds: list[Hold] = []
        self.connections: list[FakeConnection] = []

    def connector(self, source: int) -> ConnectionFactory:
        async def connect(host: str, port: int, client_id: str) -> LeaderConnection:
            await asyncio.sleep(0)
            target = self.endpoints.get((host, port))
            if target is None:
                raise ConnectionClosed(f"cannot connect to {host}:{port}: ConnectionRefusedError")
            connection = FakeConnection(self, source, target)
            self.connections.append(connection)
            return connection

        return connect

    def hold(self, match: Callable[[Sent], bool], count: int | None = 1) -> Hold:
        hold = Hold(match, count)
        self.holds.append(hold)
        return hold

    def requests(self, api_key: ApiKey, source: int | None = None, target: int | None = None) -> list[Sent]:
        return [
            s
            for s in self.sent
            if s.api_key == api_key
            and (source is None or s.source == source)
            and (target is None or s.target == target)
        ]

    async def serve(self, sent: Sent) -> dict:
        await asyncio.sleep(0)
        rm = self.brokers[sent.target].rm
        body = validate_request(sent.api_key, 0, unpack(pack(sent.body)))
        if sent.api_key == ApiKey.FETCH:
            answer: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

            def respond(results: dict, session_id: int = 0, error_code: int = 0) -> None:
                if not answer.done():  # the requester may have been cancelled (a fetcher stopped)
                    answer.set_result(fetch_response(results, session_id, error_code))

            rm.fetch_messages(body, respond)
            response = await answer
        elif sent.api_key == ApiKey.LIST_OFFSETS:
            response = per_partition(
                body,
                lambda tp, p: offset_lookup.list_offset(
                    rm, tp, p["timestamp"], p["current_leader_epoch"], body["replica_id"]
                ),
            )
        elif sent.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            response = per_partition(
                body,
                lambda tp, p: offset_lookup.end_offset_for_epoch(
                    rm, tp, p["leader_epoch"], p["current_leader_epoch"]
                ),
            )
        else:
            raise AssertionError(f"a fetcher sent {sent.api_key.name}")
        for hold in self.holds:
            if hold.takes(sent):
                await hold.released.wait()
        return validate_response(sent.api_key, unpack(pack(response)))


async def _no_overrides(topic: str) -> dict[str, str]:
    return {}


class Broker:
    """One broker's replication side: ReplicaManager, logs on disk, replica fetchers."""

    def __init__(self, net: Net, broker_id: int, root: Path) -> None:
        self.net, self.id = net, broker_id
        self.host, self.port = "127.0.0.1", 9000 + broker_id
        self.clock = FakeClock()
        self.state_changes: list[dict] = []
        config = BrokerConfig(
            {
                "broker.id": str(broker_id),
                "zookeeper.connect": "127.0.0.1:1",
                "log.dirs": str(root / f"broker-{broker_id}"),
                "replica.fetch.wait.max.ms": str(FETCH_WAIT_MS),
                "replica.fetch.backoff.ms": str(BACKOFF_MS),
            }
        )
        self.rm = ReplicaManager(
            config,
            LogManager(config.log_dirs, config.log_config(), self.clock),
            MetadataCache(broker_id),
            self.clock,
            self.state_changes.append,
            _no_overrides,
        )
        self.fetchers = ReplicaFetcherManager(self.rm, net.connector(broker_id))
        self.rm.fetchers = self.fetchers
        net.brokers[broker_id] = self
        net.endpoints[(self.host, self.port)] = broker_id

    @property
    def endpoint(self) -> dict:
        return {"id": self.id, "host": self.host, "port": self.port}

    def listen_on(self, port: int) -> None:
        """The broker restarted with another port (its registration in ZooKeeper changed): the
        connections to the old one are gone."""
        del self.net.endpoints[(self.host, self.port)]
        for connection in self.net.connections:
            if connection.target == self.id:
                connection.close()
        self.port = port
        self.net.endpoints[(self.host, port)] = self.id

    async def leader_and_isr(
        self, partition: int, leader: Broker, epoch: int, isr: Iterable[int], replicas: Iterable[int]
    ) -> None:
        body = {
            "controller_id": CONTROLLER_ID,
            "controller_epoch": 1,
            "partition_states": [
                {
                    "topic": TOPIC,
                    "partition": partition,
                    "controller_epoch": 1,
                    "leader": leader.id,
                    "leader_epoch": epoch,
                    "isr": list(isr),
                    "zk_version": epoch,
                    "replicas": list(replicas),
                }
            ],
            "live_leaders": [leader.endpoint],
        }
        response = await self.rm.become_leader_or_follower(body)
        assert response["partitions"][0]["error_code"] == ErrorCode.NONE, response

    def produce(self, partition: int, *values: bytes) -> int:
        """acks=1 appends, one batch per value; returns the offset of the last one."""
        last = -1
        for value in values:
            statuses: dict[TopicPartition, ProducePartitionStatus] = {}
            batch = build_batch([(None, value, START_MS, [])])
            self.rm.append_records(1, 1000, {(TOPIC, partition): batch}, statuses.update)
            status = statuses[(TOPIC, partition)]
            assert status.error_code == ErrorCode.NONE, status
            last = status.base_offset
        return last

    def log(self, partition: int) -> Log:
        log = self.rm.get_log((TOPIC, partition))
        assert log is not None
        return log

    def batches(self, partition: int) -> list[tuple[int, bytes]]:
        """(base offset, bytes as stored) of every batch from the log start to the LEO."""
        log, out = self.log(partition), []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for pos, header in iter_batches(data):
                out.append((header.base_offset, data[pos : pos + header.size]))
                offset = header.next_offset
        return out

    def values(self, partition: int) -> list[bytes | None]:
        return [r.value for _, raw in self.batches(partition) for _, r in decode_records(raw)]

    def epochs(self, partition: int) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.log(partition).leader_epoch_cache.entries]

    def describe(self, partition: int) -> str:
        log = self.log(partition)
        return (
            f"broker {self.id} {TOPIC}-{partition}: LEO {log.log_end_offset}, HW {log.high_watermark}, "
            f"start {log.log_start_offset}, epochs {self.epochs(partition)}, values {self.values(partition)}"
        )

    async def shutdown(self) -> None:
        await self.fetchers.shutdown()
        self.rm.shutdown()
        self.rm.log_manager.shutdown()


async def eventually(condition: Callable[[], bool], what: Callable[[], str], timeout: float = WAIT_S) -> None:
    """Wait until ``condition`` holds; fail with ``what()`` (the state that says why) if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout}s: {what()}")
        await asyncio.sleep(0.005)


async def settle(rounds: int = 50) -> None:
    """Let every task runnable now run until it waits on something not yet ready."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def assert_identical_below_hw(leader: Broker, follower: Broker, partition: int) -> None:
    """SPEC 5.4's replication invariant: below the HW both replicas hold the same batches, byte
    for byte (the follower appends the leader's batches as they are, epoch stamp and CRC included)."""
    hw = min(leader.log(partition).high_watermark, follower.log(partition).high_watermark)
    ours = [b for b in follower.batches(partition) if b[0] < hw]
    theirs = [b for b in leader.batches(partition) if b[0] < hw]
    assert ours == theirs, (
        f"replicas diverge below HW {hw}:\n  {leader.describe(partition)}\n  {follower.describe(partition)}"
    )


@pytest.fixture(name="net")
async def net_fixture() -> AsyncIterator[Net]:
    """A fresh network of in-process brokers, shut down after the test."""
    net = Net()
    yield net
    for broker in net.brokers.values():
        await broker.shutdown()
