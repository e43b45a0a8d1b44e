"""The storage faults of a simulated run (docs/design.md "Simulation"; sim/storage_model.py is
the disk they act on, :data:`sim.world.STORAGE_FAULTS` the world's own injection):

* ``power-loss``: the broker's machine loses power: it crashes, its disk keeps only what was
  fsynced, and it restarts at the heal, no sooner than its ZooKeeper session has expired and
  :data:`POWER_LOSS_REBOOT_S` more (a machine reboots). Back within its session, it would rejoin
  still listed in the ISRs it had, its unsynced tail lost, and a controller electing it (seed 452
  of the first sweep: the power-lost broker was the controller, came back as the next one, and
  elected itself from an ISR nobody had shrunk, with an empty log) loses acknowledged records:
  ZooKeeper-mode Kafka's weakness that KIP-966 closes in KRaft, recorded in docs/design.md as
  future work. Two brokers' power losses come at least
  :data:`POWER_LOSS_APART_S` apart: records acknowledged before every in-sync replica fsynced them
  are lost when all of those replicas lose power (docs/guarantees.md "Process crash, power loss":
  Kafka's trade, acknowledgement is replication), so a second power loss while the first
  broker's replicas may still lack their lost tail would make that trade a "finding" (seeds 272
  and 452 of issue 35's first sweep with power loss: two of a partition's in-sync replicas lost
  power a second apart, and the one left leading held nothing);
* ``disk-full``, ``disk-error``: the disk fills up, or its next write, fsync, open or metadata
  call fails with EIO; a broker whose only log dir fails halts (KIP-112) and is started again once
  no disk fault is left;
* ``disk-floor``: the disk reports less usable space than the broker's free-space floor (issue
  25: client appends refused, followers paused while they still fetch the exempt
  ``__consumer_offsets`` in the same fetch sessions), and maybe, a moment later, its ``statvfs``
  starts failing, in half of those for the rest of the run (issue 33's windows 10 and 11).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sim.fault_kinds import DISTURBING, ActiveFault, FaultKind
from sim.storage_model import CAPACITY_BYTES

if TYPE_CHECKING:
    from sim.world import World

POWER_LOSS_APART_S = 30.0
#: A machine that lost power is down for its broker's ZooKeeper session and this much more.
POWER_LOSS_REBOOT_S = 2.0


class _Injector(Protocol):
    world: World
    rng: random.Random
    note: Callable[[str], None]
    active: list[ActiveFault]
    _timers: list[asyncio.TimerHandle]

    def _restart(self, broker: int) -> None: ...


def power_loss(injector: _Injector, broker: int, until: float) -> ActiveFault | None:
    world = injector.world
    now = world.loop.time()
    for other, process in world.brokers.items():
        if (
            other != broker
            and process.power_lost_at is not None
            and now - process.power_lost_at < POWER_LOSS_APART_S
        ):
            return None
    # down longer than its ZooKeeper session, as a machine that lost power is (it reboots): the
    # controller then sees it go and takes it out of every ISR before it is back
    session_s = int(world.brokers[broker].props.get("zookeeper.session.timeout.ms", "6000")) / 1000
    until = max(until, now + session_s + POWER_LOSS_REBOOT_S)
    injector.note(world.storage_fault("power-loss", broker) + f" (down for {until - now:.3f} s)")
    return ActiveFault(FaultKind.POWER_LOSS, broker, until, lambda: injector._restart(broker))


def disk_full(injector: _Injector, broker: int, until: float) -> ActiveFault:
    world = injector.world
    injector.note(world.storage_fault("disk-full", broker) + f" (for {until - world.loop.time():.3f} s)")
    return ActiveFault(FaultKind.DISK_FULL, broker, until, lambda: heal_disks(injector))


def disk_error(injector: _Injector, broker: int, until: float) -> ActiveFault:
    injector.note(injector.world.storage_fault("disk-error", broker))
    return ActiveFault(FaultKind.DISK_ERROR, broker, until, lambda: heal_disks(injector))


def heal_disks(injector: _Injector) -> None:
    """Free the disks once no disk fault is left, and start again a broker that halted on its
    failed log dir (KIP-112: it stays down until restarted)."""
    if any(f.kind in (FaultKind.DISK_FULL, FaultKind.DISK_ERROR) for f in injector.active):
        return
    world = injector.world
    world.heal_disks()
    injector.note("heal the disks")
    disturbed = {f.broker for f in injector.active if f.kind in DISTURBING}
    for broker in sorted(world.brokers):
        if not world.brokers[broker].running and broker not in disturbed:
            injector._restart(broker)


def disk_floor(injector: _Injector, broker: int, until: float) -> ActiveFault:
    world, rng = injector.world, injector.rng
    disk = world.brokers[broker].disk
    assert disk is not None
    disk.usable_bytes = rng.randrange(0, 256 << 20)  # below the 1% floor of the 64 GiB disk
    breaks = rng.random() < 0.4
    lasting = breaks and rng.random() < 0.5
    injector.note(
        f"disk-floor broker {broker}: {disk.usable_bytes >> 20} MiB usable"
        + (f", statvfs failing{' for good' if lasting else ''} soon" if breaks else "")
        + f" (for {until - world.loop.time():.3f} s)"
    )
    healed = False

    def measurement_breaks() -> None:
        if not healed:
            disk.statvfs_fails = True

    if breaks:
        delay = rng.uniform(0.1, max(0.1, until - world.loop.time()))
        injector._timers.append(world.loop.call_later(delay, measurement_breaks))

    def heal() -> None:
        nonlocal healed
        healed = True
        disk.usable_bytes = CAPACITY_BYTES // 2
        if not lasting:
            disk.statvfs_fails = False
        injector.note(f"heal broker {broker}'s free space{'; its statvfs still fails' if lasting else ''}")

    return ActiveFault(FaultKind.DISK_FLOOR, broker, until, heal)
