"""Loopback ports for a local cluster: free ones for ZooKeeper and N consecutive broker ports, a
second block of N for the brokers' ``/metrics`` endpoints (docs/operations.md "Local cluster
layout"), and the check that a recorded port is still free before its process starts."""

from __future__ import annotations

import socket
from collections.abc import Collection

from devcluster.errors import ClusterError

HOST = "127.0.0.1"


class PortInUse(ClusterError):
    def __init__(self, port: int, owner: str) -> None:
        self.port = port
        super().__init__(f"port {port} on {HOST} (wanted for {owner}) is already in use")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """One free loopback port (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def free_block(count: int, avoid: Collection[int] = (), attempts: int = 200) -> int:
    """A base port such that base .. base+count-1 are all free and none of them is in ``avoid``
    (ports already chosen for the same cluster but not bound yet)."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            base = probe.getsockname()[1]
        block = range(base, base + count)
        if block[-1] <= 65535 and not set(block) & set(avoid) and all(map(_bindable, block)):
            return base
    raise ClusterError(f"no block of {count} free loopback ports found")


def free_port_block(count: int, attempts: int = 200) -> int:
    """A base port such that base-1 (for ZooKeeper) .. base+count-1 (brokers) are all free."""
    return free_block(count + 1, attempts=attempts) + 1


def check_port_free(port: int, owner: str) -> None:
    """Raise PortInUse when something listens on ``port`` (SO_REUSEADDR, as asyncio servers bind)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            raise PortInUse(port, owner) from None
