"""The asyncio bridge over kazoo: one ZooKeeper session whose calls are awaitable and whose
watches and state changes are delivered on the event loop (kazoo calls back on its own threads),
with Kafka's ZooKeeperClient rule of resending a request after a connection drop within the
session (docs/design.md "The ZooKeeper client layer"). Also the multi-op vocabulary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    EXCEPTIONS,
    ConnectionLoss,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import (
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
)
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from zk.poll_handler import PollThreadingHandler

log = logging.getLogger(__name__)


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

#: Paths per multiRead request (:meth:`ZkBridge.get_many`): about 100 bytes each way per state
#: znode, far below ZooKeeper's 1 MiB jute.maxbuffer.
MULTI_READ_MAX = 1000


class MultiRead(namedtuple("MultiRead", "paths")):
    """ZooKeeper's multiRead (OpCode 22, ZooKeeper 3.6+, ZOOKEEPER-3402): many getData in one
    request and one response, each answered on its own (data and stat, or its error); no watch
    is set. kazoo (2.x) has no API for it: this is its request, serialized as kazoo serializes its
    own multi (``kazoo.protocol.serialization.Transaction``), and queued through the client's
    request queue by :meth:`ZkBridge.get_many` (docs/design.md "The controller at scale")."""

    type = 22

    def serialize(self) -> bytearray:
        b = bytearray()
        for path in self.paths:
            b.extend(MultiHeader(GetData.type, False, -1).serialize() + GetData(path, None).serialize())
        return b + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list:
        results: list = []
        header, offset = MultiHeader.deserialize(buffer, offset)
        while not header.done:
            if header.type == GetData.type:
                data, offset = read_buffer(buffer, offset)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))))
                offset += stat_struct.size
            else:  # an error result: its code follows
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            header, offset = MultiHeader.deserialize(buffer, offset)
        return results


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
    after which the session is gone at the server anyway). A request belongs to the session
    kazoo was last connected in when it started: kazoo reports no session while disconnected,
    and it fires its reset watches then, so the re-registering reads start during the drop.
    Kafka's ZooKeeperClient holds every request until the expiry handlers (the controller's
    Expire) have started; kazoo opens the new session at once, so a request unanswered when its
    session ended is kept out of the new session here, while one started after the expiry is
    sent in the new session, possibly before Expire has run (its controller writes are still
    fenced by /controller_epoch). A resent write may have landed the first time:
    creates can then answer NodeExists, conditional sets BadVersion, deletes NoNode, and each
    caller that writes checks what ZooKeeper holds (Kafka's checkedEphemeralCreate,
    checkControllerAndEpoch, checkLeaderAndIsrZkData; the controller's state writes use
    :func:`zk.client.resolve_leader_and_isr_write`); see docs/design.md "The ZooKeeper client
    layer".
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        loop: asyncio.AbstractEventLoop | None = None,
        retry_timeout_s: float | None = None,
        client_factory: Callable[..., Any] | None = None,
    ) -> None:
        """``client_factory`` (default KazooClient) is called with kazoo's ``hosts``, ``timeout``
        and ``connection_retry``; a client whose ``start`` is a coroutine function runs on the
        loop (the simulator's, :mod:`sim.zk_client`): it is started and stopped without a thread
        and calls back on the loop itself."""
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.retry_timeout_s = session_timeout_ms / 1000.0 if retry_timeout_s is None else retry_timeout_s
        #: requests sent again after a ConnectionLoss (a metric for tests and operators)
        self.resent_requests = 0
        self._loop = loop
        # Reconnect attempts at most a second apart: kazoo's default backoff grows to an hour, so
        # after a long outage a broker would come back long after ZooKeeper did (and its session
        # would expire for nothing); Kafka's client retries its connection without such growth.
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
        if client_factory is None:  # kazoo's, polling without a descriptor per wait (zk/poll_handler.py)
            self.client = KazooClient(
                hosts=connect,
                timeout=session_timeout_ms / 1000.0,
                connection_retry=retry,
                handler=PollThreadingHandler(),
            )
        else:
            self.client = client_factory(
                hosts=connect, timeout=session_timeout_ms / 1000.0, connection_retry=retry
            )
        #: the client calls back on the loop's own thread (no kazoo threads to hop from)
        self._on_loop = asyncio.iscoroutinefunction(getattr(self.client, "start", None))
        #: multiRead through kazoo's request queue (:meth:`get_many`): kazoo's client only
        self._multi_read = isinstance(self.client, KazooClient)
        self._listeners: list[Callable[[str], None]] = []
        self._wrappers: dict[Callable, Callable[[WatchedEvent], None]] = {}
        self._closed = False
        #: the session kazoo was last connected in (its client_id is None while disconnected)
        self._last_session_id: int | None = None
        self.client.add_listener(self._on_kazoo_state)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def start(self, timeout: float = 15.0) -> None:
        _ = self.loop
        if self._on_loop:
            await self.client.start(timeout)
        else:
            await asyncio.to_thread(self.client.start, timeout)
        self._request_session()

    async def close(self) -> None:
        """End the session: its ephemeral znodes (a /controller, a /brokers/ids/<id>) go at once."""
        if self._closed:
            return
        self._closed = True
        if self._on_loop:
            try:
                await self.client.stop()
            finally:
                await self.client.close()
            return
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
        """The session kazoo is connected in; None while it is not connected."""
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def _request_session(self) -> int | None:
        """The session a request started now belongs to: the one kazoo is connected in or, while
        it is disconnected, the one it was last connected in. kazoo keeps the session id across a
        reconnection within the session and starts another only after LOST (expiry), so a
        request started during a plain drop belongs to the session it reconnects to."""
        session = self.session_id
        if session is not None:
            self._last_session_id = session
        return self._last_session_id

    # -- state and watch forwarding ----------------------------------------------------------------
    def add_state_listener(self, fn: Callable[[str], None]) -> None:
        """``fn`` is called on the loop with "CONNECTED", "SUSPENDED" or "LOST"."""
        self._listeners.append(fn)

    def _on_kazoo_state(self, state: KazooState) -> None:  # kazoo thread: must not block
        if state == KazooState.CONNECTED:
            self._request_session()
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
            (loop.call_soon if self._on_loop else loop.call_soon_threadsafe)(fn, *args)

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
        session = self._request_session()
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

    @property
    def supports_multi_read(self) -> bool:
        """Whether :meth:`get_many` sends multiRead requests (a kazoo client, and a server that
        did not refuse one) rather than one getData per path."""
        return self._multi_read

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        """Each path's data and stat (None: no such znode), in order, in multiRead requests of
        MULTI_READ_MAX paths (:class:`MultiRead`) sent together: N reads in about one round trip
        and N / MULTI_READ_MAX requests instead of N. Without multiRead (the simulator's client,
        a ZooKeeper before 3.6) one getData per path, sent together. An error other than NoNode
        is raised. A request is resent after a connection loss as every read is (:meth:`_call`)."""
        if not self._multi_read:
            return list(await asyncio.gather(*(self.get(p) for p in paths)))
        chunks = [paths[i : i + MULTI_READ_MAX] for i in range(0, len(paths), MULTI_READ_MAX)]
        try:
            answers = await asyncio.gather(*(self._multi_read_chunk(chunk) for chunk in chunks))
        except UnimplementedError:
            log.warning("ZooKeeper refused multiRead (a server before 3.6?): reading one znode at a time")
            self._multi_read = False
            return await self.get_many(paths)
        results: list[tuple[bytes, ZnodeStat] | None] = []
        for answer in answers:
            for result in answer:
                if isinstance(result, NoNodeError):
                    results.append(None)
                elif isinstance(result, Exception):
                    raise result
                else:
                    results.append(result)
        return results

    async def _multi_read_chunk(self, paths: Sequence[str]) -> list:
        def send() -> Any:
            client = self.client
            async_result = client.handler.async_result()
            request = MultiRead(tuple(_prefix_root(client.chroot, p) for p in paths))
            client._call(request, async_result)  # kazoo's own request queue (see MultiRead)
            return async_result

        answer = await self._call(f"multiRead of {len(paths)} znodes from {paths[0]}", send)
        if len(answer) != len(paths):
            raise RuntimeError(f"multiRead of {len(paths)} znodes answered {len(answer)} results")
        return answer

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
        (kazoo's ``TransactionRequest.commit``). This raises the real error, with ``op_index`` set
        to the failing op."""

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
