"""Virtual time in the units the code under test reads (docs/design.md "Simulation").

The broker takes its wall clock as a ``time_ms`` callable (``BrokerServer(time_ms=...)``, whose
default is ``broker.server.wall_clock_ms``: ``int(time.time() * 1000)``); loop timers, backoffs and
deadlines read ``loop.time()``. Under :class:`sim.loop.SimEventLoop` both are the loop's virtual
clock: :class:`SimClock` is the wall-clock face of it, a fixed epoch plus the virtual time elapsed
since the run started, so the same seed gives the same timestamps in every record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.loop import SimEventLoop

#: The wall clock at the start of every simulated run (2023-11-14T22:13:20Z): fixed, so record
#: timestamps, ISR lag and retention decisions are the same in every replay.
DEFAULT_EPOCH_MS = 1_700_000_000_000


class SimClock:
    """``time.time()`` and ``time.monotonic()`` stand-ins over a simulation loop's virtual clock.

    An instance is a ``time_ms`` callable (milliseconds since the Unix epoch, truncated like
    ``wall_clock_ms``), so it can be handed to the broker wherever a clock is injected.
    """

    def __init__(self, loop: SimEventLoop, epoch_ms: int = DEFAULT_EPOCH_MS) -> None:
        self.loop = loop
        self.epoch_ms = epoch_ms

    def __call__(self) -> int:
        return self.time_ms()

    def time_ms(self) -> int:
        """Wall-clock milliseconds: the epoch plus the virtual time elapsed, exact (integer ns)."""
        return self.epoch_ms + self.loop.elapsed_ns // 1_000_000

    def time(self) -> float:
        """Wall-clock seconds, as ``time.time()`` returns them."""
        return self.epoch_ms / 1000 + self.loop.elapsed_ns / 1e9

    def monotonic(self) -> float:
        """Monotonic seconds, as ``time.monotonic()`` returns them: the loop's own clock."""
        return self.loop.time()
