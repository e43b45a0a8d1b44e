"""What the cluster keeps in ZooKeeper, and the asyncio bridge to it (SPEC 3, seed 003 "Kafka在zookeeper中的存储").

Three parts:

* the znode paths and the value types they hold (:class:`BrokerInfo`, :class:`LeaderAndIsr`, ...);
* the JSON codecs, byte for byte the shapes of SPEC 3 (compact JSON, key order as Kafka writes it),
  so an operator with ``zkCli.sh`` sees what a Kafka operator would;
* :class:`ZkBridge`, one kazoo session whose calls are awaitable and whose watches and state
  changes are delivered *on the event loop* (MACHINE-NOTES: kazoo calls back on its own threads).

Plus the few helpers every broker needs (broker registration, the leader's conditional ISR
write, ISR change notifications) and :func:`fenced_multi`, the controller's only way to write:
a multi-op that first checks the ``/controller_epoch`` version the controller won with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Paths (SPEC 3)
# ---------------------------------------------------------------------------------------------

BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
CONFIG_PATH = "/config"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
#: KIP-112: a broker whose log dir failed writes log_dir_event_<seq> here (Kafka's LogDirEventNotificationZNode).
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
#: Kafka's ProducerIdBlockZNode: the last block of producer ids handed to a broker (SPEC 5.4).
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000

#: The persistent paths Kafka creates at start-up (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
)

NO_LEADER = -1
#: The leader UpdateMetadata announces for a partition of a topic being deleted (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2
#: /controller_epoch is created with this value; the first controller makes it 1.
INITIAL_CONTROLLER_EPOCH = 0


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def config_topic_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


# ---------------------------------------------------------------------------------------------
# What the znodes hold
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as its /brokers/ids/<id> znode describes it. ``epoch`` is the znode's czxid
    (Kafka's broker epoch): a broker that re-registers gets a new one."""

    id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1

    def endpoint(self) -> dict:
        """The wire shape of live_leaders / live_brokers entries (client/protocol/api.py)."""
        return {"id": self.id, "host": self.host, "port": self.port, "rack": self.rack}


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leader, leader epoch and ISR, plus the state znode's version (zkVersion),
    the compare-and-set token for the next change."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int = 0

    def new_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """A leadership change: the leader epoch goes up by one."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr))

    def new_leader(self, leader: int) -> LeaderAndIsr:
        return self.new_leader_and_isr(leader, self.isr)

    def with_zk_version(self, zk_version: int) -> LeaderAndIsr:
        return replace(self, zk_version=zk_version)


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """The content of a partition state znode: LeaderAndIsr and the epoch of the controller that wrote it."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int


@dataclass(frozen=True)
class PartitionReplica:
    """One replica of one partition (Kafka's PartitionAndReplica)."""

    tp: TopicPartition
    replica: int


# ---------------------------------------------------------------------------------------------
# JSON codecs: compact, key order as in SPEC 3
# ---------------------------------------------------------------------------------------------


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    return json.loads(data.decode())


def encode_broker_registration(host: str, port: int, timestamp_ms: int, listener: str = "PLAINTEXT") -> bytes:
    return _dumps(
        {
            "version": 1,
            "host": host,
            "port": port,
            "timestamp": str(timestamp_ms),
            "endpoints": [f"{listener}://{host}:{port}"],
            "jmx_port": -1,
        }
    )


def decode_broker_registration(data: bytes, broker_id: int = -1, epoch: int = -1) -> BrokerInfo:
    """The id is the znode's name, not part of its JSON: pass it (and the czxid as ``epoch``)."""
    obj = _loads(data)
    host, port = obj.get("host"), obj.get("port")
    if (not host or port in (None, -1)) and obj.get("endpoints"):
        # Kafka's later versions leave host/port empty and advertise endpoints only.
        hostport = obj["endpoints"][0].split("://", 1)[1]
        host, _, port_text = hostport.rpartition(":")
        port = int(port_text)
    return BrokerInfo(id=broker_id, host=host, port=int(port), rack=obj.get("rack"), epoch=epoch)


def encode_partition_state(state: LeaderIsrAndControllerEpoch) -> bytes:
    lai = state.leader_and_isr
    return _dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": lai.leader,
            "version": 1,
            "leader_epoch": lai.leader_epoch,
            "isr": list(lai.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int) -> LeaderIsrAndControllerEpoch:
    obj = _loads(data)
    return LeaderIsrAndControllerEpoch(
        LeaderAndIsr(obj["leader"], obj["leader_epoch"], tuple(obj["isr"]), zk_version),
        obj["controller_epoch"],
    )


def encode_topic_assignment(assignment: dict[int, Sequence[int]]) -> bytes:
    return _dumps({"version": 1, "partitions": {str(p): list(r) for p, r in sorted(assignment.items())}})


def decode_topic_assignment(data: bytes) -> dict[int, list[int]]:
    obj = _loads(data)
    return {int(p): list(r) for p, r in sorted(obj.get("partitions", {}).items(), key=lambda kv: int(kv[0]))}


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    """The controller's broker id. Tolerates the pre-0.8.2 bare-integer form."""
    obj = _loads(data)
    return int(obj) if isinstance(obj, int) else int(obj["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return dict(_loads(data).get("config", {}))


def encode_config_change(entity_path: str) -> bytes:
    """A /config/changes/config_change_<seq> notification, e.g. entity_path ``topics/foo``."""
    return _dumps({"version": 2, "entity_path": entity_path})


def encode_isr_change_notification(partitions: Iterable[TopicPartition]) -> bytes:
    return _dumps(
        {
            "version": 1,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(set(partitions))],
        }
    )


def decode_isr_change_notification(data: bytes) -> list[TopicPartition]:
    return [TopicPartition(p["topic"], p["partition"]) for p in _loads(data).get("partitions", [])]


def encode_log_dir_event(broker_id: int) -> bytes:
    """A /log_dir_event_notification/log_dir_event_<seq> value, as Kafka writes it."""
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int:
    """The broker id of a log dir event notification; ValueError for anything else."""
    doc = _loads(data)
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("broker"), int)
        or doc.get("event") != LOG_DIR_FAILURE_EVENT
    ):
        raise ValueError(f"not a log dir failure event: {data!r}")
    return doc["broker"]


def encode_partition_list(partitions: Iterable[TopicPartition]) -> bytes:
    """/admin/preferred_replica_election (seed 003 2.12)."""
    return _dumps(
        {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
    )


def decode_partition_list(data: bytes) -> list[TopicPartition]:
    return [TopicPartition(p["topic"], p["partition"]) for p in _loads(data).get("partitions", [])]


def encode_reassignment(reassignment: dict[TopicPartition, Sequence[int]]) -> bytes:
    """/admin/reassign_partitions (seed 003 2.11)."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in sorted(reassignment.items())
            ],
        }
    )


def decode_reassignment(data: bytes) -> dict[TopicPartition, list[int]]:
    return {
        TopicPartition(p["topic"], p["partition"]): list(p["replicas"])
        for p in _loads(data).get("partitions", [])
    }


# ---------------------------------------------------------------------------------------------
# Multi-op vocabulary
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOp:
    path: str
    version: int


@dataclass(frozen=True)
class CreateOp:
    path: str
    value: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetDataOp:
    path: str
    value: bytes
    version: int = -1


@dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = -1


ZkOp = CheckOp | CreateOp | SetDataOp | DeleteOp


class ControllerMovedError(Exception):
    """A fenced write found /controller_epoch at another version: another controller won since."""


# ---------------------------------------------------------------------------------------------
# The bridge
# ---------------------------------------------------------------------------------------------


class ZkBridge:
    """One kazoo session with an asyncio face.

    Every call is a coroutine; kazoo's ``*_async`` results are completed on the loop with
    ``call_soon_threadsafe``. Watches and state listeners are likewise forwarded to the loop, so
    callers never run on a kazoo thread. A watch function given twice for one path is registered
    once (the same forwarding wrapper is reused, and kazoo keeps watchers in a set).

    Kazoo drops every watch when the connection drops and fires it with an event of type
    ``EventType.NONE``: watchers must treat that as "re-read and re-register".

    A request that fails with ConnectionLoss is sent again once kazoo has reconnected to the
    same session (Kafka's ZooKeeperClient.retryRequestsUntilConnected), so a connection drop
    never reaches the callers and a watch-registering read always registers its watch. Two
    outcomes still reach them: SessionExpiredError (the session ended: the drop cost the
    ephemeral znodes and the watches, and resending into a new session would be wrong) and
    ConnectionLoss after ``retry_timeout_s`` without a connection (default: the session timeout,
    after which the session is gone at the server anyway). A resent write may have landed the
    first time: creates can then answer NodeExists, conditional sets BadVersion, deletes NoNode,
    and each caller that writes checks what ZooKeeper holds (Kafka's checkedEphemeralCreate,
    checkControllerAndEpoch, checkLeaderAndIsrZkData); see docs/design.md "The ZooKeeper client
    layer".
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        loop: asyncio.AbstractEventLoop | None = None,
        retry_timeout_s: float | None = None,
    ) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.retry_timeout_s = session_timeout_ms / 1000.0 if retry_timeout_s is None else retry_timeout_s
        #: requests sent again after a ConnectionLoss (a metric for tests and operators)
        self.resent_requests = 0
        self._loop = loop
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000.0)
        self._listeners: list[Callable[[str], None]] = []
        self._wrappers: dict[Callable, Callable[[WatchedEvent], None]] = {}
        self._closed = False
        self.client.add_listener(self._on_kazoo_state)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def start(self, timeout: float = 15.0) -> None:
        _ = self.loop
        await asyncio.to_thread(self.client.start, timeout)

    async def close(self) -> None:
        """End the session: its ephemeral znodes (a /controller, a /brokers/ids/<id>) go at once."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._stop_and_close)

    def _stop_and_close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return self.client.connected

    @property
    def session_id(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    # -- state and watch forwarding ----------------------------------------------------------------
    def add_state_listener(self, fn: Callable[[str], None]) -> None:
        """``fn`` is called on the loop with "CONNECTED", "SUSPENDED" or "LOST"."""
        self._listeners.append(fn)

    def _on_kazoo_state(self, state: KazooState) -> None:  # kazoo thread: must not block
        self._forward(self._deliver_state, str(state))

    def _deliver_state(self, state: str) -> None:
        for fn in list(self._listeners):
            try:
                fn(state)
            except Exception:
                log.exception("ZooKeeper state listener failed on %s", state)

    def _forward(self, fn: Callable, *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            loop.call_soon_threadsafe(fn, *args)

    def _wrap(self, watch: Callable[[WatchedEvent], None] | None) -> Callable[[WatchedEvent], None] | None:
        if watch is None:
            return None
        wrapper = self._wrappers.get(watch)
        if wrapper is None:

            def wrapper(event: WatchedEvent, _watch=watch) -> None:  # kazoo thread
                self._forward(self._deliver_watch, _watch, event)

            self._wrappers[watch] = wrapper
        return wrapper

    def _deliver_watch(self, watch: Callable[[WatchedEvent], None], event: WatchedEvent) -> None:
        if self._closed:
            return
        try:
            watch(event)
        except Exception:
            log.exception("ZooKeeper watch on %s failed", event.path)

    async def _call(self, what: str, send: Callable[[], Any]) -> Any:
        """Send a request (``send`` returns kazoo's async result) and await its answer, sending it
        again after a ConnectionLoss once the same session is connected again."""
        session = self.session_id
        while True:
            try:
                return await self._await(send())
            except ConnectionLoss:
                if self._closed:
                    raise
                await self._wait_connected(what)
                if self.session_id != session:
                    raise SessionExpiredError(
                        f"{what}: the session ended while the request was unanswered"
                    ) from None
                self.resent_requests += 1
                log.info("ZooKeeper %s: connection lost before the answer; sending it again", what)

    async def _wait_connected(self, what: str) -> None:
        """Until kazoo is connected again (its ``connected`` flag is cleared before it fails the
        requests in flight), at most ``retry_timeout_s``; then ConnectionLoss is raised."""
        loop = self.loop
        deadline = loop.time() + self.retry_timeout_s
        while not self.client.connected:
            if self._closed:
                raise ConnectionLoss(f"{what}: the ZooKeeper client was closed")
            if loop.time() >= deadline:
                raise ConnectionLoss(f"{what}: no ZooKeeper connection for {self.retry_timeout_s:g} s")
            await asyncio.sleep(0.02)

    async def _await(self, async_result: Any) -> Any:
        loop = self.loop
        future: asyncio.Future = loop.create_future()

        def done(result: Any) -> None:  # kazoo thread
            try:
                value = result.get_nowait()
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                self._forward(_settle, future, None, exc)
            else:
                self._forward(_settle, future, value, None)

        async_result.rawlink(done)
        return await future

    # -- operations ------------------------------------------------------------------------------
    async def get(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self._call(
                f"get {path}", lambda: self.client.get_async(path, watch=self._wrap(watch))
            )
        except NoNodeError:
            return None

    async def get_children(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> list[str] | None:
        try:
            return await self._call(
                f"get_children {path}", lambda: self.client.get_children_async(path, watch=self._wrap(watch))
            )
        except NoNodeError:
            return None

    async def exists(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> ZnodeStat | None:
        return await self._call(
            f"exists {path}", lambda: self.client.exists_async(path, watch=self._wrap(watch))
        )

    async def create(
        self,
        path: str,
        value: bytes = b"",
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        return await self._call(
            f"create {path}",
            lambda: self.client.create_async(
                path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
            ),
        )

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return await self._call(f"set {path}", lambda: self.client.set_async(path, value, version))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if not recursive:
            await self._call(f"delete {path}", lambda: self.client.delete_async(path, version))
            return
        for _ in range(10):  # children may be created while we delete
            children = await self.get_children(path)
            if children is None:
                return
            await asyncio.gather(*(self.delete(f"{path}/{c}", recursive=True) for c in children))
            try:
                await self._call(f"delete {path}", lambda: self.client.delete_async(path, version))
                return
            except NoNodeError:
                return
            except NotEmptyError:
                continue
        raise NotEmptyError(path)

    async def ensure_path(self, path: str) -> None:
        await self._call(f"ensure_path {path}", lambda: self.client.ensure_path_async(path))

    async def multi(self, ops: Sequence[ZkOp]) -> list:
        """Commit ``ops`` atomically. Kazoo's commit does not raise: it returns RolledBackError for
        the operations before the failing one, the real error for it, RuntimeInconsistency after
        (MACHINE-NOTES). This raises the real error, with ``op_index`` set to the failing op."""

        def send() -> Any:
            transaction = self.client.transaction()
            for op in ops:
                if isinstance(op, CheckOp):
                    transaction.check(op.path, op.version)
                elif isinstance(op, CreateOp):
                    transaction.create(op.path, op.value, ephemeral=op.ephemeral, sequence=op.sequence)
                elif isinstance(op, SetDataOp):
                    transaction.set_data(op.path, op.value, op.version)
                elif isinstance(op, DeleteOp):
                    transaction.delete(op.path, op.version)
                else:
                    raise TypeError(f"not a ZooKeeper op: {op!r}")
            return transaction.commit_async()

        results = await self._call(f"multi of {len(ops)} ops on {ops[0].path if ops else '-'}", send)
        failures = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
        if failures:
            real = [(i, r) for i, r in failures if not isinstance(r, RolledBackError | RuntimeInconsistency)]
            index, error = (real or failures)[0]
            error.op_index = index
            raise error
        return results


def _settle(future: asyncio.Future, value: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


def is_reset_event(event: WatchedEvent) -> bool:
    """True for kazoo's "your watches were dropped" event (connection loss or session end)."""
    return event.type == EventType.NONE


# ---------------------------------------------------------------------------------------------
# Fenced controller writes (SPEC 3)
# ---------------------------------------------------------------------------------------------


async def fenced_multi(zk: ZkBridge, epoch_zk_version: int, ops: Sequence[ZkOp]) -> list:
    """Commit ``ops`` only if /controller_epoch is still at ``epoch_zk_version``.

    Returns the results of ``ops`` (without the check). Raises ControllerMovedError when the
    check fails; any other failure is raised as :meth:`ZkBridge.multi` raises it, with
    ``op_index`` counted within ``ops``.
    """
    try:
        results = await zk.multi([CheckOp(CONTROLLER_EPOCH_PATH, epoch_zk_version), *ops])
    except (BadVersionError, NoNodeError) as exc:
        if getattr(exc, "op_index", None) == 0:
            raise ControllerMovedError(
                f"/controller_epoch is no longer at version {epoch_zk_version}: another controller was elected"
            ) from None
        exc.op_index -= 1
        raise
    except Exception as exc:
        if getattr(exc, "op_index", None) is not None:
            exc.op_index -= 1
        raise
    return results[1:]


# ---------------------------------------------------------------------------------------------
# Reads shared by the controller and the brokers
# ---------------------------------------------------------------------------------------------


async def get_broker(zk: ZkBridge, broker_id: int) -> BrokerInfo | None:
    got = await zk.get(broker_id_path(broker_id))
    if got is None:
        return None
    data, stat = got
    return decode_broker_registration(data, broker_id, stat.czxid)


async def get_partition_state(zk: ZkBridge, tp: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
    got = await zk.get(partition_state_path(tp.topic, tp.partition))
    if got is None:
        return None
    data, stat = got
    return decode_partition_state(data, stat.version)


async def get_topic_assignment(zk: ZkBridge, topic: str) -> dict[int, list[int]] | None:
    got = await zk.get(topic_path(topic))
    return None if got is None else decode_topic_assignment(got[0])


async def get_topic_config(zk: ZkBridge, topic: str) -> dict[str, str]:
    got = await zk.get(config_topic_path(topic))
    return {} if got is None else decode_topic_config(got[0])


async def get_controller_id(zk: ZkBridge) -> int:
    """The active controller's broker id, or -1 when there is none."""
    got = await zk.get(CONTROLLER_PATH)
    if got is None:
        return -1
    try:
        return decode_controller(got[0])
    except (ValueError, KeyError):
        log.error("cannot parse %s: %r", CONTROLLER_PATH, got[0])
        return -1


# ---------------------------------------------------------------------------------------------
# Broker-side writes
# ---------------------------------------------------------------------------------------------


async def register_broker(
    zk: ZkBridge,
    broker_id: int,
    host: str,
    port: int,
    time_ms: int,
    listener: str = "PLAINTEXT",
    timeout: float | None = None,
) -> int:
    """Create the ephemeral /brokers/ids/<id> and return its czxid (the broker epoch).

    If the znode exists and belongs to this session, that is success. If it belongs to an older
    session of the same broker (a quick restart), wait for ZooKeeper to expire that session, at
    most ``timeout`` seconds (default: 1.5 x the session timeout); another live broker with our
    id is still there after that and the NodeExistsError is raised.
    """
    path = broker_id_path(broker_id)
    data = encode_broker_registration(host, port, time_ms, listener)
    await zk.ensure_path(BROKER_IDS_PATH)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout if timeout is not None else 1.5 * zk.session_timeout_ms / 1000.0)
    while True:
        try:
            await zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            stat = await zk.exists(path)
            if stat is None:
                continue
            if stat.ephemeralOwner == zk.session_id:
                return stat.czxid
            if loop.time() >= deadline:
                raise
            log.warning(
                "%s exists, owned by session 0x%x (not ours, 0x%x); waiting for it to expire",
                path,
                stat.ephemeralOwner,
                zk.session_id or 0,
            )
            await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))
            continue
        stat = await zk.exists(path)
        return stat.czxid if stat is not None else -1


async def update_leader_and_isr(
    zk: ZkBridge, tp: TopicPartition, leader_and_isr: LeaderAndIsr, controller_epoch: int
) -> LeaderAndIsr | None:
    """The partition leader's ISR change (SPEC 5.4, Kafka's ReplicationUtils.updateLeaderAndIsr):
    write the state znode conditional on ``leader_and_isr.zk_version``. Returns the written state
    with its new zkVersion, or None when the znode moved on (BADVERSION) or is gone: the caller
    must keep its in-memory ISR unchanged and wait for the controller's LeaderAndIsr.

    On BADVERSION the znode is read (Kafka's checkLeaderAndIsrZkData): when it holds exactly this
    state, the write is ours, one that landed although its answer was lost and is now re-sent,
    and it counts as written with the znode's version. Any other state, even from the same
    leader epoch, is someone else's and the write failed. ConnectionLoss and other ZooKeeper
    errors are raised: the outcome is unknown, and the caller re-sends the identical write."""
    path = partition_state_path(tp.topic, tp.partition)
    data = encode_partition_state(LeaderIsrAndControllerEpoch(leader_and_isr, controller_epoch))
    try:
        stat = await zk.set(path, data, leader_and_isr.zk_version)
    except BadVersionError:
        current = await get_partition_state(zk, tp)
        if current is not None and holds_leader_and_isr(current, leader_and_isr, controller_epoch):
            return current.leader_and_isr
        return None
    except NoNodeError:
        return None
    return leader_and_isr.with_zk_version(stat.version)


def holds_leader_and_isr(
    current: LeaderIsrAndControllerEpoch, written: LeaderAndIsr, controller_epoch: int
) -> bool:
    """Whether the state znode holds what a leader wrote: the same leader, leader epoch, ISR (in
    order) and controller epoch, whatever its zkVersion (Kafka's checkLeaderAndIsrZkData)."""
    held, epoch = current.leader_and_isr, current.controller_epoch
    return (held.leader, held.leader_epoch, held.isr, epoch) == (
        written.leader,
        written.leader_epoch,
        written.isr,
        controller_epoch,
    )


async def propagate_isr_change(zk: ZkBridge, partitions: Iterable[TopicPartition]) -> str:
    """Announce ISR changes to the controller: a sequential /isr_change_notification/isr_change_<seq>."""
    data = encode_isr_change_notification(partitions)
    path = f"{ISR_CHANGE_NOTIFICATION_PATH}/{ISR_CHANGE_PREFIX}"
    try:
        return await zk.create(path, data, sequence=True)
    except NoNodeError:
        await zk.ensure_path(ISR_CHANGE_NOTIFICATION_PATH)
        return await zk.create(path, data, sequence=True)


async def propagate_log_dir_event(zk: ZkBridge, broker_id: int) -> str:
    """KIP-112: tell the controller that a log dir of ``broker_id`` went offline. The controller
    answers with LeaderAndIsr for the broker's replicas and learns from the per-partition
    KAFKA_STORAGE_ERRORs which of them to take offline."""
    data = encode_log_dir_event(broker_id)
    path = f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{LOG_DIR_EVENT_PREFIX}"
    try:
        return await zk.create(path, data, sequence=True)
    except NoNodeError:
        await zk.ensure_path(LOG_DIR_EVENT_NOTIFICATION_PATH)
        return await zk.create(path, data, sequence=True)


@dataclass(frozen=True)
class ProducerIdBlock:
    """Producer ids ``block_start`` .. ``block_end`` (inclusive), owned by ``broker``."""

    broker: int
    block_start: int
    block_end: int


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    """Kafka's JSON: the ids as decimal strings (JSON numbers lose precision past 2^53)."""
    return _dumps(
        {
            "version": 1,
            "broker": block.broker,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    obj = _loads(data)
    return ProducerIdBlock(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))


async def allocate_producer_id_block(
    zk: ZkBridge, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE, max_attempts: int = 100
) -> ProducerIdBlock:
    """Claim the next ``block_size`` producer ids for ``broker_id`` (Kafka's
    ZkProducerIdManager.getNewProducerIdBlock): read /latest_producer_id_block, write the block
    after it conditional on the znode version, and start over when another broker won the race.
    Blocks never overlap, so producer ids are unique cluster-wide."""
    for _ in range(max_attempts):
        got = await zk.get(PRODUCER_ID_BLOCK_PATH)
        start = 0 if got is None or not got[0] else decode_producer_id_block(got[0]).block_end + 1
        if start > 2**63 - 1 - block_size:
            raise RuntimeError("Have exhausted all producerIds.")
        block = ProducerIdBlock(broker_id, start, start + block_size - 1)
        try:
            if got is None:
                await zk.create(PRODUCER_ID_BLOCK_PATH, encode_producer_id_block(block), makepath=True)
            else:
                await zk.set(PRODUCER_ID_BLOCK_PATH, encode_producer_id_block(block), got[1].version)
        except (NodeExistsError, BadVersionError):
            # Lost the race, or a resent write whose first try landed: claim the next block. A
            # landed block is never handed out then (1000 ids skipped), but adopting it by its
            # data, as Kafka's checkProducerIdBlockZkData does, would hand one block out twice
            # when claims of one broker run concurrently (docs/design.md "The ZooKeeper client layer").
            continue
        log.info("broker %d claimed producer id block %d..%d", broker_id, block.block_start, block.block_end)
        return block
    raise RuntimeError(f"could not claim a producer id block in {max_attempts} attempts: too much contention")


async def create_persistent_paths(zk: ZkBridge) -> None:
    """The top-level persistent paths (Kafka's createTopLevelPaths); harmless when they exist."""
    await asyncio.gather(*(zk.ensure_path(p) for p in PERSISTENT_PATHS))
