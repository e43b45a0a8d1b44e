"""Fixtures of the unit tests that drive the controller against a real ZooKeeper."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from zk.bridge import ZkBridge
from zk.client import create_persistent_paths


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[ZkBridge]:
    """A started ZkBridge in this test's own chroot, with Kafka's persistent paths created."""
    bridge = ZkBridge(zk_connect, session_timeout_ms=6000)
    await bridge.start()
    await create_persistent_paths(bridge)
    yield bridge
    await bridge.close()
