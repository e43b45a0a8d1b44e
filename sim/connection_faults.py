"""Faults of one client connection (docs/design.md "Simulation"; the vocabulary of
sim/fault_kinds.py): a connection whose bytes are held (``stall``), and one that breaks with its
answers lost (``lost-answers``), the two ways a request's outcome becomes unknown to the client
while the request itself still reaches the broker, late.

* ``stall``: one client connection to the broker holds what the client writes (TCP's
  retransmission backoff on one flow), a producer's when one has a connection there: its requests
  reach the broker late, even after the client gave up on them and closed it, while the client's
  new connections flow (a request held past the producer's timeout, its retry landing first);
* ``lost-answers``: a producer's connection breaks with its answers lost, after holding them for
  under a second, or while the producer's requests themselves are held (they then reach the
  broker after their retries, and after later batches): each batch is retried, unchanged, on a
  new connection, so the leader's duplicate check must recognise it, the late copies among the
  producer's last five batches and not only the last (KIP-98). Besides its draw among the other
  kinds it comes on its own ``producer-faults`` stream at :data:`PRODUCER_FAULT_RATE` per step:
  drawn among fifteen kinds it would come about once in three schedules, and a late copy lands
  after a later batch only for about one in four of them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sim.fault_kinds import ActiveFault, FaultKind

if TYPE_CHECKING:
    from sim.world import World

#: Per step, the chance of an aimed ``lost-answers`` on its own stream.
PRODUCER_FAULT_RATE = 0.15


class _Injector(Protocol):
    world: World
    note: Callable[[str], None]
    _timers: list[asyncio.TimerHandle]

    @property
    def kinds(self) -> frozenset[FaultKind]: ...


def stall(
    world: World, rng: random.Random, note: Callable[[str], None], broker: int, until: float
) -> ActiveFault | None:
    network = world.network
    node = f"broker-{broker}"
    flows = [
        c
        for c in network.connections
        if c.server.node == node and c.client.node.startswith("client-") and not c.client.closed
    ]
    # the group's members have their own stall (sim/group_faults.py)
    flows = [c for c in flows if c.client.node in world.producer_nodes] or flows
    if not flows:
        return None
    connection = rng.choice(flows)
    network.stall(connection, until - world.loop.time())
    note(f"stall {connection} (for {until - world.loop.time():.3f} s)")
    return ActiveFault(FaultKind.STALL, broker, until, lambda: network.unstall(connection))


def lose_answers(
    world: World,
    rng: random.Random,
    note: Callable[[str], None],
    timers: list[asyncio.TimerHandle],
    broker: int,
) -> ActiveFault | None:
    network = world.network
    flows = [
        c
        for c in network.connections
        if c.server.node == f"broker-{broker}"
        and c.client.node in world.producer_nodes
        and not c.client.closed
    ]
    if not flows:
        return None
    connection = rng.choice(flows)
    held = rng.uniform(0.1, 0.9)
    if rng.random() < 0.5:
        network.hold_answers(connection, held)
        note(f"hold the answers on {connection} for {held:.3f} s, then lose them")
    else:  # the requests themselves late: their retries land first, then the copies
        network.stall(connection, held + rng.uniform(0.2, 2.0))
        held = rng.uniform(0.02, 0.3)
        note(
            f"stall {connection}, lose its answers {held:.3f} s later: its requests arrive after their retries"
        )
    timers.append(world.loop.call_later(held, network.lose_answers, connection))
    return ActiveFault(FaultKind.LOST_ANSWERS, broker, world.loop.time() + held, lambda: None)


def aim_at_producers(injector: _Injector, rng: random.Random, now: float) -> ActiveFault | None:
    """Maybe a ``lost-answers`` on a broker holding a producer's connection."""
    if FaultKind.LOST_ANSWERS not in injector.kinds or rng.random() >= PRODUCER_FAULT_RATE:
        return None
    world = injector.world
    held = sorted(
        {
            int(c.server.node.removeprefix("broker-"))
            for c in world.network.connections
            if c.client.node in world.producer_nodes and not c.client.closed
        }
    )
    if not held:
        return None
    return lose_answers(world, rng, injector.note, injector._timers, rng.choice(held))
