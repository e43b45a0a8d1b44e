"""ZooKeeper faults above the bridge, at exact calls: :class:`FailingZk` wraps the real
:class:`~zk.bridge.ZkBridge` so that a chosen call fails with kazoo's ConnectionLoss, before it
is sent or after ZooKeeper answered (the reply lost), as a caller sees it once the bridge has
given up (no connection within its retry timeout). ``before`` runs a hook just before a call
goes out. Faults beneath the bridge are in tests/unit/kazoo_faults.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.exceptions import ConnectionLoss

from zk.bridge import ZkBridge


class FailingZk:
    """``fail("get", nth=1, path=...)`` fails the first later ``get`` of that path;
    ``match`` selects calls by their first argument instead (a multi's ops, say), and
    ``after_commit=True`` sends the call and loses its answer. ``failed`` lists (method, path)
    of every failure injected, ``injected`` the same as "method before" / "method after commit"."""

    def __init__(self, zk: ZkBridge) -> None:
        self._zk = zk
        self._rules: list[dict[str, Any]] = []
        self.failed: list[tuple[str, str]] = []
        self.injected: list[str] = []

    def fail(
        self,
        method: str,
        nth: int = 1,
        path: str | None = None,
        match: Callable[[Any], bool] | None = None,
        after_commit: bool = False,
    ) -> None:
        self._rules.append(
            {"method": method, "path": path, "match": match, "left": nth, "hook": None, "after": after_commit}
        )

    def before(
        self,
        method: str,
        hook: Callable[[], Awaitable[None]],
        path: str | None = None,
        match: Callable[[Any], bool] | None = None,
    ) -> None:
        """Run ``hook`` once, just before the first matching call goes to ZooKeeper."""
        self._rules.append(
            {"method": method, "path": path, "match": match, "left": 1, "hook": hook, "after": False}
        )

    def _due(self, name: str, args: tuple) -> dict[str, Any] | None:
        first = args[0] if args else None
        for rule in self._rules:
            if rule["left"] <= 0 or rule["method"] != name:
                continue
            if rule["path"] is not None and rule["path"] != first:
                continue
            if rule["match"] is not None and not rule["match"](first):
                continue
            rule["left"] -= 1
            return rule if rule["left"] == 0 else None
        return None

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._zk, name)
        if not callable(real) or not asyncio.iscoroutinefunction(real):
            return real

        async def call(*args: Any, **kwargs: Any) -> Any:
            rule = self._due(name, args)
            path = str(args[0]) if args and isinstance(args[0], str) else "None"
            if rule is not None and rule["hook"] is not None:
                await rule["hook"]()
                rule = None
            if rule is not None and not rule["after"]:
                self.failed.append((name, path))
                self.injected.append(f"{name} before")
                raise ConnectionLoss()
            result = await real(*args, **kwargs)
            if rule is not None:
                self.failed.append((name, path))
                self.injected.append(f"{name} after commit")
                raise ConnectionLoss()
            return result

        return call
