"""Cluster metadata for clients: the cached Metadata response and a connection pool.

* :func:`parse_brokers` and :func:`parse_topic` are the one parser of a Metadata response
  body, used by the cache below and by :mod:`client.admin`.
* :class:`ClusterMetadata` (Kafka's ``Metadata`` cache) is sans-IO:
  :meth:`ClusterMetadata.update` folds a Metadata response body (api.py METADATA) into
  lookups - the leader and leader epoch of a partition, a topic's partitions and which of them
  are *available* (have a live leader), brokers, controller. It remembers when it was last
  refreshed and whether it was invalidated.
* :class:`Cluster` is what producer, consumer and admin share: it asks any reachable broker
  (known brokers first, then the bootstrap list) for metadata, hedged (a broker that does not
  answer within a second is not waited for alone), coalesces concurrent refreshes,
  and keeps one pooled :class:`~client.connection.BrokerConnection` per broker address,
  reopened when it was lost.

Metadata is refreshed when it is older than ``metadata_max_age_ms`` and whenever a caller
:meth:`~Cluster.invalidate` s it: on NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION and
the other errors of ``errors.INVALIDATES_METADATA``, and on connection loss. See
docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from client.bootstrap import format_bootstrap, parse_bootstrap
from client.connection import BrokerConnection, ConnectionFactory
from client.protocol.api import ApiKey
from client.protocol.errors import ErrorCode, KafkaError
from client.types import BrokerInfo, PartitionInfo, TopicInfo, TopicPartition

log = logging.getLogger(__name__)

Address = tuple[str, int]

#: How long a metadata request waits for its broker before the next candidate is asked as well.
METADATA_HEDGE_AFTER_MS = 1000


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ClientRuntime:
    """What a client takes from the process it runs in: how it opens connections, its clocks and
    its randomness. The defaults are the real ones; the simulator (docs/design.md "Simulation")
    passes its network's connections, its virtual clock and a seeded stream."""

    connect: ConnectionFactory = BrokerConnection.open
    monotonic_ms: Callable[[], float] = monotonic_ms
    wall_clock_ms: Callable[[], int] = wall_clock_ms
    rng: random.Random | None = None


def parse_brokers(body: dict) -> dict[int, BrokerInfo]:
    """The brokers of a Metadata response body, by node id."""
    return {
        b["node_id"]: BrokerInfo(b["node_id"], b["host"], b["port"], b.get("rack")) for b in body["brokers"]
    }


def parse_topic(t: dict, brokers: dict[int, BrokerInfo]) -> TopicInfo:
    """One topic entry of a Metadata response body (``brokers`` decides which partitions are
    available: their leader is a known broker)."""
    partitions = {
        p["partition"]: PartitionInfo(
            p["partition"],
            p["leader"],
            p["leader_epoch"],
            list(p["replicas"]),
            list(p["isr"]),
            list(p.get("offline_replicas") or []),
            p["error_code"],
        )
        for p in t["partitions"]
    }
    ids = sorted(partitions)
    available = [i for i in ids if partitions[i].leader >= 0 and partitions[i].leader in brokers]
    return TopicInfo(t["topic"], t["error_code"], bool(t.get("is_internal")), partitions, ids, available)


class ClusterMetadata:
    """A cache of Metadata responses. Topic entries from a response for some topics are merged
    into the cache; a response for all topics (``topics=None``) replaces it."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id: int = -1
        self.cluster_id: str | None = None
        self.last_response: dict | None = None
        self.updated_ms: float | None = None
        self.version = 0  # bumped on every update: lets callers cache derived lookups
        self._stale = True

    def update(self, body: dict, now_ms: float, requested: Sequence[str] | None = None) -> None:
        self.brokers = parse_brokers(body)
        self.controller_id = body["controller_id"]
        self.cluster_id = body["cluster_id"]
        topics = {} if requested is None else dict(self.topics)
        for t in body["topics"]:
            name = t["topic"]
            if t["error_code"] in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION):
                topics.pop(name, None)
                continue
            topics[name] = parse_topic(t, self.brokers)
        self.topics = topics
        self.last_response = body
        self.updated_ms = now_ms
        self.version += 1
        self._stale = False

    # -- lookups -----------------------------------------------------------------------------
    def leader_for(self, tp: TopicPartition) -> int | None:
        topic = self.topics.get(tp[0])
        if topic is None:
            return None
        info = topic.partitions.get(tp[1])
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            return None
        return info.leader

    def leader_epoch_for(self, tp: TopicPartition) -> int:
        topic = self.topics.get(tp[0])
        info = topic.partitions.get(tp[1]) if topic else None
        return info.leader_epoch if info else -1

    def partition_info(self, tp: TopicPartition) -> PartitionInfo | None:
        topic = self.topics.get(tp[0])
        return topic.partitions.get(tp[1]) if topic else None

    def partitions_for(self, topic: str) -> list[int] | None:
        info = self.topics.get(topic)
        return info.partition_ids if info and info.partition_ids else None

    def available_partitions_for(self, topic: str) -> list[int]:
        info = self.topics.get(topic)
        return info.available if info else []

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    # -- freshness ---------------------------------------------------------------------------
    def invalidate(self) -> None:
        self._stale = True

    @property
    def stale(self) -> bool:
        return self._stale

    def needs_refresh(self, now_ms: float, max_age_ms: float) -> bool:
        return self._stale or self.updated_ms is None or now_ms - self.updated_ms >= max_age_ms


def _retrieve(task: asyncio.Task) -> None:
    """Mark a task's outcome seen (a hedged request nobody awaits any more)."""
    if not task.cancelled():
        task.exception()


def _fail_future(future: asyncio.Future, exc: BaseException, what: str) -> None:
    """Hand a shared operation's failure to the callers that joined it. A cancellation of the
    caller that ran it is not theirs: they get a retriable NETWORK_EXCEPTION instead."""
    if future.done():
        return
    if not isinstance(exc, Exception):
        exc = KafkaError(ErrorCode.NETWORK_EXCEPTION, f"{what} was cancelled")
    future.set_exception(exc)
    future.exception()  # mark retrieved: only joiners re-raise it


class Cluster:
    """Metadata plus pooled connections, shared by one producer, consumer or admin client."""

    def __init__(
        self,
        bootstrap_servers,
        client_id: str,
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        *,
        connect_timeout_ms: int = 10000,
        clock: Callable[[], float] = monotonic_ms,
        rng: random.Random | None = None,
        connect: ConnectionFactory = BrokerConnection.open,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        #: a metadata request unanswered this long is hedged with the next candidate
        self.hedge_after_ms = min(METADATA_HEDGE_AFTER_MS, request_timeout_ms)
        self.connect_timeout_ms = min(connect_timeout_ms, request_timeout_ms)
        self.metadata = ClusterMetadata()
        #: Metadata's allow_auto_topic_creation: the producer's and the consumer's (Kafka's
        #: allow.auto.create.topics) requests may create a missing topic; the AdminClient's never
        self.allow_auto_topic_creation = False
        self._clock = clock
        self._rng = rng or random.Random()
        self._open_connection = connect
        self._connections: dict[Address, BrokerConnection] = {}
        self._opening: dict[Address, asyncio.Future] = {}
        self._refreshing: tuple[frozenset[str] | None, asyncio.Future] | None = None
        self._last_refresh_attempt_ms: float | None = None
        self._closed = False

    @classmethod
    def for_client(cls, bootstrap_servers, config, runtime: ClientRuntime | None = None) -> Cluster:
        """The cluster of a producer or consumer, from the settings their configs share
        (``client_id``, ``request_timeout_ms``, ``metadata_max_age_ms``, ``retry_backoff_ms``)."""
        runtime = runtime or ClientRuntime()
        return cls(
            bootstrap_servers,
            config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            clock=runtime.monotonic_ms,
            rng=runtime.rng,
            connect=runtime.connect,
        )

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Learn the brokers (a Metadata request for no topics); raises if none is reachable."""
        await self.refresh([])

    async def close(self) -> None:
        self._closed = True
        for conn in list(self._connections.values()):
            conn.close()
        self._connections.clear()

    # -- metadata ---------------------------------------------------------------------------
    async def refresh(self, topics: list[str] | None = None) -> None:
        """Fetch metadata for ``topics`` (None: every topic) from any reachable broker."""
        wanted = None if topics is None else frozenset(topics)
        current = self._refreshing
        if current is not None and not current[1].done():
            covered, future = current
            if covered is None or (wanted is not None and wanted <= covered):
                await asyncio.shield(future)
                return
        future = asyncio.get_running_loop().create_future()
        self._refreshing = (wanted, future)
        try:
            await self._refresh(None if topics is None else sorted(wanted))
        except BaseException as exc:
            _fail_future(future, exc, "metadata refresh")
            raise
        else:
            future.set_result(None)
        finally:
            if self._refreshing is not None and self._refreshing[1] is future:
                self._refreshing = None

    async def request_metadata(self, topics: list[str] | None = None) -> dict:
        """One Metadata request (``topics`` None: all, []: none) to any reachable broker; the
        answer updates the cache and is returned raw (topics the broker does not know stay in
        it with their error code)."""
        return await self._refresh(None if topics is None else sorted(set(topics)))

    async def _refresh(self, topics: list[str] | None) -> dict:
        """Ask the candidates one after another, hedged: when the one asked gives no answer within
        ``hedge_after_ms`` (a paused broker keeps its connection and never answers), the next is
        asked too while the first is still outstanding, and the first answer wins. A failure
        moves to the next candidate at once. Kafka's AdminClient waits out request.timeout.ms on
        a paused broker instead (30 s)."""
        self._last_refresh_attempt_ms = self._clock()
        body = {"topics": topics, "allow_auto_topic_creation": self.allow_auto_topic_creation}
        errors: list[str] = []
        tried: list[Address] = []
        asking: dict[asyncio.Task, Address] = {}
        candidates = iter(self._candidates())
        try:
            while True:
                address = next(candidates, None)
                if address is not None:
                    tried.append(address)
                    asking[asyncio.ensure_future(self._ask_metadata(address, body))] = address
                if not asking:
                    break
                done, _ = await asyncio.wait(
                    asking,
                    timeout=self.hedge_after_ms / 1000 if address is not None else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for task in done:
                    failed = asking.pop(task)
                    exc = task.exception()
                    if exc is None:
                        response = task.result()
                        self.metadata.update(response, self._clock(), topics)
                        return response
                    if not isinstance(exc, KafkaError):
                        raise exc
                    errors.append(f"{format_bootstrap([failed])}: {exc}")
                    log.debug("metadata from %s failed: %s", failed, exc)
        finally:
            for task in asking:  # the slower ones, or all of them when this refresh was cancelled
                task.cancel()
                task.add_done_callback(_retrieve)
        self.metadata.invalidate()
        raise KafkaError(
            ErrorCode.NETWORK_EXCEPTION,
            f"no broker reachable among {format_bootstrap(tried)} ({'; '.join(errors[-3:])})",
        )

    async def _ask_metadata(self, address: Address, body: dict) -> dict:
        conn = await self._connect(address)
        return await conn.request(ApiKey.METADATA, body, timeout=self.request_timeout_ms / 1000)

    def _candidates(self) -> list[Address]:
        """Known brokers (already-connected ones first, the rest in random order), then bootstrap."""
        known = [(b.host, b.port) for b in self.metadata.brokers.values()]
        self._rng.shuffle(known)
        known.sort(key=lambda a: not (a in self._connections and self._connections[a].is_open))
        out: list[Address] = []
        for address in [*known, *self.bootstrap]:
            if address not in out:
                out.append(address)
        return out

    async def maybe_refresh(self, topics: list[str] | None = None) -> bool:
        """Refresh if the cache was invalidated or is older than ``metadata_max_age_ms``, waiting
        out ``retry_backoff_ms`` since the previous attempt. Returns whether it refreshed."""
        now = self._clock()
        if not self.metadata.needs_refresh(now, self.metadata_max_age_ms):
            return False
        if self._last_refresh_attempt_ms is not None:
            wait = self._last_refresh_attempt_ms + self.retry_backoff_ms - now
            if wait > 0:
                await asyncio.sleep(wait / 1000)
        await self.refresh(topics)
        return True

    async def wait_for_topic(self, topic: str, timeout_ms: float) -> list[int]:
        """The topic's partitions, refreshing (with backoff) until it appears or ``timeout_ms``
        passes. A topic still being created answers LEADER_NOT_AVAILABLE for a while."""
        deadline = self._clock() + timeout_ms
        last_error: KafkaError | None = None
        while True:
            partitions = self.metadata.partitions_for(topic)
            if partitions is not None:
                return partitions
            if self._clock() >= deadline:
                break
            try:
                await self.refresh([topic])
            except KafkaError as exc:
                last_error = exc
            if self.metadata.partitions_for(topic) is None:
                await asyncio.sleep(min(self.retry_backoff_ms, max(0.0, deadline - self._clock())) / 1000)
        if last_error is not None and last_error.code == ErrorCode.NETWORK_EXCEPTION:
            raise KafkaError(
                last_error.code, f"metadata for topic {topic!r} unavailable: {last_error.message}"
            )
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Topic {topic} not present in metadata after {timeout_ms:.0f} ms.",
        )

    def invalidate(self) -> None:
        self.metadata.invalidate()

    def needs_refresh(self) -> bool:
        """Invalidated, or older than ``metadata_max_age_ms``."""
        return self.metadata.needs_refresh(self._clock(), self.metadata_max_age_ms)

    @property
    def stale(self) -> bool:
        return self.metadata.stale

    def leader_for(self, tp: TopicPartition) -> int | None:
        return self.metadata.leader_for(tp)

    def leader_epoch_for(self, tp: TopicPartition) -> int:
        return self.metadata.leader_epoch_for(tp)

    def partitions_for(self, topic: str) -> list[int] | None:
        return self.metadata.partitions_for(topic)

    def available_partitions_for(self, topic: str) -> list[int]:
        return self.metadata.available_partitions_for(topic)

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.metadata.broker(node_id)

    @property
    def topics(self) -> dict[str, TopicInfo]:
        return self.metadata.topics

    @property
    def brokers(self) -> dict[int, BrokerInfo]:
        return self.metadata.brokers

    @property
    def controller_id(self) -> int:
        return self.metadata.controller_id

    @property
    def cluster_id(self) -> str | None:
        return self.metadata.cluster_id

    @property
    def last_response(self) -> dict | None:
        return self.metadata.last_response

    # -- connections --------------------------------------------------------------------------
    async def connection(self, node_id: int) -> BrokerConnection:
        """The pooled connection to broker ``node_id`` (opened or reopened as needed)."""
        broker = self.metadata.broker(node_id)
        if broker is None:
            self.invalidate()
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, f"broker {node_id} is not in the cluster metadata")
        try:
            return await self._connect((broker.host, broker.port))
        except KafkaError as exc:
            raise KafkaError(exc.code, f"broker {node_id}: {exc.message}") from None

    async def any_connection(self) -> BrokerConnection:
        """A connection to any reachable broker: an open pooled one if there is one."""
        errors = []
        for address in self._candidates():
            try:
                return await self._connect(address)
            except KafkaError as exc:
                errors.append(str(exc))
        raise KafkaError(
            ErrorCode.NETWORK_EXCEPTION,
            f"no broker reachable among {format_bootstrap(self._candidates())} ({'; '.join(errors[-3:])})",
        )

    async def _connect(self, address: Address) -> BrokerConnection:
        if self._closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "client is closed")
        conn = self._connections.get(address)
        if conn is not None:
            if conn.is_open:
                return conn
            del self._connections[address]
            self.invalidate()  # connection loss: leadership may have moved
        pending = self._opening.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        future = asyncio.get_running_loop().create_future()
        self._opening[address] = future
        try:
            conn = await self._open_connection(
                address[0], address[1], client_id=self.client_id, timeout=self.connect_timeout_ms / 1000
            )
        except BaseException as exc:
            self.invalidate()
            _fail_future(future, exc, f"connecting to {format_bootstrap([address])}")
            raise
        finally:
            self._opening.pop(address, None)
        if self._closed:
            conn.close()
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "client is closed")
        self._connections[address] = conn
        future.set_result(conn)
        return conn

    def abandon(self) -> None:
        """Drop every connection at once and refuse new ones (a client killed mid-flight)."""
        self._closed = True
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def drop_connection(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (after a timeout, say) so the next use reopens it."""
        broker = self.metadata.broker(node_id)
        if broker is not None:
            conn = self._connections.pop((broker.host, broker.port), None)
            if conn is not None:
                conn.close()
