"""Network partitions for the local cluster with Linux network namespaces (ip netns,
veth, a bridge), when running as root (docs/design.md "Chaos and verification").

Each broker runs in a namespace of its own, joined to one bridge in the root namespace::

    root namespace: bridge fm<N>br 10.231.<N>.254/24  (ZooKeeper and the clients live here)
        |-- veth fm<N>v1 <-> eth0 10.231.<N>.1 in namespace fm<N>b1   (broker 1)
        |-- veth fm<N>v2 <-> eth0 10.231.<N>.2 in namespace fm<N>b2   (broker 2)
        ...

The addresses are this machine's own test hosts, inside namespaces this module made; nothing
is routed anywhere else. Faults:

* ``isolate(id)``: take the broker's eth0 down: it loses ZooKeeper, its followers and its
  clients at once (the classic partitioned leader). ``heal(id)`` brings it back up.
* ``cut_link(a, b)``: blackhole routes in both namespaces, so a and b no longer reach each
  other while both still reach ZooKeeper and the clients. ``mend_link(a, b)`` removes them.

Every command is ``ip`` from iproute2; ``N`` keeps concurrent clusters apart.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

SUBNET_PREFIX = "10.231"
GATEWAY_HOST = 254


class NetnsError(RuntimeError):
    pass


def netns_available() -> bool:
    """Root and iproute2: what namespaces need."""
    return os.geteuid() == 0 and subprocess.run(["ip", "-V"], capture_output=True).returncode == 0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class NetnsLayout:
    """The names and addresses of one cluster's namespaces; ``index`` is 1..250."""

    index: int

    @property
    def bridge(self) -> str:
        return f"fm{self.index}br"

    @property
    def gateway(self) -> str:
        """The bridge's address in the root namespace: where brokers reach ZooKeeper."""
        return f"{SUBNET_PREFIX}.{self.index}.{GATEWAY_HOST}"

    def namespace(self, broker_id: int) -> str:
        return f"fm{self.index}b{broker_id}"

    def veth(self, broker_id: int) -> str:
        return f"fm{self.index}v{broker_id}"

    def host(self, broker_id: int) -> str:
        if not 1 <= broker_id < GATEWAY_HOST:
            raise NetnsError(f"broker id {broker_id} does not fit the /24 of a namespaced cluster")
        return f"{SUBNET_PREFIX}.{self.index}.{broker_id}"

    def exec_prefix(self, broker_id: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(broker_id)]

    # -- set-up and tear-down -------------------------------------------------------------------
    def create(self, broker_ids: Iterable[int]) -> None:
        """Create the bridge and one namespace per broker; idempotent (existing pieces are kept)."""
        if _ip("link", "show", self.bridge, check=False).returncode != 0:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        existing = set(_ip("netns", "list").stdout.split())
        for broker_id in broker_ids:
            ns, veth = self.namespace(broker_id), self.veth(broker_id)
            if ns in existing:
                continue
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{self.host(broker_id)}/24", "dev", "eth0")
            _ip("netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def destroy(self, broker_ids: Iterable[int], timeout: float = 5.0) -> None:
        """Remove the namespaces (their veth pairs go with them) and the bridge; idempotent. The
        kernel frees a deleted namespace's veth pair asynchronously (tens of ms here), so wait,
        bounded, until they are gone: a ``create`` right after would otherwise find "File exists"."""
        broker_ids = list(broker_ids)
        for broker_id in broker_ids:
            _ip("netns", "del", self.namespace(broker_id), check=False)
        _ip("link", "del", self.bridge, check=False)
        deadline = time.monotonic() + timeout
        for broker_id in broker_ids:
            while _ip("link", "show", self.veth(broker_id), check=False).returncode == 0:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)

    # -- faults ---------------------------------------------------------------------------------
    def isolate(self, broker_id: int, cut: bool = True) -> None:
        _ip("netns", "exec", self.namespace(broker_id), "ip", "link", "set", "eth0", "down" if cut else "up")

    def heal(self, broker_id: int) -> None:
        self.isolate(broker_id, cut=False)

    def cut_link(self, a: int, b: int, cut: bool = True) -> None:
        verb = "add" if cut else "del"
        for here, there in ((a, b), (b, a)):
            _ip(
                "netns",
                "exec",
                self.namespace(here),
                "ip",
                "route",
                verb,
                "blackhole",
                f"{self.host(there)}/32",
                check=cut,
            )

    def mend_link(self, a: int, b: int) -> None:
        self.cut_link(a, b, cut=False)


def layout_for(zookeeper_port: int) -> NetnsLayout:
    """A layout index derived from the cluster's ZooKeeper port, so two clusters on this
    machine (each with its own ports) get different bridges and subnets."""
    return NetnsLayout(zookeeper_port % 250 + 1)
