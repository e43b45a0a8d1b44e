"""The one seeded random source of a simulated run (docs/design.md "Simulation"; FoundationDB's
deterministicRandom, TigerBeetle's one PRNG per VOPR seed).

Every choice the simulator makes (which ready callback runs next, network delays, faults) is drawn
from a stream derived from the run's seed and the stream's name, so one integer replays the whole
run, and adding draws to one stream (say, the network's) does not shift the scheduler's choices.
"""

from __future__ import annotations

import hashlib
import random


class SeedSource:
    """The run's seed and the named random streams derived from it, one instance per name."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._streams: dict[str, random.Random] = {}

    def stream(self, name: str) -> random.Random:
        """The stream called ``name``: the same sequence for the same seed and name, every run."""
        stream = self._streams.get(name)
        if stream is None:
            digest = hashlib.blake2b(f"{self.seed}/{name}".encode(), digest_size=8).digest()
            stream = self._streams[name] = random.Random(int.from_bytes(digest, "big"))
        return stream
