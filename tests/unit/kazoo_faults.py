"""ZooKeeper connection faults at exact requests, beneath the bridge: :class:`KazooFaults` wraps
one kazoo client's ``*_async`` calls so that a chosen request fails with ConnectionLoss, either
before it is sent or after ZooKeeper answered (the reply lost), which is what kazoo hands the
bridge for every request in flight when its connection drops. :func:`drop_connection` drops the
real connection (kazoo reconnects to the same session and fires every watch with a NONE event).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.connection import _CONNECTION_DROP, _SESSION_EXPIRED

_METHODS = ("get_async", "get_children_async", "exists_async", "create_async", "set_async", "delete_async")


class KazooFaults:
    """``fail("exists_async", path="/controller")`` fails the next such request with ConnectionLoss
    (``after_answer=True``: the request is sent and answered, and the answer is lost)."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._rules: list[dict[str, Any]] = []
        self.injected: list[tuple[str, str]] = []
        self._held: list[Any] = []
        for name in _METHODS:
            setattr(client, name, self._wrap(name, getattr(client, name)))

    def fail(self, method: str, path: str | None = None, nth: int = 1, after_answer: bool = False) -> None:
        self._rules.append({"method": method, "path": path, "left": nth, "after": after_answer})

    def hold(self, method: str, path: str | None = None) -> None:
        """The next such request is sent, and its answer withheld until :meth:`release`."""
        self._rules.append({"method": method, "path": path, "left": 1, "after": True, "hold": True})

    async def wait_held(self, timeout: float = 5.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._held:
            assert loop.time() < deadline, "no request was held"
            await asyncio.sleep(0.01)

    def release(self, exc: BaseException) -> None:
        """Answer every held request with ``exc``."""
        held, self._held = self._held, []
        for result in held:
            result.set_exception(exc)

    def pending(self) -> int:
        return sum(1 for rule in self._rules if rule["left"] > 0)

    def _match(self, name: str, path: str) -> dict[str, Any] | None:
        for rule in self._rules:
            if rule["left"] > 0 and rule["method"] == name and rule["path"] in (None, path):
                rule["left"] -= 1
                return rule if rule["left"] == 0 else None
        return None

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: str, *args: Any, **kwargs: Any) -> Any:
            rule = self._match(name, path)
            if rule is None:
                return real(path, *args, **kwargs)
            self.injected.append((name, path))
            lost = self._client.handler.async_result()
            if rule.get("hold"):
                real(path, *args, **kwargs)
                self._held.append(lost)
            elif rule["after"]:
                answered = real(path, *args, **kwargs)
                answered.rawlink(lambda _result: lost.set_exception(ConnectionLoss()))
            else:
                lost.set_exception(ConnectionLoss())
            return lost

        return call


async def drop_connection(client: KazooClient, timeout: float = 10.0) -> None:
    """Cut kazoo's socket and wait until it is connected again (same session, watches reset)."""
    session = client.client_id
    client._call(_CONNECTION_DROP, client.handler.async_result())  # kazoo's own test hook
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while client.connected:
        assert loop.time() < deadline, "kazoo did not notice the dropped connection"
        await asyncio.sleep(0.01)
    while not client.connected:
        assert loop.time() < deadline, "kazoo did not reconnect"
        await asyncio.sleep(0.01)
    assert client.client_id == session, "the drop must not end the session"


async def expire_session(client: KazooClient, timeout: float = 10.0) -> None:
    """Make kazoo act as if ZooKeeper expired its session (LOST, then a new session)."""
    session = client.client_id
    client._call(_SESSION_EXPIRED, client.handler.async_result())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (client.connected and client.client_id != session):
        assert loop.time() < deadline, "kazoo did not start a new session"
        await asyncio.sleep(0.01)
