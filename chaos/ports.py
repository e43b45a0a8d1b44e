"""Finding free loopback ports for a local cluster (ZooKeeper + N consecutive broker ports)."""

from __future__ import annotations

import socket


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(count: int, attempts: int = 200) -> int:
    """A base port such that base-1 (for ZooKeeper) .. base+count-1 (brokers) are all free."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count < 65535 and all(_bindable(p) for p in range(base - 1, base + count)):
            return base
    raise RuntimeError(f"no block of {count + 1} free loopback ports found")
