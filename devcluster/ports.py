"""Loopback ports for a local cluster: free ones for ZooKeeper and N consecutive broker ports, a
second block of N for the brokers' ``/metrics`` endpoints and a third for their ``KAFKA``
listeners (KIP-103 named listeners, Kafka's own wire protocol; docs/operations.md "Local cluster
layout"), and the check that a recorded port is still free before its process starts.

Ports are chosen below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``): a port
the kernel hands out for ``bind(0)`` is also the one it hands to the next outgoing connection's
local end, so between choosing it and the broker binding it a client socket could take it
(a CI run lost a cluster to exactly that: EADDRINUSE on a port chosen a second earlier)."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Collection
from pathlib import Path

from devcluster.errors import ClusterError

HOST = "127.0.0.1"


class PortInUse(ClusterError):
    def __init__(self, port: int, owner: str) -> None:
        self.port = port
        super().__init__(f"port {port} on {HOST} (wanted for {owner}) is already in use")


def bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


LOWEST_PORT = 10000


def listen_port_range(ephemeral: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """Ports no outgoing connection is given: below the ephemeral range (or above it when it
    starts too low to leave room)."""
    try:
        low, high = map(int, ephemeral.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - LOWEST_PORT >= 4096:
        return range(LOWEST_PORT, low)
    return range(high + 1, 65536)


def free_port(rng: random.Random | None = None) -> int:
    """One free loopback port outside the ephemeral range."""
    return free_block(1, rng=rng)


def free_block(
    count: int, avoid: Collection[int] = (), attempts: int = 200, rng: random.Random | None = None
) -> int:
    """A base port such that base .. base+count-1 are all free and none of them is in ``avoid``
    (ports already chosen for the same cluster but not bound yet)."""
    rng = rng or random.Random()
    ports = listen_port_range()
    for _ in range(attempts):
        base = rng.randrange(ports.start, ports.stop - count)
        block = range(base, base + count)
        if not set(block) & set(avoid) and all(map(bindable, block)):
            return base
    raise ClusterError(f"no block of {count} free loopback ports found")


def choose_block(
    count: int, what: str, taken: Collection[int], taken_what: str, base: int | None = None
) -> list[int]:
    """``count`` consecutive ports for ``what``: ``base`` .. ``base + count - 1`` when the user gave
    ``base``, else a free block clear of ``taken`` (the cluster's ports chosen so far, described
    by ``taken_what`` in the error when the user's block overlaps them)."""
    start = base if base is not None else free_block(count, avoid=taken)
    chosen = list(range(start, start + count))
    if chosen[-1] > 65535:
        raise ClusterError(f"{what} ports {chosen[0]}-{chosen[-1]} run past 65535")
    if set(chosen) & set(taken):
        raise ClusterError(f"{what} ports {chosen[0]}-{chosen[-1]} collide with the {taken_what}")
    return chosen


def free_port_block(count: int, attempts: int = 200) -> int:
    """A base port such that base-1 (for ZooKeeper) .. base+count-1 (brokers) are all free."""
    return free_block(count + 1, attempts=attempts) + 1


def check_port_free(port: int, owner: str, wait_s: float = 0.0) -> None:
    """Raise PortInUse when something listens on ``port`` (SO_REUSEADDR, as asyncio servers bind)
    and still does after ``wait_s``: the listener of a process SIGKILLed a moment ago can outlive
    it briefly, ownerless, while the kernel tears down its connections (seen: a broker restarted
    at once after its SIGKILL met its own old port)."""
    deadline = time.monotonic() + wait_s
    while True:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((HOST, port))
                return
            except OSError:
                if time.monotonic() >= deadline:
                    raise PortInUse(port, owner) from None
        time.sleep(0.05)
